"""What a tuning trial must meet, scored and predicted (docs/tuning.md §3).

constraints:  the constraints of a scored candidate (feasible when all ≤ 0): ζ's tests, the width floor,
              the clipping shift and clipped fraction at the optimum, the flagged traces;
predicted_constraints: the same from the facts alone (`predict`), before any trace: what orders the
              candidates the search simulates.
"""

from __future__ import annotations

import math

import numpy as np

from .predict import Prediction
from .preflight_report import LIMITS
from .score import Score, bias_limit

__all__ = ["MECHANICS", "NAMES", "constraints", "predicted_constraints"]

SEARCH_CLIPPED = LIMITS["clipped"] / 2
"""The clipped fraction at the optimum a chosen trial may have (half the check's: margin for fresh
simulations)."""
SEARCH_SHIFT = LIMITS["shift"] / 2
"""The clipping shift (posterior sds of φ*) a chosen trial may have: half the check's, for the same reason (the
trial of smallest width sits at the edge of what the search simulations allow)."""
WIDTH_FLOOR = 0.97
"""The smallest mean posterior sd over the non-private VI sd a trial may have, per coordinate (the noise-aware
mixture over φ* is never narrower than q(θ | φ̂) when ρ* is right; 3 % for Monte Carlo error)."""
SEARCH_ALPHA = 0.05
"""Level of the pooled calibration tests during the search (Bonferroni over coordinates)."""


def constraints(score: Score, simulations: int | None = None) -> tuple[float, ...]:
    """Optuna constraints (feasible when all ≤ 0): φ* against the non-private optimum (ζ's tests: χ² over μ,
    a shared shift over ρ), a posterior at least about as wide as the non-private VI posterior, the clipping
    shift and clipped fraction at the optimum, the flagged traces.

    The θ-against-truth test is left to the fresh check: every trial sees the same simulations, so where their
    truths happen to fall (a sample's z² far from 1 even for the exact posterior) would bias every trial alike
    and reward width; ζ measures what the settings change, against φ̂, a function of the data.
    simulations: ζ's tests as they would come out on that many simulations with the same effect sizes (a rung of
    successive halving judged as the full search would judge it); None: on the score's own."""
    p = score.optimum_p_at(simulations)
    return (
        math.log(SEARCH_ALPHA / p.size) - math.log(max(p.min(), 1e-300)),
        WIDTH_FLOOR - float(score.sd_ratio.min()),
        score.shift - SEARCH_SHIFT,
        score.clipped - SEARCH_CLIPPED,
        score.flagged - LIMITS["flagged"],
    )


MECHANICS = slice(2, 5)
"""The constraints on the DP-SGD mechanics (clipping shift, clipped fraction, flagged traces): a fallback
trial must meet them before its calibration is weighed."""


def predicted_constraints(prediction: Prediction, simulations: int) -> tuple[float, ...]:
    """`constraints` as far as a prediction knows them (feasible when all ≤ 0): the pair model's ζ of the ρ rows
    against the |mean ζ| the shift test rejects on `simulations` (`bias_limit`), the predicted width floor, the
    clipping shift, the clipped fraction (exact: the score computes the same number from the same facts) and the
    share of simulations that would still hold the start after burn-in or cannot settle (κ ∉ (0, 2)). The μ rows'
    χ² test has no prediction (the linear law makes ζ of the μ rows N(0, 1))."""
    coordinates = prediction.shift.shape[1]
    with np.errstate(invalid="ignore"):
        floor = WIDTH_FLOOR - float(np.nanmin(np.mean(prediction.ratio, axis=0), initial=np.inf))
    return (
        prediction.bias - bias_limit(simulations, coordinates, SEARCH_ALPHA),
        floor if np.isfinite(floor) else 0.0,
        prediction.relative_shift - SEARCH_SHIFT,
        prediction.clipped - SEARCH_CLIPPED,
        max(prediction.remembered, prediction.unstable) - LIMITS["flagged"],
    )


NAMES = ("calibration", "width floor", "shift", "clipped", "traces")
"""What each constraint is about, in `constraints`' order (a candidate's table names the ones it fails)."""
