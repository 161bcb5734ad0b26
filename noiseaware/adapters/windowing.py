"""A windowed trace of a run, accumulated inside a jitted training loop: the optax transformation that keeps it.

`windowing(inner, steps=T, divisor=…)` wraps a library's privatising `GradientTransformation` as `recording` does:
its update passes the inner one's output through unchanged, bit for bit, and adds (φ_t, G_t = D_t·G̃_t) to the sums
over W windows of steps (`noiseaware.trace.sums`), and R evenly spaced rows to a sample buffer: O(W·P + R·P) memory
whatever T is, where a trace takes 2·T·P; with `clipped_count`, the released counts of clipped examples too (their
window sums Σ c̃, Σ c̃², and the sample rows' counts). `windowed_of(opt_state, convention=…, **settings)` turns the
state into a
`WindowedTrace`, which the gradient-model routes fit as they fit the full trace (docs/windowed.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from ..trace import Convention, TraceError
from ..trace.convention import divisors
from ..trace.families import MEAN_FIELD, family_for
from ..trace.run import scale_rows_of
from ..trace.sums import WindowSums, add_count, add_step, empty_sums, window_bounds
from ..trace.windowed import ROWS, WINDOWS, WindowedTrace, coupled_dim, sample_steps
from ..util.checks import positive_int
from .recorder import TraceBuffer, buffer_trace, empty, one_state, record

__all__ = ["WindowingState", "windowed_of", "windowing_state", "windowing"]


class WindowingState(NamedTuple):
    """The wrapped transformation's state; the window sums; the sample rows (a `TraceBuffer` of R rows); the updates
    seen (step); the run's declared length T (steps); the scale s (P,) the run divides φ by; the smallest and the
    largest divisor D_t seen (2,), which `windowed_of` checks against the convention; clipped (W, 2): per window Σ c̃_t
    and Σ c̃_t² of the released clipped counts ((0, 2) for a run that releases none)."""

    inner: Any
    sums: WindowSums
    sample: TraceBuffer
    step: jax.Array
    steps: jax.Array
    grad_scale: jax.Array
    divisors: jax.Array
    clipped: jax.Array


def windowing(
    inner: optax.GradientTransformation,
    *,
    steps: int,
    divisor: Callable[[Any], Any],
    family: str = MEAN_FIELD,
    windows: int = WINDOWS,
    rows: int = ROWS,
    grad_scale=None,
    clipped_count: tuple[Callable, float] | None = None,
) -> optax.GradientTransformation:
    """`inner` with every update added to the window sums of a run of `steps` updates: φ_t (the params passed to
    update, raveled) and G_t = D_t·G̃_t (G̃_t inner's output, raveled; D_t = divisor(updates), what the producer
    divided the noisy sum by) over `windows` windows, and `rows` sample rows. family: the variational family of the
    raveled params, as a trace names it (`noiseaware.trace.VARIATIONAL_FAMILIES`), whose ρ block gets its sums in
    ψ = softplus(ρ)². grad_scale s (P,) or a scalar: the run optimised φ' = φ ⊘ s (`recorder.unscaled`); the sums
    are of φ = s ⊙ φ' and G̃'/s. clipped_count: (count, σ_b) as `recorder.recording` takes it."""
    steps = positive_int("steps", steps, hint="the number of updates of the run, e.g. steps=T")
    starts = tuple(window_bounds(steps, windows)[:-1].tolist())
    kept = jnp.asarray(sample_steps(steps, rows))
    count, count_noise = (None, None) if clipped_count is None else clipped_count

    def init_fn(params):
        flat, _ = ravel_pytree(params)
        shape = family_for(family, flat.size)
        scale = jnp.broadcast_to(jnp.asarray(1.0 if grad_scale is None else grad_scale, flat.dtype), flat.shape)
        return WindowingState(
            inner.init(params),
            empty_sums(flat.size, windows, scale_rows_of(shape), coupled_dim(shape), flat.dtype),
            empty(kept.size, flat.size, flat.dtype, count_noise),
            jnp.array(0),
            jnp.array(steps),
            scale,
            jnp.array([jnp.inf, -jnp.inf]),
            jnp.zeros((0 if count is None else windows, 2), flat.dtype),
        )

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("the window sums add φ_t: pass params to update (optimizer.update(grads, state, params))")
        released, inner_state = inner.update(updates, state.inner, params)
        phi, out = ravel_pytree(params)[0], ravel_pytree(released)[0]
        scaled = divisor(updates)
        rows_of = scale_rows_of(family_for(family, phi.size))
        t, s = state.step, state.grad_scale
        sums = add_step(state.sums, t, phi * s, out * scaled / s, starts=starts, scale_rows=rows_of)
        clipped, windowed = 0.0, state.clipped
        if count is not None:
            clipped = count(updates, t)
            windowed = add_count(windowed, t, clipped, starts=starts)
        sample = record(state.sample, phi, out, scaled, keep=jnp.any(kept == t), clipped=clipped)
        seen = jnp.array([jnp.minimum(state.divisors[0], scaled), jnp.maximum(state.divisors[1], scaled)])
        return released, WindowingState(inner_state, sums, sample, t + 1, state.steps, s, seen, windowed)

    return optax.GradientTransformation(init_fn, update_fn)


def windowing_state(opt_state) -> WindowingState:
    """The one WindowingState inside an optimizer state (a chain's tuple, nested); a ValueError without exactly one."""
    return one_state(opt_state, WindowingState, "windowing states", "windowing_aggregate")


def windowed_of(opt_state, *, convention: Convention, final_params=None, **fields) -> WindowedTrace:
    """The windowed trace of the run kept in `opt_state` (the state of a chain holding one `windowing`), under the
    producer's `convention`: its sums of the noisy sums b·D_t·G̃_t, and its sample rows as a `Trace` with the run's
    settings; final_params φ_T as a pytree (or flat); fields: the other `Trace.from_arrays` keywords (σ, C, q, N,
    learning_rate, sites …). A ValueError when the run took another number of updates than the windows were cut for.
    """
    state = windowing_state(opt_state)
    taken, steps = int(state.step), int(state.steps)
    if taken != steps:
        raise ValueError(
            f"the run took {taken} updates but the windows were cut for steps={steps}: they fit only that "
            f"length; create the windowing transformation with steps={taken}"
        )
    family = fields.get("variational_family", MEAN_FIELD)
    rows = scale_rows_of(family_for(family, state.sums.first.size))
    if rows.stop - rows.start != state.sums.psi_reference.shape[-1]:
        raise ValueError(
            f"the windows were made for a family whose ρ block has {state.sums.psi_reference.shape[-1]} rows, not "
            f"variational_family={family!r}: pass the family the windowing transformation was created with"
        )
    scale = np.asarray(state.grad_scale)
    sample = buffer_trace(
        state.sample, convention=convention, final_params=final_params, grad_scale=scale, run_steps=steps, **fields
    )
    factor = _to_sums(convention, np.asarray(state.divisors), sample.sampling_rate, sample.n_examples)
    sums = jax.tree.map(np.asarray, state.sums)
    if factor != 1.0:
        sums = scaled_gradients(sums, factor)
    clipped = np.asarray(state.clipped, np.float64) if state.clipped.shape[0] else None
    kept = np.asarray(sample_steps(steps, state.sample.params.shape[0]))
    return WindowedTrace(sums, sample, kept, steps, clipped)


def _to_sums(convention: Convention, seen: np.ndarray, sampling_rate: float, n_examples: int) -> float:
    """What turns the sums of D_t·G̃_t (D_t the divisors the run reported, seen: their least and largest) into sums of
    the noisy sums b·D'_t·G̃_t, D'_t the convention's divisor (`trace.convention.divisors`): 1 where the convention
    divides by the reported batch sizes, else b·D'/D for a constant D. A TraceError for batch sizes that vary under
    Poisson sampling (not DP-released) and a ValueError for a divisor that varies where the convention's does not."""
    low, high = float(seen[0]), float(seen[1])
    if convention.needs_batch_sizes():
        if convention.sampling == "poisson" and low != high:
            raise TraceError(
                f"the batch sizes varied from {low:g} to {high:g} under Poisson sampling: the realised size of a "
                "Poisson sample is not DP-released, so it may not enter window sums; divide by the expected batch size "
                "(normaliser 'expected-batch') or pad the batches to one size"
            )
        return 1.0
    if low != high:
        raise ValueError(
            f"the divisor varied from {low:g} to {high:g} between steps, but normaliser {convention.normaliser!r} "
            "divides by a constant: give the windowing transformation the divisor the producer used"
        )
    return float(convention.clip_factor * divisors(convention, None, sampling_rate, n_examples, 1)[0]) / low


def scaled_gradients(sums: WindowSums, factor: float) -> WindowSums:
    """The sums of factor·G in place of G: the sums linear in G times factor, Σ G² times factor²."""
    linear = ("g", "gy", "yyg", "gw", "gwv")
    changed = {name: getattr(sums, name) * factor for name in linear} | {"gg": sums.gg * factor**2}
    cross = sums.cross
    if cross is not None:
        cross = cross._replace(gy=cross.gy * factor, gy2=cross.gy2 * factor)
    return sums._replace(**changed, cross=cross)
