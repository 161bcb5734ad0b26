"""What the gradient model reads of a run's moments, and the estimates read off them (docs/method.md §2.2–2.3).

Over the post-burn-in steps t = B..T−1, with φ̃_tj = φ_tj − φ̄_j (φ̄ the post-burn-in mean, so Σ_t φ̃_tj = 0 up
to rounding), the log-likelihood of coordinate j depends on the T' = T − B pairs only through six of the run's
`Moments` (Σ G, Σ φ̃, Σ G², Σ φ̃², Σ G φ̃ and Σ w²), accumulated in float64 around φ̄. `model_moments` gives them as
the gradient model reads them: the scale rows of the variance model in ψ (`in_psi`), the μ rows' gradients net of
the other coordinates' wander when the model's coupling is known (`without_wander`). Read off them: the
least-squares fits of G on φ (`slope_estimates` with φ* fixed at φ̄, `ols_fit` with an intercept) and ν_j, the
noise sd that scales the empirical-Bayes priors (`noise_reference`): the DP noise sd σC/s_j, or for a non-private
trace (σ = 0) the residual sd of G on φ. For the Stein model (docs/method.md §2.11), each μ row's partner ρ row as it
reads it (`ScalePartner`, `scale_partner`); the squared residual of a row from its sums, `residual_squares`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from ..trace import BURN_IN
from ..trace.moments import Moments, coupling, in_psi, row_moments, without_wander
from ..trace.run import Run, scale_rows_of
from ..trace.sums import COUPLING_LIMIT
from ..util.errors import FROZEN, NO_NOISE, FitFailure

__all__ = [
    "centred_phiphi",
    "is_non_private",
    "model_moments",
    "noise_reference",
    "ols_fit",
    "partial_slopes",
    "others_of",
    "partial_on_others",
    "residual_squares",
    "ScalePartner",
    "scale_partner",
    "slope_estimates",
    "solves_partial_rows",
]


def model_moments(
    run: Run, burn_in: float = BURN_IN, scale_rows=None, coupling=None, curvature=None, partial: bool = False
) -> Moments:
    """The moments of `run` over steps t ≥ B = ⌊burn_in · T⌋ as the gradient model reads them: rows in `scale_rows`
    (a (P,) bool mask, or None for none) in the variance model's ψ coordinates; with `coupling` (the model's c
    (d, d), `ModelOptimumPrior.coupling`, and curvature h (d,)) the μ rows' gradients net of the other coordinates'
    wander; else with `partial`, the μ rows' sums net of the other μ coordinates where the run keeps their cross
    moments (`partial_on_others`). Only the per-row moments and the μ rows' cross products are kept (`row_moments`)."""
    moments = run.moments(burn_in, cross=coupling is not None or partial)
    if coupling is not None:
        moments = without_wander(moments, run.settings.sampling_rate, coupling, curvature)
    elif partial:
        moments = partial_on_others(moments, run.family.dim, np.asarray(run.settings.noise_sd, np.float64) ** 2)
    if coupling is not None or not partial:
        moments = moments._replace(mu_phiphi=None, mu_gphi=None)
    if scale_rows is not None:
        moments = in_psi(moments, scale_rows, scale_rows_of(run.family))
    return row_moments(moments)


def partial_slopes(params: np.ndarray, grads: np.ndarray, sampling_rate: float) -> np.ndarray:
    """Each coordinate's own slope |b_jj|/q in the least-squares fit of G_j on all of φ̃ with an intercept, (P,);
    params, grads (T', P)."""
    design = np.column_stack([np.ones(len(params)), params - params.mean(axis=0)])
    return np.abs(np.diagonal(np.linalg.lstsq(design, grads, rcond=None)[0][1:])) / sampling_rate


def is_non_private(noise_var) -> bool:
    """Whether the DP noise variance (σC/s)² (P,) is 0 everywhere (σ = 0): the gradient noise is then all
    subsampling and Monte Carlo noise, the extra noise u of the model."""
    return not np.any(np.asarray(noise_var) > 0)


def centred_phiphi(stats: Moments):
    """Σ (φ̃ − its weighted mean)² = S_φφ − S_φ²/Σw², per coordinate (P,): the spread the slope with a free intercept
    is estimated from (w ≡ 1 except for scale rows in ψ). Plain arithmetic, numpy or traced jax arrays."""
    return stats.sum_phiphi - stats.sum_phi**2 / stats.sum_ww


def ols_fit(stats: Moments):
    """The OLS fit of G_tj on φ_tj with a free intercept, per coordinate: (slope b, residual variance r²), (P,) each.

    b = Σ G φ̃ᶜ / Σ φ̃ᶜ²,  r² = (Σ (G − Ḡ)² − b² Σ φ̃ᶜ²) / (T' − 2), with φ̃ᶜ = φ̃ − mean φ̃. Plain arithmetic,
    so numpy arrays and traced jax arrays alike.
    """
    n, weight = stats.count, stats.sum_ww
    centred = centred_phiphi(stats)
    slope = (stats.sum_gphi - stats.sum_g * stats.sum_phi / weight) / centred
    return slope, (stats.sum_gg - stats.sum_g**2 / weight - slope**2 * centred) / (n - 2)


def noise_reference(stats: Moments, noise_var) -> np.ndarray:
    """ν_j, the noise sd that scales the empirical-Bayes priors, (P,).

    The DP noise sd σC/s_j of G, known exactly. A non-private trace (σ = 0) has none: its noise is all
    subsampling and Monte Carlo noise, the extra noise u, so ν_j is the residual sd r_j of the OLS fit of G
    on φ (`ols_fit`), the noise the trace shows. A FitFailure (NO_NOISE) when a non-private trace shows no noise.
    """
    if not is_non_private(noise_var):
        return np.sqrt(noise_var)
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


def slope_estimates(stats: Moments, noise_var, sampling_rate: float, scale_rows) -> tuple[np.ndarray, np.ndarray]:
    """The OLS slope of G on φ with φ* fixed at φ̄, per coordinate, and its standard error, both (P,):

    â_j = |Σ G_tj φ̃_tj / Σ φ̃_tj²| / q,   τ_j = ν_j / sqrt(Σ φ̃_tj²) / q,
    ν_j = σC/s_j, the DP noise sd (for a non-private trace the residual sd: `noise_reference`).
    A coordinate whose trace does not move (Σ φ̃² ≈ 0) carries no slope information: a FitFailure (FROZEN).
    """
    # "never moves": the spread of φ after burn-in is at rounding level (1e-12 relative to φ̄; to ψ̄ for scale rows)
    reference = np.where(scale_rows, np.abs(stats.centre), np.maximum(1.0, np.abs(stats.centre)))
    still = stats.sum_phiphi <= stats.count * (1e-12 * reference) ** 2
    if np.any(still):
        frozen = np.flatnonzero(still).tolist()
        raise FitFailure(
            FROZEN,
            f"parameters {frozen} never move after burn-in, so the trace says nothing about their Hessian: "
            "record with a larger learning rate or check the trace",
        )
    q = sampling_rate
    slope = np.abs(stats.sum_gphi / stats.sum_phiphi) / q
    return slope, noise_reference(stats, noise_var) / np.sqrt(stats.sum_phiphi) / q


def residual_squares(sums, delta, qa):
    """Σ_t (G_t − q a (x_t − δ w_t))² of a row from its sums (`Moments`' or a `ScalePartner`'s fields of one name):
    S_GG − 2qa (S_Gx − δ S_Gw) + (qa)² (S_xx − 2δ S_xw + δ² S_ww), with x = φ̃, w = 1 (ψ view: x = ω(ψ − ψ̄), w = ω)."""
    return (
        sums.sum_gg
        - 2.0 * qa * (sums.sum_gphi - delta * sums.sum_g)
        + qa**2 * (sums.sum_phiphi - 2.0 * delta * sums.sum_phi + sums.sum_ww * delta**2)
    )


class ScalePartner(NamedTuple):
    """The Stein model's pairing (docs/method.md §2.11), per column (P,): for the μ_j column of a mean-field trace,
    the ρ_j row whose gradient shares its slope a_j = Λ_jj, as its ψ-view sums (`in_psi`: sum_g Σ G ω, sum_phi
    Σ ω z, sum_phiphi Σ z², sum_gphi Σ G z, sum_ww Σ ω², sum_gg Σ G², z = ω (ψ − ψ̄)) about centre ψ̄, its DP noise
    variance, its extra noise's prior sd, and its least-squares slope, standard error and residual variance under
    G = q a ω ψ − q ω (from which the exact route places its first grid and the row's u nodes); `active` marks the μ
    columns (zeros elsewhere); column: each column's partner (μ_j ↔ ρ_j), as an index into the trace's P columns;
    others: how many other μ coordinates each μ row was regressed on (d − 1 where its sums are partial,
    `partial_on_others`; else 0)."""

    active: jax.Array
    column: jax.Array
    centre: jax.Array
    sum_g: jax.Array
    sum_phi: jax.Array
    sum_phiphi: jax.Array
    sum_gphi: jax.Array
    sum_ww: jax.Array
    sum_gg: jax.Array
    noise_var: jax.Array
    extra_sd: jax.Array
    residual: jax.Array
    slope: jax.Array
    slope_se: jax.Array


def scale_partner(stats: Moments, noise_var, extra_sd, sampling_rate: float, dim: int) -> ScalePartner:
    """The `ScalePartner` of a mean-field trace of dimension d = `dim` from its moments with the ρ rows in ψ.

    Under G_t = q·a·z_t − q·ω_t + e_t, z = ω ψ (Stein's identity for the ρ row, ψ* = 1/a): â = Σ z (G + q ω) /
    (q Σ z²), the residual variance r² of that fit, and the standard error √(v/Σ z²)/q, v = max(r², DP noise)."""
    size = 2 * dim
    column = np.concatenate([np.arange(dim, size), np.arange(dim)])
    active = np.arange(size) < dim
    psi = stats.centre[column]
    sums = {name: np.asarray(getattr(stats, name), np.float64)[column] for name in ScalePartner._fields[3:9]}
    q, n = float(sampling_rate), stats.count
    cross = sums["sum_gphi"] + psi * sums["sum_g"] + q * (sums["sum_phi"] + psi * sums["sum_ww"])
    square = sums["sum_phiphi"] + 2.0 * psi * sums["sum_phi"] + psi**2 * sums["sum_ww"]
    total = sums["sum_gg"] + 2.0 * q * sums["sum_g"] + q**2 * sums["sum_ww"]
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = cross / (q * square)
        residual = np.maximum(total - cross**2 / square, 0.0) / max(n - 1, 1)
    var = np.maximum(residual, np.asarray(noise_var, np.float64)[column])
    keep = lambda values: np.where(active, values, 0.0)  # noqa: E731
    return ScalePartner(
        active=active,
        column=column,
        centre=keep(psi),
        **{name: keep(values) for name, values in sums.items()},
        noise_var=keep(np.asarray(noise_var, np.float64)[column]),
        extra_sd=keep(np.asarray(extra_sd, np.float64)[column]),
        residual=keep(residual),
        slope=keep(slope),
        slope_se=keep(np.sqrt(var / square) / q),
    )


def solves_partial_rows(scale_model: str, run: Run) -> bool:
    """Whether the μ rows of `run` are solved on their partial sums where it shows their coupling
    (`partial_on_others`): the Stein model's rows, and a point trace's, whose Laplace posterior reads the whole
    Hessian (docs/method.md §6), for 2 ≤ d ≤ COUPLING_LIMIT (the d × d cross moments windowed traces keep)."""
    coupled = scale_model == "stein" or run.family.kind == "point"
    return coupled and 2 <= run.family.dim <= COUPLING_LIMIT


def others_of(stats: Moments, n_params: int, dim: int) -> np.ndarray:
    """(P,): how many other μ coordinates each row was regressed on, d − 1 on the μ rows where the sums are partial
    (`partial_on_others`), else 0."""
    return np.where(np.arange(n_params) < dim, dim - 1.0 if stats.partial else 0.0, 0.0)


def partial_on_others(moments: Moments, dim: int, noise_var) -> Moments:
    """The μ rows' sums net of the other μ coordinates, and the cross moments they came from: for row j, G_j and δ_j
    regressed on δ_−j (K = Σ δ δᵀ, g[k, j] = Σ δ_k G_j), S̃_δδ = 1/(K⁻¹)_jj, S̃_Gδ = g_jj − K_j,−j K_−j⁻¹ g_−j,j,
    S̃_GG = S_GG − g_−j,jᵀ K_−j⁻¹ g_−j,j; Σ G and Σ δ are untouched (δ is centred, so the intercept is orthogonal to
    δ_−j). The slope of row j in these sums is its partial slope, (qΛ)_jj where E G_μ = qΛ(μ − μ*); the cross moments
    stay, for the other coefficients' draws. Only where the trace shows the coupling (`trace.moments.coupling`, with
    the DP noise variance `noise_var` (P,); then `partial` is True); else the moments come back as they were (the
    diagonal model). Unchanged where they hold no cross moments, or d = 1."""
    if moments.mu_phiphi is None or dim < 2 or coupling(moments, noise_var) is None:
        return moments
    phiphi, gphi = np.asarray(moments.mu_phiphi, np.float64), np.asarray(moments.mu_gphi, np.float64)
    sum_gg, sum_gphi, sum_phiphi = (
        np.array(x, np.float64) for x in (moments.sum_gg, moments.sum_gphi, moments.sum_phiphi)
    )
    for j in range(dim):
        others = np.delete(np.arange(dim), j)
        inner = np.linalg.solve(phiphi[np.ix_(others, others)], np.stack([phiphi[others, j], gphi[others, j]], axis=1))
        sum_phiphi[j] = phiphi[j, j] - phiphi[j, others] @ inner[:, 0]
        sum_gphi[j] = gphi[j, j] - phiphi[j, others] @ inner[:, 1]
        sum_gg[j] = sum_gg[j] - gphi[others, j] @ inner[:, 1]
    return moments._replace(sum_gg=sum_gg, sum_gphi=sum_gphi, sum_phiphi=sum_phiphi, partial=True)
