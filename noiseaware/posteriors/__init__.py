"""Posteriors over θ: the noise-aware mixture over the VI optimum and the baselines' posteriors, behind one protocol."""

from .base import Posterior
from .mixture import DPVImPosterior, MixturePosterior, NaivePosterior, NoiseAwarePosterior, load_posterior

__all__ = ["DPVImPosterior", "MixturePosterior", "NaivePosterior", "NoiseAwarePosterior", "Posterior", "load_posterior"]
