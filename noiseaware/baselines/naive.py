"""The naive baseline: the DPVI answer itself, θ ~ q_{φ_T} = N(μ_T, diag(softplus(ρ_T)²)), unaware of the DP noise."""

from __future__ import annotations

from ..posterior import NoiseAwarePosterior
from ..trace import Trace

__all__ = ["naive_posterior"]


def naive_posterior(trace: Trace) -> NoiseAwarePosterior:
    """The last iterate φ_T as a one-component posterior (K = 1, no Hessian), with the interface of `fit`'s result."""
    return NoiseAwarePosterior(
        optimum_chains=trace.final_iterate()[None, None, :],
        hessian_chains=None,
        extra_noise_chains=None,
        method="naive",
        param_names=trace.param_names,
        sites=trace.sites,
        info=trace_facts(trace),
    )


def trace_facts(trace: Trace, **more) -> dict:
    """The trace's settings worth carrying into a posterior: privacy level and size."""
    return {
        "epsilon": trace.epsilon,
        "delta": trace.delta,
        "noise_multiplier": trace.noise_multiplier,
        "clip": trace.clip,
        "sampling_rate": trace.sampling_rate,
        "n_examples": trace.n_examples,
        "steps": trace.steps,
    } | more
