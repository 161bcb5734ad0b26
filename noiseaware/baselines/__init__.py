"""Baselines built from the same trace as the noise-aware posterior (method.md §3, baselines.md)."""

from .dpvim import dpvim_posterior
from .naive import naive_posterior

__all__ = ["dpvim_posterior", "naive_posterior"]
