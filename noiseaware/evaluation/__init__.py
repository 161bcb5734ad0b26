"""Scoring posteriors: TARP coverage (method.md §4)."""

from .tarp import LEVELS, coverage_rmse, marginal_ecp, reference_box, tarp_ecp, tarp_repeats

__all__ = ["LEVELS", "coverage_rmse", "marginal_ecp", "reference_box", "tarp_ecp", "tarp_repeats"]
