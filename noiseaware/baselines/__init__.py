"""Baselines (method.md §3, docs/baselines.md): built from the same trace as the noise-aware posterior (naive
last iterate, DPVIm), or from their own sufficient-statistic release at the same ε (Bernstein & Sheldon)."""

from .bernstein_sheldon import bernstein_sheldon_naive, bernstein_sheldon_posterior, bs2018_batch, bs2018_naive_batch
from .bernstein_sheldon_regression import bs2019_batch, bs2019_posterior, naive_ss_batch, naive_ss_posterior
from .dpvim import dpvim_posterior
from .naive import naive_posterior

__all__ = [
    "bernstein_sheldon_naive", "bernstein_sheldon_posterior", "bs2018_batch", "bs2018_naive_batch", "bs2019_batch",
    "bs2019_posterior", "dpvim_posterior", "naive_posterior", "naive_ss_batch", "naive_ss_posterior",
]
