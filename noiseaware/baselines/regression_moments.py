"""B&S 2019 linear regression: the released statistic's layout, the design moments and the CLT (docs/baselines.md §2).

With x̃ = (x₁..x_d, 1) and u = (x̃, y) ∈ R^p, p = d + 2 (bias at index d, y at index d + 1):

* Released statistic: the D = p(p+1)/2 − 1 unique entries of the Gram matrix Σᵢ uᵢuᵢᵀ (upper triangle,
  without the (bias, bias) entry = N, which is public), t(u) = (u_a u_b)_{a ≤ b}; D = 77 for d = 10.
* Gibbs-SS-Noisy moments (§2.4a): the C(d+4, 4) − 1 unique sums Σᵢ x̃ᵢ^{⊗4} (1000 for d = 10) released with
  noise give M̂₄ = z₄/N, M̂₂ = M̂₄[·, ·, bias, bias], K̂ = M̂₄ − M̂₂⊗M̂₂ projected PSD (as a (d+1)² × (d+1)²
  matrix), M̂₂ projected PD. 'known' moments (§2.4b): the exact moments of the public design x ~ N(0, I_d)
  clamped at ±B_x (censored normal).
* CLT (§2.3): s | w, σ² ≈ N(N·E[t], N·Cov[t]) with, for A = [I; wᵀ] (p × (d+1)), B = A M₂ Aᵀ, c = e_y,
      E[u uᵀ] = B + σ² c cᵀ,
      Cov(u_a u_b, u_c u_e) = (A⊗⁴K)_{abce} + σ²(B_ac c_b c_e + B_ae c_b c_c + B_bc c_a c_e + B_be c_a c_c)
                              + 2σ⁴ c_a c_b c_c c_e,
  the §2.3 list in one formula (Isserlis over the Gaussian e; A⊗⁴ M₄ − B⊗B = A⊗⁴ K).
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from .primitives import project_psd

__all__ = [
    "clt_factor",
    "clt_moments",
    "component_bounds",
    "fourth_sums",
    "gram",
    "known_moments",
    "noisy_moments",
    "pairs",
    "quartets",
    "sufficient_statistics",
]


# ---------------------------------------------------------------- index layouts


@functools.cache
def pairs(d: int) -> tuple[np.ndarray, np.ndarray]:
    """The D = p(p+1)/2 − 1 released Gram entries (a_c, b_c), a ≤ b, of u = (x̃, y), without (bias, bias)."""
    a, b = np.triu_indices(d + 2)
    keep = ~((a == d) & (b == d))
    return a[keep], b[keep]


@functools.cache
def quartets(d: int) -> np.ndarray:
    """The C(d+4, 4) − 1 multisets (i ≤ j ≤ k ≤ l) of x̃ indices without the all-bias one, (Q, 4)."""
    return np.array([q for q in itertools.combinations_with_replacement(range(d + 1), 4) if q != (d,) * 4])


@functools.cache
def _quartet_tensor_index(d: int) -> np.ndarray:
    """For every (i, j, k, l) ∈ [d+1]⁴, its quartet's row in `quartets(d)`, or Q for the all-bias entry."""
    position = {tuple(q): r for r, q in enumerate(quartets(d))}
    grid = np.sort(np.stack(np.meshgrid(*[np.arange(d + 1)] * 4, indexing="ij"), -1).reshape(-1, 4), axis=1)
    index = np.array([position.get(tuple(q), len(position)) for q in grid])
    return index.reshape((d + 1,) * 4)


def component_bounds(indices: np.ndarray, d: int, bound_x: float, bound_y: float) -> tuple[np.ndarray, np.ndarray]:
    """sup |t_c| and range(t_c) of the monomials t_c = Π u_{indices[c]} over |x_j| ≤ B_x, |y| ≤ B_y.

    indices (C, k) over u = (x̃, y). The range is sup|t_c| when every non-bias index occurs an even number
    of times (t_c ≥ 0), else 2 sup|t_c|.
    """
    bound = np.array([bound_x] * d + [1.0, bound_y])
    sup = np.prod(bound[indices], axis=1)
    odd = np.zeros(len(indices), bool)
    for j in [*range(d), d + 1]:
        odd |= (np.sum(indices == j, axis=1) % 2) == 1
    return sup, np.where(odd, 2.0 * sup, sup)


# ---------------------------------------------------------------- statistics and moments


def sufficient_statistics(u: jax.Array) -> jax.Array:
    """The released Gram components Σᵢ u_{i,a} u_{i,b}, (a, b) in `pairs`: u (N, p) → (D,)."""
    a, b = pairs(u.shape[-1] - 2)
    return jnp.einsum("na,nb->ab", u, u)[a, b]


def fourth_sums(x: jax.Array) -> jax.Array:
    """Σᵢ Π_{r} x̃_{i,q_r} for the quartets q of `quartets`: x̃ (N, d+1) → (Q,), via the Gram of pair products."""
    d = x.shape[-1] - 1
    i, j = np.triu_indices(d + 1)
    slot = np.zeros((d + 1, d + 1), int)
    slot[i, j] = np.arange(len(i))
    products = x[:, i] * x[:, j]
    products_gram = products.T @ products
    q = quartets(d)
    return products_gram[slot[q[:, 0], q[:, 1]], slot[q[:, 2], q[:, 3]]]


def _moments_from_tensor(m4: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(M₂, F) from M₄ (d+1)⁴ with M₄[bias⁴] = 1 (§2.4a): M₂ = M₄[·,·,bias,bias] projected PD, and the PSD
    projection of K = M₄ − M₂⊗M₂ ((d+1)², (d+1)²) as the factor F = V_r diag(√max(λ_r, 0)) of its r largest
    eigenpairs (clipping at 0 is the PSD projection; the other eigenvalues vanish by the pair symmetry)."""
    k = m4.shape[0]
    second = m4[:, :, -1, -1]
    fourth = (m4 - second[:, :, None, None] * second[None, None]).reshape(k * k, k * k)
    values, vectors = jnp.linalg.eigh(0.5 * (fourth + fourth.T))
    r = k * (k + 1) // 2
    return project_psd(second), vectors[:, -r:] * jnp.sqrt(jnp.maximum(values[-r:], 0.0))


def noisy_moments(z4: jax.Array, n) -> tuple[jax.Array, jax.Array]:
    """Gibbs-SS-Noisy moments (M̂₂, F) from the noisy quartet sums z₄ (Q,): M̂₄ = z₄/N symmetrised (all-bias entry 1)."""
    d = _quartet_d(z4.shape[-1])
    values = jnp.concatenate([z4 / n, jnp.ones(1, z4.dtype)])
    return _moments_from_tensor(values[_quartet_tensor_index(d)])


def _quartet_d(count: int) -> int:
    for d in range(1, 64):
        if math.comb(d + 4, 4) - 1 == count:
            return d
    raise ValueError(f"{count} fourth-moment components match no dimension d (need C(d+4, 4) − 1)")


@functools.lru_cache(maxsize=8)
def known_moments(d: int, bound_x: float) -> tuple[np.ndarray, np.ndarray]:
    """(M₂, F) of x̃ = (clip(x, ±B_x), 1) with x ~ N(0, I_d) (§2.4b, censored normal, coordinates independent):
    E[x_j²] = (2Φ(B)−1) − 2Bφ(B) + 2B²Φ(−B),  E[x_j⁴] = 3(2Φ(B)−1) − 2(B³+3B)φ(B) + 2B⁴Φ(−B), odd moments 0."""
    B = float(bound_x)
    inner, pdf, tail = 2 * special.ndtr(B) - 1, math.exp(-0.5 * B * B) / math.sqrt(2 * math.pi), special.ndtr(-B)
    raw = np.array(
        [1.0, 0.0, inner - 2 * B * pdf + 2 * B**2 * tail, 0.0, 3 * inner - 2 * (B**3 + 3 * B) * pdf + 2 * B**4 * tail]
    )
    grid = np.stack(np.meshgrid(*[np.arange(d + 1)] * 4, indexing="ij"), -1)
    counts = np.stack([np.sum(grid == j, axis=-1) for j in range(d)], -1)  # the bias contributes factors 1
    m4 = np.prod(raw[counts], axis=-1)
    with jax.ensure_compile_time_eval(), jax.enable_x64(True):
        second, factor = _moments_from_tensor(jnp.asarray(m4, jnp.float64))
        return np.asarray(second), np.asarray(factor)


# ---------------------------------------------------------------- the CLT


def clt_factor(w: jax.Array, sigma2, second: jax.Array, factor: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-record mean (D,) and a covariance factor W (D, r + d + 2), Cov[t] = W Wᵀ, given (w (d+1,), σ²)
    and the design moments M₂ (d+1, d+1), F ((d+1)², r) (§2.3).

    With u = A x̃ + e c (A = [I; wᵀ], c = e_y, e ~ N(0, σ²)), t_ab = u_a u_b splits into uncorrelated parts
    (A x̃)_a (A x̃)_b, e·h_ab(x̃) with h_ab = (A x̃)_a c_b + c_a (A x̃)_b, and e² c_a c_b, so
        W = [ (A⊗A) F | σ H chol(M₂) | √2 σ² (c_a c_b) ],   H_{ab,i} = A_ai c_b + c_a A_bi,
    which is the §2.3 list: Cov(u_a u_b, u_c u_e) = (A⊗⁴K)_{abce} + σ²(B_ac c_b c_e + B_ae c_b c_c +
    B_bc c_a c_e + B_be c_a c_c) + 2σ⁴ c_a c_b c_c c_e with B = A M₂ Aᵀ, K = F Fᵀ.
    """
    k = w.shape[-1]
    a, b = pairs(k - 1)
    A = jnp.concatenate([jnp.eye(k, dtype=w.dtype), w[None]], axis=0)
    c = jnp.zeros(k + 1, w.dtype).at[-1].set(1.0)
    mean = (A @ second @ A.T + sigma2 * jnp.outer(c, c))[a, b]
    F = factor.reshape(k, k, -1)
    F = jnp.concatenate([F, jnp.einsum("i,ijr->jr", w, F)[None]], axis=0)  # (p, k, r)
    F = jnp.concatenate([F, jnp.einsum("j,ajr->ar", w, F)[:, None]], axis=1)  # (p, p, r)
    AL = A @ jnp.linalg.cholesky(second)  # (p, k)
    H = AL[a] * c[b][:, None] + c[a][:, None] * AL[b]
    W = jnp.concatenate([F[a, b], jnp.sqrt(sigma2) * H, (jnp.sqrt(2.0) * sigma2 * c[a] * c[b])[:, None]], axis=1)
    return mean, W


def clt_moments(w, sigma2, second, factor) -> tuple[np.ndarray, np.ndarray]:
    """Per-record mean (D,) and covariance (D, D) = W Wᵀ of t(u) (`clt_factor`), float64 numpy arrays."""
    with jax.enable_x64(True):
        w, sigma2, second, factor = (jnp.asarray(a, jnp.float64) for a in (w, sigma2, second, factor))
        mean, W = clt_factor(w, sigma2, second, factor)
        return np.asarray(mean), np.asarray(W @ W.T)


def gram(s: jax.Array, n, d: int) -> jax.Array:
    """Ĝ (p, p) from the D components s, with Ĝ[bias, bias] = N (a gather: scatters are slow under vmap)."""
    return jnp.concatenate([s, jnp.asarray(n, s.dtype)[None]])[_gram_index(d)]


@functools.cache
def _gram_index(d: int) -> np.ndarray:
    """(p, p) positions of the Gram entries in (s, N): component c at (a_c, b_c) and (b_c, a_c), N at (bias, bias)."""
    a, b = pairs(d)
    index = np.full((d + 2, d + 2), len(a))
    index[a, b] = index[b, a] = np.arange(len(a))
    return index
