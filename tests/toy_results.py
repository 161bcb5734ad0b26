"""Small study results built by hand, for the tests of what is written and drawn from them."""

import numpy as np

from noiseaware.evaluation.calibration_result import METRICS, CalibrationResult
from noiseaware.evaluation.result import CoverageResult


def coverage_result(**settings) -> CoverageResult:
    """A small CoverageResult of one method, "exact"; `settings` replace or add to its toy settings."""
    levels = np.linspace(0, 1, 21)
    curves = {rule: {"exact": np.tile(levels, (2, 1))} for rule in ("research", "trace")}
    return CoverageResult(
        levels=levels,
        curves=curves,
        marginal_curves={rule: {"exact": c["exact"][..., None]} for rule, c in curves.items()},
        failures={"exact": 0},
        seconds={"dpvi": 1.0},
        diagnostics={},
        theta_names=("rate",),
        settings={"model": "toy", "epsilon": 1.0, "noise_multiplier": 2.0, "simulations": 4} | settings,
    )


def calibration_result() -> CalibrationResult:
    runs = 3
    return CalibrationResult(
        metrics={"exact": {k: np.array([0.02, 0.03, 0.04]) for k in METRICS}},
        curves={
            "exact": {
                "mean_predicted": np.tile([0.2, 0.6], (runs, 1)),
                "fraction_positive": np.tile([0.3, 0.5], (runs, 1)),
                "counts": np.full((runs, 2), 5),
            }
        },
        histograms={"exact": np.ones((runs, 20), int)},
        paired_methods=("exact",),
        failures={"exact": 0},
        seconds={"exact": 1.0},
        diagnostics={},
        settings={"dataset": "toy", "runs": runs, "bins": 2, "binning": "equal-count", "epsilon": 1.0},
    )
