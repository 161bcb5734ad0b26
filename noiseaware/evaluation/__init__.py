"""Scoring posteriors: TARP coverage (method.md §4) and the coverage experiment."""

from .result import REFERENCE_RULES, CoverageResult
from .simulate import METHODS, Simulation, Simulations, coverage, evaluate, register_method, simulate_traces
from .tarp import LEVELS, coverage_rmse, marginal_ecp, reference_box, tarp_ecp, tarp_repeats

__all__ = [
    "LEVELS", "METHODS", "REFERENCE_RULES", "CoverageResult", "Simulation", "Simulations", "coverage",
    "coverage_rmse", "evaluate", "marginal_ecp", "reference_box", "register_method", "simulate_traces", "tarp_ecp",
    "tarp_repeats",
]
