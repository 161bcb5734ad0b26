"""The naive baseline: the DPVI answer itself, θ ~ q_{φ_T} = N(μ_T, diag(softplus(ρ_T)²)), unaware of the DP noise."""

from __future__ import annotations

import dataclasses

from ..posteriors.mixture import NAIVE, MixturePosterior
from ..trace import Trace
from ..util.diagnostics import Diagnostics

__all__ = ["NaiveDiagnostics", "naive_posterior"]


@dataclasses.dataclass(frozen=True)
class NaiveDiagnostics(Diagnostics):
    """The last iterate has nothing to report but what it is."""

    def describe(self, posterior) -> list[str]:
        return ["the DPVI last iterate φ_T, ignores the DP noise"]


def naive_posterior(trace: Trace) -> MixturePosterior:
    """The last iterate φ_T as a one-component posterior (K = 1, no Hessian); needs no key (nothing is random)."""
    return MixturePosterior.from_trace(
        trace, trace.final_iterate()[None, None, :], method="naive", kind=NAIVE, diagnostics=NaiveDiagnostics()
    )
