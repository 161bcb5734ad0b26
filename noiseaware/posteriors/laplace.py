"""The posteriors of a point trace (a plain DP-SGD run, docs/method.md §6) as mixtures of Gaussians over θ.

With draws (θ̂_k, Λ_k) of the optimum and the Hessian of the objective L(θ) = −Σ_i log p(x_i | θ) − log p(θ) from the
gradient model,

* the noise-aware Laplace posterior is (1/K) Σ_k N(θ; θ̂_k, Λ_k⁻¹): the data's uncertainty through Λ⁻¹, DP's through
  the spread of (θ̂_k, Λ_k);
* the sandwich, for the frequentist reading, is (1/K) Σ_k N(θ; θ̂_k, Λ_k⁻¹ V_k Λ_k⁻¹), V = Σ_i g_i g_iᵀ the
  per-example gradients' outer products at θ̂, whose diagonal the gradient model's extra noise gives under Poisson
  sampling, u_j² = q(1 − q)·V_jj; its off-diagonal correlations are taken from Λ_k's (equal where the model is
  right, V = Λ up to the prior's curvature).

Each is written as a `MixturePosterior` of a Gaussian family's layout: mean-field φ = (θ̂, softplus⁻¹(sd)) where Λ
is diagonal, full-rank φ = (θ̂, softplus⁻¹(diag L), L's strictly lower entries), L Lᵀ the component's covariance,
where the trace's μ rows are coupled and Λ is drawn whole. A draw whose Λ_k is not positive definite is left out;
where fewer than `MIN_DEFINITE` of them are, the components fall back to Λ's diagonal and a note says so.
"""

from __future__ import annotations

import numpy as np

from ..trace.families import FullRank, MeanField, VariationalFamily
from ..util.notes import Note
from ..util.numerics import softplus_inverse
from .mixture import LAPLACE, SANDWICH

__all__ = ["MIN_DEFINITE", "POINT_KINDS", "point_components"]

MIN_DEFINITE = 0.5
"""The share of draws whose Λ_k must be positive definite for the components to use the whole matrix."""
POINT_KINDS = {"laplace": LAPLACE, "sandwich": SANDWICH}
"""The two readings of a point trace and the kinds of their posteriors: noise-aware Laplace, and the sandwich."""
INDEFINITE_ADVICE = (
    "the trace's draws (the value: the share of them) of the whole Hessian Λ, its coupled coordinates' cross "
    "slopes, are mostly not positive definite, so the components use its diagonal alone and ignore the coupling "
    "between these coordinates; record a longer run, or one whose iterates wander more (a larger learning rate)"
)


def point_components(
    optimum: np.ndarray,
    hessian: np.ndarray,
    matrix: np.ndarray | None,
    extra_noise: np.ndarray | None,
    sampling_rate: float,
    reading: str = "laplace",
) -> tuple[VariationalFamily, np.ndarray, np.ndarray, list[Note]]:
    """The components of a point trace's posterior from K draws: optimum θ̂ (K, d), Hessian diagonal a (K, d), the
    whole Λ (K, d, d) or None, extra noise u (K, d) (the sandwich's V) or None; `reading` "laplace" or "sandwich".
    Returns the family, φ (K', P) in its layout, which draws were kept (K,) bool (Λ_k positive definite: the prior
    of Λ restricted to such matrices) and the notes."""
    if reading not in POINT_KINDS:
        raise ValueError(f"reading must be one of {', '.join(POINT_KINDS)}; got {reading!r}")
    if reading == "sandwich" and extra_noise is None:
        raise ValueError(
            "the sandwich reads V = Σ g_i g_iᵀ off the gradient model's extra noise u, and this fit has none: "
            "fit with a prior that has extra noise (the default)"
        )
    draws, dim = optimum.shape
    kept, notes, symmetric = np.ones(draws, bool), [], None
    if matrix is not None:
        symmetric = 0.5 * (matrix + np.swapaxes(matrix, -1, -2))
        definite = np.linalg.eigvalsh(symmetric)[:, 0] > 0
        if definite.mean() < MIN_DEFINITE:
            symmetric = None
            notes.append(
                Note("coupling not identified", INDEFINITE_ADVICE, value=float(1.0 - definite.mean()), combine="max")
            )
        else:
            kept, symmetric = definite, symmetric[definite]
    variance = None if extra_noise is None else extra_noise[kept] ** 2 / (sampling_rate * (1.0 - sampling_rate))
    if symmetric is None:
        diagonal = hessian[kept]
        covariance = 1.0 / diagonal if reading == "laplace" else variance / diagonal**2
        return MeanField(dim), np.concatenate([optimum[kept], softplus_inverse(np.sqrt(covariance))], -1), kept, notes
    inverse = np.linalg.inv(symmetric)
    if reading == "sandwich":
        sd = np.sqrt(np.diagonal(symmetric, axis1=-2, axis2=-1))
        root = np.sqrt(variance) / sd
        inverse = inverse @ (symmetric * root[:, :, None] * root[:, None, :]) @ inverse
    family = FullRank(dim)
    factor = np.linalg.cholesky(0.5 * (inverse + np.swapaxes(inverse, -1, -2)))
    rows, cols = family.entries
    parts = (
        optimum[kept],
        softplus_inverse(np.diagonal(factor, axis1=-2, axis2=-1)),
        factor[:, rows[dim:], cols[dim:]],
    )
    return family, np.concatenate(parts, axis=-1), kept, notes
