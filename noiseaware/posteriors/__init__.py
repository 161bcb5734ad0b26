"""Posteriors over θ: the noise-aware mixture over the VI optimum and the baselines' posteriors, behind one protocol."""

from .base import Posterior
from .files import load_posterior
from .mixture import DPVImPosterior, MixturePosterior, NaivePosterior, NoiseAwarePosterior
from .summary import PosteriorSummary

__all__ = [
    "DPVImPosterior",
    "MixturePosterior",
    "NaivePosterior",
    "NoiseAwarePosterior",
    "Posterior",
    "PosteriorSummary",
    "load_posterior",
]
