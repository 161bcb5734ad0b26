"""The moments of (φ, G) over a run's kept steps: all that the gradient model and the trace checks read of a run.

Over the kept steps t = B..T−1 (n of them), about the kept mean φ̄ (φ̃ = φ − φ̄), in float64, `Moments` holds

* per row (P,): φ̄, Σ φ̃, Σ φ̃², Σ G, Σ G², Σ (G − Ḡ)², Σ G φ̃, Σ w² (= n: every row's weight is 1 until `in_psi`), and
  for the checks Σ φ̃³, Σ φ̃⁴, Σ φ̃² G and the lag-1 products Σ φ̃_t φ̃_{t−1};
* the scale rows ρ of the family (R of them) in ψ = softplus(ρ)², weight ω = sigmoid(ρ)/softplus(ρ), about the
  kept mean ψ̄ (R,): ψ̄, Σ ω²(ψ − ψ̄), Σ ω²(ψ − ψ̄)², Σ G ω, Σ G ω (ψ − ψ̄), Σ ω² (docs/method.md §2.9);
* for a mean-field family, when asked, the μ rows' cross moments about μ̄ (d, d), δ = μ − μ̄: Σ δ_k² δ_j,
  Σ δ_k² G_j, Σ δ_k² δ_l² (docs/method.md §2.10), and Σ δ_k δ_j, Σ δ_k G_j (the coupled μ rows, §2.11);
* the checks' `CHECK_WINDOWS` groups of the kept steps (K, 3, P): steps, mean φ, mean G; the mean φ at the kept
  trace's start; φ_0 and the growth max_t |φ_t − φ_0| over every step; the first kept step B.

One type from either source: `moments_of_rows` sums a trace's rows; `moments_of_windows` pools a windowed trace's
window sums (`sums.py`) exactly, so that the two agree up to float rounding. What a model reads off them is the same
code whichever the source: the ψ view of the scale rows (`in_psi`), the correction of the μ rows' gradients for
the other coordinates' wander (`without_wander`), and whether the μ rows are coupled (`coupling`: the multivariate
slopes where the trace shows the other coordinates' pull, read by the coupled Stein model and by the trace checks,
which then read each μ row net of the others, `net_of_coupling`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats

from ..util.numerics import sigmoid, softplus
from .sums import WINDOWED, CrossMoments, WindowSums

__all__ = [
    "CHECK_WINDOWS",
    "COUPLING_P",
    "Moments",
    "coupling",
    "in_psi",
    "moments_of_rows",
    "moments_of_windows",
    "net_of_coupling",
    "pull_of_others",
    "row_moments",
    "without_wander",
]

CHECK_WINDOWS = 4
"""K, the groups of the kept steps whose optima the checks compare (the drift test: the first and the last)."""
COUPLING_P = 1e-3
"""The p-value below which a μ row's gradient shows the other μ coordinates' pull (`coupling`'s χ² test, any row):
the μ rows are then read coupled."""


class Moments(NamedTuple):
    """The moments of the module doc: count n and start B (ints); per row (P,) centre φ̄, sum_phi Σ φ̃, sum_phiphi
    Σ φ̃², sum_g Σ G, sum_gg Σ G², grad_ss Σ (G − Ḡ)², sum_gphi Σ G φ̃, sum_ww Σ w², x3 Σ φ̃³, x4 Σ φ̃⁴, x2g Σ φ̃² G,
    lag Σ φ̃_t φ̃_{t−1}; the scale rows (R,) psi_centre ψ̄, psi_phi, psi_phiphi, psi_g, psi_gphi, psi_ww; the cross
    moments wander, wander_g, wander2, mu_phiphi Σ δ_k δ_j, mu_gphi Σ δ_k G_j (d, d) or None; windows (K, 3, P);
    early, first, growth (P,); partial: whether the μ rows' sums are net of the other μ coordinates (the coupled
    Stein model's, `inference.statistics.partial_on_others`)."""

    count: int
    start: int
    centre: np.ndarray
    sum_phi: np.ndarray
    sum_phiphi: np.ndarray
    sum_g: np.ndarray
    sum_gg: np.ndarray
    grad_ss: np.ndarray
    sum_gphi: np.ndarray
    sum_ww: np.ndarray
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
    mu_phiphi: np.ndarray | None
    mu_gphi: np.ndarray | None
    windows: np.ndarray
    early: np.ndarray
    first: np.ndarray
    growth: np.ndarray
    partial: bool = False


def moments_of_rows(params, grads, start: int, scale_rows: slice, cross: int = 0) -> Moments:
    """The moments of the rows t ≥ start of params, grads (T, P); scale_rows: the family's ρ block; cross: d for
    the μ rows' cross moments (0: none)."""
    everything = np.asarray(params, np.float64)
    phi, grad = everything[start:], np.asarray(grads, np.float64)[start:]
    n = phi.shape[0]
    centre = phi.mean(axis=0)
    x = phi - centre
    rho, g_rho = phi[:, scale_rows], grad[:, scale_rows]
    scale = softplus(rho)
    with np.errstate(divide="ignore", invalid="ignore"):  # ρ → −∞ (a run that ran away): its ψ rows are not finite
        weight, psi = sigmoid(rho) / scale, scale**2
        psi_centre = psi.mean(axis=0)
        z = weight * (psi - psi_centre)
        scale_sums = {
            "psi_phi": np.sum(z * weight, axis=0),
            "psi_phiphi": np.sum(z * z, axis=0),
            "psi_g": np.sum(g_rho * weight, axis=0),
            "psi_gphi": np.sum(g_rho * z, axis=0),
            "psi_ww": np.sum(weight * weight, axis=0),
        }
    wander = wander_g = wander2 = mu_phiphi = mu_gphi = None
    if cross:
        square = x[:, :cross] ** 2
        wander, wander_g, wander2 = square.T @ x[:, :cross], square.T @ grad[:, :cross], square.T @ square
        mu_phiphi, mu_gphi = x[:, :cross].T @ x[:, :cross], x[:, :cross].T @ grad[:, :cross]
    bounds = np.linspace(0, n, CHECK_WINDOWS + 1).astype(int)
    windows = np.stack(
        [
            [np.full(phi.shape[1], b - a), phi[a:b].mean(axis=0), grad[a:b].mean(axis=0)]
            for a, b in zip(bounds, bounds[1:])
        ]
    )
    return Moments(
        count=n,
        start=start,
        centre=centre,
        sum_phi=x.sum(axis=0),
        sum_phiphi=np.sum(x * x, axis=0),
        sum_g=grad.sum(axis=0),
        sum_gg=np.sum(grad * grad, axis=0),
        grad_ss=np.sum((grad - grad.mean(axis=0)) ** 2, axis=0),
        sum_gphi=np.sum(grad * x, axis=0),
        sum_ww=np.full(phi.shape[1], float(n)),
        x3=np.sum(x**3, axis=0),
        x4=np.sum(x**4, axis=0),
        x2g=np.sum(x * x * grad, axis=0),
        lag=np.sum(x[1:] * x[:-1], axis=0),
        psi_centre=psi_centre,
        **scale_sums,
        wander=wander,
        wander_g=wander_g,
        wander2=wander2,
        mu_phiphi=mu_phiphi,
        mu_gphi=mu_gphi,
        windows=windows,
        early=phi[: max(n // 10, 1)].mean(axis=0),
        first=everything[0],
        growth=np.max(np.abs(everything - everything[0]), axis=0),
    )


def moments_of_windows(sums: WindowSums, window: int, start: int) -> Moments:
    """The moments of windows window..W−1 of `sums`, whose first step is `start`: each window's sums about its first
    row K_w recentred on the kept mean (Σ(y − e)² = Σ y² − 2eΣ y + n e², e = φ̄ − K_w; `sums.py`), in float64. The
    check windows are the kept windows in K groups as equal as `np.array_split` makes them, the lag-1 products leave
    out the steps that open a window, and the kept trace's start is its first window."""
    if not 0 <= window < sums.windows:
        raise ValueError(f"the first kept window must be between 0 and {sums.windows - 1}, got {window}")
    s = {name: np.asarray(value, np.float64)[window:] for name, value in sums._asdict().items() if name in WINDOWED}
    n_w = s["count"][:, None]
    n = float(n_w.sum())
    centre = np.sum(n_w * s["reference"] + s["y"], axis=0) / n
    e = centre - s["reference"]
    psi_centre = np.sum(n_w * s["psi_reference"] + s["v"], axis=0) / n
    f = psi_centre - s["psi_reference"]
    wander = wander_g = wander2 = mu_phiphi = mu_gphi = None
    if sums.cross is not None:
        wander, wander_g, wander2, mu_phiphi, mu_gphi = _recentred_cross(sums.cross, s, e, window)
    means = (n_w * s["reference"] + s["y"]) / n_w
    groups = np.array_split(np.arange(len(n_w)), min(CHECK_WINDOWS, len(n_w)))
    windows = np.stack(
        [
            [
                np.full(centre.shape, n_w[g].sum()),
                np.sum(n_w[g] * means[g], axis=0) / n_w[g].sum(),
                np.sum(s["g"][g], axis=0) / n_w[g].sum(),
            ]
            for g in groups
        ]
    )
    sum_g = s["g"].sum(axis=0)
    return Moments(
        count=int(n),
        start=start,
        centre=centre,
        sum_phi=np.sum(s["y"] - n_w * e, axis=0),
        sum_phiphi=np.sum(s["yy"] - 2.0 * e * s["y"] + n_w * e * e, axis=0),
        sum_g=sum_g,
        sum_gg=s["gg"].sum(axis=0),
        grad_ss=s["gg"].sum(axis=0) - sum_g**2 / n,
        sum_gphi=np.sum(s["gy"] - e * s["g"], axis=0),
        sum_ww=np.full(centre.shape, n),
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
        mu_phiphi=mu_phiphi,
        mu_gphi=mu_gphi,
        windows=windows,
        early=means[0],
        first=np.asarray(sums.first, np.float64),
        growth=np.asarray(sums.growth, np.float64),
    )


def coupling(moments: Moments, noise_var) -> np.ndarray | None:
    """The μ rows' multivariate slopes B (d, d), E[G_μ | μ] = a + B (μ − μ̄) by least squares on the cross moments
        (B[j, k]: the pull of μ_k on row j), where the trace shows the coupling; else None (also without cross moments,
        or d = 1). The test: the residual sum of squares that μ_−j removes from row j's fit on (1, μ_j), over its noise
        variance v = max(the full fit's residual variance, the DP noise variance `noise_var` (P,)), is χ²_{d−1} without
        coupling; some row's p-value below `COUPLING_P` shows it. None too where the μ wander is degenerate (a
    coordinate that never moves)."""
    if moments.mu_phiphi is None or moments.mu_phiphi.shape[0] < 2:
        return None
    phiphi, gphi = np.asarray(moments.mu_phiphi, np.float64), np.asarray(moments.mu_gphi, np.float64)
    d, n = phiphi.shape[0], moments.count
    if not np.linalg.cond(phiphi) < 1e12:  # a μ coordinate that never moves, or two that move as one
        return None
    slopes = np.linalg.solve(phiphi, gphi)  # [k, j]: the coefficient of μ_k in row j
    diagonal = np.diagonal(gphi) ** 2 / np.diagonal(phiphi)
    explained = np.einsum("kj,kj->j", slopes, gphi) - diagonal
    residual = np.maximum(np.asarray(moments.grad_ss, np.float64)[:d] - diagonal - explained, 0.0)
    variance = np.maximum(residual / max(n - d - 1, 1), np.broadcast_to(noise_var, moments.centre.shape)[:d])
    return slopes.T if np.min(stats.chi2.sf(explained / variance, d - 1)) < COUPLING_P else None


def pull_of_others(slopes: np.ndarray) -> np.ndarray:
    """(d, d) [k, j] = B_jk for k ≠ j, 0 on the diagonal: δ @ it is each μ row's pull of the other coordinates,
    Σ_{k≠j} B_jk δ_k (slopes B from `coupling`)."""
    return slopes.T - np.diag(np.diagonal(slopes))


def net_of_coupling(moments: Moments, slopes: np.ndarray) -> Moments:
    """The moments with each μ row's gradient net of the other μ coordinates' pull, G̃_j = G_j − Σ_{k≠j} B_jk δ_k
    (slopes B (d, d) from `coupling`, δ = μ − μ̄): Σ G̃, Σ G̃², Σ (G̃ − mean)², Σ G̃ δ_j, Σ δ_j² G̃ and the windows'
    mean G̃, from the cross moments. Row j of G̃ on δ_j has the multivariate fit's slope B_jj and residuals, so the
    per-coordinate checks read it as they read an uncoupled row."""
    d = slopes.shape[0]
    off = pull_of_others(slopes)
    phiphi, gphi = np.asarray(moments.mu_phiphi, np.float64), np.asarray(moments.mu_gphi, np.float64)
    pulled = np.einsum("kj,kl,lj->j", off, phiphi, off)  # Σ (Σ_k B_jk δ_k)²

    def rows(values, mu):
        out = np.array(values, np.float64)
        out[..., :d] = mu
        return out

    drawn = np.einsum("kj,k->j", off, np.asarray(moments.sum_phi, np.float64)[:d])  # Σ_t Σ_k B_jk δ_k
    cross_g = np.einsum("kj,kj->j", off, gphi)
    sum_g = moments.sum_g[:d] - drawn
    centred_cross = cross_g - drawn * moments.sum_g[:d] / moments.count
    centred_pulled = pulled - drawn**2 / moments.count
    windows = np.array(moments.windows, np.float64)
    windows[:, 2, :d] -= (windows[:, 1, :d] - moments.centre[:d]) @ off
    return moments._replace(
        sum_g=rows(moments.sum_g, sum_g),
        sum_gg=rows(moments.sum_gg, moments.sum_gg[:d] - 2 * cross_g + pulled),
        grad_ss=rows(moments.grad_ss, moments.grad_ss[:d] - 2 * centred_cross + centred_pulled),
        sum_gphi=rows(moments.sum_gphi, np.diagonal(gphi) - np.einsum("kj,kj->j", off, phiphi)),
        x2g=rows(moments.x2g, moments.x2g[:d] - np.einsum("kj,jk->j", off, np.asarray(moments.wander, np.float64))),
        windows=windows,
    )


def in_psi(moments: Moments, rows: np.ndarray, scale_rows: slice) -> Moments:
    """The moments with the scale rows in `rows` ((P,) bool, within the family's ρ block `scale_rows`) read in ψ:
    their sums are those of z = ω (ψ − ψ̄) in place of φ̃ and ω in place of 1 (Σ G ω, Σ z ω, Σ z², Σ G z, Σ ω²), and
    their centre is ψ̄ (docs/method.md §2.9)."""
    rows = np.asarray(rows, bool)
    if not rows.any():
        return moments
    chosen = rows[scale_rows]

    def swap(linear, psi):
        out = np.array(linear, np.float64)
        out[scale_rows] = np.where(chosen, psi, out[scale_rows])
        return out

    m = moments
    return m._replace(
        centre=swap(m.centre, m.psi_centre),
        sum_g=swap(m.sum_g, m.psi_g),
        sum_phi=swap(m.sum_phi, m.psi_phi),
        sum_phiphi=swap(m.sum_phiphi, m.psi_phiphi),
        sum_gphi=swap(m.sum_gphi, m.psi_gphi),
        sum_ww=swap(m.sum_ww, m.psi_ww),
    )


def without_wander(moments: Moments, sampling_rate: float, coupling: np.ndarray, curvature: np.ndarray) -> Moments:
    """The moments of the μ rows' gradients net of the other coordinates' wander, G′ = G − shift.

    At second order in δ_t = μ_t − μ*, E G_tj = q·[h_j δ_tj + ½ Σ_{k≠j} ∂_j h_k δ_tk²] (docs/method.md §2.10); with
    c_kj = ∂_j h_k / h_k (d, d) and the curvature h_k (d,) from the model, shift_tj = Σ_k A_kj δ_tk², A_kj =
    ½ q c_kj h_k (k ≠ j), so Σ G′_j = Σ G_j − Σ_k A_kj Σ δ_k², Σ G′_j² = Σ G_j² − 2 Σ_k A_kj Σ δ_k² G_j +
    Σ_kl A_kj A_lj Σ δ_k² δ_l², Σ G′_j φ̃_j = Σ G_j φ̃_j − Σ_k A_kj Σ δ_k² δ_j. Needs the cross moments."""
    if moments.wander is None:
        raise ValueError(
            "the model's coupling between coordinates (Prior(optimum_prior='model') on a mean-field trace) needs the "
            "μ rows' cross moments, which a windowed trace keeps only for d ≤ noiseaware.trace.sums.COUPLING_LIMIT: "
            "fit with Prior(optimum_prior='trace'), or without the model"
        )
    m, d = moments, coupling.shape[0]
    shift = 0.5 * sampling_rate * np.asarray(curvature)[:, None] * coupling * (1.0 - np.eye(d))
    sum_g, sum_gg, sum_gphi = (np.array(x, np.float64) for x in (m.sum_g, m.sum_gg, m.sum_gphi))
    sum_g[:d] -= m.sum_phiphi[:d] @ shift
    sum_gg[:d] += -2.0 * np.sum(shift * m.wander_g, axis=0) + np.einsum("kj,lj,kl->j", shift, shift, m.wander2)
    sum_gphi[:d] -= np.sum(shift * m.wander, axis=0)
    return m._replace(sum_g=sum_g, sum_gg=sum_gg, sum_gphi=sum_gphi, grad_ss=sum_gg - sum_g**2 / m.count)


LIKELIHOOD_FIELDS = ("count", "start", "centre", "sum_phi", "sum_phiphi", "sum_g", "sum_gg", "sum_gphi", "sum_ww")
LIKELIHOOD_FIELDS += ("mu_phiphi", "mu_gphi", "partial")
"""The moments a per-coordinate Gaussian likelihood of G on φ reads (method.md §2.2), and the μ rows' cross products
from which the coupled Stein model draws the other coefficients of each row (§2.11; None where not asked for)."""


def row_moments(moments: Moments) -> Moments:
    """The moments with only `LIKELIHOOD_FIELDS` kept, the others None: what a per-coordinate likelihood carries
    into compiled code, which maps over the rows."""
    return moments._replace(**{name: None for name in Moments._fields if name not in LIKELIHOOD_FIELDS})


def _recentred_cross(cross: CrossMoments, s: dict, e: np.ndarray, start: int):
    """Σ δ_k² δ_j, Σ δ_k² G_j, Σ δ_k² δ_l², Σ δ_k δ_j and Σ δ_k G_j (d, d) over the kept windows, δ = y − e per window
    (e = μ̄ − K_w): the products of δ_k² = y_k² − 2e_k y_k + e_k² and of δ_k with δ_j, G_j and δ_l², expanded into the
    windows' moments."""
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
    products = c["yy"] - ek * yj - ej * yk + n * ek * ej
    products_g = c["gy"] - ek * g[:, None, :]
    return wander.sum(axis=0), wander_g.sum(axis=0), wander2.sum(axis=0), products.sum(axis=0), products_g.sum(axis=0)
