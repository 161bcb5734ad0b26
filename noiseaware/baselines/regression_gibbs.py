"""B&S 2019 Gibbs-SS-Noisy, linear regression: the NIG update and the sampler (docs/baselines.md §2.5).

Model: σ² ~ InvGamma(a₀, b₀), w | σ² ~ N(0, σ²Λ₀⁻¹), Λ₀ = I/prior_scale², y = wᵀx̃ + N(0, σ²).
Gibbs, state (w, σ², ω²), one sweep:
    S1  s | w, σ², ω², z: prior N(m, S) from the CLT, observation z = s + N(0, diag ω²), drawn by
        Matheron's rule s = s₀ + S G⁻¹(z − s₀ − v₀), s₀ ~ N(m, S), v₀ ~ N(0, Ω), G = S + Ω; redrawn up
        to `redraws` times until the Gram matrix Ĝ(s) (bias entry N) is PD, then Ĝ is PSD-projected
        (a counted fallback) and s is read back from it;
    S2  (w, σ²) | s: Λ_n = Λ₀ + XX, μ_n = Λ_n⁻¹Xy, a_n = a₀ + N/2, b_n = b₀ + ½(yy − μ_nᵀXy),
        σ² ~ InvGamma(a_n, b_n), w ~ N(μ_n, σ²Λ_n⁻¹);
    S3  ω_c² | s, z: 1/ω_c² ~ InverseGaussian(1/(b|z_c − s_c|), 1/b²) (Laplace only; the Gaussian
        mechanism's Ω = σ_G² I is known).
θ = (w, softplus⁻¹(σ²)) (d+2,) is recorded after S2, every `thin`-th sweep. Float64 throughout; the sampler
is one `lax.scan` program vmapped over chains and data sets.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions.transforms import SoftplusTransform

from ..trace.sites import SiteSpec
from ..util.checks import positive_float, positive_int
from .primitives import mixing_variance, project_psd
from .regression_moments import clt_factor, gram, pairs
from .regression_release import Released

__all__ = [
    "NIGPrior",
    "RegressionGibbs",
    "gibbs_sample",
    "nig_draw",
    "nig_parameters",
    "theta_names",
    "theta_of",
    "theta_sites",
    "warmup_sweeps",
]


@dataclasses.dataclass(frozen=True)
class NIGPrior:
    """σ² ~ InvGamma(shape a0, rate b0); w | σ² ~ N(0, prior_scale² σ² I): the linreg-10d prior."""

    a0: float = 20.0
    b0: float = 0.5
    prior_scale: float = 2.0

    def __post_init__(self):
        for name in ("a0", "b0", "prior_scale"):
            positive_float(name, getattr(self, name))


@dataclasses.dataclass(frozen=True)
class RegressionGibbs:
    """Chain settings: `chains` chains of `warmup` (rounded up to a multiple of thin) + `draws`·`thin` sweeps,
    keeping every `thin`-th θ; `redraws` tries of S1 before the PSD-projection fallback (§2.5: 10).

    The defaults (4 × 1500 sweeps, 2000 kept draws) cost 3.5–5 s per 10D simulation on a 2-core CPU
    (docs/results.md; redraws=1 about halves it, since at DP noise levels the redraws all fail);
    docs/baselines.md §6.7 recommends 4 × (2000 + 5000) sweeps, about 5× the cost.
    """

    chains: int = 4
    warmup: int = 500
    draws: int = 500
    thin: int = 2
    redraws: int = 10

    def __post_init__(self):
        for name, minimum in {"chains": 1, "warmup": 0, "draws": 4, "thin": 1, "redraws": 1}.items():
            positive_int(name, getattr(self, name), minimum=minimum)


def warmup_sweeps(gibbs: RegressionGibbs) -> int:
    """The warm-up sweeps run: `warmup` rounded up to a multiple of thin."""
    return -(-gibbs.warmup // gibbs.thin) * gibbs.thin


def theta_names(d: int) -> tuple[str, ...]:
    """Labels of θ = (w, softplus⁻¹(σ²)) (d+2,), as linreg-10d's site map labels them."""
    return tuple(f"w[{j}]" for j in range(d + 1)) + ("sigma2",)


def theta_sites(d: int) -> tuple[SiteSpec, SiteSpec]:
    """The sites θ = (w, softplus⁻¹(σ²)) maps to, w (d+1,) and σ² > 0, as linreg-10d's site map has them."""
    return SiteSpec("w", (d + 1,), "identity"), SiteSpec("sigma2", (), "softplus")


def theta_of(w: jax.Array, sigma2: jax.Array) -> jax.Array:
    """θ = (w, softplus⁻¹(σ²)), (…, d+2): the model's unconstrained space."""
    return jnp.concatenate([w, SoftplusTransform().inv(sigma2)[..., None]], axis=-1)


def nig_parameters(G: jax.Array, n, prior: NIGPrior) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The NIG update from an augmented Gram matrix G = [[XX, Xy], [Xyᵀ, yy]] (p, p) of N records:
    returns μ_n (d+1,), chol(Λ_n) (d+1, d+1), a_n, b_n with Λ_n = Λ₀ + XX, μ_n = Λ_n⁻¹Xy,
    a_n = a₀ + N/2, b_n = b₀ + ½(yy − μ_nᵀXy)."""
    XX, Xy, yy = G[:-1, :-1], G[:-1, -1], G[-1, -1]
    k = XX.shape[0]
    L = jnp.linalg.cholesky(XX + jnp.eye(k, dtype=G.dtype) / prior.prior_scale**2)
    mu = jax.scipy.linalg.cho_solve((L, True), Xy)
    return mu, L, prior.a0 + 0.5 * n, prior.b0 + 0.5 * (yy - mu @ Xy)


def nig_draw(key, mu, L, a_n, b_n, shape=()) -> tuple[jax.Array, jax.Array]:
    """σ² ~ InvGamma(a_n, b_n) (*shape) and w ~ N(μ_n, σ²Λ_n⁻¹) (*shape, d+1), Λ_n = L Lᵀ."""
    k_g, k_w = jax.random.split(key)
    sigma2 = b_n / jax.random.gamma(k_g, a_n, shape, mu.dtype)
    xi = jax.random.normal(k_w, shape + mu.shape, mu.dtype)
    solved = jax.scipy.linalg.solve_triangular(L.T, xi.reshape(-1, mu.shape[0]).T, lower=False).T
    return mu + jnp.sqrt(sigma2)[..., None] * solved.reshape(xi.shape), sigma2


# ---------------------------------------------------------------- the sampler


class _State(NamedTuple):
    w: jax.Array  # (d+1,)
    sigma2: jax.Array  # ()
    omega2: jax.Array  # (D,)
    fallbacks: jax.Array  # () sweeps that ended in the PSD projection
    redraws: jax.Array  # () S1 redraws beyond the first


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
        return s, jnp.all(jnp.isfinite(jnp.linalg.cholesky(gram(s, r.n, d))))

    def retry(carry):
        k, _, _, tries = carry
        k, sub = jax.random.split(k)
        return (k, *draw(sub), tries + 1)

    # the retry and projection loops run only while some lane needs them (a select would always pay)
    _, s, valid, tries = jax.lax.while_loop(
        lambda c: (~c[2]) & (c[3] < redraws), retry, (k2, *draw(k1), jnp.ones((), jnp.int64))
    )
    G = jax.lax.while_loop(lambda c: ~c[1], lambda c: (project_psd(c[0]), True), (gram(s, r.n, d), valid))[0]
    a, b = pairs(d)
    s = G[a, b]
    k_nig, k_omega = jax.random.split(k3)
    w, sigma2 = nig_draw(k_nig, *nig_parameters(G, r.n, prior))
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


def _chain(key, r: Released, *, gibbs: RegressionGibbs, prior: NIGPrior, gaussian: bool):
    """One chain of ⌈warmup/thin⌉ + draws blocks of `thin` sweeps (one compiled sweep): θ after each kept
    block (draws, d+2), and the fallbacks and redraws of the kept blocks and of the whole chain."""
    sweep = functools.partial(_sweep, r=r, prior=prior, gaussian=gaussian, redraws=gibbs.redraws)
    k_init, k_run = jax.random.split(key)

    def block(state, k):
        state = jax.lax.fori_loop(0, gibbs.thin, lambda t, s: sweep(jax.random.fold_in(k, t), s), state)
        return state, (theta_of(state.w, state.sigma2), state.fallbacks, state.redraws)

    warm = warmup_sweeps(gibbs) // gibbs.thin
    state, (thetas, fallbacks, redraws) = jax.lax.scan(
        block, _init(k_init, r, prior, gaussian), jax.random.split(k_run, warm + gibbs.draws)
    )
    before = (lambda a: a[warm - 1]) if warm else (lambda a: jnp.zeros_like(a[0]))
    return thetas[warm:], fallbacks[-1] - before(fallbacks), redraws[-1] - before(redraws), fallbacks[-1]


@functools.partial(jax.jit, static_argnames=("gibbs", "prior", "gaussian"))
def _sample_batch(keys, r: Released, *, gibbs: RegressionGibbs, prior: NIGPrior, gaussian: bool):
    """keys (M, chains); r with a leading M axis → θ (M, chains, draws, d+2) and counts (M, chains)."""
    chain = functools.partial(_chain, gibbs=gibbs, prior=prior, gaussian=gaussian)
    return jax.vmap(jax.vmap(chain, in_axes=(0, None)))(keys, r)


def gibbs_sample(
    keys, released: Released, *, gibbs: RegressionGibbs, prior: NIGPrior, mechanism: str
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Run the Gibbs sampler on M releases at once: keys (M,) PRNG keys (data set m's chains run on
    split(keys[m], chains)), released fields with a leading M axis → θ draws (M, chains, draws, d+2) in the
    unconstrained space and per-chain counts (M, chains): fallbacks (kept phase), redraws (kept phase),
    all_fallbacks (warm-up included)."""
    with jax.enable_x64(True):
        keys = jax.vmap(lambda k: jax.random.split(k, gibbs.chains))(keys)
        r = Released(*(jnp.asarray(f, jnp.float64) for f in released))
        thetas, fallbacks, redraws, total = _sample_batch(
            keys, r, gibbs=gibbs, prior=prior, gaussian=mechanism == "gaussian"
        )
        return np.asarray(thetas), {
            "fallbacks": np.asarray(fallbacks),
            "redraws": np.asarray(redraws),
            "all_fallbacks": np.asarray(total),
        }
