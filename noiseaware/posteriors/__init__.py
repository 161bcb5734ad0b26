"""Posteriors over θ behind one protocol: mixtures over the VI optimum (the noise-aware posterior and the trace
baselines, told apart by their `kind`) and posteriors known by their draws."""

from .base import Posterior
from .draws import DrawsPosterior
from .files import load_posterior
from .mixture import MixturePosterior
from .summary import PosteriorSummary

__all__ = [
    "DrawsPosterior",
    "MixturePosterior",
    "Posterior",
    "PosteriorSummary",
    "load_posterior",
]
