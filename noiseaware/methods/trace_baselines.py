"""The baselines that read the same trace as the noise-aware fit: the naive last iterate, DPVIm, the
random-scaling intervals from the iterates and the parametric bootstrap from the released estimate."""

from __future__ import annotations

import dataclasses
from typing import Literal

from ..baselines.bootstrap import bootstrap_posterior
from ..baselines.dpvim import CENTRES, dpvim_posterior
from ..baselines.naive import naive_posterior
from ..baselines.random_scaling import random_scaling_posterior
from ..models.benchmark import BenchmarkModel
from ..trace import BURN_IN
from ..util.checks import choice, fraction, positive_float, positive_int
from ..util.defaults import DRAWS
from .base import Batch, Method, Outcome, outcome_of, per_trace
from .reach import BASELINE_ADVICE, uninformative_note


def _told(fit_one):
    """`fit_one(trace, key, options)`, its posterior carrying the note on a trace that cannot locate the optimum
    (`uninformative_note`, at the options' burn-in)."""

    def fit(trace, key, options):
        post = fit_one(trace, key, options)
        note = uninformative_note(trace, getattr(options, "burn_in", BURN_IN), BASELINE_ADVICE)
        return post if note is None else dataclasses.replace(post, notes=(*post.notes, note))

    fit.__doc__ = fit_one.__doc__
    return fit


__all__ = ["BOOTSTRAP", "BootstrapOptions", "DPVIM", "DPVImOptions", "NAIVE", "RANDOM_SCALING", "RandomScalingOptions"]


@dataclasses.dataclass(frozen=True)
class DPVImOptions:
    """draws: K draws of φ; centre: "last" (φ_T), "average" (the tail mean) or "empirical" (tail rows);
    threshold κ of the convergence test; windows: the number of window starts (docs/baselines.md §3)."""

    draws: int = DRAWS
    centre: Literal["last", "average", "empirical"] = "last"
    threshold: float = 0.05
    windows: int = 10

    def __post_init__(self):
        positive_int("draws", self.draws, hint=f"the number K of draws of φ, e.g. draws={DRAWS}")
        choice("centre", self.centre, CENTRES)
        positive_float("threshold", self.threshold, hint="the slope threshold κ of the convergence test (DPVIm: 0.05)")
        positive_int("windows", self.windows, minimum=2, hint="the number of window starts of the convergence test")


NAIVE = per_trace(
    "naive",
    _told(lambda trace, key, options: naive_posterior(trace)),
    description="naive: the last DPVI iterate q_{φ_T}, unaware of the DP noise",
)
DPVIM = per_trace(
    "dpvim",
    _told(
        lambda trace, key, o: dpvim_posterior(
            trace, key=key, draws=o.draws, centre=o.centre, threshold=o.threshold, windows=o.windows
        )
    ),
    options=DPVImOptions,
    description="DPVIm-style: φ spread by the variance of the converged tail",
)


@dataclasses.dataclass(frozen=True)
class RandomScalingOptions:
    """draws: K draws of φ* from the pivot; burn_in: the fraction of the trace left out before averaging."""

    draws: int = DRAWS
    burn_in: float = BURN_IN

    def __post_init__(self):
        positive_int("draws", self.draws, hint=f"the number K of draws of φ*, e.g. draws={DRAWS}")
        fraction("burn_in", self.burn_in, hint="the share of the trace dropped before averaging, e.g. burn_in=0.2")


RANDOM_SCALING = per_trace(
    "random-scaling",
    _told(lambda trace, key, o: random_scaling_posterior(trace, key=key, draws=o.draws, burn_in=o.burn_in)),
    options=RandomScalingOptions,
    description="random scaling (Lee et al. 2022; Xia, Zhang & Cai 2025): φ* from the iterate average's pivot, "
    "frequentist",
)


@dataclasses.dataclass(frozen=True)
class BootstrapOptions:
    """replicates B: DP-SGD re-runs per trace (≥ 20: a 90 % interval's ends); burn_in: the share of each run left
    out of its estimate; model: the BenchmarkModel to simulate from (None: the study's model)."""

    replicates: int = 50
    burn_in: float = BURN_IN
    model: BenchmarkModel | None = None

    def __post_init__(self):
        positive_int("replicates", self.replicates, minimum=20, hint="the number B of DP-SGD re-runs, e.g. 50")
        fraction("burn_in", self.burn_in, hint="the share of each run dropped before its estimate, e.g. 0.2")
        if self.model is not None and not isinstance(self.model, BenchmarkModel):
            raise TypeError(f"model must be a na.models.BenchmarkModel; got {type(self.model).__name__}")


def _bootstrap_batch(batch: Batch, keys, opts: BootstrapOptions) -> list[Outcome]:
    model = opts.model or batch.model
    if model is None:
        raise ValueError(
            "the parametric bootstrap simulates data from the model: pass it, "
            "e.g. na.fit(trace, 'bootstrap', key=0, model=na.models.get('M1'))"
        )
    fit = _told(lambda t, k, o: bootstrap_posterior(t, model, key=k, replicates=o.replicates, burn_in=o.burn_in))
    return [outcome_of(lambda t=t, k=k: fit(t, k, opts)) for t, k in zip(batch.traces, keys)]


BOOTSTRAP = Method(
    "bootstrap",
    _bootstrap_batch,
    BootstrapOptions,
    "trace",
    description="parametric bootstrap (Ferrando, Wang & Sheldon 2022): B DP-SGD re-runs on data simulated at the "
    "released estimate, basic-bootstrap intervals; frequentist",
)
