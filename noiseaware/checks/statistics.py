"""The statistics behind `na.diagnose`: per coordinate j, tests of the gradient model's assumptions.

docs/diagnostics.md explains each check.

Over the kept steps t = B..T−1 (n = T − B, x_t = φ_tj − φ̄_j), the model G_tj = c_j (φ_tj − φ*_j) + e_tj,
e_tj ~ N(0, ν_j² + u_j²) independent over t, with ν_j = σC/s_j the recorded DP noise sd, is checked by

* noise: (n − 2) r²/ν² ~ χ²_{n−2} at u = 0, r² the residual variance of the OLS fit of G on φ; a small value
  means G varies less than its own DP noise (wrong σ, C, s or convention in the metadata); `noise_ratio` r²/ν²;
  excess noise: the upper tail of (n − 2) r²/(3ν²), G varying over 3× more than its DP noise;
* windows: K windows agree on φ* = φ̄ − Ḡ/c: the score test S = Σ_w n_w ē_w²/r² ~ χ²_{K−1} on the windows'
  mean residuals of the pooled fit;
* curvature: the t test of a quadratic term, G = α + c x + γ (x² − fit) + e; t ~ t_{n−3};
* autocorrelation: Ljung–Box on the residuals, Q = n(n + 2) Σ_{k≤m} ρ̂_k²/(n − k) ~ χ²_m (the DP noise is
  independent across steps);
* drift: the first and last windows' means of φ against their difference under the stationary AR(1) the model
  implies (φ_{t+1} − φ* = (1 − κ)(φ_t − φ*) − λe_t, κ = λc, stationary variance γ₀ = λ² r²/(κ(2 − κ))), z ~ N(0, 1);
  without known step sizes κ and γ₀ come from φ's own lag-1 autocorrelation and variance;
* relaxation (rules, not tests): the start's leftover at B, (|φ_0j − φ̂*_j| − 2 se(φ̂*_j))·(1 − κ⁺)^B, and the
  kept trace's start offset, |mean of φ_j over its first tenth − φ̂*_j| − 2 se(φ̂*_j), both in
  stationary sds √γ₀ (κ⁺ from the slope's upper 2-standard-error bound); and n·κ⁺, the relaxation times kept;
* divergence (rules): a slope significantly below 0 (G pushes φ away from where it is) and κ ≥ 2 (each step
  multiplies the distance to φ* by |1 − κ| ≥ 1);
* runaway (rule): the growth max_t |φ_tj − φ_0j| / (1 + |φ_0j|) over every step, burn-in included: how far the
  iterates went from their start, in units of the start's own size.

Where the μ rows are coupled (a mean-field trace of d ≤ 64 whose cross moments show the other coordinates' pull,
`trace.moments.coupling`), each μ row is read net of the others, G̃_j = G_j − Σ_{k≠j} B_jk (μ_k − μ̄_k)
(`net_of_coupling`; the multivariate fit's slope and residuals), and with SGD's step sizes the drift test and the
stationary sds take the μ block's VAR(1), δ_{t+1} = (I − ΛB) δ_t − Λ e_t, Λ = diag(λ_μ), e_t independent with the
rows' residual variances: its stationary covariance Γ = AΓAᵀ + ΛRΛ (A = I − ΛB) and, per eigenvalue of A, the AR(1)
sums below. Read one at a time, the other coordinates' slow wander would look like autocorrelated residuals, excess
noise, windows that disagree and drift.

Every p-value is a (P,) array; `checks_of_moments` computes them all in float64 from a run's `Moments` (and its rows
for the residuals' autocorrelation, where it kept them).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg
from scipy import stats

from ..trace.moments import Moments, coupling, net_of_coupling, pull_of_others

__all__ = ["CheckStatistics", "EXCESS", "LAGS", "checks_of_moments"]

EXCESS = 3.0
"""The excess-noise test asks whether r²/ν² exceeds this: G varying 3× more than the recorded DP noise."""
LAGS = 10
"""m, the lags of the Ljung–Box test of the residuals."""


class CheckStatistics(NamedTuple):
    """Per-coordinate statistics, (P,) float64 arrays (NaN where a coordinate does not move).

    moves: whether φ_j varies after burn-in (bool); slope_z: ĉ/se(ĉ); noise_ratio r²/ν² (inf without DP noise);
    p_noise (lower tail), p_excess (r²/ν² above EXCESS), p_windows, p_curvature, p_autocorrelation, p_drift;
    window_optima (K, P) φ̂* per window (pooled slope); optimum φ̂*; relaxation κ̂ per step; relaxations n·κ⁺;
    leftover: what is left of the initial offset at B, start_offset: how far the kept trace starts from φ̂*,
    both in stationary sds; stationary_sd √γ₀; growth max_t |φ_t − φ_0|/(1 + |φ_0|) over every step (defined
    for every coordinate, moving or not).
    """

    moves: np.ndarray
    slope_z: np.ndarray
    noise_ratio: np.ndarray
    p_noise: np.ndarray
    p_excess: np.ndarray
    p_windows: np.ndarray
    p_curvature: np.ndarray
    p_autocorrelation: np.ndarray
    p_drift: np.ndarray
    window_optima: np.ndarray
    optimum: np.ndarray
    relaxation: np.ndarray
    relaxations: np.ndarray
    leftover: np.ndarray
    start_offset: np.ndarray
    stationary_sd: np.ndarray
    growth: np.ndarray


def checks_of_moments(
    sums: Moments, rows: tuple | None, *, noise_sd: np.ndarray, learning_rate: np.ndarray | None
) -> CheckStatistics:
    """All statistics from the kept steps' moments; rows: (φ_t, G_t) (T, P) of every step, for the residuals'
    autocorrelation (NaN without them: a windowed trace). noise_sd ν (P,); learning_rate λ (P,) of plain SGD or
    None. Coupled μ rows are read net of each other (module doc)."""
    slopes = coupling(sums, np.asarray(noise_sd, np.float64) ** 2)
    if slopes is not None:
        sums = net_of_coupling(sums, slopes)
    n, sxx, sgg, sxg = sums.count, sums.sum_phiphi, sums.grad_ss, sums.sum_gphi
    grad_mean = sums.sum_g / n
    moves = sxx > n * (1e-12 * np.maximum(1.0, np.abs(sums.centre))) ** 2
    safe = np.where(moves, sxx, 1.0)
    slope = np.where(moves, sxg / safe, np.nan)
    rss = np.maximum(sgg - slope * sxg, 0.0)
    residual_var = rss / (n - 2)
    slope_se = np.sqrt(residual_var / safe)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope_z = slope / slope_se
        noise_var = np.asarray(noise_sd, np.float64) ** 2
        noise_ratio = np.where(noise_var > 0, residual_var / noise_var, np.inf)
        p_noise = np.where(noise_var > 0, stats.chi2.cdf((n - 2) * noise_ratio, n - 2), np.nan)
        p_excess = np.where(noise_var > 0, stats.chi2.sf((n - 2) * noise_ratio / EXCESS, n - 2), np.nan)
        optimum = sums.centre - grad_mean / slope
        p_windows, window_optima = _windows(sums, slope, residual_var)
        p_curvature = _curvature(sums, rss)
        p_autocorrelation = np.full_like(slope, np.nan) if rows is None else _ljung_box(sums, rows, slope, slopes)
        relaxation, variance = _dynamics(sums, slope, slope_se, residual_var, learning_rate)
        kappa, kappa_up = relaxation
        modes = _ar_modes(kappa, variance)
        if slopes is not None and learning_rate is not None:
            modes = _var_modes(modes, slopes, residual_var, learning_rate)
            variance = np.real(np.sum(modes[1], axis=0))
        p_drift = _drift(sums, *modes)
        stationary_sd = np.sqrt(variance)
        optimum_se = _optimum_se(grad_mean, slope, slope_se, residual_var, n)
        offset = np.maximum(np.abs(sums.first - optimum) - 2.0 * optimum_se, 0.0)
        decay = np.exp(sums.start * np.log(np.clip(1.0 - kappa_up, 1e-300, None)))
        leftover = np.where(kappa_up < 1.0, offset * decay / stationary_sd, 0.0)
        start_offset = _start_offset(sums.early, optimum, optimum_se, stationary_sd)
    nan = ~moves
    return CheckStatistics(
        moves=moves,
        slope_z=_blank(slope_z, nan),
        noise_ratio=noise_ratio,
        p_noise=p_noise,
        p_excess=p_excess,
        p_windows=_blank(p_windows, nan),
        p_curvature=_blank(p_curvature, nan),
        p_autocorrelation=_blank(p_autocorrelation, nan),
        p_drift=_blank(p_drift, nan),
        window_optima=np.where(nan, np.nan, window_optima),
        optimum=_blank(optimum, nan),
        relaxation=_blank(kappa, nan),
        relaxations=_blank(n * kappa_up, nan),
        leftover=_blank(leftover, nan),
        start_offset=_blank(start_offset, nan),
        stationary_sd=_blank(stationary_sd, nan),
        growth=sums.growth / (1.0 + np.abs(sums.first)),
    )


def _blank(values: np.ndarray, where: np.ndarray) -> np.ndarray:
    return np.where(where, np.nan, values).astype(np.float64)


def _windows(sums: Moments, slope: np.ndarray, residual_var: np.ndarray):
    """Score test that the K windows agree on φ* given the pooled fit: the windows' mean residuals ē_w of the
    pooled OLS fit, ē_w = (Ḡ_w − Ḡ) − ĉ (φ̄_w − φ̄), S = Σ_w n_w ē_w² / r² ~ χ²_{K−1}. (Refitting the slope within
    windows would bias it where a window holds few relaxation times, as fixed effects do in dynamic panels.) Returns
    p (P,) and the windows' optima φ̄_w − Ḡ_w/ĉ (K, P)."""
    size, mean, grad_mean = sums.windows[:, 0], sums.windows[:, 1], sums.windows[:, 2]
    residual = (grad_mean - sums.sum_g / sums.count) - slope * (mean - sums.centre)
    statistic = np.sum(size * residual**2, axis=0) / residual_var
    return stats.chi2.sf(statistic, len(sums.windows) - 1), mean - grad_mean / slope


def _curvature(sums: Moments, rss: np.ndarray) -> np.ndarray:
    """t test of γ in G = α + c x + γ z + e, z = x² orthogonalised against (1, x): γ̂ = Σ z G / Σ z², two-sided, with
    Σ z² = Σ x⁴ − (Σ x²)²/n − (Σ x³)²/Σ x² and Σ z G = Σ x² G − Ḡ Σ x² − (Σ x³/Σ x²) Σ x G."""
    n, sxx = sums.count, sums.sum_phiphi
    szz = sums.x4 - sxx**2 / n - sums.x3**2 / sxx
    szg = sums.x2g - sums.sum_g / n * sxx - sums.x3 / sxx * sums.sum_gphi
    residual_var = np.maximum(rss - szg**2 / szz, 0.0) / (n - 3)
    t = (szg / szz) / np.sqrt(residual_var / szz)
    return 2.0 * stats.t.sf(np.abs(t), n - 3)


def _ljung_box(sums: Moments, rows: tuple[np.ndarray, np.ndarray], slope: np.ndarray, slopes) -> np.ndarray:
    """Ljung–Box p-value over LAGS lags of the residuals e_t = (G_t − Ḡ) − ĉ x_t of the kept rows, x = φ − φ̄ (the μ
    rows' G net of the other μ coordinates where `slopes` B (d, d) couples them; `sums` are then net too)."""
    params, grads = (np.asarray(a[sums.start :], np.float64) for a in rows)
    x = params - sums.centre
    if slopes is not None:
        d = slopes.shape[0]
        grads = grads.copy()
        grads[:, :d] -= x[:, :d] @ pull_of_others(slopes)
    g = grads - sums.sum_g / sums.count
    residuals = g - slope * x
    n = residuals.shape[0]
    total = np.sum(residuals * residuals, axis=0)
    statistic = np.zeros(residuals.shape[1])
    for lag in range(1, LAGS + 1):
        rho = np.sum(residuals[lag:] * residuals[:-lag], axis=0) / total
        statistic += rho**2 / (n - lag)
    return stats.chi2.sf(n * (n + 2) * statistic, LAGS)


def _dynamics(sums: Moments, slope, slope_se, residual_var, learning_rate):
    """((κ̂, κ⁺), γ₀): the relaxation per step and its upper bound, and the stationary variance of φ.

    Plain SGD with known λ: κ = λĉ, κ⁺ = λ(ĉ + 2 se), γ₀ = λ² r²/(κ(2 − κ)). Otherwise φ's lag-1 autocorrelation
    ρ₁: κ = 1 − ρ₁ (κ⁺ the same) and γ₀ its sample variance. (ĉ, the slope of G on φ, is q·a.)
    """
    if learning_rate is not None:
        lam = np.asarray(learning_rate, np.float64)
        kappa, kappa_up = lam * slope, lam * (slope + 2.0 * slope_se)
        variance = lam**2 * residual_var / (kappa * (2.0 - kappa))
        return (kappa, kappa_up), variance
    variance = sums.sum_phiphi / sums.count
    kappa = 1.0 - sums.lag / sums.sum_phiphi
    return (kappa, kappa), variance


def _ar_modes(kappa: np.ndarray, variance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each coordinate's own stationary AR(1) as one mode: coefficients r = 1 − κ (1, P) and weights γ₀ (1, P); a
    coordinate without a stationary law (0 < κ < 2 fails) gets r = NaN."""
    stable = (kappa > 0) & (kappa < 2)
    return np.where(stable, 1.0 - kappa, np.nan)[None], np.asarray(variance, np.float64)[None]


def _var_modes(modes, slopes: np.ndarray, residual_var: np.ndarray, learning_rate) -> tuple[np.ndarray, np.ndarray]:
    """The modes (K = d, P) of the coupled μ block's VAR(1) (module doc): eigenvalues r_i of A = I − ΛB and, for
    coordinate j, weights w_ij = V_ji (V⁻¹Γ)_ij with Σ_i w_ij r_i^k = (A^k Γ)_jj; the other rows keep their own mode
    (weights 0 beyond it). Complex where A is not symmetric."""
    d = slopes.shape[0]
    lam = np.asarray(learning_rate, np.float64)[:d]
    transition = np.eye(d) - lam[:, None] * slopes
    eigenvalues, vectors = np.linalg.eig(transition)
    if np.max(np.abs(eigenvalues)) >= 1.0:
        return modes  # no stationary law for the block: each coordinate as it is
    gamma = scipy.linalg.solve_discrete_lyapunov(transition, np.diag(lam**2 * residual_var[:d]))
    weights = (vectors * np.linalg.solve(vectors, gamma).T).T  # [i, j] = V_ji (V⁻¹Γ)_ij
    p = modes[0].shape[1]
    r = np.zeros((d, p), complex)
    w = np.zeros((d, p), complex)
    r[0], w[0] = modes[0][0], modes[1][0]
    r[:, :d], w[:, :d] = eigenvalues[:, None], weights
    return r, w


def _drift(sums: Moments, r: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """p-value of the first and last windows' means of φ (u and v steps long, the last starting s steps after the
    first) under the stationary law of modes (K, P) with coefficients r_i and weights w_i (an AR(1): one mode, r = 1 −
    κ, w = γ₀; `_var_modes` for coupled rows): Var(mean of w steps) = Σ_i w_i/w² (w(1 + r_i)/(1 − r_i) − 2r_i(1 −
    r_i^w)/(1 − r_i)²), their covariance Σ_i w_i r_i^(s−u+1) (1 − r_i^u)(1 − r_i^v)/((1 − r_i)² u v). NaN where a
    coordinate has no stationary law."""
    u, v = float(sums.windows[0, 0, 0]), float(sums.windows[-1, 0, 0])
    lag = sums.count - v - u + 1
    stable = np.all(np.isfinite(r), axis=0)
    r = np.where(np.isfinite(r), r, 0.0)
    one = 1.0 - r

    def mean_variance(w):
        return np.real(np.sum(weight / w**2 * (w * (1 + r) / one - 2 * r * (1 - r**w) / one**2), axis=0))

    cov = np.real(np.sum(weight / (u * v) * r**lag * (1 - r**u) * (1 - r**v) / one**2, axis=0))
    sd = np.sqrt(np.maximum(mean_variance(u) + mean_variance(v) - 2.0 * cov, 0.0))
    z = (sums.windows[-1, 1] - sums.windows[0, 1]) / sd
    return np.where(stable & (sd > 0), 2.0 * stats.norm.sf(np.abs(z)), np.nan)


def _start_offset(early, optimum, optimum_se, stationary_sd) -> np.ndarray:
    """How far the kept trace starts from φ̂*: the mean of φ over its first tenth (`early`) minus φ̂*, less 2 se(φ̂*),
    in stationary sds (≥ 0). A transient that dies out within a small part of the tenth barely moves its mean (and
    barely moves the fit)."""
    return np.maximum(np.abs(early - optimum) - 2.0 * optimum_se, 0.0) / stationary_sd


def _optimum_se(grad_mean, slope, slope_se, residual_var, n):
    """se of φ̂* = φ̄ − Ḡ/ĉ by the delta method: sqrt(r²/n + (Ḡ se(ĉ)/ĉ)²)/|ĉ|."""
    return np.sqrt(residual_var / n + (grad_mean * slope_se / slope) ** 2) / np.abs(slope)
