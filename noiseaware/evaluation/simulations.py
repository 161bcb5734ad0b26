"""Simulations of a coverage study: θ_m ~ prior, x_m ~ p(x | θ_m), a DPVI trace of x_m, for m = 1..M.

Simulation m uses split(k_sim, M)[m] and split(k_dpvi, M)[m] of the study key's simulation stream whichever
part of the study it is in, so a part (`simulate_part`) simulates exactly what the whole would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..methods.base import Batch
from ..models.benchmark import BenchmarkModel
from ..recording.dpvi import record_dpvi_batch
from ..trace import Trace
from ..util.chunks import chunk_slices
from ..util.keys import as_key
from ..util.progress import Progress, progress_bar

__all__ = ["Simulations", "simulate_part", "simulate_traces"]


@dataclasses.dataclass(frozen=True)
class Simulations:
    """M simulations at one privacy level: the problems methods see (`batch`) and the truth (M, d) they never see."""

    batch: Batch
    truth: np.ndarray
    noise_multiplier: float

    def __len__(self) -> int:
        return len(self.batch)

    @property
    def traces(self) -> tuple[Trace, ...]:
        return self.batch.traces

    @property
    def model(self) -> BenchmarkModel:
        return self.batch.model


def simulate_traces(
    bm: BenchmarkModel,
    *,
    noise_multiplier: float | None,
    delta: float,
    simulations: int,
    key,
    epsilon: float | None = None,
    chunk: int = 100,
    progress: Progress = False,
    **settings,
) -> Simulations:
    """θ_m ~ prior, x_m ~ p(x | θ_m) and a DPVI trace of x_m for m = 1..M: one compiled program, in chunks.

    Simulation m uses split(k, M)[m] of the simulation and DPVI streams of `key` whichever chunk it is in.
    settings: record_dpvi's (the preset's, with overrides); noise_multiplier=None with non_private=True
    and a learning_rate records non-private reference runs.
    """
    parts: list[Simulations] = []
    with progress_bar(simulations, "DPVI", progress, unit="simulation") as advance:
        for part in chunk_slices(simulations, chunk):
            parts.append(simulate_part(bm, noise_multiplier, delta, epsilon, key, simulations, part, settings))
            advance(part.stop - part.start)
    batch = Batch(
        tuple(t for p in parts for t in p.traces),
        bm,
        jax.tree.map(lambda *a: jnp.concatenate(a), *(p.batch.data for p in parts)),
        epsilon,
        delta,
    )
    return Simulations(batch, np.concatenate([p.truth for p in parts]), parts[0].noise_multiplier)


def simulate_part(
    bm: BenchmarkModel,
    noise_multiplier: float | None,
    delta: float,
    epsilon: float | None,
    key,
    total: int,
    part: slice,
    settings: Mapping[str, Any],
) -> Simulations:
    """Simulations part.start..part.stop − 1 of `total` (`simulate_traces`), as one compiled DPVI program."""
    privacy = {} if noise_multiplier is None else {"noise_multiplier": noise_multiplier}
    k_sim, k_dpvi = jax.random.split(as_key(key))
    truth, data = jax.vmap(bm.simulate)(jax.random.split(k_sim, total)[part])
    keys = jax.random.split(k_dpvi, total)[part]
    traces = record_dpvi_batch(bm.model, data, keys=keys, delta=delta, batch=bm.batch, **privacy, **settings)
    sigma = traces[0].noise_multiplier if traces else noise_multiplier
    return Simulations(Batch(tuple(traces), bm, data, epsilon, delta), np.asarray(truth, np.float64), sigma)
