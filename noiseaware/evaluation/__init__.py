"""Scoring posteriors: TARP coverage (docs/method.md §4), calibration of predictive probabilities (§5), and the
experiment driver both share."""

from .calibration import (
    BINNINGS,
    CalibrationCurve,
    CalibrationMetrics,
    calibration_curve,
    calibration_metrics,
    predictive_probabilities,
)
from .calibration_experiment import CalibrationDesign, calibration, record_traces
from .calibration_result import CalibrationResult
from .coverage import CoverageDesign, coverage, evaluate
from .result import REFERENCE_RULES, CoverageResult
from .simulations import Simulations, simulate_traces
from .tarp import (
    LEVELS,
    coverage_rmse,
    ecp_from_fractions,
    marginal_ecp,
    reference_box,
    tarp_ecp,
    tarp_fractions,
    tarp_repeats,
)

__all__ = [
    "BINNINGS",
    "CalibrationCurve",
    "CalibrationDesign",
    "CalibrationMetrics",
    "CalibrationResult",
    "CoverageDesign",
    "CoverageResult",
    "LEVELS",
    "REFERENCE_RULES",
    "Simulations",
    "calibration",
    "calibration_curve",
    "calibration_metrics",
    "coverage",
    "coverage_rmse",
    "ecp_from_fractions",
    "evaluate",
    "marginal_ecp",
    "predictive_probabilities",
    "record_traces",
    "reference_box",
    "simulate_traces",
    "tarp_ecp",
    "tarp_fractions",
    "tarp_repeats",
]
