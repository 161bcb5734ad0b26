"""The posteriors of the sufficient-statistic baselines (docs/baselines.md §1, §2), behind the `Posterior` protocol.

Both kinds are posteriors over the model's unconstrained θ (d,), with the model's sites (`sites`) where known:

* `GibbsPosterior` (bs2018, bs2019): the noise-aware sampler's draws θ (chains, draws, d); its mean, sd
  and central intervals are those of the stored draws, so they need no key.
* `ClosedFormPosterior` (the noise-naive bs2018-naive, bs2019-naive): marginals θ_j = g_j(X_j) with X_j a
  one-dimensional law and g_j increasing, so the central interval is exact, g_j(F_j⁻¹(α/2)), g_j(F_j⁻¹(1 − α/2)),
  and E[θ_j], sd[θ_j] are 1-D integrals; draws (and so summaries on the sites' scale, and the draws a saved
  file holds) need a key.

`BaselinePosterior` holds what they share: the one-line description and `save`, which writes an ArviZ-style
netCDF file (`save_draws`); sampling, summaries and the repr are `PosteriorBase`'s. Their diagnostics are
typed: `ReleaseDiagnostics` (the released statistic and the privacy facts) and `GibbsDiagnostics` (those, the
mixing and the support fallbacks), each with the `summarise` a coverage study reports.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

from ..posteriors.base import PosteriorBase, tail_probability
from ..posteriors.draws import BASELINE_SCHEMA, DRAWS_SCHEMA_VERSION, StoredDraws, save_draws
from ..posteriors.mixture import DEFAULT_THETA_DRAWS
from ..trace.sites import SiteMap, SiteSpec
from ..util.diagnostics import Diagnostics, MixingDiagnostics
from ..util.errors import DIVERGED, FitFailure
from ..util.files import plain

__all__ = [
    "RELEASE_FACTS",
    "BaselinePosterior",
    "ClosedFormPosterior",
    "GibbsDiagnostics",
    "GibbsPosterior",
    "ReleaseDiagnostics",
    "chain_mixing",
    "gibbs_posterior",
    "single",
]

TAIL = 1e-15
"""Probability left out of each tail when a closed form's moments are integrated."""

RELEASE_FACTS = (
    "mechanism",
    "neighbouring",
    "epsilon",
    "delta",
    "sensitivity",
    "noise_scale",
    "bound",
    "bounds",
    "moments",
    "statistic_epsilon",
    "statistic_sensitivity",
    "statistic_noise_scale",
    "moment_epsilon",
    "moment_sensitivity",
    "moment_noise_scale",
    "chains",
    "warmup",
    "draws",
    "thin",
    "retries",
    "init",
    "n_examples",
)
"""The privacy and sampler facts a study reports for a sufficient-statistic baseline (shared by its fits)."""


# ---------------------------------------------------------------- diagnostics


@dataclasses.dataclass(frozen=True)
class ReleaseDiagnostics(Diagnostics):
    """released: the DP statistic z (D,) the posterior was computed from; release: the facts of the release
    (mechanism, neighbouring, ε, δ spent, sensitivities, noise scales …) and of the sampler settings."""

    released: np.ndarray
    release: Mapping[str, Any]

    @classmethod
    def summarise(cls, records: Sequence[ReleaseDiagnostics]) -> dict[str, Any]:
        """{"release": the RELEASE_FACTS of the first fit} (every fit of one study shares them)."""
        if not records:
            return {}
        facts = records[0].release
        return {"release": {name: plain(facts[name]) for name in RELEASE_FACTS if name in facts}}


@dataclasses.dataclass(frozen=True)
class GibbsDiagnostics(MixingDiagnostics, ReleaseDiagnostics):
    """A Gibbs fit: split R-hat rhat, effective sample size ess and integrated autocorrelation time iat (in kept
    draws), each (d,), with their extremes max_rhat, min_ess; over `sweeps` sweeps, fallbacks (support
    projections after the redraws failed) and redraws (support draws beyond the first); the release."""

    rhat: np.ndarray
    ess: np.ndarray
    iat: np.ndarray
    fallbacks: int
    redraws: int
    sweeps: int

    @property
    def fallback_rate(self) -> float:
        """Fallbacks per sweep."""
        return self.fallbacks / self.sweeps

    @classmethod
    def summarise(cls, records: Sequence[GibbsDiagnostics]) -> dict[str, Any]:
        """The mixing summary, the fallbacks summed and the fits that had any, and the release."""
        if not records:
            return {}
        fallbacks = np.array([r.fallbacks for r in records])
        return (
            MixingDiagnostics.summarise(records)
            | {"fallbacks": int(fallbacks.sum()), "simulations_with_fallbacks": int(np.count_nonzero(fallbacks))}
            | ReleaseDiagnostics.summarise(records)
        )


def chain_mixing(chains: np.ndarray) -> dict[str, Any]:
    """Split R-hat, ESS and IAT = chains·draws/ESS per coordinate (d,), their extremes; draws (chains, draws, d)."""
    rhat, ess = split_gelman_rubin(chains), effective_sample_size(chains)
    return {
        "rhat": rhat,
        "max_rhat": float(np.max(rhat)),
        "ess": ess,
        "min_ess": float(np.min(ess)),
        "iat": chains.shape[0] * chains.shape[1] / ess,
    }


# ---------------------------------------------------------------- the shared base


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class BaselinePosterior(PosteriorBase, abc.ABC):
    """A posterior over θ (d,) with labels theta_names (d,), the registered method that made it, its
    diagnostics (a `ReleaseDiagnostics`, so it knows its release) and the model's sites (None when unknown)."""

    theta_names: tuple[str, ...]
    diagnostics: ReleaseDiagnostics
    method: str
    sites: tuple[SiteSpec, ...] | None = None

    kind: ClassVar[str]

    def __post_init__(self):
        if not isinstance(self.diagnostics, ReleaseDiagnostics):
            raise TypeError(f"diagnostics must be a ReleaseDiagnostics record; got {type(self.diagnostics).__name__}")
        object.__setattr__(self, "theta_names", tuple(self.theta_names))
        if self.sites is not None:
            object.__setattr__(self, "sites", tuple(self.sites))
            if SiteMap(self.sites).dim != len(self.theta_names):
                raise ValueError(f"the sites describe d = {SiteMap(self.sites).dim}, θ has d = {len(self.theta_names)}")

    @abc.abstractmethod
    def _sample(self, key, n: int) -> np.ndarray:
        """n ≥ 1 draws of θ, (n, d); key a jax PRNG key."""

    @abc.abstractmethod
    def interval(self, level: float = 0.9, *, key=None) -> tuple[np.ndarray, np.ndarray]:
        """The central `level` credible interval of each θ_j, (d,) ends."""

    @abc.abstractmethod
    def saved_draws(self, key=None) -> np.ndarray:
        """The θ draws (chains, draws, d) a saved file holds."""

    @abc.abstractmethod
    def _details(self) -> list[str]:
        """The parts of the one-line description that belong to the kind of posterior."""

    def describe(self) -> str:
        """One line: what it is, the method, the release and the kind's own facts."""
        facts = self.diagnostics.release
        release = f"ε = {facts['epsilon']:g} ({facts['mechanism']}, δ spent {facts['delta']:g})"
        return f"{self.kind}: " + ", ".join([f"method {self.method}", release, *self._details()])

    def save(self, path: str | os.PathLike, key=None, *, overwrite: bool = False) -> None:
        """Write `saved_draws(key)` and the diagnostics to a netCDF file, atomically (`save_draws`); an existing
        file is replaced only with `overwrite=True`."""
        save_draws(path, self.saved_draws(key), self.theta_names, self._attrs(), sites=self.sites, overwrite=overwrite)

    def _attrs(self) -> dict[str, Any]:
        return {
            "schema": BASELINE_SCHEMA,
            "schema_version": DRAWS_SCHEMA_VERSION,
            "kind": type(self).__name__,
            "description": self.kind,
            "method": self.method,
            "diagnostics_type": type(self.diagnostics).__name__,
            "diagnostics": json.dumps(plain(dict(self.diagnostics))),
        }


# ---------------------------------------------------------------- Gibbs draws


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class GibbsPosterior(StoredDraws, BaselinePosterior):
    """The Gibbs draws θ (chains, draws, d) of a noise-aware sufficient-statistic sampler (bs2018, bs2019)."""

    chains: np.ndarray
    diagnostics: GibbsDiagnostics

    kind: ClassVar[str] = "Bernstein–Sheldon noise-aware posterior (Gibbs)"

    def __post_init__(self):
        super().__post_init__()
        chains = np.asarray(self.chains, np.float64)
        if chains.ndim != 3 or chains.shape[-1] != len(self.theta_names):
            raise ValueError(
                f"chains must be (chains, draws, d) with d = {len(self.theta_names)} theta_names; "
                f"got shape {chains.shape}"
            )
        object.__setattr__(self, "chains", chains)

    def saved_draws(self, key=None) -> np.ndarray:
        """The stored chains (no key)."""
        return self.chains

    def _details(self) -> list[str]:
        chains, draws = self.chains.shape[:2]
        d = self.diagnostics
        return [
            f"{chains} × {draws} draws",
            f"max R-hat {d.max_rhat:.4g}",
            f"min ESS {d.min_ess:.4g}",
            f"{d.fallbacks} support fallbacks",
        ]


def single(outcomes: Sequence) -> Any:
    """The one outcome of a batch of one data set; raised when it is the fit's failure."""
    (outcome,) = outcomes
    if isinstance(outcome, FitFailure):
        raise outcome
    return outcome


def gibbs_posterior(
    chains: np.ndarray,
    *,
    method: str,
    theta_names: Sequence[str],
    sites: Sequence[SiteSpec] | None = None,
    diagnostics: type[GibbsDiagnostics] = GibbsDiagnostics,
    **facts,
) -> GibbsPosterior | FitFailure:
    """One problem's GibbsPosterior from its draws θ (chains, draws, d) of the model with these `sites`, with their
    mixing facts and `facts` (the other fields of `diagnostics`); its FitFailure (DIVERGED) when a draw
    is not finite."""
    if not np.all(np.isfinite(chains)):
        return FitFailure(
            DIVERGED,
            f"{method}: the Gibbs sampler produced non-finite draws of θ (a numerical failure of this problem's fit)",
        )
    return GibbsPosterior(
        chains=chains,
        theta_names=theta_names,
        method=method,
        sites=sites,
        diagnostics=diagnostics(**chain_mixing(chains), **facts),
    )


# ---------------------------------------------------------------- closed forms

Marginal = tuple[Any, Callable[[np.ndarray], np.ndarray]]
"""(X_j, g_j): a frozen scipy.stats law and an increasing map with θ_j = g_j(X_j)."""


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class ClosedFormPosterior(BaselinePosterior):
    """A posterior known in closed form whose marginals are increasing maps of 1-D laws (`marginals`)."""

    kind: ClassVar[str] = "noise-naive sufficient-statistic posterior"

    @abc.abstractmethod
    def marginals(self) -> list[Marginal]:
        """(X_j, g_j) for j = 1..d."""

    @abc.abstractmethod
    def parameters(self) -> dict[str, Any]:
        """The closed form's parameters (written to saved files)."""

    def interval(self, level: float = 0.9, *, key=None) -> tuple[np.ndarray, np.ndarray]:
        """Exact: g_j(F_j⁻¹(α/2)) and g_j(F_j⁻¹(1 − α/2)), (d,) each (no key)."""
        alpha = tail_probability(level)
        ends = np.array([[g(law.ppf(p)) for law, g in self.marginals()] for p in (alpha, 1.0 - alpha)], np.float64)
        return ends[0], ends[1]

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """E[g_j(X_j)] and sd[g_j(X_j)] by adaptive quadrature between the 1e-15 and 1 − 1e-15 quantiles, (d,) each."""
        mean, sd = np.array([_transformed_moments(law, g) for law, g in self.marginals()], np.float64).T
        return mean, sd

    def _exact_moments(self) -> tuple[np.ndarray, np.ndarray]:
        return self.moments()

    def _exact_interval(self, level: float) -> tuple[np.ndarray, np.ndarray]:
        return self.interval(level)

    def saved_draws(self, key=None) -> np.ndarray:
        """DEFAULT_THETA_DRAWS exact draws as one chain, (1, draws, d): the key is required."""
        if key is None:
            raise ValueError(f"a {self.kind} is saved with draws of θ from its closed form: pass key=… to save")
        return self.sample(key, DEFAULT_THETA_DRAWS)[None]

    def _details(self) -> list[str]:
        return ["exact closed form"]

    def _attrs(self) -> dict[str, Any]:
        return super()._attrs() | {"parameters": json.dumps(plain(self.parameters()))}


def _transformed_moments(law, g) -> tuple[float, float]:
    """E[g(X)] and sd[g(X)] for a frozen scipy law X, integrated between its TAIL and 1 − TAIL quantiles."""
    low, high = law.ppf(TAIL), law.isf(TAIL)
    mean = law.expect(g, lb=low, ub=high)
    return mean, float(np.sqrt(law.expect(lambda x: (g(x) - mean) ** 2, lb=low, ub=high)))
