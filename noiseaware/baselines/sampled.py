"""The posteriors of the sufficient-statistic baselines (docs/baselines.md §1, §2), behind the `Posterior` protocol.

Both are posteriors over the model's unconstrained θ (d,), with the model's sites (`sites`) where known:

* the noise-aware Gibbs samplers (bs2018, bs2019) give their draws θ (chains, draws, d) as a `DrawsPosterior` of
  kind GIBBS (`gibbs_posterior`): mean, sd and central intervals are those of the stored draws, with no key;
* `ClosedFormPosterior` (the noise-naive bs2018-naive, bs2019-naive) holds a `ClosedForm` law whose marginals are
  θ_j = g_j(X_j) with X_j a one-dimensional law and g_j increasing, so the central interval is exact,
  g_j(F_j⁻¹(α/2)), g_j(F_j⁻¹(1 − α/2)), and E[θ_j], sd[θ_j] are 1-D integrals; draws (and so summaries on the
  sites' scale, and the draws a saved file holds) need a key.

Their diagnostics are typed: `ReleaseDiagnostics` (the released statistic and the privacy facts) and
`GibbsDiagnostics` (those, the mixing and the support fallbacks), each with the `aggregate` a coverage study
reports and the `describe` a posterior's one-line description shows.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import jax
import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

from ..posteriors.base import PosteriorBase, tail_probability
from ..posteriors.draws import DrawsPosterior, draws_attrs, save_draws
from ..posteriors.mixture import DEFAULT_THETA_DRAWS
from ..posteriors.summary import INTERVAL_LEVEL
from ..trace.sites import SiteMap, SiteSpec
from ..util.diagnostics import Diagnostics, MixingDiagnostics
from ..util.errors import DIVERGED, FitFailure
from ..util.files import plain
from ..util.notes import Note

__all__ = [
    "GIBBS",
    "RELEASE_FACTS",
    "ClosedForm",
    "ClosedFormPosterior",
    "GibbsDiagnostics",
    "ReleaseDiagnostics",
    "chain_mixing",
    "gibbs_posterior",
    "single",
]

GIBBS = "Bernstein–Sheldon noise-aware posterior (Gibbs)"
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
    def aggregate(cls, records: Sequence[ReleaseDiagnostics]) -> dict[str, Any]:
        """{"release": the RELEASE_FACTS of the first fit} (every fit of one study shares them)."""
        if not records:
            return {}
        facts = records[0].release
        return {"release": {name: plain(facts[name]) for name in RELEASE_FACTS if name in facts}}

    def describe(self, posterior) -> list[str]:
        """The release: ε, the mechanism and the δ it spent."""
        facts = self.release
        return [f"ε = {facts['epsilon']:g} ({facts['mechanism']}, δ spent {facts['delta']:g})"]


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
    def aggregate(cls, records: Sequence[GibbsDiagnostics]) -> dict[str, Any]:
        """The mixing facts, the fallbacks summed and the fits that had any, and the release."""
        if not records:
            return {}
        fallbacks = np.array([r.fallbacks for r in records])
        return (
            MixingDiagnostics.aggregate(records)
            | {"fallbacks": int(fallbacks.sum()), "simulations_with_fallbacks": int(np.count_nonzero(fallbacks))}
            | ReleaseDiagnostics.aggregate(records)
        )

    def describe(self, posterior) -> list[str]:
        """The release, then the draws and their mixing."""
        chains, draws = posterior.chains.shape[:2]
        return super().describe(posterior) + [
            f"{chains} × {draws} draws",
            f"max R-hat {self.max_rhat:.4g}",
            f"min ESS {self.min_ess:.4g}",
            f"{self.fallbacks} support fallbacks",
        ]


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
) -> DrawsPosterior | FitFailure:
    """One problem's posterior (a `DrawsPosterior` of kind GIBBS) from its draws θ (chains, draws, d) of the model
    with these `sites`, with their mixing facts and `facts` (the other fields of `diagnostics`); its FitFailure
    (DIVERGED) when a draw is not finite."""
    if not np.all(np.isfinite(chains)):
        return FitFailure(
            DIVERGED,
            f"{method}: the Gibbs sampler produced non-finite draws of θ (a numerical failure of this problem's fit)",
        )
    return DrawsPosterior(
        chains,
        method,
        names=tuple(theta_names),
        sites=sites,
        diagnostics=diagnostics(**chain_mixing(chains), **facts),
        kind=GIBBS,
    )


# ---------------------------------------------------------------- closed forms

Marginal = tuple[Any, Callable[[np.ndarray], np.ndarray]]
"""(X_j, g_j): a frozen scipy.stats law and an increasing map with θ_j = g_j(X_j)."""


class ClosedForm(Protocol):
    """A law of θ (d,) known in closed form: exact draws, marginals θ_j = g_j(X_j), and its parameters."""

    def draw(self, key: jax.Array, n: int) -> np.ndarray:
        """n exact draws of θ, (n, d)."""
        ...

    def marginals(self) -> list[Marginal]:
        """(X_j, g_j) for j = 1..d."""
        ...

    def parameters(self) -> dict[str, Any]:
        """The closed form's parameters (written to saved files)."""
        ...


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True, repr=False)
class ClosedFormPosterior(PosteriorBase):
    """A posterior over θ (d,) known in closed form (`law`, a `ClosedForm`): the noise-naive bs2018-naive and
    bs2019-naive. theta_names (d,); method; diagnostics (a `ReleaseDiagnostics`: it knows its release); the model's
    sites (None when unknown); kind: what it is, in words; notes: the fit's remarks."""

    law: ClosedForm
    theta_names: tuple[str, ...]
    method: str
    diagnostics: ReleaseDiagnostics
    sites: tuple[SiteSpec, ...] | None = None
    kind: str = "noise-naive sufficient-statistic posterior"
    notes: tuple[Note, ...] = ()

    def __post_init__(self):
        if not isinstance(self.diagnostics, ReleaseDiagnostics):
            raise TypeError(f"diagnostics must be a ReleaseDiagnostics record; got {type(self.diagnostics).__name__}")
        object.__setattr__(self, "theta_names", tuple(self.theta_names))
        if self.sites is not None:
            object.__setattr__(self, "sites", tuple(self.sites))
            if SiteMap(self.sites).dim != len(self.theta_names):
                raise ValueError(f"the sites describe d = {SiteMap(self.sites).dim}, θ has d = {len(self.theta_names)}")

    def _sample(self, key, n: int) -> np.ndarray:
        return self.law.draw(key, n)

    def interval(self, level: float = INTERVAL_LEVEL, *, key=None) -> tuple[np.ndarray, np.ndarray]:
        """Exact: g_j(F_j⁻¹(α/2)) and g_j(F_j⁻¹(1 − α/2)), (d,) each (no key)."""
        alpha = tail_probability(level)
        ends = np.array([[g(law.ppf(p)) for law, g in self.law.marginals()] for p in (alpha, 1.0 - alpha)], np.float64)
        return ends[0], ends[1]

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """E[g_j(X_j)] and sd[g_j(X_j)] by adaptive quadrature between the 1e-15 and 1 − 1e-15 quantiles, (d,) each."""
        mean, sd = np.array([_transformed_moments(law, g) for law, g in self.law.marginals()], np.float64).T
        return mean, sd

    def _exact_moments(self) -> tuple[np.ndarray, np.ndarray]:
        return self.moments()

    def _exact_interval(self, level: float) -> tuple[np.ndarray, np.ndarray]:
        return self.interval(level)

    def describe(self) -> str:
        """One line: the kind, the method, the release and "exact closed form"."""
        details = [f"method {self.method}", *self.diagnostics.describe(self), "exact closed form"]
        return f"{self.kind}: " + ", ".join(details)

    def save(self, path: str | os.PathLike, key=None, *, overwrite: bool = False) -> None:
        """Write DEFAULT_THETA_DRAWS exact draws (one chain; the key is required), the parameters and the diagnostics
        to a netCDF file, atomically (`save_draws`); an existing file is replaced only with `overwrite=True`."""
        if key is None:
            raise ValueError(f"a {self.kind} is saved with draws of θ from its closed form: pass key=… to save")
        attrs = draws_attrs(self, parameters=json.dumps(plain(self.law.parameters())))
        theta = self.sample(key, DEFAULT_THETA_DRAWS)[None]
        save_draws(path, theta, self.theta_names, attrs, sites=self.sites, overwrite=overwrite)


def _transformed_moments(law, g) -> tuple[float, float]:
    """E[g(X)] and sd[g(X)] for a frozen scipy law X, integrated between its TAIL and 1 − TAIL quantiles."""
    low, high = law.ppf(TAIL), law.isf(TAIL)
    mean = law.expect(g, lb=low, ub=high)
    return mean, float(np.sqrt(law.expect(lambda x: (g(x) - mean) ** 2, lb=low, ub=high)))
