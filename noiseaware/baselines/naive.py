"""The naive baseline: the DPVI answer itself, θ ~ q_{φ_T} = N(μ_T, diag(softplus(ρ_T)²)), unaware of the DP noise."""

from __future__ import annotations

from ..posteriors.mixture import NaivePosterior
from ..trace import Trace

__all__ = ["naive_posterior"]


def naive_posterior(trace: Trace) -> NaivePosterior:
    """The last iterate φ_T as a one-component posterior (K = 1, no Hessian); needs no key (nothing is random)."""
    return NaivePosterior.from_trace(trace, trace.final_iterate()[None, None, :], method="naive")
