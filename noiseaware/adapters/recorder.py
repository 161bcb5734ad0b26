"""A fixed-size record of a run inside a jitted training loop, and the optax transformation that fills it.

`TraceBuffer` holds φ_t (T, P), the released G̃_t (T, P), its divisor D_t (T,) and, for a run that releases them,
the noisy counts of clipped examples c̃_t (T,) with their noise sd σ_b; `record` writes step t's row (pure,
jittable); rows past T are not written but counted, so `to_arrays` says when the run outgrew the buffer instead of
keeping its first T steps. `recording(inner, steps, divisor)` wraps a library's privatising `GradientTransformation`:
its update passes the inner one's output through unchanged and records (φ_t, that output, divisor(updates)), and with
`clipped_count` its released count of clipped examples (`clipped_count_query`). Its state is a `RecordingState`;
`recording_state` finds it inside a chain's state.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from ..trace import Convention, Trace
from ..util.checks import positive_int

__all__ = [
    "RecordingState",
    "TraceBuffer",
    "buffer_trace",
    "clipped_count_query",
    "counts_of",
    "empty",
    "one_state",
    "producer",
    "record",
    "recorded_trace",
    "recording",
    "recording_state",
    "to_arrays",
    "unscaled",
]


class TraceBuffer(NamedTuple):
    """params, released (T, P), divisors (T,), step: rows written so far (including any past T); clipped (T,): the
    released counts of clipped examples ((0,) for a run that releases none), count_noise: their noise sd σ_b."""

    params: jax.Array
    released: jax.Array
    divisors: jax.Array
    step: jax.Array
    clipped: jax.Array
    count_noise: jax.Array


def empty(steps: int, n_params: int, dtype, count_noise: float | None = None) -> TraceBuffer:
    """A buffer for `steps` rows of P = n_params; with `count_noise` σ_b, for their released clipped counts too."""
    counts = 0 if count_noise is None else steps
    return TraceBuffer(
        jnp.zeros((steps, n_params), dtype),
        jnp.zeros((steps, n_params), dtype),
        jnp.zeros((steps,)),
        jnp.array(0),
        jnp.zeros((counts,), dtype),
        jnp.asarray(0.0 if count_noise is None else count_noise),
    )


def record(buffer: TraceBuffer, params: jax.Array, released: jax.Array, divisor, keep=True, clipped=0.0) -> TraceBuffer:
    """The buffer with row `step` set to (φ_t, G̃_t, D_t) (φ, G̃ flat (P,)) and the released clipped count c̃_t (kept
    where the buffer holds counts) where `keep` (a traced bool), and its step advanced by one; past the last row
    nothing is written. The row is written in place (an out-of-range index is dropped), never selected over the
    whole buffer, which would copy it every step."""
    t = buffer.step
    index = jnp.where(keep, t, buffer.params.shape[0])

    def put(array, row):
        return array.at[index].set(row, mode="drop")

    return TraceBuffer(
        put(buffer.params, params.astype(buffer.params.dtype)),
        put(buffer.released, released.astype(buffer.released.dtype)),
        put(buffer.divisors, jnp.asarray(divisor, buffer.divisors.dtype)),
        t + jnp.asarray(keep, t.dtype),
        put(buffer.clipped, jnp.asarray(clipped, buffer.clipped.dtype)) if buffer.clipped.shape[0] else buffer.clipped,
        buffer.count_noise,
    )


def to_arrays(buffer: TraceBuffer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(φ (T, P), G̃ (T, P), D (T,)) of the rows written; a ValueError when the run took more steps than the
    buffer holds, or none (the clipped counts: `counts_of`)."""
    written, capacity = int(buffer.step), buffer.params.shape[0]
    if written > capacity:
        raise ValueError(
            f"the run took {written} steps but the recorder holds {capacity}: create it with steps={written} or more"
        )
    if written == 0:
        raise ValueError("the recorder holds no steps: run at least one update through it")
    return (
        np.asarray(buffer.params[:written]),
        np.asarray(buffer.released[:written]),
        np.asarray(buffer.divisors[:written]),
    )


def counts_of(buffer: TraceBuffer) -> dict:
    """{clipped_counts (T,), count_noise_multiplier σ_b} of the rows written, as `Trace.from_arrays` takes them;
    empty for a buffer that holds no counts."""
    if buffer.clipped.shape[0] == 0:
        return {}
    written = min(int(buffer.step), buffer.clipped.shape[0])
    return {"clipped_counts": np.asarray(buffer.clipped[:written]), "count_noise_multiplier": float(buffer.count_noise)}


def clipped_count_query(clip: float, count_noise: float, key) -> Callable:
    """count(per_example, step) → Σ_i 1[‖g_i‖ > C] + σ_b·z_step: the released count of clipped examples of a batch of
    per-example gradients (a pytree whose leaves lead with the batch; ‖g_i‖ over all leaves), its noise from `key`
    folded with `COUNT_STREAM` and the step; sensitivity 1, accounted with the gradient
    (`privacy.combined_noise_multiplier`)."""
    stream = jax.random.fold_in(key, COUNT_STREAM)

    def count(per_example, step):
        leaves = jax.tree.leaves(per_example)
        squares = sum(jnp.sum(jnp.reshape(leaf, (leaf.shape[0], -1)) ** 2, axis=1) for leaf in leaves)
        clipped = jnp.sum(jnp.sqrt(squares) > clip).astype(leaves[0].dtype)
        return clipped + count_noise * jax.random.normal(jax.random.fold_in(stream, step), (), leaves[0].dtype)

    return count


COUNT_STREAM = 0x636C6970
"""The stream the clipped count's noise is drawn from, folded into the run's key: apart from the gradient's noise."""


class RecordingState(NamedTuple):
    """The wrapped transformation's state and the buffer."""

    inner: Any
    buffer: TraceBuffer


def recording(
    inner: optax.GradientTransformation,
    *,
    steps: int,
    divisor: Callable[[Any], Any],
    clipped_count: tuple[Callable, float] | None = None,
) -> optax.GradientTransformation:
    """`inner` with every update recorded: (φ_t = the params passed to update, raveled; G̃_t = inner's output,
    raveled; D_t = divisor(updates)), for up to `steps` updates. update needs params (φ_t is what it records).
    clipped_count: (count, σ_b), `count(updates, step)` the released clipped count (`clipped_count_query`)."""
    steps = positive_int("steps", steps, hint="the number of updates to record, e.g. steps=T, the run's length")
    count, count_noise = (None, None) if clipped_count is None else clipped_count

    def init_fn(params):
        flat, _ = ravel_pytree(params)
        return RecordingState(inner.init(params), empty(steps, flat.size, flat.dtype, count_noise))

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("the recorder records φ_t: pass params to update (optimizer.update(grads, state, params))")
        released, inner_state = inner.update(updates, state.inner, params)
        clipped = 0.0 if count is None else count(updates, state.buffer.step)
        buffer = record(
            state.buffer, ravel_pytree(params)[0], ravel_pytree(released)[0], divisor(updates), True, clipped
        )
        return released, RecordingState(inner_state, buffer)

    return optax.GradientTransformation(init_fn, update_fn)


def recording_state(opt_state) -> RecordingState:
    """The one RecordingState inside an optimizer state (a chain's tuple, nested); a ValueError without exactly one."""
    return one_state(opt_state, RecordingState, "recorders", "recording_aggregate")


def one_state(opt_state, kind: type, plural: str, first: str):
    """The one leaf of type `kind` inside an optimizer state (a chain's tuple, nested); a ValueError naming how many
    `plural` it holds otherwise, with a chain that starts with `first`."""
    found = [
        leaf for leaf in jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, kind)) if isinstance(leaf, kind)
    ]
    if len(found) != 1:
        raise ValueError(
            f"the optimizer state holds {len(found)} {plural}; chain exactly one first, "
            f"e.g. optax.chain({first}(...), optax.sgd(learning_rate))"
        )
    return found[0]


def unscaled(params: np.ndarray, released: np.ndarray, final_params, grad_scale) -> tuple:
    """A run that optimised φ' = φ ⊘ s (preconditioning, noiseaware's grad_scale s) as the trace of φ: params s ⊙ φ'_t
    (T, P), released G̃'_t ⊘ s, final s ⊙ φ'_T (or None); the trace then records grad_scale s, and its noise sd σC/s.
    grad_scale None: as recorded."""
    if grad_scale is None:
        return params, released, final_params
    scale = np.asarray(grad_scale, params.dtype)
    if scale.shape not in ((), params.shape[1:]):
        raise ValueError(
            f"grad_scale has shape {scale.shape}, but the run has P = {params.shape[1]} parameters (its flattened "
            f"parameters, in order): give one scale per parameter, shape ({params.shape[1]},), or one number"
        )
    if not np.all(np.isfinite(scale) & (scale > 0)):
        raise ValueError(f"grad_scale must be positive and finite everywhere, got {grad_scale!r}")
    scale = np.broadcast_to(scale, params.shape[1:])
    final = None if final_params is None else final_params * scale
    return params * scale, released / scale, final


def recorded_trace(
    opt_state, *, convention: Convention, final_params=None, grad_scale=None, step_scales=None, **fields
) -> Trace:
    """The trace of the run recorded in `opt_state` (the state of a chain holding one `recording`): φ_t, the released
    G̃_t with their divisors as batch_sizes when the convention divides by the batch size, under `convention`;
    final_params φ_T as a pytree (or flat); grad_scale: see `unscaled`; step_scales s_t (T, P): a scale applied to
    each step's per-example gradients before clipping and not undone in what was recorded (jax-privacy's
    scale_then_privatize), undone here, G̃_t ⊘ s_t, and kept as the trace's per-step grad_scale; fields: the other
    `Trace.from_arrays` keywords (σ, C, q, N, learning_rate, sites …)."""
    return buffer_trace(
        recording_state(opt_state).buffer,
        convention=convention,
        final_params=final_params,
        grad_scale=grad_scale,
        step_scales=step_scales,
        **fields,
    )


def buffer_trace(
    buffer: TraceBuffer, *, convention: Convention, final_params=None, grad_scale=None, step_scales=None, **fields
) -> Trace:
    """The trace of the rows a `TraceBuffer` holds (`recorded_trace`, whose arguments these are), with its released
    clipped counts when it holds them."""
    params, released, divisors = to_arrays(buffer)
    counts = counts_of(buffer)
    given = fields.get("count_noise_multiplier")
    if counts and given is not None and not np.isclose(given, counts["count_noise_multiplier"], rtol=1e-6):
        raise ValueError(
            f"count_noise_multiplier={given} but the recorder released its counts with σ_b = "
            f"{counts['count_noise_multiplier']:.6g}: give the σ_b the run used (or leave it out)"
        )
    fields = counts | fields
    if final_params is not None:
        final_params = np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(final_params)]).astype(params.dtype)
    params, released, final_params = unscaled(params, released, final_params, grad_scale)
    scale = 1.0 if grad_scale is None else np.asarray(grad_scale, params.dtype)
    if step_scales is not None:
        steps = _step_scales(step_scales, params.shape)
        released, scale = released / steps, steps * scale
    return Trace.from_arrays(
        params,
        released,
        convention=convention,
        batch_sizes=np.rint(divisors).astype(np.int64) if convention.needs_batch_sizes() else None,
        final_params=final_params,
        grad_scale=scale,
        **fields,
    )


def _step_scales(step_scales, shape: tuple[int, int]) -> np.ndarray:
    """The per-step scales s_t (T, P), checked against the recorded steps (T, P): positive and finite."""
    scales = np.asarray(step_scales)
    if scales.shape != shape:
        raise ValueError(
            f"scales has shape {scales.shape}, but the recorder holds {shape[0]} steps of {shape[1]} parameters: give "
            f"the scale each step applied before clipping, shape {shape}"
        )
    bad = np.argwhere(~(np.isfinite(scales) & (scales > 0)))
    if bad.size:
        step, j = (int(i) for i in bad[0])
        raise ValueError(
            f"scales is {scales[step, j]} at step {step}, parameter {j}; a scale must be positive and finite"
        )
    return scales


def producer(package: str) -> str:
    """ "<package> <installed version>", or "<package> (version unknown)" when it is not installed."""
    try:
        return f"{package} {version(package)}"
    except PackageNotFoundError:
        return f"{package} (version unknown)"
