"""Baselines built from the same trace as the noise-aware posterior (method.md §3, baselines.md)."""

from .naive import naive_posterior

__all__ = ["naive_posterior"]
