"""noiseaware: noise-aware differentially private Bayesian inference from DPVI traces."""

__version__ = "0.1.0"
