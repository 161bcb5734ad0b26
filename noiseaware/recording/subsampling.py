"""Poisson subsampling and per-example clipping: the privacy-relevant part of a DP-SGD step, shared by the DPVI
recorder (`recording.dpvi`) and DP-SGLD (`baselines.dpsgld`).

`poisson_chunk` draws the next indices of a Poisson(q) sample by geometric gaps; `poisson_sum` adds a summand
over a whole sample chunk by chunk inside `lax.while_loop`; `clip_weights` gives each example's clipping weight
min(1, C/‖h_i‖), zero for padded slots and non-finite gradients; `clipped_number` counts the examples clipped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["clip_weights", "clipped_number", "poisson_chunk", "poisson_sum"]

_ROW = 8
"""Row length of the two-level cumulative sum in `_saturating_cumsum`."""


def _uniform_open(key, shape, dtype):
    """U ~ Uniform(0, 1) with 64 random bits, so that log U is accurate far into the lower tail."""
    hi, lo = jax.random.bits(key, (2,) + shape, jnp.uint32)
    scale = jnp.asarray(2.0**-32, dtype)
    return (hi.astype(dtype) + (lo.astype(dtype) + 0.5) * scale) * scale


def poisson_chunk(key, last, sampling_rate, size: int, n_examples: int):
    """The next `size` Poisson-sampled example indices after index `last`.

    The gaps between consecutive indices of Bernoulli(q) sampling are i.i.d. Geometric(q) on {1, 2, …},
    drawn by inversion ⌊log U / log(1 − q)⌋ + 1; returns (indices (size,) int32, mask (size,) bool:
    index < N). Offsets saturate at N + 1 (an index beyond N is beyond N either way).
    """
    dtype = jnp.result_type(float)
    u = _uniform_open(key, (size,), dtype)
    gaps = jnp.floor(jnp.log(u) / jnp.log1p(-jnp.asarray(sampling_rate, dtype))) + 1
    gaps = jnp.minimum(gaps, n_examples + 1).astype(jnp.int32)
    indices = last + _saturating_cumsum(gaps, n_examples + 1)
    return indices, indices < n_examples


def _saturating_cumsum(gaps, bound: int):
    """min(Σ_{j ≤ i} gaps_j, bound), (size,), for int32 gaps in [1, bound]: the same integers either way.

    When size · bound < 2³¹ no partial sum can overflow: a plain cumulative sum, taken as rows of `_ROW` (a cumsum
    within rows plus a cumsum of the row totals: on the CPU half the time of one scan over the chunk), then
    capped; else a saturating associative scan (min(a + b, bound) is associative) keeps every sum in int32 for
    bound ≤ 2³⁰ (N < 2³⁰ examples).
    """
    size = gaps.shape[0]
    if size * bound >= 2**31:
        return lax.associative_scan(lambda a, b: jnp.minimum(a + b, bound), gaps)
    rows = jnp.pad(gaps, (0, -size % _ROW)).reshape(-1, _ROW)
    totals = jnp.sum(rows, axis=1, dtype=jnp.int32)
    sums = jnp.cumsum(rows, axis=1, dtype=jnp.int32) + (jnp.cumsum(totals, dtype=jnp.int32) - totals)[:, None]
    return jnp.minimum(sums.reshape(-1)[:size], bound)


def clip_weights(norms, mask, clip):
    """Per-example clipping weights min(1, C/‖h_i‖), (B,), and which examples count, (B,) bool.

    Padded slots and non-finite per-example gradients get weight exactly zero (a select, not 0 × NaN), so each
    example's contribution stays bounded by C whatever the model returns; zero the kept-out rows too.
    """
    keep = mask & jnp.isfinite(norms)
    return jnp.where(keep, jnp.minimum(1.0, clip / jnp.where(norms > 0, norms, 1.0)), 0.0), keep


def clipped_number(norms, keep, clip):
    """Σ_i 1[‖h_i‖ > C] over the examples that count (`keep`, (B,) bool, from `clip_weights`), as a float scalar: the
    query of the clipped count, sensitivity 1 (one example more or less, or one replaced, moves it by at most 1)."""
    return jnp.sum(keep & (norms > clip)).astype(norms.dtype)


def poisson_sum(key, sampling_rate, chunk_size: int, n_examples: int, per_example, summand, zeros):
    """Σ of summand(examples, mask) over the chunks of one Poisson(q) sample of the N examples.

    per_example: arrays with leading axis N; summand(examples (B, …), mask (B,)) → a pytree shaped like
    `zeros`; chunks of `chunk_size` sampled indices (`poisson_chunk`) until the sample passes the last example.
    """

    def chunk(carry):
        count, last, total = carry
        indices, mask = poisson_chunk(jax.random.fold_in(key, count), last, sampling_rate, chunk_size, n_examples)
        examples = jax.tree.map(lambda a: a[jnp.where(mask, indices, 0)], per_example)
        return count + 1, indices[-1], jax.tree.map(jnp.add, total, summand(examples, mask))

    init = (jnp.zeros((), jnp.int32), jnp.full((), -1, jnp.int32), zeros)
    return lax.while_loop(lambda carry: carry[1] < n_examples - 1, chunk, init)[2]
