"""B&S 2019 linear regression: the DP release of the Gram statistic and the design moments (docs/baselines.md §2.2–2.4).

* Bounds fixed before seeing data (§2.2): x_j ← clip(x_j, ±B_x), y ← clip(y, ±B_y); sensitivities of the
  released monomials over that box (add-remove: sup ‖t(u)‖; substitute: the norm of the component ranges).
* z = s + noise, Laplace(Δ₁/ε_s) or analytic-Gaussian noise per component (§0.2), with (ε_s, δ_s) = (ε/2, δ/2)
  and the other half for the fourth moments under Gibbs-SS-Noisy (basic composition), or (ε, δ) with
  'known' moments.

`release_statistics` is the only function of the method that reads the data; everything after it is
post-processing of `Released`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal, NamedTuple, get_args

import jax
import jax.numpy as jnp
import numpy as np

from ..util.checks import choice, positive_float
from .mechanisms import MECHANISMS, NEIGHBOURING, Mechanism, Neighbouring, check_epsilon, keys_for, noise_scale
from .regression_moments import (
    component_bounds,
    fourth_sums,
    known_moments,
    noisy_moments,
    pairs,
    quartets,
    sufficient_statistics,
)

__all__ = [
    "MOMENTS",
    "Moments",
    "RegressionRelease",
    "Released",
    "check_data",
    "moment_sensitivity",
    "release_facts",
    "release_statistics",
    "statistic_sensitivity",
]

Moments = Literal["noisy", "known"]
MOMENTS: tuple[str, ...] = get_args(Moments)


@dataclasses.dataclass(frozen=True)
class RegressionRelease:
    """How the statistics are released: fixed before seeing data (docs/baselines.md §0.2, §2.2, §6.2–6.6).

    bound_x, bound_y: clamping bounds B_x, B_y (defaults (3, 4): Δ₁ = 665 for d = 10);
    mechanism: "laplace" (pure ε) or "gaussian" (analytic Gaussian at (ε, δ)); neighbouring:
    "add-remove" (N public) or "substitute"; moments: "noisy" (Gibbs-SS-Noisy: half the budget releases
    the fourth moments) or "known" (censored N(0, I) design moments, full budget to the statistic).
    """

    bound_x: float = 3.0
    bound_y: float = 4.0
    mechanism: Mechanism = "laplace"
    neighbouring: Neighbouring = "add-remove"
    moments: Moments = "noisy"

    def __post_init__(self):
        for name in ("bound_x", "bound_y"):
            positive_float(name, getattr(self, name), hint="a clamping bound fixed before seeing data")
        for name, allowed in (("mechanism", MECHANISMS), ("neighbouring", NEIGHBOURING), ("moments", MOMENTS)):
            choice(name, getattr(self, name), allowed)


class Released(NamedTuple):
    """What the method keeps after the release (each field with a leading axis of M data sets).

    z (D,): noisy Gram components; scale (): Laplace b or Gaussian σ_G of the statistic's noise;
    second (d+1, d+1): M̂₂ (PD); factor ((d+1)², r), r = (d+1)(d+2)/2: K̂ = M̂₄ − M̂₂⊗M̂₂ = F Fᵀ as a
    (d+1)² × (d+1)² PSD matrix (K̂ is symmetric in each index pair, so its rank is at most r); n (): N.
    """

    z: jax.Array
    scale: jax.Array
    second: jax.Array
    factor: jax.Array
    n: jax.Array


# ---------------------------------------------------------------- sensitivities


def _sensitivity(sup: np.ndarray, ranges: np.ndarray, neighbouring: str, norm: int) -> float:
    choice("neighbouring", neighbouring, NEIGHBOURING)
    choice("norm", norm, (1, 2))
    per = sup if neighbouring == "add-remove" else ranges
    return float(np.sum(per) if norm == 1 else np.sqrt(np.sum(per**2)))


def statistic_sensitivity(
    d: int, bound_x: float, bound_y: float, *, neighbouring: Neighbouring = "add-remove", norm: int = 1
) -> float:
    """Δ of the Gram components t(u) (§2.2).

    add-remove: sup_u ‖t(u)‖ (exact: every |t_c| peaks at the same corner), e.g. Δ₁ = C(d,2)B_x² + dB_x² +
    dB_x + dB_xB_y + B_y + B_y² (665 for d = 10, (3, 4)); substitute: ‖(range t_c)_c‖, an upper bound of
    sup_{u,u'} ‖t(u) − t(u')‖ (1224 for the L1 norm).
    """
    sup, ranges = component_bounds(np.stack(pairs(d), 1), d, bound_x, bound_y)
    return _sensitivity(sup, ranges, neighbouring, norm)


def moment_sensitivity(d: int, bound_x: float, *, neighbouring: Neighbouring = "add-remove", norm: int = 1) -> float:
    """Δ of the fourth-moment components Π x̃_{q} (§2.4a): add-remove Δ₁ = Σ_{k=1}^{4} C(d+k−1, k) B_x^k
    (64 380 for d = 10, B_x = 3); substitute: the norm of the component ranges (an upper bound)."""
    sup, ranges = component_bounds(quartets(d), d, bound_x, 1.0)
    return _sensitivity(sup, ranges, neighbouring, norm)


def _noise_scale(
    release: RegressionRelease, epsilon: float, delta: float | None, d: int, which: str
) -> tuple[float, float]:
    """(noise scale, sensitivity) of one release: Laplace b = Δ₁/ε or Gaussian σ_G(ε, δ, Δ₂)."""
    if which == "statistic":
        l1, l2 = (
            statistic_sensitivity(d, release.bound_x, release.bound_y, neighbouring=release.neighbouring, norm=norm)
            for norm in (1, 2)
        )
    else:
        l1, l2 = (
            moment_sensitivity(d, release.bound_x, neighbouring=release.neighbouring, norm=norm) for norm in (1, 2)
        )
    scale, _ = noise_scale(release.mechanism, l1=l1, l2=l2, epsilon=epsilon, delta=delta)
    return scale, l1 if release.mechanism == "laplace" else l2


def _budget(release: RegressionRelease, epsilon: float, delta: float | None) -> tuple[float, float | None]:
    """(ε, δ) per release: halves for the two releases of Gibbs-SS-Noisy (basic composition), else all."""
    if release.moments == "known":
        return epsilon, delta
    return epsilon / 2, None if delta is None else delta / 2


def release_facts(release: RegressionRelease, epsilon: float, delta: float | None, d: int) -> dict[str, Any]:
    """The privacy parameters actually spent, for diagnostics."""
    eps, dlt = _budget(release, epsilon, delta)
    scale, sensitivity = _noise_scale(release, eps, dlt, d, "statistic")
    facts = {
        "mechanism": release.mechanism,
        "neighbouring": release.neighbouring,
        "moments": release.moments,
        "epsilon": float(epsilon),
        "delta": float(delta) if release.mechanism == "gaussian" else 0.0,
        "bounds": (release.bound_x, release.bound_y),
        "statistic_epsilon": eps,
        "statistic_sensitivity": sensitivity,
        "statistic_noise_scale": scale,
        "sensitivity_norm": "L1" if release.mechanism == "laplace" else "L2",
    }
    if release.moments == "noisy":
        m_scale, m_sensitivity = _noise_scale(release, eps, dlt, d, "moments")
        facts |= {"moment_epsilon": eps, "moment_sensitivity": m_sensitivity, "moment_noise_scale": m_scale}
    return facts


# ---------------------------------------------------------------- the release


def _clamp(X: jax.Array, y: jax.Array, release: RegressionRelease) -> jax.Array:
    """u = (clip(x, ±B_x), 1, clip(y, ±B_y)) per record: X (N, d+1) with the bias last, y (N,) → (N, p)."""
    x = jnp.clip(X[..., :-1], -release.bound_x, release.bound_x)
    return jnp.concatenate([x, X[..., -1:], jnp.clip(y, -release.bound_y, release.bound_y)[..., None]], axis=-1)


@functools.partial(jax.jit, static_argnames=("release",))
def _release_batch(keys, X, y, scale, moment_scale, *, release: RegressionRelease) -> Released:
    """The releases of M data sets: keys (M,), X (M, N, d+1), y (M, N) → Released with a leading M axis."""
    noise = jax.random.laplace if release.mechanism == "laplace" else jax.random.normal

    def one(key, X, y):
        u = _clamp(X, y, release)
        k_s, k_m = jax.random.split(key)
        s = sufficient_statistics(u)
        z = s + scale * noise(k_s, s.shape, s.dtype)
        n = jnp.asarray(X.shape[0], X.dtype)
        if release.moments == "noisy":
            sums = fourth_sums(u[:, :-1])
            second, factor = noisy_moments(sums + moment_scale * noise(k_m, sums.shape, sums.dtype), n)
        else:
            second, factor = (jnp.asarray(m) for m in known_moments(u.shape[-1] - 2, release.bound_x))
        return Released(z, jnp.asarray(scale, X.dtype), second, factor, n)

    return jax.vmap(one)(keys, X, y)


def release_statistics(
    X, y, *, keys, epsilon: float, delta: float | None = 1e-5, release: RegressionRelease = RegressionRelease()
) -> Released:
    """The DP releases of M data sets: X (M, N, d+1) with the bias column last, y (M, N), keys (M,) → `Released`
    (numpy, float64) with a leading M axis; data set m's noise depends on keys[m] alone. δ is spent by the
    Gaussian only."""
    X, y = check_data(X, y)
    epsilon = check_epsilon(epsilon)
    d = X.shape[-1] - 1
    eps, dlt = _budget(release, epsilon, delta)
    scale = _noise_scale(release, eps, dlt, d, "statistic")[0]
    moment_scale = _noise_scale(release, eps, dlt, d, "moments")[0] if release.moments == "noisy" else 0.0
    with jax.enable_x64(True):
        released = _release_batch(
            keys_for(keys, X.shape[0]),
            jnp.asarray(X, jnp.float64),
            jnp.asarray(y, jnp.float64),
            scale,
            moment_scale,
            release=release,
        )
    return Released(*(np.asarray(field) for field in released))


def check_data(X, y) -> tuple[np.ndarray, np.ndarray]:
    """X (M, N, d+1) with the bias column last and y (M, N) as float64 arrays; a ValueError that says what is wrong."""
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    if X.ndim != 3 or X.shape[-1] < 2 or y.shape != X.shape[:-1]:
        raise ValueError(
            f"X must be (M, N, d+1) with the bias column last and y (M, N) for M data sets; got "
            f"X {X.shape}, y {y.shape}"
        )
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise ValueError("X and y must be finite")
    if not np.all(X[..., -1] == 1):
        raise ValueError("the last column of X must be the bias column, all ones (the model's design)")
    return X, y
