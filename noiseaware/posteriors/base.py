"""The posterior protocol, and what every posterior type shares (`PosteriorBase`).

A posterior is a distribution over the unconstrained θ (d,) of a model; with the model's site map it also
describes each named site on its own (constrained) scale, x_site = T_site(θ_site). The noise-aware posterior,
the naive and DPVIm baselines (mixtures over the VI optimum, `posteriors.mixture`), posteriors known by
stored draws (`posteriors.draws`) and the Bernstein–Sheldon posteriors (Gibbs draws or closed forms,
`baselines`) all implement it, so experiments, plots and the CLI treat them alike.

Summaries (`PosteriorSummary`, a DataFrame) show the sites on their own scale by default: one row per
element, mean, sd and HDI from draws of θ mapped through T (Monte Carlo, with its standard error, where the
draws are fresh: a key is then required), central intervals exactly T of θ's quantiles where T is
elementwise and the posterior knows those quantiles.
"""

from __future__ import annotations

import os
from typing import ClassVar, Protocol, runtime_checkable

import jax
import numpy as np

from ..trace.sites import SiteMap
from ..util.checks import choice, positive_int
from ..util.diagnostics import Diagnostics
from ..util.keys import as_key
from ..util.notes import Note
from .summary import (
    CONSTRAINED,
    INTERVAL_LEVEL,
    UNCONSTRAINED,
    PosteriorSummary,
    constrain,
    constrained_rows,
    summary_frame,
    tail_probability,
)

__all__ = ["SCALES", "SUMMARY_DRAWS", "Posterior", "PosteriorBase", "tail_probability"]

SCALES = ("constrained", "unconstrained")
"""The scales a summary shows: the sites' own (constrained) values, or the unconstrained θ."""

SUMMARY_DRAWS = 20_000
"""Monte Carlo draws of θ a posterior gives by default: behind the summary of one that is sampled afresh (not known
by stored draws), and `sample`'s and `constrained_sample`'s n."""


@runtime_checkable
class Posterior(Protocol):
    """A posterior over θ (d,), unconstrained, and over the model's sites when it knows their map.

    kind: what it is, in words ("noise-aware posterior", "naive posterior", …); method: the registered
    method that produced it; theta_names (d,); site_map: θ ⇄ the named sites, or None; diagnostics: a typed
    `Diagnostics` record. A posterior may also carry `notes`, the fit's remarks as data (`util.notes.Note`s).
    """

    kind: str
    method: str
    diagnostics: Diagnostics

    @property
    def theta_names(self) -> tuple[str, ...]: ...

    @property
    def site_map(self) -> SiteMap | None: ...

    def sample(self, key, n: int) -> np.ndarray:
        """n draws of θ, (n, d)."""
        ...

    def constrained_sample(self, key, n: int) -> dict[str, np.ndarray]:
        """n draws of each site on its own scale, {site: (n, *shape)} (ValueError without a site map)."""
        ...

    def interval(self, level: float = INTERVAL_LEVEL, *, key=None) -> tuple[np.ndarray, np.ndarray]:
        """The central `level` credible interval of each θ_j, (d,) ends (key: for posteriors known by a sampler)."""
        ...

    def summary(
        self, level: float = INTERVAL_LEVEL, *, key=None, scale: str = "constrained", draws: int = SUMMARY_DRAWS
    ) -> PosteriorSummary:
        """A table (a DataFrame) of the sites on their own scale (scale="unconstrained": of θ): mean, sd,
        mcse_mean, central and HDI intervals, under a one-line description."""
        ...

    def describe(self) -> str:
        """One line: what the posterior is and how it was made."""
        ...

    def save(self, path: str | os.PathLike, key=None, *, overwrite: bool = False) -> None:
        """Write the posterior to a netCDF file (atomically); key: required where the file holds fresh draws
        (θ paired with each φ* of a mixture); an existing file is replaced only with `overwrite=True`."""
        ...


class PosteriorBase:
    """What every posterior type shares, written once: `sample` with its checks, `constrained_sample`,
    `summary`, `plot` and a short repr.

    A type provides `_sample(key, n)` (n ≥ 1 draws of θ, (n, d), key a jax key), `describe()`,
    `theta_names` and `sites` (its SiteSpecs, or None); where it knows them exactly, `_exact_moments()`
    (E θ, sd θ) and `_exact_interval(level)` (central ends of θ); a type known by stored draws overrides
    `_summary_draws`. Dataclass subclasses need `repr=False` to keep this repr.
    """

    kind: ClassVar[str]
    method: str
    notes: tuple[Note, ...] = ()

    def _sample(self, key: jax.Array, n: int) -> np.ndarray:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    @property
    def site_map(self) -> SiteMap | None:
        """θ ⇄ the model's named sites, or None when the posterior does not know them."""
        sites = getattr(self, "sites", None)
        return None if sites is None else SiteMap(tuple(sites))

    def sample(self, key, n: int = SUMMARY_DRAWS) -> np.ndarray:
        """n draws of θ (n, d), unconstrained; key: an int seed or a jax PRNG key."""
        n = positive_int("n", n, hint="pass the number of draws of θ, e.g. post.sample(key, 1000)")
        return self._sample(as_key(key), n)

    def constrained_sample(self, key, n: int = SUMMARY_DRAWS) -> dict[str, np.ndarray]:
        """n draws of each site on its own scale, {site: (n, *shape)} in float64: θ draws mapped by the sites'
        transforms."""
        site_map = self.site_map
        if site_map is None:
            raise ValueError(
                f"constrained_sample needs the model's site map, which this {type(self).__name__} does not have: "
                "record the trace with noiseaware, or pass sites=... to Trace.from_arrays; sample() gives θ"
            )
        return constrain(site_map, self.sample(key, n))

    def _exact_moments(self) -> tuple[np.ndarray, np.ndarray] | None:
        """E[θ] and sd[θ] (d,) each when known exactly, else None (the summary takes them from draws)."""
        return None

    def _exact_interval(self, level: float) -> tuple[np.ndarray, np.ndarray] | None:
        """The exact central `level` interval of θ, (d,) ends, when known, else None."""
        return None

    def _summary_draws(self, key, n: int) -> tuple[np.ndarray, bool]:
        """The draws of θ (chains, draws, d) a summary is computed from, and whether they are independent:
        n fresh draws, so the key is required."""
        if key is None:
            raise TypeError(
                f"the summary of a {self.kind} is computed from Monte Carlo draws of θ (means, sds, HDIs), so "
                "it needs a key: pass key=… (an int seed or a jax PRNG key), e.g. post.summary(key=0)"
            )
        return self.sample(key, n)[None], True

    def summary(
        self, level: float = INTERVAL_LEVEL, *, key=None, scale: str = "constrained", draws: int = SUMMARY_DRAWS
    ) -> PosteriorSummary:
        """The posterior's summary table (a `PosteriorSummary`, a pandas DataFrame; `print` it for the text).

        scale="constrained" (default): one row per site element on the model's own scale (without a site map,
        θ unconstrained, labelled so); scale="unconstrained": one row per coordinate of θ. Columns mean, sd,
        mcse_mean, eti{L}_lb/_ub (central interval) and hdi{L}_lb/_ub (L = 100·level). key: required where
        the numbers come from fresh draws (`draws` of them); a posterior known by stored draws uses those.
        """
        tail_probability(level)
        choice("scale", scale, SCALES, hint="'constrained' shows the sites on their own scale, 'unconstrained' θ")
        theta, independent = self._summary_draws(key, positive_int("draws", draws, hint="draws of θ, e.g. 20000"))
        site_map = self.site_map
        if scale == "unconstrained" or site_map is None:
            frame = summary_frame(
                theta,
                self.theta_names,
                level,
                label=UNCONSTRAINED,
                description=self.describe(),
                independent=independent,
                moments=self._exact_moments(),
                central=self._exact_interval(level),
            )
            if site_map is None and scale == "constrained":
                frame.note += "; no site map, so θ is shown unconstrained"
            return frame
        values, names, central = constrained_rows(site_map, theta, self._exact_interval(level))
        return summary_frame(
            values,
            names,
            level,
            label=CONSTRAINED,
            description=self.describe(),
            independent=independent,
            central=central,
        )

    def __repr__(self) -> str:
        site_map = self.site_map
        sites = "unknown" if site_map is None else ", ".join(_site_label(site) for site in site_map.sites)
        return f"{type(self).__name__}({self.describe()}; d = {len(self.theta_names)}, sites: {sites})"


def _site_label(site) -> str:
    return site.name if site.shape == () else f"{site.name}[{','.join(map(str, site.shape))}]"
