"""A trace's sums over W windows of steps: what the gradient model needs from T × P rows, in O(W·P) memory.

The T steps are cut into W windows at ⌊w·T/W⌋, w = 0..W (`window_bounds`), so that a burn-in can still be chosen at
a window boundary. Within window w each sum is taken about the window's first row K_w (y = φ − K_w keeps float32
sums precise), with G the noisy sum of clipped gradients:

* every row, (W, P): K_w, Σ y, Σ y², Σ G, Σ G², Σ G y, and for the trace checks Σ y³, Σ y⁴, Σ y² G, the lag-1
  products Σ y_t y_{t−1} of the window's consecutive steps and the last y;
* the scale rows ρ of the variational family (R of them), in ψ = softplus(ρ)² with weight ω = sigmoid(ρ)/softplus(ρ)
  (docs/method.md §2.9), about L_w, the window's first ψ (v = ψ − L_w), (W, R): L_w, Σ v, Σ ω², Σ ω² v, Σ ω² v²,
  Σ G ω, Σ G ω v;
* for a mean-field family of d ≤ `COUPLING_LIMIT`, the μ rows' cross moments that the wander of the other coordinates
  needs (docs/method.md §2.10), (W, d, d): Σ y_k y_j, Σ y_k² y_j, Σ y_k² y_l², Σ y_k G_j, Σ y_k² G_j;
* the counts n_w (W,), the first row φ_0 and the growth max_t |φ_t − φ_0| over every step (P,);
* the open window's K_w (P,) and L_w (R,) and the step's y (P,), which the next step reads: kept apart from the
  (W, ·) arrays, which a step only writes, so that XLA updates those in place;
* apart from `WindowSums`, for a run that releases counts of clipped examples, Σ c̃ and Σ c̃² per window (W, 2)
  (`add_count`).

`add_step` adds one step (pure jax, jittable, inside `lax.scan`); `moments.moments_of_windows` combines windows
s..W−1 into the moments about their own mean, exactly, in float64.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "COUPLING_LIMIT",
    "ROW_SUMS",
    "SCALE_SUMS",
    "WINDOWED",
    "CrossMoments",
    "WindowSums",
    "add_count",
    "add_step",
    "empty_sums",
    "window_bounds",
]

COUPLING_LIMIT = 64
"""The largest d whose μ rows' cross moments (5·W·d² numbers) a mean-field windowed trace keeps."""


class CrossMoments(NamedTuple):
    """The μ rows' cross moments per window, (W, d, d), about K_w: yy[k, j] Σ y_k y_j, y2y Σ y_k² y_j, y2y2 Σ y_k² y_j²,
    gy Σ y_k G_j, gy2 Σ y_k² G_j."""

    yy: jax.Array
    y2y: jax.Array
    y2y2: jax.Array
    gy: jax.Array
    gy2: jax.Array


class WindowSums(NamedTuple):
    """The sums of the module doc: count (W,); first, growth (P,); reference, y, yy, g, gg, gy, yyy, yyyy, yyg, lag,
    last (W, P); the scale rows' psi_reference, v, ww, wwv, wwvv, gw, gwv (W, R); cross: `CrossMoments` or None;
    open_reference, previous (P,) and open_psi_reference (R,): the open window's K_w, the last step's y, its L_w."""

    count: jax.Array
    first: jax.Array
    growth: jax.Array
    reference: jax.Array
    y: jax.Array
    yy: jax.Array
    g: jax.Array
    gg: jax.Array
    gy: jax.Array
    yyy: jax.Array
    yyyy: jax.Array
    yyg: jax.Array
    lag: jax.Array
    last: jax.Array
    psi_reference: jax.Array
    v: jax.Array
    ww: jax.Array
    wwv: jax.Array
    wwvv: jax.Array
    gw: jax.Array
    gwv: jax.Array
    cross: CrossMoments | None
    open_reference: jax.Array
    previous: jax.Array
    open_psi_reference: jax.Array

    @property
    def windows(self) -> int:
        return self.count.shape[0]


ROW_SUMS = ("reference", "y", "yy", "g", "gg", "gy", "yyy", "yyyy", "yyg", "lag", "last")
"""The fields of `WindowSums` kept per window for every row, (W, P)."""
SCALE_SUMS = ("psi_reference", "v", "ww", "wwv", "wwvv", "gw", "gwv")
"""The fields of `WindowSums` kept per window for the scale rows, (W, R)."""
WINDOWED = ("count", *ROW_SUMS, *SCALE_SUMS)
"""The fields of `WindowSums` kept per window (a leading axis W)."""


def window_bounds(steps: int, windows: int) -> np.ndarray:
    """The windows' boundaries ⌊w·T/W⌋, w = 0..W, (W + 1,) int; a ValueError unless 1 ≤ W ≤ T."""
    if not 1 <= windows <= steps:
        raise ValueError(f"windows must be between 1 and the run's {steps} steps, got {windows}")
    return np.arange(windows + 1) * steps // windows


def empty_sums(n_params: int, windows: int, scale_rows: slice, coupled: int, dtype) -> WindowSums:
    """Zero sums for P = n_params over W windows; scale_rows: the family's ρ block; coupled: d for the cross moments
    (0: none)."""
    scale = scale_rows.stop - scale_rows.start

    def zeros(*shape):
        return jnp.zeros(shape, dtype)

    return WindowSums(
        jnp.zeros(windows, jnp.int32),
        zeros(n_params),
        zeros(n_params),
        *(zeros(windows, n_params) for _ in ROW_SUMS),
        *(zeros(windows, scale) for _ in SCALE_SUMS),
        CrossMoments(*(zeros(windows, coupled, coupled) for _ in range(5))) if coupled else None,
        zeros(n_params),
        zeros(n_params),
        zeros(scale),
    )


def _window_of(step, starts):
    """The window w holding `step` (traced int): starts, the windows' first steps (W,)."""
    return jnp.searchsorted(jnp.asarray(starts), step, side="right") - 1


def add_count(clipped: jax.Array, step, count, *, starts) -> jax.Array:
    """Σ c̃ and Σ c̃² per window (W, 2) with step `step`'s released clipped count c̃ added. Pure and jittable."""
    return clipped.at[_window_of(step, starts)].add(jnp.stack([count, count * count]).astype(clipped.dtype))


def add_step(sums: WindowSums, step, params: jax.Array, grads: jax.Array, *, starts, scale_rows: slice) -> WindowSums:
    """The sums with step `step`'s row added: φ_t, G_t (P,); starts: the windows' first steps (W,), `window_bounds`
    without its last entry. Pure and jittable."""
    dtype = sums.y.dtype
    phi, grad = params.astype(dtype), grads.astype(dtype)
    w = _window_of(step, starts)
    opens = step == jnp.asarray(starts)[w]
    first = jnp.where(step == 0, phi, sums.first)
    reference = jnp.where(opens, phi, sums.open_reference)
    y = phi - reference
    square = y * y
    rho = phi[scale_rows]
    scale = jax.nn.softplus(rho)
    psi, weight = scale * scale, jax.nn.sigmoid(rho) / scale
    psi_reference = jnp.where(opens, psi, sums.open_psi_reference)
    v, g_rho = psi - psi_reference, grad[scale_rows]
    ww = weight * weight

    def put(array, value):
        return array.at[w].add(value)

    def opening(array, value):
        """Row w set to value where the window opens; otherwise nothing written (out of range, dropped)."""
        return array.at[jnp.where(opens, w, array.shape[0])].set(value, mode="drop")

    cross = sums.cross
    if cross is not None:
        d = cross.yy.shape[-1]
        mean, g_mean, mean2 = y[:d], grad[:d], square[:d]
        cross = CrossMoments(
            put(cross.yy, jnp.outer(mean, mean)),
            put(cross.y2y, jnp.outer(mean2, mean)),
            put(cross.y2y2, jnp.outer(mean2, mean2)),
            put(cross.gy, jnp.outer(mean, g_mean)),
            put(cross.gy2, jnp.outer(mean2, g_mean)),
        )
    return WindowSums(
        sums.count.at[w].add(1),
        first,
        jnp.maximum(sums.growth, jnp.abs(phi - first)),
        opening(sums.reference, phi),
        put(sums.y, y),
        put(sums.yy, square),
        put(sums.g, grad),
        put(sums.gg, grad * grad),
        put(sums.gy, grad * y),
        put(sums.yyy, square * y),
        put(sums.yyyy, square * square),
        put(sums.yyg, square * grad),
        put(sums.lag, y * sums.previous),  # y = 0 where the window opens: no product across windows
        sums.last.at[w].set(y),
        opening(sums.psi_reference, psi),
        put(sums.v, v),
        put(sums.ww, ww),
        put(sums.wwv, ww * v),
        put(sums.wwvv, ww * v * v),
        put(sums.gw, g_rho * weight),
        put(sums.gwv, g_rho * weight * v),
        cross,
        reference,
        y,
        psi_reference,
    )
