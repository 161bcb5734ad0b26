"""The trace's sufficient statistics for the gradient model, and the estimates read off them (docs/method.md §2.2–2.3).

Over the post-burn-in steps t = B..T−1, with φ̃_tj = φ_tj − φ̄_j (φ̄ the post-burn-in mean, so Σ_t φ̃_tj = 0 up
to rounding), the log-likelihood of coordinate j depends on the T' = T − B pairs only through six sums
(`TraceStatistics`), accumulated in float64 around φ̄ (raw Σφ² and ΣGφ lose precision in float32). Read off
them: the least-squares fits of G on φ (`slope_estimates` with φ* fixed at φ̄, `ols_fit` with an intercept)
and ν_j, the noise sd that scales the empirical-Bayes priors (`noise_reference`): the DP noise sd σC/s_j, or
for a non-private trace (σ = 0) the residual sd of G on φ.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..trace import BURN_IN, Trace
from ..trace.summaries import TraceSummary, scale_rows_of
from ..trace.sums import Pooled, pooled
from ..util.errors import FROZEN, NO_NOISE, FitFailure
from ..util.numerics import sigmoid, softplus

__all__ = [
    "TraceStatistics",
    "centred_phiphi",
    "is_non_private",
    "kept_arrays",
    "noise_reference",
    "ols_fit",
    "partial_slopes",
    "slope_estimates",
    "summary_statistics",
    "trace_statistics",
    "wander_shift",
]


class TraceStatistics(NamedTuple):
    """Per-coordinate sums over the post-burn-in steps, all (P,) float64 arrays except `count`.

    count T'; centre φ̄; sum_g Σ G; sum_phi Σ φ̃; sum_gg Σ G²; sum_phiphi Σ φ̃²; sum_gphi Σ G φ̃;
    noise_var (σC/s)², the DP noise variance of G; sampling_rate q; sum_ww Σ w² (T'); scale_rows (P,) bool.

    A row in `scale_rows` (a scale coordinate ρ_j, sd = softplus(ρ_j), under `Prior(scale_model="variance")`)
    is modelled as G_tj = q·a_j·w_tj·(ψ_tj − ψ*_j) with ψ = softplus(ρ)² and w = sigmoid(ρ)/softplus(ρ)
    (docs/method.md §2.9): its sums are those of z_t = w_t (ψ_t − ψ̄) in place of φ̃_t and w_t in place of 1
    (sum_g Σ G w, sum_phi Σ z w, sum_phiphi Σ z², sum_gphi Σ G z, sum_ww Σ w²), and its centre is ψ̄.
    """

    count: int
    centre: np.ndarray
    sum_g: np.ndarray
    sum_phi: np.ndarray
    sum_gg: np.ndarray
    sum_phiphi: np.ndarray
    sum_gphi: np.ndarray
    noise_var: np.ndarray
    sampling_rate: float
    sum_ww: np.ndarray
    scale_rows: np.ndarray


def trace_statistics(
    trace: Trace | TraceSummary, burn_in: float = BURN_IN, scale_rows=None, coupling=None, curvature=None
) -> TraceStatistics:
    """The sufficient statistics of `trace` over steps t ≥ B = ⌊burn_in · T⌋ (float64, centred at φ̄); rows in
    `scale_rows` (a (P,) bool mask, or None for none) in the variance model's ψ coordinates; with `coupling` (the
    model's c (d, d), `ModelOptimumPrior.coupling`, and curvature h (d,)) the μ rows' gradients net of the other
    coordinates' wander (`wander_shift`). A `TraceSummary` gives the same sums from its windows
    (`summary_statistics`)."""
    if isinstance(trace, TraceSummary):
        return summary_statistics(trace, burn_in, scale_rows, coupling, curvature)
    params, grads = kept_arrays(trace, burn_in)
    if coupling is not None:
        grads = grads - wander_shift(params, trace.sampling_rate, coupling, curvature)
    rows = np.zeros(params.shape[1], bool) if scale_rows is None else np.asarray(scale_rows, bool)
    weight, values = np.ones_like(params), params.copy()
    if rows.any():  # the transforms on the scale columns only
        scale = softplus(params[:, rows])
        weight[:, rows], values[:, rows] = sigmoid(params[:, rows]) / scale, scale**2
    centre = values.mean(axis=0)
    phi = np.where(rows, weight * (values - centre), values - centre)
    return TraceStatistics(
        count=params.shape[0],
        centre=centre,
        sum_g=np.where(rows, np.sum(grads * weight, axis=0), grads.sum(axis=0)),
        sum_phi=np.where(rows, np.sum(phi * weight, axis=0), phi.sum(axis=0)),
        sum_gg=np.sum(grads * grads, axis=0),
        sum_phiphi=np.sum(phi * phi, axis=0),
        sum_gphi=np.sum(grads * phi, axis=0),
        noise_var=np.asarray(trace.noise_sd, np.float64) ** 2,
        sampling_rate=float(trace.sampling_rate),
        sum_ww=np.where(rows, np.sum(weight * weight, axis=0), float(params.shape[0])),
        scale_rows=rows,
    )


def summary_statistics(
    summary: TraceSummary, burn_in: float = BURN_IN, scale_rows=None, coupling=None, curvature=None
) -> TraceStatistics:
    """`trace_statistics` of the run a summary keeps, from its windows after the burn-in (which must start a window):
    the same sums up to float rounding. With `coupling`, the wander's shift of the μ rows' sums comes from the
    summary's cross moments (`wander_sums`)."""
    pool = pooled(summary.sums, summary.first_kept_window(burn_in))
    rows = np.zeros(summary.n_params, bool) if scale_rows is None else np.asarray(scale_rows, bool)
    scale = scale_rows_of(summary.family)

    def in_psi(linear, psi):
        out = np.array(linear, np.float64)
        out[scale] = np.where(rows[scale], psi, out[scale])
        return out

    sum_g, sum_gg, sum_gphi = pool.sum_g, pool.sum_gg, pool.sum_gphi
    if coupling is not None:
        sum_g, sum_gg, sum_gphi = wander_sums(pool, summary.sampling_rate, coupling, curvature)
    return TraceStatistics(
        count=pool.count,
        centre=in_psi(pool.centre, pool.psi_centre),
        sum_g=in_psi(sum_g, pool.psi_g),
        sum_phi=in_psi(pool.sum_phi, pool.psi_phi),
        sum_gg=sum_gg,
        sum_phiphi=in_psi(pool.sum_phiphi, pool.psi_phiphi),
        sum_gphi=in_psi(sum_gphi, pool.psi_gphi),
        noise_var=np.asarray(summary.noise_sd, np.float64) ** 2,
        sampling_rate=float(summary.sampling_rate),
        sum_ww=in_psi(np.full(summary.n_params, float(pool.count)), pool.psi_ww),
        scale_rows=rows,
    )


def wander_sums(pool: Pooled, sampling_rate: float, coupling: np.ndarray, curvature: np.ndarray) -> tuple:
    """(Σ G′, Σ G′², Σ G′φ̃) (P,) for G′ = G − shift (`wander_shift`), from pooled sums and cross moments.

    With shift_tj = Σ_k A_kj δ_tk², A_kj = ½ q c_kj h_k (k ≠ j): Σ G′_j = Σ G_j − Σ_k A_kj Σ δ_k²,
    Σ G′_j² = Σ G_j² − 2 Σ_k A_kj Σ δ_k² G_j + Σ_kl A_kj A_lj Σ δ_k² δ_l², Σ G′_j φ̃_j = Σ G_j φ̃_j − Σ_k A_kj Σ δ_k² δ_j.
    """
    if pool.wander is None:
        raise ValueError(
            "the model's coupling between coordinates (Prior(optimum_prior='model') on a mean-field trace) needs the "
            "μ rows' cross moments, which a summary keeps only for d ≤ noiseaware.trace.sums.COUPLING_LIMIT: fit "
            "with Prior(optimum_prior='trace'), or without the model"
        )
    d = coupling.shape[0]
    shift = 0.5 * sampling_rate * np.asarray(curvature)[:, None] * coupling * (1.0 - np.eye(d))
    sum_g, sum_gg, sum_gphi = (np.array(x, np.float64) for x in (pool.sum_g, pool.sum_gg, pool.sum_gphi))
    sum_g[:d] -= pool.sum_phiphi[:d] @ shift
    sum_gg[:d] += -2.0 * np.sum(shift * pool.wander_g, axis=0) + np.einsum("kj,lj,kl->j", shift, shift, pool.wander2)
    sum_gphi[:d] -= np.sum(shift * pool.wander, axis=0)
    return sum_g, sum_gg, sum_gphi


def wander_shift(params: np.ndarray, sampling_rate: float, coupling: np.ndarray, curvature: np.ndarray) -> np.ndarray:
    """What the other coordinates' wander adds to the mean of each μ row's gradient, (T', P) (0 on the other rows).

    At second order in δ_t = μ_t − μ*, E G_tj = q·[h_j δ_tj + ½ Σ_{k≠j} ∂_j h_k δ_tk²] (docs/method.md §2.10); with
    c_kj = ∂_j h_k / h_k and the curvature h_k (d,) from the model, the shift is q·½ Σ_{k≠j} c_kj h_k (μ_tk − μ̄_k)².
    params (T', P), mean-field layout first 2d.
    """
    d = coupling.shape[0]
    mean = params[:, :d]
    wander = (mean - mean.mean(axis=0)) ** 2 * curvature
    others = coupling * (1.0 - np.eye(d))
    shift = np.zeros_like(params)
    shift[:, :d] = 0.5 * sampling_rate * wander @ others
    return shift


def kept_arrays(trace: Trace, burn_in: float = BURN_IN) -> tuple[np.ndarray, np.ndarray]:
    """The post-burn-in parameters and gradients, steps t ≥ B = ⌊burn_in · T⌋, (T', P) float64 each."""
    if not 0.0 <= burn_in < 1.0:
        raise ValueError(f"burn_in must be a fraction in [0, 1), got {burn_in}")
    start = math.floor(burn_in * trace.steps)
    if trace.steps - start < 2:
        raise ValueError(
            f"the trace has {trace.steps} steps, leaving {trace.steps - start} after a burn-in of {burn_in:g}: "
            "the gradient model needs at least 2 (and many more for a useful posterior)"
        )
    return np.asarray(trace.params[start:], np.float64), np.asarray(trace.grads[start:], np.float64)


def partial_slopes(params: np.ndarray, grads: np.ndarray, sampling_rate: float) -> np.ndarray:
    """Each coordinate's own slope |b_jj|/q in the least-squares fit of G_j on all of φ̃ with an intercept, (P,);
    params, grads (T', P)."""
    design = np.column_stack([np.ones(len(params)), params - params.mean(axis=0)])
    return np.abs(np.diagonal(np.linalg.lstsq(design, grads, rcond=None)[0][1:])) / sampling_rate


def is_non_private(stats: TraceStatistics) -> bool:
    """Whether the trace carries no DP noise (σ = 0): its gradient noise is then all subsampling and Monte
    Carlo noise, the extra noise u of the model."""
    return not np.any(np.asarray(stats.noise_var) > 0)


def centred_phiphi(stats: TraceStatistics):
    """Σ (φ̃ − its weighted mean)² = S_φφ − S_φ²/Σw², per coordinate (P,): the spread the slope with a free intercept
    is estimated from (w ≡ 1 except for scale rows in ψ). Plain arithmetic, numpy or traced jax arrays."""
    return stats.sum_phiphi - stats.sum_phi**2 / stats.sum_ww


def ols_fit(stats: TraceStatistics):
    """The OLS fit of G_tj on φ_tj with a free intercept, per coordinate: (slope b, residual variance r²), (P,) each.

    b = Σ G φ̃ᶜ / Σ φ̃ᶜ²,  r² = (Σ (G − Ḡ)² − b² Σ φ̃ᶜ²) / (T' − 2), with φ̃ᶜ = φ̃ − mean φ̃. Plain arithmetic,
    so numpy arrays and traced jax arrays alike.
    """
    n, weight = stats.count, stats.sum_ww
    centred = centred_phiphi(stats)
    slope = (stats.sum_gphi - stats.sum_g * stats.sum_phi / weight) / centred
    return slope, (stats.sum_gg - stats.sum_g**2 / weight - slope**2 * centred) / (n - 2)


def noise_reference(stats: TraceStatistics) -> np.ndarray:
    """ν_j, the noise sd that scales the empirical-Bayes priors, (P,).

    The DP noise sd σC/s_j of G, known exactly. A non-private trace (σ = 0) has none: its noise is all
    subsampling and Monte Carlo noise, the extra noise u, so ν_j is the residual sd r_j of the OLS fit of G
    on φ (`ols_fit`), the noise the trace shows. A FitFailure (NO_NOISE) when a non-private trace shows no noise.
    """
    if not is_non_private(stats):
        return np.sqrt(stats.noise_var)
    if stats.count < 3:
        raise ValueError(
            f"a non-private trace (σ = 0) with {stats.count} steps after burn-in: its gradient noise is estimated "
            "from the residuals of the fit of G on φ, which needs at least 3; record a longer trace"
        )
    _, residual = ols_fit(stats)
    silent = np.flatnonzero(~(residual > 0))
    if silent.size:
        raise FitFailure(
            NO_NOISE,
            f"parameters {silent.tolist()} of a non-private trace (σ = 0) have gradients that are an exact linear "
            "function of φ, with no noise at all: the gradient model weighs steps by their noise and cannot fit "
            "them; use the last iterate (method='naive')",
        )
    return np.sqrt(residual)


def slope_estimates(stats: TraceStatistics) -> tuple[np.ndarray, np.ndarray]:
    """The OLS slope of G on φ with φ* fixed at φ̄, per coordinate, and its standard error, both (P,):

    â_j = |Σ G_tj φ̃_tj / Σ φ̃_tj²| / q,   τ_j = ν_j / sqrt(Σ φ̃_tj²) / q,
    ν_j = σC/s_j, the DP noise sd (for a non-private trace the residual sd: `noise_reference`).
    A coordinate whose trace does not move (Σ φ̃² ≈ 0) carries no slope information: a FitFailure (FROZEN).
    """
    # "never moves": the spread of φ after burn-in is at rounding level (1e-12 relative to φ̄; to ψ̄ for scale rows)
    reference = np.where(stats.scale_rows, np.abs(stats.centre), np.maximum(1.0, np.abs(stats.centre)))
    still = stats.sum_phiphi <= stats.count * (1e-12 * reference) ** 2
    if np.any(still):
        frozen = np.flatnonzero(still).tolist()
        raise FitFailure(
            FROZEN,
            f"parameters {frozen} never move after burn-in, so the trace says nothing about their Hessian: "
            "record with a larger learning rate or check the trace",
        )
    q = stats.sampling_rate
    slope = np.abs(stats.sum_gphi / stats.sum_phiphi) / q
    return slope, noise_reference(stats) / np.sqrt(stats.sum_phiphi) / q
