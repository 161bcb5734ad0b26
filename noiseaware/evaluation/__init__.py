"""Scoring posteriors: TARP coverage (method.md §4), calibration of predictive probabilities (§5), and the
experiments that run them."""

from .calibration import (BINNINGS, CalibrationCurve, CalibrationMetrics, calibration_curve, calibration_metrics,
                          predictive_probabilities)
from .calibration_experiment import CALIBRATION_METHODS, calibration, nonprivate_draws, record_traces
from .calibration_result import CalibrationResult
from .result import REFERENCE_RULES, CoverageResult
from .simulate import METHODS, Simulation, Simulations, coverage, evaluate, register_method, simulate_traces
from .tarp import LEVELS, coverage_rmse, marginal_ecp, reference_box, tarp_ecp, tarp_repeats

__all__ = [
    "BINNINGS", "CALIBRATION_METHODS", "CalibrationCurve", "CalibrationMetrics", "CalibrationResult", "calibration",
    "calibration_curve", "calibration_metrics", "nonprivate_draws", "predictive_probabilities", "record_traces",
    "LEVELS", "METHODS", "REFERENCE_RULES", "CoverageResult", "Simulation", "Simulations", "coverage",
    "coverage_rmse", "evaluate", "marginal_ecp", "reference_box", "register_method", "simulate_traces", "tarp_ecp",
    "tarp_repeats",
]
