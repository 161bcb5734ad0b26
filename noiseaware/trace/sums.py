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
  (W, ·) arrays, which a step only writes, so that XLA updates those in place.

`add_step` adds one step (pure jax, jittable, inside `lax.scan`); `pooled` combines windows s..W−1 into sums about
their own mean, exactly, in float64 (the sum about c of a window is Σ(y − e)² = Σ y² − 2eΣ y + n e², e = c − K_w).
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
    "CrossMoments",
    "Pooled",
    "WindowSums",
    "add_step",
    "empty_sums",
    "pooled",
    "window_bounds",
]

COUPLING_LIMIT = 64
"""The largest d whose μ rows' cross moments (5·W·d² numbers) a mean-field summary keeps."""


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


def add_step(sums: WindowSums, step, params: jax.Array, grads: jax.Array, *, starts, scale_rows: slice) -> WindowSums:
    """The sums with step `step`'s row added: φ_t, G_t (P,); starts: the windows' first steps (W,), `window_bounds`
    without its last entry. Pure and jittable."""
    dtype = sums.y.dtype
    phi, grad = params.astype(dtype), grads.astype(dtype)
    w = jnp.searchsorted(jnp.asarray(starts), step, side="right") - 1
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


class Pooled(NamedTuple):
    """Windows s..W−1 pooled about their own means, float64: count n; centre φ̄ (P,); sum_phi Σ φ̃, sum_phiphi Σ φ̃²,
    sum_g Σ G, sum_gg Σ G², sum_gphi Σ G φ̃, and for the checks x3 Σ φ̃³, x4 Σ φ̃⁴, x2g Σ φ̃² G, lag Σ φ̃_t φ̃_{t−1} over
    each window's consecutive steps (P,), φ̃ = φ − φ̄; the scale rows in ψ about ψ̄ (R,): psi_centre ψ̄,
    psi_phi Σ ω²(ψ − ψ̄), psi_phiphi Σ ω²(ψ − ψ̄)², psi_g Σ G ω, psi_gphi Σ G ω (ψ − ψ̄), psi_ww Σ ω²; and, with the
    cross moments, about μ̄ (d, d): wander Σ δ_k² δ_j, wander_g Σ δ_k² G_j, wander2 Σ δ_k² δ_l² (δ = μ − μ̄), else None.
    """

    count: int
    centre: np.ndarray
    sum_phi: np.ndarray
    sum_phiphi: np.ndarray
    sum_g: np.ndarray
    sum_gg: np.ndarray
    sum_gphi: np.ndarray
    x3: np.ndarray
    x4: np.ndarray
    x2g: np.ndarray
    lag: np.ndarray
    psi_centre: np.ndarray
    psi_phi: np.ndarray
    psi_phiphi: np.ndarray
    psi_g: np.ndarray
    psi_gphi: np.ndarray
    psi_ww: np.ndarray
    wander: np.ndarray | None
    wander_g: np.ndarray | None
    wander2: np.ndarray | None


def pooled(sums: WindowSums, start: int) -> Pooled:
    """Windows start..W−1 of `sums` combined about their own mean (module doc), in float64."""
    if not 0 <= start < sums.windows:
        raise ValueError(f"the first kept window must be between 0 and {sums.windows - 1}, got {start}")
    s = {name: np.asarray(value, np.float64)[start:] for name, value in sums._asdict().items() if name in WINDOWED}
    n_w = s["count"][:, None]
    n = float(n_w.sum())
    centre = np.sum(n_w * s["reference"] + s["y"], axis=0) / n
    e = centre - s["reference"]
    psi_centre = np.sum(n_w * s["psi_reference"] + s["v"], axis=0) / n
    f = psi_centre - s["psi_reference"]
    wander = wander_g = wander2 = None
    if sums.cross is not None:
        wander, wander_g, wander2 = _recentred_cross(sums.cross, s, e, start)
    return Pooled(
        count=int(n),
        centre=centre,
        sum_phi=np.sum(s["y"] - n_w * e, axis=0),
        sum_phiphi=np.sum(s["yy"] - 2.0 * e * s["y"] + n_w * e * e, axis=0),
        sum_g=s["g"].sum(axis=0),
        sum_gg=s["gg"].sum(axis=0),
        sum_gphi=np.sum(s["gy"] - e * s["g"], axis=0),
        x3=np.sum(s["yyy"] - 3 * e * s["yy"] + 3 * e**2 * s["y"] - n_w * e**3, axis=0),
        x4=np.sum(s["yyyy"] - 4 * e * s["yyy"] + 6 * e**2 * s["yy"] - 4 * e**3 * s["y"] + n_w * e**4, axis=0),
        x2g=np.sum(s["yyg"] - 2 * e * s["gy"] + e**2 * s["g"], axis=0),
        lag=np.sum(s["lag"] - e * (2 * s["y"] - s["last"]) + (n_w - 1) * e**2, axis=0),
        psi_centre=psi_centre,
        psi_phi=np.sum(s["wwv"] - f * s["ww"], axis=0),
        psi_phiphi=np.sum(s["wwvv"] - 2.0 * f * s["wwv"] + f * f * s["ww"], axis=0),
        psi_g=s["gw"].sum(axis=0),
        psi_gphi=np.sum(s["gwv"] - f * s["gw"], axis=0),
        psi_ww=s["ww"].sum(axis=0),
        wander=wander,
        wander_g=wander_g,
        wander2=wander2,
    )


def _recentred_cross(cross: CrossMoments, s: dict, e: np.ndarray, start: int):
    """Σ δ_k² δ_j, Σ δ_k² G_j and Σ δ_k² δ_l² (d, d) over the kept windows, δ = y − e per window (e = μ̄ − K_w):
    the products of δ_k² = y_k² − 2e_k y_k + e_k² with δ_j, G_j and δ_l², expanded into the windows' moments."""
    c = {name: np.asarray(value, np.float64)[start:] for name, value in cross._asdict().items()}
    d = c["yy"].shape[-1]
    e = e[:, :d]
    n = s["count"][:, None, None]
    y, yy, g = s["y"][:, :d], s["yy"][:, :d], s["g"][:, :d]
    ek, ej = e[:, :, None], e[:, None, :]
    yk, yj, yyk, yyj = y[:, :, None], y[:, None, :], yy[:, :, None], yy[:, None, :]
    wander = c["y2y"] - ej * yyk - 2 * ek * c["yy"] + 2 * ek * ej * yk + ek**2 * yj - n * ek**2 * ej
    wander_g = c["gy2"] - 2 * ek * c["gy"] + ek**2 * g[:, None, :]
    wander2 = (
        c["y2y2"]
        - 2 * ej * c["y2y"]
        + ej**2 * yyk
        - 2 * ek * np.swapaxes(c["y2y"], 1, 2)
        + 4 * ek * ej * c["yy"]
        - 2 * ek * ej**2 * yk
        + ek**2 * yyj
        - 2 * ek**2 * ej * yj
        + n * ek**2 * ej**2
    )
    return wander.sum(axis=0), wander_g.sum(axis=0), wander2.sum(axis=0)
