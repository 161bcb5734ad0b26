"""DPVI kept as a `WindowedTrace` instead of a trace: `record_dpvi(..., windowed=True)` (docs/windowed.md).

The recorder's steps run in the same compiled scan, and each step's (φ_t, G_t) is added to the window sums
(`noiseaware.trace.sums.add_step`) and, at the sample's steps, written to its R rows (a released count of clipped
examples c̃_t to its window's Σ c̃, Σ c̃² and the sample's counts): memory O(W·P + R·P) for any T.
The run is the trace's bit for bit (the same keys and steps); only what is kept of it differs.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..trace import TraceError
from ..trace.run import scale_rows_of
from ..trace.sums import add_count, add_step, empty_sums, window_bounds
from ..trace.windowed import ROWS, WINDOWS, WindowedTrace, coupled_dim, sample_steps
from ..util.chunks import run_chunks
from ..util.progress import progress_bar

__all__ = ["record_windowed"]


def record_windowed(recorder: Any, data, key, progress) -> WindowedTrace:
    """The windowed trace of the run `recorder` (a `dpvi.Recorder`) makes on prepared `data` from `key`, in the
    chunks of `run_chunks` (a progress bar between them); a TraceError when the run diverges (nothing is released)."""
    steps, family = recorder.settings.steps, recorder.settings.family
    if steps < WINDOWS:
        raise ValueError(
            f"a windowed trace keeps {WINDOWS} windows, so its run needs at least {WINDOWS} steps; got steps={steps}: "
            "record more steps, or record the trace itself (windowed=False)"
        )
    kept = sample_steps(steps, ROWS)
    starts = tuple(window_bounds(steps, WINDOWS)[:-1].tolist())
    size = family.n_params
    state = recorder.init(key)
    carry = (
        empty_sums(size, WINDOWS, scale_rows_of(family), coupled_dim(family), recorder.dtype),
        jnp.zeros((kept.size, size), recorder.dtype),
        jnp.zeros((kept.size, size), recorder.dtype),
        jnp.zeros((WINDOWS, 2), recorder.dtype),
        jnp.zeros((kept.size,), recorder.dtype),
    )
    hyper, done = recorder.hyper(), 0
    with progress_bar(steps, "DPVI (windowed)", progress) as advance:
        for n in run_chunks(steps, progress):
            state, carry = _run(recorder.program, hyper, data, state, carry, done, n, starts, tuple(kept.tolist()))
            done += n
            if not all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(carry)):
                raise TraceError(
                    f"DPVI diverged: its iterates or gradients are not finite by step {done} of {steps}, so nothing "
                    "is released; record again with a smaller learning rate"
                )
            advance(n)
    sums, params, grads, clipped, clipped_rows = jax.tree.map(np.asarray, carry)
    sample = recorder.to_trace(params, grads, state.params, clipped_rows)
    counted = sample.clipped_counts is not None
    return WindowedTrace(sums, sample, kept, steps, np.asarray(clipped, np.float64) if counted else None)


@functools.partial(jax.jit, static_argnames=("program", "n_steps", "starts", "kept"))
def _run(program, hyper, data, state, carry, first: int, n_steps: int, starts: tuple, kept: tuple):
    scale = scale_rows_of(program.family)
    sample = jnp.asarray(kept)

    def step(inner, t):
        state, (sums, rows, grads_rows, clipped, clipped_rows) = inner
        state, (params, grads, count) = program.step(hyper, data, state)
        sums = add_step(sums, t, params, grads, starts=starts, scale_rows=scale)
        clipped = add_count(clipped, t, count, starts=starts)
        r = jnp.minimum(jnp.searchsorted(sample, t), sample.size - 1)
        r = jnp.where(sample[r] == t, r, sample.size)  # off the sample's steps: out of range, dropped
        rows = rows.at[r].set(params, mode="drop")  # in place: selecting over the rows would copy them each step
        grads_rows = grads_rows.at[r].set(grads, mode="drop")
        clipped_rows = clipped_rows.at[r].set(count, mode="drop")
        return (state, (sums, rows, grads_rows, clipped, clipped_rows)), None

    return lax.scan(step, (state, carry), first + jnp.arange(n_steps))[0]
