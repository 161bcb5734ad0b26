"""Bernstein & Sheldon (NeurIPS 2019) Gibbs-SS-Noisy for Bayesian linear regression, and its noise-naive SS.

Specification: docs/baselines.md §2 (provenance tags there); the model is linreg-10d's, θ = (w, softplus⁻¹(σ²))
(d+2,) with the design X (N, d+1) bias column last. The method, one module per step:

* `regression_release`: clamp the records to bounds fixed before seeing them, release the Gram statistic
  z (D,) (and, under Gibbs-SS-Noisy, the design's fourth moments) with Laplace or analytic-Gaussian noise;
* `regression_moments`: the statistic's layout, the design moments and the CLT s | w, σ² ≈ N(N·E[t], N·Cov[t]);
* `regression_gibbs`: the Gibbs sampler over (s, w, σ², ω²) and the normal–inverse-gamma (NIG) update;
* here, the entry points: bs2019 (the sampler's draws as a `DrawsPosterior`) and the noise-naive SS
  bs2019-naive (§2.6: the NIG update applied to z itself at the full ε, Ĝ(z) PSD-projected, an exact
  `ClosedFormPosterior`).

Problem m of a batch uses keys[m] alone: split into its release key and its sampler key (`problem_keys`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy import linalg, stats

from ..posteriors.draws import DrawsPosterior
from ..util.checks import positive_int
from ..util.errors import NON_FINITE, FitFailure
from ..util.keys import as_key
from ..util.numerics import softplus_inverse
from .mechanisms import problem_keys
from .primitives import project_psd
from .regression_gibbs import (
    NIGPrior,
    RegressionGibbs,
    gibbs_sample,
    nig_draw,
    nig_parameters,
    theta_names,
    theta_of,
    theta_sites,
    warmup_sweeps,
)
from .regression_moments import gram
from .regression_release import RegressionRelease, Released, release_facts, release_statistics
from .sampled import (
    ClosedFormPosterior,
    GibbsDiagnostics,
    Marginal,
    ReleaseDiagnostics,
    gibbs_posterior,
    single,
)

__all__ = [
    "CHUNK",
    "MODEL",
    "NIGLaw",
    "RegressionGibbsDiagnostics",
    "bs2019_batch",
    "bs2019_naive_batch",
    "bs2019_posterior",
    "naive_ss_posterior",
]

MODEL = "linreg-10d"
"""The benchmark model whose prior (NIGPrior's defaults), design (bias column last) and θ space this method has."""
METHOD, NAIVE_METHOD = "bs2019", "bs2019-naive"
CHUNK = 50
"""Data sets sampled at once by one compiled program of `bs2019_batch`."""


@dataclasses.dataclass(frozen=True)
class RegressionGibbsDiagnostics(GibbsDiagnostics):
    """`GibbsDiagnostics` counted over the kept sweeps (sweeps = chains·draws·thin), and the warm-up's fallbacks."""

    warmup_fallbacks: int


@dataclasses.dataclass(frozen=True, eq=False)
class NIGLaw:
    """An exact NIG law σ² ~ InvGamma(a_n, b_n), w | σ² ~ N(μ_n, σ²Λ_n⁻¹), Λ_n = chol cholᵀ, over the
    unconstrained θ = (w, softplus⁻¹(σ²)): mu (d+1,), chol (d+1, d+1) lower, a_n, b_n."""

    mu: np.ndarray
    chol: np.ndarray
    a_n: float
    b_n: float

    def draw(self, key, n: int) -> np.ndarray:
        """n exact draws (n, d+2) of θ = (w, softplus⁻¹(σ²))."""
        with jax.enable_x64(True):
            parameters = (jnp.asarray(value) for value in (self.mu, self.chol, self.a_n, self.b_n))
            return np.asarray(theta_of(*nig_draw(key, *parameters, (n,))))

    def marginals(self) -> list[Marginal]:
        """w_j ~ Student-t_{2a_n}(μ_j, √(b_n/a_n · (Λ_n⁻¹)_jj)); σ² ~ InvGamma(a_n, b_n), mapped by softplus⁻¹."""
        inverse_chol = linalg.solve_triangular(self.chol, np.eye(len(self.mu)), lower=True)
        scale = np.sqrt(self.b_n / self.a_n * np.sum(inverse_chol**2, axis=0))
        coefficients = [(stats.t(2 * self.a_n, loc=m, scale=s), np.positive) for m, s in zip(self.mu, scale)]
        return coefficients + [(stats.invgamma(self.a_n, scale=self.b_n), softplus_inverse)]

    def parameters(self) -> dict[str, Any]:
        return {"mu": self.mu, "precision_cholesky": self.chol, "a_n": self.a_n, "b_n": self.b_n}


NIG = "noise-naive sufficient-statistic posterior (NIG update of the released Gram matrix)"


def bs2019_batch(
    X,
    y,
    *,
    keys,
    epsilon: float,
    delta: float | None,
    release: RegressionRelease = RegressionRelease(),
    gibbs: RegressionGibbs = RegressionGibbs(),
    prior: NIGPrior = NIGPrior(),
    chunk: int = CHUNK,
) -> list[DrawsPosterior | FitFailure]:
    """B&S 2019 Gibbs-SS-Noisy (or -Known) for M data sets X (M, N, d+1) bias last, y (M, N), keys (M,): data set
    m is released at (ε, δ) with the first half of split(keys[m]) and sampled with the second; the sampler runs
    `chunk` data sets at a time in one compiled program (the last chunk padded to the same shape). Returns a
    DrawsPosterior per data set, or its FitFailure where a draw is not finite."""
    chunk = positive_int("chunk", chunk)
    count, d = np.shape(X)[0], np.shape(X)[-1] - 1
    release_keys, sampler_keys = problem_keys(keys, count)
    released = release_statistics(X, y, keys=release_keys, epsilon=epsilon, delta=delta, release=release)
    facts = release_facts(release, epsilon, delta, d) | {
        "chains": gibbs.chains,
        "warmup": warmup_sweeps(gibbs),
        "draws": gibbs.draws,
        "thin": gibbs.thin,
    }
    out: list[DrawsPosterior | FitFailure] = []
    for first in range(0, count, chunk):
        index = np.arange(first, first + chunk) % count if count > chunk else np.arange(count)
        thetas, counts = gibbs_sample(
            sampler_keys[index],
            Released(*(field[index] for field in released)),
            gibbs=gibbs,
            prior=prior,
            mechanism=release.mechanism,
        )
        for j, m in enumerate(index[: count - first]):
            kept, total = int(counts["fallbacks"][j].sum()), int(counts["all_fallbacks"][j].sum())
            out.append(
                gibbs_posterior(
                    thetas[j],
                    method=METHOD,
                    theta_names=theta_names(d),
                    sites=theta_sites(d),
                    diagnostics=RegressionGibbsDiagnostics,
                    fallbacks=kept,
                    redraws=int(counts["redraws"][j].sum()),
                    sweeps=gibbs.chains * gibbs.draws * gibbs.thin,
                    warmup_fallbacks=total - kept,
                    released=released.z[m],
                    release=facts,
                )
            )
    return out


def bs2019_naive_batch(
    X,
    y,
    *,
    keys,
    epsilon: float,
    delta: float | None,
    release: RegressionRelease = RegressionRelease(),
    prior: NIGPrior = NIGPrior(),
) -> list[ClosedFormPosterior | FitFailure]:
    """Noise-naive SS (§2.6) for M data sets: z at the full (ε, δ) (release.moments is not used: nothing spends on
    moments) with the release key `bs2019_batch` uses, then the NIG update of the PSD-projected Ĝ(z) as if exact."""
    count, d = np.shape(X)[0], np.shape(X)[-1] - 1
    release = dataclasses.replace(release, moments="known")
    released = release_statistics(
        X, y, keys=problem_keys(keys, count)[0], epsilon=epsilon, delta=delta, release=release
    )
    with jax.enable_x64(True):
        update = jax.vmap(lambda z, n: nig_parameters(project_psd(gram(z, n, d)), n, prior))
        mu, chol, a_n, b_n = (np.asarray(a) for a in update(jnp.asarray(released.z), jnp.asarray(released.n)))
    facts = release_facts(release, epsilon, delta, d) | {"moments": "none"}
    out: list[ClosedFormPosterior | FitFailure] = []
    for m in range(count):
        if not (np.all(np.isfinite(mu[m])) and np.all(np.isfinite(chol[m])) and b_n[m] > 0):
            out.append(
                FitFailure(NON_FINITE, f"{NAIVE_METHOD}: the NIG update of the released Gram matrix is not finite")
            )
            continue
        out.append(
            ClosedFormPosterior(
                law=NIGLaw(mu[m], chol[m], float(a_n[m]), float(b_n[m])),
                kind=NIG,
                theta_names=theta_names(d),
                sites=theta_sites(d),
                method=NAIVE_METHOD,
                diagnostics=ReleaseDiagnostics(released=released.z[m], release=facts),
            )
        )
    return out


def bs2019_posterior(X, y, *, key, epsilon: float, delta: float = 1e-5, **options) -> DrawsPosterior:
    """B&S 2019 for one data set X (N, d+1) bias last, y (N,): problem m of `bs2019_batch` when keys[m] = key.

    options: RegressionRelease fields (bound_x, bound_y, mechanism, neighbouring, moments), RegressionGibbs
    fields (chains, warmup, draws, thin, redraws) and NIGPrior fields (a0, b0, prior_scale). A failed fit
    raises its FitFailure.
    """
    release, gibbs, prior = _split_options(options, (RegressionRelease, RegressionGibbs, NIGPrior))
    return single(
        bs2019_batch(
            np.asarray(X)[None],
            np.asarray(y)[None],
            keys=as_key(key)[None],
            epsilon=epsilon,
            delta=delta,
            release=release,
            gibbs=gibbs,
            prior=prior,
        )
    )


def naive_ss_posterior(X, y, *, key, epsilon: float, delta: float = 1e-5, **options) -> ClosedFormPosterior:
    """The noise-naive SS posterior of one data set (`bs2019_naive_batch` with keys [key]).

    options: RegressionRelease fields (moments unused) and NIGPrior fields (the posterior is exact: no sampler)."""
    release, prior = _split_options(options, (RegressionRelease, NIGPrior))
    return single(
        bs2019_naive_batch(
            np.asarray(X)[None],
            np.asarray(y)[None],
            keys=as_key(key)[None],
            epsilon=epsilon,
            delta=delta,
            release=release,
            prior=prior,
        )
    )


def _split_options(options: Mapping[str, Any], classes: tuple[type, ...]) -> tuple:
    """Flat keyword options → one settings object per class, by field name; an unknown name raises."""
    names = [{field.name for field in dataclasses.fields(cls)} for cls in classes]
    unknown = sorted(set(options) - set().union(*names))
    if unknown:
        raise ValueError(f"unknown options {unknown}: choose from {sorted(set().union(*names))}")
    return tuple(cls(**{k: v for k, v in options.items() if k in fields}) for cls, fields in zip(classes, names))
