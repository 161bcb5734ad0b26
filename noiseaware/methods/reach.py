"""Traces the clip leaves without information: the clipped gradients could show at most q·N·√n/σ standard errors
of their DP noise (`checks.clipping.clip_reach`), and below UNINFORMATIVE_REACH the trace cannot locate the VI
optimum. The gradient model's routes then give the model's prior (or, without the model, a typed failure), and the
baselines that read the iterates say so beside their answer; this module words both.
"""

from __future__ import annotations

from ..checks.clipping import UNINFORMATIVE_REACH, clip_reach
from ..trace import kept_steps
from ..trace.run import Run
from ..util.errors import UNINFORMATIVE, FitFailure
from ..util.notes import Note

__all__ = ["BASELINE_ADVICE", "PRIOR_ONLY_ADVICE", "is_uninformative", "uninformative_failure", "uninformative_note"]

_BOUND = (
    "the clip bounds every mean gradient of the trace by q·N·√n/σ standard errors of its DP noise (the value; "
    f"below {UNINFORMATIVE_REACH:g}), so the trace cannot tell where the VI optimum is"
)
PRIOR_ONLY_ADVICE = (
    f"{_BOUND}: the posterior is the model's prior on the optimum and its curvature at the trace's N, about as wide "
    "as the model's prior predictive; to learn from the data, record on more examples, more steps or a larger ε"
)
"""What a gradient-model fit with the model says of such a trace."""
BASELINE_ADVICE = (
    f"{_BOUND}: the iterates wander where the noise takes them, so these intervals, read off them, do not locate "
    "the optimum and may be narrow and misplaced; fit with the gradient model and the trace's model "
    "(method='exact', model=bm; noiseaware fit --model NAME), or record on more examples, steps or a larger ε"
)
"""What a baseline that reads the iterates (naive, DPVIm, random scaling, the bootstrap) says of such a trace."""


def _reach(trace: Run, burn_in: float) -> float:
    """q·N·√n/σ over the steps kept after `burn_in` (`clip_reach`)."""
    return clip_reach(trace.settings, kept_steps(trace, burn_in))


def is_uninformative(trace: Run, burn_in: float) -> bool:
    """Whether the trace's reach over its kept steps is below UNINFORMATIVE_REACH."""
    return _reach(trace, burn_in) < UNINFORMATIVE_REACH


def uninformative_note(trace: Run, burn_in: float, advice: str) -> Note | None:
    """The note "trace uninformative" with `advice` (its value q·N·√n/σ over the kept steps) for a trace below
    UNINFORMATIVE_REACH; None for any other."""
    reach = _reach(trace, burn_in)
    return None if reach >= UNINFORMATIVE_REACH else Note("trace uninformative", advice, value=reach, combine="max")


def uninformative_failure(trace: Run, burn_in: float) -> FitFailure:
    """The failure of a gradient-model fit of such a trace without the model: its prior would be centred on the
    trace's own position."""
    reach = _reach(trace, burn_in)
    return FitFailure(
        UNINFORMATIVE,
        f"the clip bounds every mean gradient of the trace by {reach:.2g} standard errors of its DP noise (q·N·√n/σ, "
        f"below {UNINFORMATIVE_REACH:g}), so the trace cannot tell where the VI optimum is; without the model the fit "
        "would centre its prior on the trace's own position, a confident wrong answer: fit with the trace's model "
        "(fit(trace, model=bm), noiseaware fit --model NAME) to get its prior, or record on more examples, more "
        "steps or a larger ε",
    )
