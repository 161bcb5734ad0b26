"""d3p: a trace from the arrays of a d3p DP-VI run.

d3p releases each step's gradient scaled to the population, G̃_t = (N / (qN))·(Σ_i clip_C(g_i) + ξ_t) = G_t / q:
convention "population-scaled" (D = q), Poisson sampling at rate q, add/remove neighbours.
"""

from __future__ import annotations

from ..trace import Convention, Trace
from .recorder import producer

__all__ = ["from_d3p"]


def from_d3p(
    params, grads, *, noise_multiplier: float, clip: float, sampling_rate: float, n_examples: int, **fields
) -> Trace:
    """params, grads (T, P) as d3p released them; fields: any other `Trace.from_arrays` keyword."""
    return Trace.from_arrays(
        params,
        grads,
        noise_multiplier=noise_multiplier,
        clip=clip,
        sampling_rate=sampling_rate,
        n_examples=n_examples,
        convention=Convention(normaliser="population-scaled", producer=producer("d3p")),
        **fields,
    )
