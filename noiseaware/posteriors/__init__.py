"""Posteriors over θ: the noise-aware mixture over the VI optimum and the baselines' posteriors, behind one protocol."""

from .base import Posterior
from .draws import DrawsPosterior
from .files import load_posterior
from .mixture import DPVImPosterior, MixturePosterior, NaivePosterior, NoiseAwarePosterior
from .summary import PosteriorSummary

__all__ = [
    "DPVImPosterior",
    "DrawsPosterior",
    "MixturePosterior",
    "NaivePosterior",
    "NoiseAwarePosterior",
    "Posterior",
    "PosteriorSummary",
    "load_posterior",
]
