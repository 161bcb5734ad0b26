"""What a tuning trial must meet, and when it is pruned before it has been fully scored (docs/tuning.md §3).

constraints:  Optuna's constraints of a scored trial (feasible when all ≤ 0): ζ's tests, the width floor,
              the clipping shift and clipped fraction at the optimum, the flagged traces;
hopeless:     half the simulations already far beyond one of them (pruned half-way);
doomed:       the prediction from the facts alone (`predict`) far beyond one of them, or far wider than the
              best feasible trial so far (pruned before any trace), with `predicted_constraints` for TPE.
"""

from __future__ import annotations

import math

from .predict import Prediction
from .preflight_report import LIMITS
from .score import Score

__all__ = ["MECHANICS", "PRUNE", "constraints", "doomed", "hopeless", "predicted_constraints"]

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


def constraints(score: Score) -> tuple[float, ...]:
    """Optuna constraints (feasible when all ≤ 0): φ* against the non-private optimum (ζ's tests: χ² over μ,
    a shared shift over ρ), a posterior at least about as wide as the non-private VI posterior, the clipping
    shift and clipped fraction at the optimum, the flagged traces.

    The θ-against-truth test is left to the fresh check: every trial sees the same simulations, so where their
    truths happen to fall (a sample's z² far from 1 even for the exact posterior) would bias every trial alike
    and reward width; ζ measures what the settings change, against φ̂, a function of the data."""
    return (
        math.log(SEARCH_ALPHA / score.optimum_p.size) - math.log(max(score.optimum_p.min(), 1e-300)),
        WIDTH_FLOOR - float(score.sd_ratio.min()),
        score.shift - SEARCH_SHIFT,
        score.clipped - SEARCH_CLIPPED,
        score.flagged - LIMITS["flagged"],
    )


MECHANICS = slice(2, 5)
"""The constraints on the DP-SGD mechanics (clipping shift, clipped fraction, flagged traces): a fallback
trial must meet them before its calibration is weighed."""


def hopeless(score: Score) -> bool:
    """Whether half the simulations already rule a trial out (far beyond any one constraint's edge)."""
    c = constraints(score)
    return c[0] > 10 or c[1] > 0.3 or c[2] > 3.0 or c[3] > 0.2 or c[4] > 0.4


PRUNE = {"clipped": SEARCH_CLIPPED, "shift": 2 * SEARCH_SHIFT, "memory": 0.6, "unstable": LIMITS["flagged"], "width": 2}
"""Where a prediction (`predict`) prunes a trial before any trace: a clipped fraction at the optimum above the
search's (exact: the score computes it from the same facts); a predicted clipping shift above 2 × the search's
(the measured shift was 0.62–1.58 × the predicted in the validation of docs/tuning.md §3, wherever the linear
law holds); more than 60 % of the simulations still holding the start after burn-in (the half-way pruning's
share of flagged traces), or more than the flagged limit's share with a coordinate that cannot settle (κ ∉ (0, 2));
a predicted width above 2 × the best feasible trial's so far (the prediction was at most 1.63 × the measured width
there, so such a trial measures at least 1.2 × the best), which cannot be chosen."""


def doomed(prediction: Prediction, best: float | None) -> str | None:
    """Why a trial cannot pass or win, predicted before any trace (`PRUNE`), else None; best: the smallest width of
    a feasible trial so far (None: none yet)."""
    if prediction.clipped > PRUNE["clipped"]:
        return "clipped"
    if prediction.relative_shift > PRUNE["shift"]:
        return "shift"
    if prediction.remembered > PRUNE["memory"]:
        return "memory"
    if prediction.unstable > PRUNE["unstable"]:
        return "unstable"
    if best is not None and prediction.width > PRUNE["width"] * best:
        return "width"
    return None


def predicted_constraints(prediction: Prediction) -> tuple[float, ...]:
    """`constraints` as far as a prediction knows them, for TPE: the clipping shift, the clipped fraction and
    the share of traces that cannot settle; the calibration and width floor read 0 (unknown)."""
    return (
        0.0,
        0.0,
        prediction.relative_shift - SEARCH_SHIFT,
        prediction.clipped - SEARCH_CLIPPED,
        max(prediction.remembered, prediction.unstable) - LIMITS["flagged"],
    )
