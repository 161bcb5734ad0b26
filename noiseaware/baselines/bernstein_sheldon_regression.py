"""Bernstein & Sheldon (NeurIPS 2019) Gibbs-SS-Noisy for Bayesian linear regression, and its noise-naive SS.

Specification: docs/baselines.md §2 (provenance tags there). With x̃ = (x₁..x_d, 1) and u = (x̃, y) ∈ R^p,
p = d + 2 (bias at index d, y at index d + 1):

* Model: σ² ~ InvGamma(a₀, b₀), w | σ² ~ N(0, σ²Λ₀⁻¹), Λ₀ = I/prior_scale², y = wᵀx̃ + N(0, σ²).
* Bounds fixed before seeing data (§2.2): x_j ← clip(x_j, ±B_x), y ← clip(y, ±B_y).
* Released statistic: the D = p(p+1)/2 − 1 unique entries of the Gram matrix Σᵢ uᵢuᵢᵀ (upper triangle,
  without the (bias, bias) entry = N, which is public), t(u) = (u_a u_b)_{a ≤ b}; D = 77 for d = 10.
  z = s + noise, Laplace(Δ₁/ε_ss) or analytic-Gaussian noise per component (§0.2).
* Gibbs-SS-Noisy moments (§2.4a): ε/2 releases the C(d+4, 4) − 1 unique sums Σᵢ x̃ᵢ^{⊗4} (1000 for d = 10),
  the other ε/2 the statistic; M̂₄ = z₄/N, M̂₂ = M̂₄[·, ·, bias, bias], K̂ = M̂₄ − M̂₂⊗M̂₂ projected PSD
  (as a (d+1)² × (d+1)² matrix), M̂₂ projected PD. 'known' moments (§2.4b): the exact moments of the
  public design x ~ N(0, I_d) clamped at ±B_x (censored normal), and the full ε to the statistic.
* CLT (§2.3): s | w, σ² ≈ N(N·E[t], N·Cov[t]) with, for A = [I; wᵀ] (p × (d+1)), B = A M₂ Aᵀ, c = e_y,
      E[u uᵀ] = B + σ² c cᵀ,
      Cov(u_a u_b, u_c u_e) = (A⊗⁴K)_{abce} + σ²(B_ac c_b c_e + B_ae c_b c_c + B_bc c_a c_e + B_be c_a c_c)
                              + 2σ⁴ c_a c_b c_c c_e,
  the §2.3 list in one formula (Isserlis over the Gaussian e; A⊗⁴ M₄ − B⊗B = A⊗⁴ K).
* Gibbs (§2.5), state (w, σ², ω²), one sweep:
      S1  s | w, σ², ω², z: prior N(m, S) from the CLT, observation z = s + N(0, diag ω²), drawn by
          Matheron's rule s = s₀ + S G⁻¹(z − s₀ − v₀), s₀ ~ N(m, S), v₀ ~ N(0, Ω), G = S + Ω; redrawn up
          to `redraws` times until the Gram matrix Ĝ(s) (bias entry N) is PD, then Ĝ is PSD-projected
          (a counted fallback) and s is read back from it;
      S2  (w, σ²) | s: Λ_n = Λ₀ + XX, μ_n = Λ_n⁻¹Xy, a_n = a₀ + N/2, b_n = b₀ + ½(yy − μ_nᵀXy),
          σ² ~ InvGamma(a_n, b_n), w ~ N(μ_n, σ²Λ_n⁻¹);
      S3  ω_c² | s, z: 1/ω_c² ~ InverseGaussian(1/(b|z_c − s_c|), 1/b²) (Laplace only; the Gaussian
          mechanism's Ω = σ_G² I is known).
  θ = (w, softplus⁻¹(σ²)) is recorded after S2, every `thin`-th sweep.
* Noise-naive SS (§2.6): the NIG update applied to z itself (full ε), Ĝ(z) PSD-projected; exact draws.

Arrays are float64 throughout; the sampler is one `lax.scan` program vmapped over chains and simulations.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions.transforms import SoftplusTransform
from scipy import special

from ..util.keys import as_key
from .bernstein_sheldon import GibbsPosterior, chain_mixing
from .mechanisms import MECHANISMS, NEIGHBOURING, check_choice, check_epsilon, check_integers, noise_scale
from .primitives import mixing_variance, project_psd

__all__ = [
    "Release", "Gibbs", "NIGPrior", "Released", "NIGPosterior",
    "statistic_sensitivity", "moment_sensitivity", "sufficient_statistics",
    "known_moments", "noisy_moments", "clt_factor", "clt_moments", "release_statistics", "gibbs_sample", "nig_parameters",
    "bs2019_posterior", "bs2019_batch", "naive_ss_posterior", "naive_ss_batch",
]

MOMENTS = ("noisy", "known")
MODEL = "linreg-10d"
"""The benchmark model whose prior (NIGPrior's defaults), design (bias column last) and θ space this method has."""


@dataclasses.dataclass(frozen=True)
class Release:
    """How the statistics are released: fixed before seeing data (baselines.md §0.2, §2.2, §6.2–6.6).

    bound_x, bound_y: clamping bounds B_x, B_y (defaults (3, 4): Δ₁ = 665 for d = 10);
    mechanism: "laplace" (pure ε) or "gaussian" (analytic Gaussian at (ε, δ)); neighbouring:
    "add-remove" (N public) or "substitute"; moments: "noisy" (Gibbs-SS-Noisy: half the budget releases
    the fourth moments) or "known" (censored N(0, I) design moments, full budget to the statistic).
    """

    bound_x: float = 3.0
    bound_y: float = 4.0
    mechanism: str = "laplace"
    neighbouring: str = "add-remove"
    moments: str = "noisy"

    def __post_init__(self):
        for name in ("bound_x", "bound_y"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} is {value!r}; it must be a finite positive number fixed before seeing data")
        for name, allowed in (("mechanism", MECHANISMS), ("neighbouring", NEIGHBOURING), ("moments", MOMENTS)):
            check_choice(name, getattr(self, name), allowed)


@dataclasses.dataclass(frozen=True)
class Gibbs:
    """Chain settings: `chains` chains of `warmup` (rounded up to a multiple of thin) + `draws`·`thin` sweeps,
    keeping every `thin`-th θ; `redraws` tries of S1 before the PSD-projection fallback (§2.5: 10).

    The defaults (4 × 1500 sweeps, 2000 kept draws) cost 3.5–5 s per 10D simulation on a 2-core CPU
    (docs/results.md; redraws=1 about halves it, since at DP noise levels the redraws all fail);
    baselines.md §6.7 recommends 4 × (2000 + 5000) sweeps, about 5× the cost.
    """

    chains: int = 4
    warmup: int = 500
    draws: int = 500
    thin: int = 2
    redraws: int = 10

    def __post_init__(self):
        check_integers(self, {"chains": 1, "warmup": 0, "draws": 4, "thin": 1, "redraws": 1})


@dataclasses.dataclass(frozen=True)
class NIGPrior:
    """σ² ~ InvGamma(shape a0, rate b0); w | σ² ~ N(0, prior_scale² σ² I): the linreg-10d prior."""

    a0: float = 20.0
    b0: float = 0.5
    prior_scale: float = 2.0


class Released(NamedTuple):
    """What the method keeps after the release (arrays may carry a leading simulation axis).

    z (D,): noisy Gram components; scale (): Laplace b or Gaussian σ_G of the statistic's noise;
    second (d+1, d+1): M̂₂ (PD); factor ((d+1)², r), r = (d+1)(d+2)/2: K̂ = M̂₄ − M̂₂⊗M̂₂ = F Fᵀ as a
    (d+1)² × (d+1)² PSD matrix (K̂ is symmetric in each index pair, so its rank is at most r); n (): N.
    """

    z: jax.Array
    scale: jax.Array
    second: jax.Array
    factor: jax.Array
    n: jax.Array


# ---------------------------------------------------------------- index layouts and sensitivities


@functools.lru_cache(maxsize=None)
def _pairs(d: int) -> tuple[np.ndarray, np.ndarray]:
    """The D = p(p+1)/2 − 1 released Gram entries (a_c, b_c), a ≤ b, of u = (x̃, y), without (bias, bias)."""
    a, b = np.triu_indices(d + 2)
    keep = ~((a == d) & (b == d))
    return a[keep], b[keep]


@functools.lru_cache(maxsize=None)
def _quartets(d: int) -> np.ndarray:
    """The C(d+4, 4) − 1 multisets (i ≤ j ≤ k ≤ l) of x̃ indices without the all-bias one, (Q, 4)."""
    return np.array([q for q in itertools.combinations_with_replacement(range(d + 1), 4) if q != (d,) * 4])


@functools.lru_cache(maxsize=None)
def _quartet_tensor_index(d: int) -> np.ndarray:
    """For every (i, j, k, l) ∈ [d+1]⁴, its quartet's row in `_quartets(d)`, or Q for the all-bias entry."""
    position = {tuple(q): r for r, q in enumerate(_quartets(d))}
    grid = np.sort(np.stack(np.meshgrid(*[np.arange(d + 1)] * 4, indexing="ij"), -1).reshape(-1, 4), axis=1)
    index = np.array([position.get(tuple(q), len(position)) for q in grid])
    return index.reshape((d + 1,) * 4)


def _component_bounds(indices: np.ndarray, d: int, bound_x: float, bound_y: float) -> tuple[np.ndarray, np.ndarray]:
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


def _sensitivity(sup: np.ndarray, ranges: np.ndarray, neighbouring: str, norm: int) -> float:
    check_choice("neighbouring", neighbouring, NEIGHBOURING)
    if norm not in (1, 2):
        raise ValueError(f"norm is {norm!r}; it must be 1 or 2")
    per = sup if neighbouring == "add-remove" else ranges
    return float(np.sum(per) if norm == 1 else np.sqrt(np.sum(per**2)))


def statistic_sensitivity(d: int, bound_x: float, bound_y: float, *, neighbouring: str = "add-remove",
                          norm: int = 1) -> float:
    """Δ of the Gram components t(u) (§2.2).

    add-remove: sup_u ‖t(u)‖ (exact: every |t_c| peaks at the same corner), e.g. Δ₁ = C(d,2)B_x² + dB_x² +
    dB_x + dB_xB_y + B_y + B_y² (665 for d = 10, (3, 4)); substitute: ‖(range t_c)_c‖, an upper bound of
    sup_{u,u'} ‖t(u) − t(u')‖ (1224 for the L1 norm).
    """
    sup, ranges = _component_bounds(np.stack(_pairs(d), 1), d, bound_x, bound_y)
    return _sensitivity(sup, ranges, neighbouring, norm)


def moment_sensitivity(d: int, bound_x: float, *, neighbouring: str = "add-remove", norm: int = 1) -> float:
    """Δ of the fourth-moment components Π x̃_{q} (§2.4a): add-remove Δ₁ = Σ_{k=1}^{4} C(d+k−1, k) B_x^k
    (64 380 for d = 10, B_x = 3); substitute: the norm of the component ranges (an upper bound)."""
    sup, ranges = _component_bounds(_quartets(d), d, bound_x, 1.0)
    return _sensitivity(sup, ranges, neighbouring, norm)


# ---------------------------------------------------------------- statistics and moments


def _clamp(X: jax.Array, y: jax.Array, release: Release) -> jax.Array:
    """u = (clip(x, ±B_x), 1, clip(y, ±B_y)) per record: X (N, d+1) with the bias last, y (N,) → (N, p)."""
    x = jnp.clip(X[..., :-1], -release.bound_x, release.bound_x)
    return jnp.concatenate([x, X[..., -1:], jnp.clip(y, -release.bound_y, release.bound_y)[..., None]], axis=-1)


def sufficient_statistics(u: jax.Array) -> jax.Array:
    """The released Gram components Σᵢ u_{i,a} u_{i,b}, (a, b) in `_pairs`: u (N, p) → (D,)."""
    a, b = _pairs(u.shape[-1] - 2)
    return jnp.einsum("na,nb->ab", u, u)[a, b]


def _fourth_sums(x: jax.Array) -> jax.Array:
    """Σᵢ Π_{r} x̃_{i,q_r} for the quartets q of `_quartets`: x̃ (N, d+1) → (Q,), via the Gram of pair products."""
    d = x.shape[-1] - 1
    i, j = np.triu_indices(d + 1)
    slot = np.zeros((d + 1, d + 1), int)
    slot[i, j] = np.arange(len(i))
    products = x[:, i] * x[:, j]
    gram = products.T @ products
    q = _quartets(d)
    return gram[slot[q[:, 0], q[:, 1]], slot[q[:, 2], q[:, 3]]]


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
    d = int(round(_quartet_d(z4.shape[-1])))
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
    raw = np.array([1.0, 0.0, inner - 2 * B * pdf + 2 * B**2 * tail, 0.0,
                    3 * inner - 2 * (B**3 + 3 * B) * pdf + 2 * B**4 * tail])
    grid = np.stack(np.meshgrid(*[np.arange(d + 1)] * 4, indexing="ij"), -1)
    counts = np.stack([np.sum(grid == j, axis=-1) for j in range(d)], -1)  # the bias contributes factors 1
    m4 = np.prod(raw[counts], axis=-1)
    with jax.ensure_compile_time_eval(), jax.enable_x64(True):
        second, factor = _moments_from_tensor(jnp.asarray(m4, jnp.float64))
        return np.asarray(second), np.asarray(factor)


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
    a, b = _pairs(k - 1)
    A = jnp.concatenate([jnp.eye(k, dtype=w.dtype), w[None]], axis=0)
    c = jnp.zeros(k + 1, w.dtype).at[-1].set(1.0)
    mean = (A @ second @ A.T + sigma2 * jnp.outer(c, c))[a, b]
    F = factor.reshape(k, k, -1)
    F = jnp.concatenate([F, jnp.einsum("i,ijr->jr", w, F)[None]], axis=0)          # (p, k, r)
    F = jnp.concatenate([F, jnp.einsum("j,ajr->ar", w, F)[:, None]], axis=1)       # (p, p, r)
    AL = A @ jnp.linalg.cholesky(second)                                           # (p, k)
    H = AL[a] * c[b][:, None] + c[a][:, None] * AL[b]
    W = jnp.concatenate([F[a, b], jnp.sqrt(sigma2) * H, (jnp.sqrt(2.0) * sigma2 * c[a] * c[b])[:, None]], axis=1)
    return mean, W


def clt_moments(w, sigma2, second, factor) -> tuple[np.ndarray, np.ndarray]:
    """Per-record mean (D,) and covariance (D, D) = W Wᵀ of t(u) (`clt_factor`), float64 numpy arrays."""
    with jax.enable_x64(True):
        w, sigma2, second, factor = (jnp.asarray(a, jnp.float64) for a in (w, sigma2, second, factor))
        mean, W = clt_factor(w, sigma2, second, factor)
        return np.asarray(mean), np.asarray(W @ W.T)


def _gram(s: jax.Array, n, d: int) -> jax.Array:
    """Ĝ (p, p) from the D components s, with Ĝ[bias, bias] = N (a gather: scatters are slow under vmap)."""
    return jnp.concatenate([s, jnp.asarray(n, s.dtype)[None]])[_gram_index(d)]


@functools.lru_cache(maxsize=None)
def _gram_index(d: int) -> np.ndarray:
    """(p, p) positions of the Gram entries in (s, N): component c at (a_c, b_c) and (b_c, a_c), N at (bias, bias)."""
    a, b = _pairs(d)
    index = np.full((d + 2, d + 2), len(a))
    index[a, b] = index[b, a] = np.arange(len(a))
    return index


def nig_parameters(G: jax.Array, n, prior: NIGPrior) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The NIG update from an augmented Gram matrix G = [[XX, Xy], [Xyᵀ, yy]] (p, p) of N records:
    returns μ_n (d+1,), chol(Λ_n) (d+1, d+1), a_n, b_n with Λ_n = Λ₀ + XX, μ_n = Λ_n⁻¹Xy,
    a_n = a₀ + N/2, b_n = b₀ + ½(yy − μ_nᵀXy)."""
    XX, Xy, yy = G[:-1, :-1], G[:-1, -1], G[-1, -1]
    k = XX.shape[0]
    L = jnp.linalg.cholesky(XX + jnp.eye(k, dtype=G.dtype) / prior.prior_scale**2)
    mu = jax.scipy.linalg.cho_solve((L, True), Xy)
    return mu, L, prior.a0 + 0.5 * n, prior.b0 + 0.5 * (yy - mu @ Xy)


def _nig_draw(key, mu, L, a_n, b_n, shape=()) -> tuple[jax.Array, jax.Array]:
    """σ² ~ InvGamma(a_n, b_n) (*shape) and w ~ N(μ_n, σ²Λ_n⁻¹) (*shape, d+1), Λ_n = L Lᵀ."""
    k_g, k_w = jax.random.split(key)
    sigma2 = b_n / jax.random.gamma(k_g, a_n, shape, mu.dtype)
    xi = jax.random.normal(k_w, shape + mu.shape, mu.dtype)
    solved = jax.scipy.linalg.solve_triangular(L.T, xi.reshape(-1, mu.shape[0]).T, lower=False).T
    return mu + jnp.sqrt(sigma2)[..., None] * solved.reshape(xi.shape), sigma2


def _theta(w: jax.Array, sigma2: jax.Array) -> jax.Array:
    """θ = (w, softplus⁻¹(σ²)), (…, d+2): the model's unconstrained space."""
    return jnp.concatenate([w, SoftplusTransform().inv(sigma2)[..., None]], axis=-1)


# ---------------------------------------------------------------- release


def _noise_scale(release: Release, epsilon: float, delta: float, d: int, which: str) -> tuple[float, float]:
    """(noise scale, sensitivity) of one release: Laplace b = Δ₁/ε or Gaussian σ_G(ε, δ, Δ₂)."""
    if which == "statistic":
        l1, l2 = (statistic_sensitivity(d, release.bound_x, release.bound_y, neighbouring=release.neighbouring,
                                        norm=norm) for norm in (1, 2))
    else:
        l1, l2 = (moment_sensitivity(d, release.bound_x, neighbouring=release.neighbouring, norm=norm)
                  for norm in (1, 2))
    scale, _ = noise_scale(release.mechanism, l1=l1, l2=l2, epsilon=epsilon, delta=delta)
    return scale, l1 if release.mechanism == "laplace" else l2


def _budget(release: Release, epsilon: float, delta: float) -> tuple[float, float]:
    """(ε, δ) per release: halves for the two releases of Gibbs-SS-Noisy (basic composition), else all."""
    return (epsilon / 2, delta / 2) if release.moments == "noisy" else (epsilon, delta)


def _release_facts(release: Release, epsilon: float, delta: float, d: int) -> dict[str, Any]:
    """The privacy parameters actually spent, for diagnostics."""
    eps, dlt = _budget(release, epsilon, delta)
    scale, sensitivity = _noise_scale(release, eps, dlt, d, "statistic")
    facts = {"mechanism": release.mechanism, "neighbouring": release.neighbouring, "moments": release.moments,
             "epsilon": float(epsilon), "delta": float(delta) if release.mechanism == "gaussian" else 0.0,
             "bounds": (release.bound_x, release.bound_y), "statistic_epsilon": eps,
             "statistic_sensitivity": sensitivity, "statistic_noise_scale": scale,
             "sensitivity_norm": "L1" if release.mechanism == "laplace" else "L2"}
    if release.moments == "noisy":
        m_scale, m_sensitivity = _noise_scale(release, eps, dlt, d, "moments")
        facts |= {"moment_epsilon": eps, "moment_sensitivity": m_sensitivity, "moment_noise_scale": m_scale}
    return facts


@functools.partial(jax.jit, static_argnames=("release", "scale", "moment_scale"))
def _release_one(key, X, y, *, release: Release, scale: float, moment_scale: float) -> Released:
    u = _clamp(X, y, release)
    d = u.shape[-1] - 2
    k_s, k_m = jax.random.split(key)
    s = sufficient_statistics(u)
    noise = (jax.random.laplace if release.mechanism == "laplace" else jax.random.normal)
    z = s + scale * noise(k_s, s.shape, s.dtype)
    n = jnp.asarray(X.shape[0], X.dtype)
    if release.moments == "noisy":
        sums = _fourth_sums(u[:, :-1])
        second, factor = noisy_moments(sums + moment_scale * noise(k_m, sums.shape, sums.dtype), n)
    else:
        second, factor = (jnp.asarray(m) for m in known_moments(d, release.bound_x))
    return Released(z, jnp.asarray(scale, X.dtype), second, factor, n)


def release_statistics(key, X, y, *, epsilon: float, delta: float = 1e-5, release: Release = Release()) -> Released:
    """The DP release of one data set: X (N, d+1) with the bias column last, y (N,) → `Released`.

    The only function that reads the data; everything after it is post-processing.
    """
    X, y = _check_data(X, y)
    check_epsilon(epsilon)
    d = X.shape[-1] - 1
    eps, dlt = _budget(release, epsilon, delta)
    scale = _noise_scale(release, eps, dlt, d, "statistic")[0]
    moment_scale = _noise_scale(release, eps, dlt, d, "moments")[0] if release.moments == "noisy" else 0.0
    with jax.enable_x64(True):
        return _release_one(as_key(key), jnp.asarray(X, jnp.float64), jnp.asarray(y, jnp.float64),
                            release=release, scale=scale, moment_scale=moment_scale)


def _check_data(X, y) -> tuple[np.ndarray, np.ndarray]:
    X, y = np.asarray(X), np.asarray(y)
    if X.ndim < 2 or X.shape[-1] < 2 or y.shape != X.shape[:-1]:
        raise ValueError(f"X must be (N, d+1) with the bias column last and y (N,); got X {X.shape}, y {y.shape}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise ValueError("X and y must be finite")
    if not np.all(X[..., -1] == 1):
        raise ValueError("the last column of X must be the bias column, all ones (the model's design)")
    return X, y


# ---------------------------------------------------------------- the Gibbs sampler


class _State(NamedTuple):
    w: jax.Array        # (d+1,)
    sigma2: jax.Array   # ()
    omega2: jax.Array   # (D,)
    fallbacks: jax.Array  # () sweeps that ended in the PSD projection
    redraws: jax.Array    # () S1 redraws beyond the first


def _sweep(key, state: _State, r: Released, *, prior: NIGPrior, gaussian: bool, redraws: int) -> _State:
    """One Gibbs sweep S1 → S2 → S3 (module docstring)."""
    d = r.second.shape[0] - 1
    k1, k2, k3 = jax.random.split(key, 3)
    mean, W = clt_factor(state.w, state.sigma2, r.second, r.factor)
    m, W = r.n * mean, jnp.sqrt(r.n) * W
    S = W @ W.T
    L_G = jnp.linalg.cholesky(S + jnp.diag(state.omega2))

    def draw(k):  # Matheron: s₀ ~ N(m, S), v₀ ~ N(0, Ω), s = s₀ + S G⁻¹(z − s₀ − v₀); valid if Ĝ(s) is PD
        ka, kb = jax.random.split(k)
        s0 = m + W @ jax.random.normal(ka, W.shape[1:], m.dtype)
        v0 = jnp.sqrt(state.omega2) * jax.random.normal(kb, m.shape, m.dtype)
        s = s0 + S @ jax.scipy.linalg.cho_solve((L_G, True), r.z - s0 - v0)
        return s, jnp.all(jnp.isfinite(jnp.linalg.cholesky(_gram(s, r.n, d))))

    def retry(carry):
        k, _, _, tries = carry
        k, sub = jax.random.split(k)
        return (k, *draw(sub), tries + 1)

    # the retry and projection loops run only while some lane needs them (a select would always pay)
    _, s, valid, tries = jax.lax.while_loop(lambda c: (~c[2]) & (c[3] < redraws), retry,
                                            (k2, *draw(k1), jnp.ones((), jnp.int64)))
    G = jax.lax.while_loop(lambda c: ~c[1], lambda c: (project_psd(c[0]), True), (_gram(s, r.n, d), valid))[0]
    a, b = _pairs(d)
    s = G[a, b]
    k_nig, k_omega = jax.random.split(k3)
    w, sigma2 = _nig_draw(k_nig, *nig_parameters(G, r.n, prior))
    if gaussian:
        omega2 = state.omega2
    else:  # 1/ω² ~ IG(μ = 1/(b|z − s|), λ = 1/b²)
        omega2 = mixing_variance(k_omega, r.z - s, r.scale)
    return _State(w, sigma2, omega2, state.fallbacks + (~valid), state.redraws + tries - 1)


def _init(key, r: Released, prior: NIGPrior, gaussian: bool) -> _State:
    """(w, σ²) from the prior, ω_c² ~ Exp(mean 2b²) (Laplace) or σ_G² (Gaussian) (§2.5)."""
    k_s, k_w, k_o = jax.random.split(key, 3)
    dtype = r.z.dtype
    sigma2 = prior.b0 / jax.random.gamma(k_s, prior.a0, (), dtype)
    w = prior.prior_scale * jnp.sqrt(sigma2) * jax.random.normal(k_w, (r.second.shape[0],), dtype)
    if gaussian:
        omega2 = jnp.full(r.z.shape, r.scale**2)
    else:
        omega2 = 2.0 * r.scale**2 * jax.random.exponential(k_o, r.z.shape, dtype)
    zero = jnp.zeros((), jnp.int64)
    return _State(w, sigma2, omega2, zero, zero)


def _chain(key, r: Released, *, gibbs: Gibbs, prior: NIGPrior, gaussian: bool):
    """One chain of ⌈warmup/thin⌉ + draws blocks of `thin` sweeps (one compiled sweep): θ after each kept
    block (draws, d+2), and the fallbacks and redraws of the kept blocks and of the whole chain."""
    sweep = functools.partial(_sweep, r=r, prior=prior, gaussian=gaussian, redraws=gibbs.redraws)
    k_init, k_run = jax.random.split(key)

    def block(state, k):
        state = jax.lax.fori_loop(0, gibbs.thin, lambda t, s: sweep(jax.random.fold_in(k, t), s), state)
        return state, (_theta(state.w, state.sigma2), state.fallbacks,
                       state.redraws)

    warm = _warmup_blocks(gibbs)
    state, (thetas, fallbacks, redraws) = jax.lax.scan(block, _init(k_init, r, prior, gaussian),
                                                       jax.random.split(k_run, warm + gibbs.draws))
    before = (lambda a: a[warm - 1]) if warm else (lambda a: jnp.zeros_like(a[0]))
    return thetas[warm:], fallbacks[-1] - before(fallbacks), redraws[-1] - before(redraws), fallbacks[-1]


def _warmup_blocks(gibbs: Gibbs) -> int:
    """Warm-up blocks of `thin` sweeps: the warm-up rounded up to a multiple of thin."""
    return -(-gibbs.warmup // gibbs.thin)


@functools.partial(jax.jit, static_argnames=("gibbs", "prior", "gaussian"))
def _sample_batch(keys, r: Released, *, gibbs: Gibbs, prior: NIGPrior, gaussian: bool):
    """keys (M, chains); r with a leading M axis → θ (M, chains, draws, d+2) and counts (M, chains)."""
    chain = functools.partial(_chain, gibbs=gibbs, prior=prior, gaussian=gaussian)
    return jax.vmap(jax.vmap(chain, in_axes=(0, None)))(keys, r)


def gibbs_sample(keys, released: Released, *, gibbs: Gibbs = Gibbs(), prior: NIGPrior = NIGPrior(),
                 mechanism: str = "laplace") -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Run the Gibbs sampler on M releases at once: keys (M,) PRNG keys, released fields with a leading
    M axis → θ draws (M, chains, draws, d+2) in the unconstrained space and per-chain counts (M, chains):
    fallbacks (kept phase), redraws (kept phase), all_fallbacks (warm-up included)."""
    with jax.enable_x64(True):
        keys = jax.vmap(lambda k: jax.random.split(k, gibbs.chains))(keys)
        r = Released(*(jnp.asarray(f, jnp.float64) for f in released))
        thetas, fallbacks, redraws, total = _sample_batch(keys, r, gibbs=gibbs, prior=prior,
                                                          gaussian=mechanism == "gaussian")
        return np.asarray(thetas), {"fallbacks": np.asarray(fallbacks), "redraws": np.asarray(redraws),
                                    "all_fallbacks": np.asarray(total)}


# ---------------------------------------------------------------- posteriors


@dataclasses.dataclass(frozen=True)
class NIGPosterior:
    """An exact NIG posterior (μ_n, chol Λ_n, a_n, b_n) sampled in the unconstrained space (naive SS)."""

    mu: np.ndarray
    chol: np.ndarray
    a_n: float
    b_n: float
    diagnostics: Mapping[str, Any]
    method: str = "bs2019-naive"

    def sample(self, key, n: int) -> np.ndarray:
        """n draws (n, d+2) of θ = (w, softplus⁻¹(σ²))."""
        with jax.enable_x64(True):
            return np.asarray(_theta(*_nig_draw(as_key(key), jnp.asarray(self.mu), jnp.asarray(self.chol),
                                                jnp.asarray(self.a_n), jnp.asarray(self.b_n), (n,))))


# ---------------------------------------------------------------- public API


def _split_options(options: Mapping[str, Any]) -> tuple[Release, Gibbs, NIGPrior]:
    """Flat keyword options → (Release, Gibbs, NIGPrior); an unknown name raises."""
    groups = {cls: {f.name for f in dataclasses.fields(cls)} for cls in (Release, Gibbs, NIGPrior)}
    unknown = sorted(set(options) - set().union(*groups.values()))
    if unknown:
        raise ValueError(f"unknown options {unknown}: choose from {sorted(set().union(*groups.values()))}")
    return tuple(cls(**{k: v for k, v in options.items() if k in names}) for cls, names in groups.items())


def _posteriors(thetas, counts, gibbs: Gibbs, facts: dict) -> list[GibbsPosterior]:
    out = []
    sweeps = gibbs.chains * gibbs.draws * gibbs.thin
    for m in range(thetas.shape[0]):
        mixing = chain_mixing(thetas[m])
        diagnostics = {
            **mixing, "iat_sweeps": mixing["iat_draws"] * gibbs.thin,
            "fallbacks": int(counts["fallbacks"][m].sum()),
            "fallback_rate": float(counts["fallbacks"][m].sum() / sweeps),
            "warmup_fallbacks": int(counts["all_fallbacks"][m].sum() - counts["fallbacks"][m].sum()),
            "redraws": int(counts["redraws"][m].sum()),
            "chains": gibbs.chains, "warmup": _warmup_blocks(gibbs) * gibbs.thin, "draws": gibbs.draws,
            "thin": gibbs.thin, **facts,
        }
        out.append(GibbsPosterior(thetas[m], diagnostics, method="bs2019"))
    return out


def bs2019_posterior(X, y, *, epsilon: float, delta: float = 1e-5, key=0, **options) -> GibbsPosterior:
    """B&S 2019 Gibbs-SS-Noisy (or -Known) posterior of one data set: X (N, d+1) bias last, y (N,).

    options: Release fields (bound_x, bound_y, mechanism, neighbouring, moments), Gibbs fields (chains,
    warmup, draws, thin, redraws) and NIGPrior fields (a0, b0, prior_scale).
    """
    rel, gibbs, prior = _split_options(options)
    k_release, k_gibbs = jax.random.split(as_key(key))
    r = release_statistics(k_release, X, y, epsilon=epsilon, delta=delta, release=rel)
    thetas, counts = gibbs_sample(k_gibbs[None], jax.tree.map(lambda a: a[None], r), gibbs=gibbs, prior=prior,
                                  mechanism=rel.mechanism)
    return _posteriors(thetas, counts, gibbs, _release_facts(rel, epsilon, delta, X.shape[-1] - 1))[0]


def _sims_data(sims) -> tuple[np.ndarray, np.ndarray]:
    """X (M, N, d+1) and y (M, N) of simulations of MODEL at a finite ε; a clear ValueError otherwise."""
    if sims.model.name != MODEL:
        raise ValueError(f"B&S 2019 is the baseline of the linear regression {MODEL!r} (its prior, design and θ "
                         f"space); the simulations are of {sims.model.name!r}")
    if sims.epsilon is None:
        raise ValueError("B&S 2019 releases at the coverage run's ε; this run was given a noise multiplier only")
    check_epsilon(sims.epsilon)
    data = sims.data
    if "X" not in data or "y" not in data:
        raise ValueError(f"B&S 2019 needs regression data with 'X' and 'y'; the simulations hold {sorted(data)}")
    X, y = np.asarray(data["X"], np.float64), np.asarray(data["y"], np.float64)
    if X.ndim != 3 or y.shape != X.shape[:2]:
        raise ValueError(f"expected X (M, N, d+1) and y (M, N); got {X.shape} and {y.shape}")
    return X, y


def bs2019_batch(sims, key, *, chunk: int = 50, **options) -> list[GibbsPosterior]:
    """BatchMethod for `na.coverage`: release each simulation's statistics from sims.data at
    (sims.epsilon, sims.delta), then Gibbs for `chunk` simulations at a time in one compiled program
    (the last chunk padded to the same shape). options: as `bs2019_posterior`."""
    rel, gibbs, prior = _split_options(options)
    X, y = _sims_data(sims)
    for m in range(X.shape[0]):
        _check_data(X[m], y[m])
    count = X.shape[0]
    k_release, k_gibbs = jax.random.split(as_key(key))
    release_keys, gibbs_keys = jax.random.split(k_release, count), jax.random.split(k_gibbs, count)
    facts = _release_facts(rel, sims.epsilon, sims.delta, X.shape[-1] - 1)
    out: list[GibbsPosterior] = []
    for first in range(0, count, chunk):
        index = np.arange(first, first + chunk) % count if count > chunk else np.arange(count)
        rs = [release_statistics(release_keys[m], X[m], y[m], epsilon=sims.epsilon, delta=sims.delta, release=rel) for m in index]
        r = Released(*(np.stack([np.asarray(f) for f in field]) for field in zip(*rs)))
        thetas, counts = gibbs_sample(gibbs_keys[index], r, gibbs=gibbs, prior=prior, mechanism=rel.mechanism)
        keep = min(chunk, count - first)
        out += _posteriors(thetas[:keep], jax.tree.map(lambda a: a[:keep], counts), gibbs, facts)
    return out


def naive_ss_posterior(X, y, *, epsilon: float, delta: float = 1e-5, key=0, **options) -> NIGPosterior:
    """Noise-naive SS (§2.6): z at the full (ε, δ), the NIG update of the PSD-projected Ĝ(z) as if exact.

    options: Release fields except moments (none are needed), NIGPrior fields."""
    rel, _, prior = _split_options(options)
    if set(options) & {f.name for f in dataclasses.fields(Gibbs)}:
        raise ValueError("the naive SS posterior is exact: it takes no Gibbs options")
    rel = dataclasses.replace(rel, moments="known")  # the whole budget to the statistic; moments are unused
    r = release_statistics(key, X, y, epsilon=epsilon, delta=delta, release=rel)
    d = X.shape[-1] - 1
    with jax.enable_x64(True):
        G = project_psd(_gram(r.z, r.n, d))
        mu, L, a_n, b_n = nig_parameters(G, r.n, prior)
    facts = _release_facts(rel, epsilon, delta, d)
    facts["moments"] = "none"
    return NIGPosterior(np.asarray(mu), np.asarray(L), float(a_n), float(b_n), facts)


def naive_ss_batch(sims, key, **options) -> list[NIGPosterior]:
    """BatchMethod for the noise-naive SS baseline (one exact NIG posterior per simulation)."""
    X, y = _sims_data(sims)
    keys = jax.random.split(as_key(key), X.shape[0])
    return [naive_ss_posterior(X[m], y[m], epsilon=sims.epsilon, delta=sims.delta, key=keys[m], **options)
            for m in range(X.shape[0])]
