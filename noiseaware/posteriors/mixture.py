"""Posteriors that are mixtures over the VI optimum φ* (docs/method.md §3): noise-aware, naive and DPVIm.

With draws φ*_k, k = 1..K, the posterior over the unconstrained θ (d,) is

    p̂(θ | trace) = (1/K) Σ_k N(θ; μ*_k, Σ(φ*_k)),

Σ(φ) the variational family's covariance (`trace.families`: diag(softplus(ρ)²) for mean-field, L Lᵀ for
full-rank, diag(softplus(ρ)²) + B Bᵀ for low-rank), so E[θ] = E[μ*] and Var[θ_j] = Var[μ*_j] + E[Σ_jj(φ*)];
the marginals (intervals, quantiles) are mixtures of normals with sds sqrt(Σ_jj(φ*_k)). One type holds them
all, told apart by their `kind` and their diagnostics: the noise-aware posterior draws φ* from the gradient
model; the naive one is the last iterate (K = 1, no Hessian); DPVIm spreads φ* by the converged tail of the
trace, random scaling by its pivot, partitioned VI combines clients' factors. Each keeps the trace's iterates
μ_t (DP-released) for plots and ArviZ. One file format holds them all (`save`, `to_arviz`;
`posteriors.files.load_posterior`).

Why this module is long: the mixture's components (any variational family), draws, exact marginals, summaries
and its ArviZ form are the methods of one frozen object that every posterior over the VI optimum shares.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import xarray as xr
from scipy import special

from ..checks import TraceDiagnosis
from ..trace.families import MEAN_FIELD, VariationalFamily, family_for
from ..trace.run import Run
from ..trace.sites import SiteMap, SiteSpec
from ..util.defaults import DRAWS
from ..util.diagnostics import Diagnostics, NoDiagnostics
from ..util.errors import NON_FINITE, FitFailure
from ..util.files import atomic_write, plain
from ..util.keys import as_key, standard_normal
from ..util.notes import Note, notes_json
from .base import SUMMARY_DRAWS, PosteriorBase, tail_probability
from .draws import CHECKSUM, site_attrs, tree_checksum
from .summary import INTERVAL_LEVEL, UNCONSTRAINED, constrain

__all__ = [
    "DPVIM",
    "MixturePosterior",
    "NAIVE",
    "NOISE_AWARE",
    "LAPLACE",
    "PVI",
    "RANDOM_SCALING",
    "SANDWICH",
    "trace_facts",
    "trace_iterates",
]

SCHEMA = "noiseaware-posterior"
SCHEMA_VERSION = 2
"""Version 2 files carry a checksum of what `load_posterior` reads (`draws.tree_checksum`); version 1 files do not."""
GROUP = "gradient_model"
ITERATES = "dpvi"
"""The file's and `to_arviz`'s group of the trace's iterates μ_t."""
LOG_PRIOR, LOG_LIKELIHOOD = "log_prior", "log_likelihood"
"""The groups of each φ* draw's gradient-model log prior and log-likelihood (ArviZ's names: `az.psense_summary`)."""
LOG_VARIABLES = {LOG_PRIOR: "gradient_model", LOG_LIKELIHOOD: "trace"}
"""The variable each of those groups holds, (chain, draw)."""
READ_GROUPS = (GROUP, ITERATES, LOG_PRIOR, LOG_LIKELIHOOD)
"""The groups `load_posterior` reads back, which the file's checksum covers (`posterior` is for ArviZ only)."""
DEFAULT_THETA_DRAWS = DRAWS
NOISE_AWARE = "noise-aware posterior"
NAIVE = "naive posterior"
DPVIM = "DPVIm posterior"
RANDOM_SCALING = "random-scaling posterior (frequentist, from the iterates)"
PVI = "partitioned-VI posterior (clients' factors combined)"
"""The kinds of posterior over the VI optimum: the gradient model's, and the trace baselines'."""
LAPLACE = "noise-aware Laplace posterior (a point trace)"
SANDWICH = "sandwich (frequentist, a point trace)"
"""The kinds of a point trace's posteriors (`posteriors.laplace`)."""


@dataclasses.dataclass(frozen=True, repr=False)
class MixturePosterior(PosteriorBase):
    """A posterior over θ from a trace: draws of the VI optimum φ* (and of the Hessian diagonal A).

    optimum_chains (C, K, P), hessian_chains (C, K, P) or None (naive), extra_noise_chains (C, K, P) or
    None: draws per chain. method: "exact", "laplace", "nuts", "naive", ...; prior: the gradient-model
    prior it used (a preset name or a Prior's repr; None for the naive baseline). param_names (P,) label
    φ; family: the trace's variational family name (its layout of φ, `trace.families`); factor: "mean" (the
    θ-mixture's components take the factor block of φ* at its posterior mean) or "mixture" (at each draw);
    sites map θ (d,) to the model's named sites (None when the trace had no site map).
    diagnostics: the route's facts (R-hat, ESS, divergences, grid sizes …); info: facts of the trace
    (ε, δ, σ, steps, burn-in); iterates (T, d): the trace's μ_t, t = 0..T−1 (`trace_iterates`; DP-released
    values), or None. checks: the trace's `TraceDiagnosis` (set by `fit`), whose `theta_verdicts()` say which
    θ coordinates the trace checks trust; None when the checks were off. notes: the fit's remarks (`Note`s: weak
    identification, grid edges, mixing, the repair) as data, issued as warnings by `fit`. kind: what it is, in
    words (NOISE_AWARE, "naive posterior", "DPVIm posterior", …); the one-line description takes its details
    from the diagnostics where they have their own (`Diagnostics.describe`). log_prior, log_likelihood (C, K) or
    None: each φ* draw's log prior and log-likelihood of the trace under the gradient model that drew it (up to
    constants), for power-scaling prior sensitivity (`prior_sensitivity`).
    """

    optimum_chains: np.ndarray
    hessian_chains: np.ndarray | None
    extra_noise_chains: np.ndarray | None
    method: str
    param_names: tuple[str, ...]
    sites: tuple[SiteSpec, ...] | None = None
    prior: str | None = None
    diagnostics: Diagnostics = NoDiagnostics()
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    iterates: np.ndarray | None = None
    checks: TraceDiagnosis | None = None
    family: str = MEAN_FIELD
    factor: str = "mean"
    notes: tuple[Note, ...] = ()
    kind: str = NOISE_AWARE
    log_prior: np.ndarray | None = None
    log_likelihood: np.ndarray | None = None

    def __post_init__(self):
        if not isinstance(self.diagnostics, Diagnostics):
            raise TypeError(
                f"diagnostics must be a noiseaware Diagnostics record; got {type(self.diagnostics).__name__}"
            )
        optimum = np.asarray(self.optimum_chains, np.float64)
        if optimum.ndim != 3 or optimum.shape[1] < 1:
            raise ValueError(f"optimum_chains must be (chains, draws, P); got shape {optimum.shape}")
        family_for(self.family, optimum.shape[-1])  # a ValueError when P does not fit the family
        if self.factor not in ("mean", "mixture"):
            raise ValueError(f"factor must be 'mean' or 'mixture', got {self.factor!r}")
        if not np.all(np.isfinite(optimum)):
            raise FitFailure(
                NON_FINITE, "optimum_chains holds non-finite draws: the fit failed; refit or check the trace"
            )
        object.__setattr__(self, "optimum_chains", optimum)
        for name in ("hessian_chains", "extra_noise_chains"):
            value = getattr(self, name)
            if value is not None:
                value = np.asarray(value, np.float64)
                if value.shape != optimum.shape:
                    raise ValueError(f"{name} must have the shape of optimum_chains {optimum.shape}; got {value.shape}")
                object.__setattr__(self, name, value)
        for name in ("log_prior", "log_likelihood"):
            value = getattr(self, name)
            if value is not None:
                value = np.asarray(value, np.float64)
                if value.shape != optimum.shape[:2]:
                    raise ValueError(f"{name} must be (chains, draws) {optimum.shape[:2]}; got {value.shape}")
                object.__setattr__(self, name, value)
        if len(self.param_names) != optimum.shape[-1]:
            raise ValueError(f"param_names has {len(self.param_names)} labels for P = {optimum.shape[-1]} parameters")
        object.__setattr__(self, "param_names", tuple(self.param_names))
        if self.sites is not None and SiteMap(tuple(self.sites)).dim != self.dim:
            raise ValueError(f"the sites describe d = {SiteMap(tuple(self.sites)).dim}, the draws d = {self.dim}")
        if self.iterates is not None:
            iterates = np.asarray(self.iterates)
            if iterates.ndim != 2 or iterates.shape[1] != self.dim:
                raise ValueError(f"iterates must be μ_t (T, d) with d = {self.dim}; got shape {iterates.shape}")
            object.__setattr__(self, "iterates", iterates)

    @classmethod
    def from_trace(cls, trace: Run, optimum, *, method: str, hessian=None, extra_noise=None, **fields):
        """A posterior of `trace` from draws of φ* (C, K, P) (and of A, u): the trace's names, family, sites, facts
        and iterates μ_t filled in; fields: the rest (diagnostics, prior, and info facts beyond the trace's), and
        the family and param_names where the components are not in the trace's layout (a point trace's)."""
        info = trace_facts(trace, **fields.pop("info", {}))
        layout = {"param_names": trace.param_names, "family": trace.settings.variational_family}
        return cls(
            optimum_chains=optimum,
            hessian_chains=hessian,
            extra_noise_chains=extra_noise,
            method=method,
            sites=trace.settings.sites,
            info=info,
            iterates=trace_iterates(trace),
            **(layout | fields),
        )

    # ------------------------------------------------------------------ shapes and draws

    @property
    def n_params(self) -> int:
        """P, the length of φ (2d for mean-field)."""
        return self.optimum_chains.shape[-1]

    @property
    def variational_family(self) -> VariationalFamily:
        """The family of the components N(μ*, Σ(φ*)), with its layout of φ."""
        return family_for(self.family, self.n_params)

    @property
    def dim(self) -> int:
        """d, the dimension of θ."""
        return self.variational_family.dim

    @property
    def theta_names(self) -> tuple[str, ...]:
        """Labels of θ's coordinates (from the μ half of param_names)."""
        return tuple(name.removeprefix("mu:") for name in self.param_names[: self.dim])

    @property
    def optimum_draws(self) -> np.ndarray:
        """Draws of φ* = (μ*, ρ*), chains concatenated: (C·K, P)."""
        return self.optimum_chains.reshape(-1, self.n_params)

    @property
    def hessian_draws(self) -> np.ndarray | None:
        """Draws of the Hessian diagonal A, (C·K, P); None for the naive baseline."""
        return None if self.hessian_chains is None else self.hessian_chains.reshape(-1, self.n_params)

    @property
    def extra_noise_draws(self) -> np.ndarray | None:
        """Draws of |u|, the extra gradient-noise sd, (C·K, P); None without extra noise."""
        return None if self.extra_noise_chains is None else self.extra_noise_chains.reshape(-1, self.n_params)

    def _components(self, optimum: np.ndarray) -> np.ndarray:
        """The φ of the θ-mixture's components from φ* draws (…, P): the draws themselves, with the factor block
        (full-rank ℓ, low-rank b) at its posterior mean when `factor` is "mean".

        Mixing over uncertain factor entries inflates the covariance, E[L Lᵀ] = L̄ L̄ᵀ + Cov(ℓ) terms, a bias
        rather than uncertainty about θ (docs/method.md §3).
        """
        start = 2 * self.variational_family.dim
        if self.factor == "mixture" or start == self.n_params:
            return optimum
        out = np.array(optimum, np.float64)
        out[..., start:] = self.optimum_draws[:, start:].mean(axis=0)
        return out

    def _mixture(self) -> tuple[np.ndarray, np.ndarray]:
        """The components' means μ*_k and marginal sds sqrt(Σ_jj(φ_k)), (C·K, d) each."""
        draws, family = self._components(self.optimum_draws), self.variational_family
        return family.mean(draws), family.marginal_sd(draws)

    def _sample(self, key, n: int) -> np.ndarray:
        """n draws of θ (n, d), unconstrained: k uniform over the K draws, θ = μ*_k + A(φ*_k) z, z ~ N(0, I_m)."""
        pick, noise = jax.random.split(key)
        with jax.enable_x64(True):
            k = np.asarray(jax.random.randint(pick, (n,), 0, self.optimum_draws.shape[0], jnp.int64))
        return self._component_draws(self.optimum_draws[k], noise)

    def _component_draws(self, optimum: np.ndarray, key) -> np.ndarray:
        """One θ from each component N(μ*, Σ(φ*)) of `optimum` (…, P): (…, d)."""
        family = self.variational_family
        return family.sample(self._components(optimum), standard_normal(key, optimum.shape[:-1] + (family.noise_dim,)))

    # ------------------------------------------------------------------ summaries

    @property
    def theta_mean(self) -> np.ndarray:
        """E[θ] = E[μ*], (d,)."""
        return self._mixture()[0].mean(axis=0)

    @property
    def theta_sd(self) -> np.ndarray:
        """sd[θ] = sqrt(Var[μ*] + E[Σ_jj(φ*)]), (d,)."""
        means, sds = self._mixture()
        return np.sqrt(means.var(axis=0) + np.mean(sds**2, axis=0))

    def interval(self, level: float = INTERVAL_LEVEL, *, key=None) -> tuple[np.ndarray, np.ndarray]:
        """The central `level` credible interval of each θ_j, (d,) ends: exact quantiles of the mixture (no key)."""
        alpha, mixture = tail_probability(level), self._mixture()
        return mixture_quantile(*mixture, alpha), mixture_quantile(*mixture, 1.0 - alpha)

    def optimum_interval(self, level: float = INTERVAL_LEVEL) -> tuple[np.ndarray, np.ndarray]:
        """The central `level` interval of each φ*_j from its draws, (P,) ends (a point for the naive baseline)."""
        alpha = tail_probability(level)
        return tuple(np.quantile(self.optimum_draws, [alpha, 1.0 - alpha], axis=0))

    def summary(
        self, level: float = INTERVAL_LEVEL, *, key=None, scale: str = "constrained", draws: int = SUMMARY_DRAWS
    ):
        """The summary table of `PosteriorBase.summary`, with a column `checks`: the verdict of the trace checks
        per row ("ok", or the checks that fired on it) when the posterior carries them."""
        frame = super().summary(level, key=key, scale=scale, draws=draws)
        if self.checks is not None:
            by_theta = self.sites is None or frame.index.name == UNCONSTRAINED
            frame["checks"] = self.checks.theta_verdicts() if by_theta else self.checks.element_verdicts(self.sites)
        return frame

    def _exact_moments(self) -> tuple[np.ndarray, np.ndarray]:
        return self.theta_mean, self.theta_sd

    def _exact_interval(self, level: float) -> tuple[np.ndarray, np.ndarray]:
        return self.interval(level)

    def gradient_terms(self) -> pd.DataFrame | None:
        """Each term set's posterior probability per coordinate of φ (rows: φ's names; columns: the candidate
        sets, e.g. diagonal, curved, coupled, second-order), or None when the gradient model had the paper's
        diagonal terms only (`Prior.terms`, docs/gradient-model.md)."""
        probability = self.diagnostics.get("term_probability")
        if probability is None:
            return None
        return pd.DataFrame(
            np.asarray(probability).T, index=list(self.param_names), columns=list(self.diagnostics["term_sets"])
        )

    def describe(self) -> str:
        """One line: what the posterior is, how it was made and its main diagnostics (the diagnostics' own words
        where they have them, `Diagnostics.describe`)."""
        return f"{self.kind}: " + ", ".join(self.diagnostics.describe(self) or self._details())

    def _details(self) -> list[str]:
        """The parts of the one-line description after the kind: method, prior, draws, main diagnostics."""
        chains, draws = self.optimum_chains.shape[:2]
        parts = [f"method {self.method}"]
        if self.prior is not None:
            parts.append(f"prior {self.prior}")
        if "optimum_prior" in self.info:
            parts.append(
                "φ*'s prior from the model" if self.info["optimum_prior"] == "model" else "φ*'s prior from the trace"
            )
        parts.append(f"{chains} × {draws} draws of φ*" if chains > 1 else f"{draws} draws of φ*")
        terms = self.gradient_terms()
        if terms is not None:
            beyond = terms[terms["diagonal"] < 0.5] if "diagonal" in terms else terms
            others = beyond.drop(columns=["diagonal"], errors="ignore")
            listed = ", ".join(
                f"{name} {kind} ({others.loc[name, kind]:.2f})" for name, kind in others.idxmax(axis=1).items()
            )
            parts.append(f"gradient terms beyond the diagonal (P > 0.5): {listed or 'none'}")
        for key in ("max_rhat", "min_ess", "divergences"):
            if key in self.diagnostics:
                value = self.diagnostics[key]
                parts.append(f"{key.replace('_', ' ')} {value:.4g}" if isinstance(value, float) else f"{key} {value}")
        return parts

    # ------------------------------------------------------------------ ArviZ and files

    def to_arviz(self, key) -> xr.DataTree:
        """An ArviZ DataTree: group `posterior` holds θ by site name in the model's own space (one θ per φ*
        draw, paired with it, or 4000 for the naive baseline) — or `theta` with coordinate names when there is
        no site map; group `gradient_model` holds optimum, hessian and extra_noise (chain, draw, param); group
        `dpvi` (when the iterates are kept) holds the trace's μ_t per site, unconstrained, as one chain whose
        draws are the steps (chain 1, draw T), so `az.plot_trace(tree, group="dpvi")` shows the DPVI run; the
        root's attrs hold the method, prior, diagnostics and trace facts."""
        chains, draws = self.optimum_chains.shape[:2]
        if chains * draws == 1:
            chains, draws = 1, DEFAULT_THETA_DRAWS
            theta = self.sample(key, draws)[None]
        else:
            # θ[c, k] ~ N(μ*[c, k], Σ(φ*[c, k])): paired with its φ* draw, so chains stay chains
            theta = self._component_draws(self.optimum_chains, as_key(key))
        sample_dims = ("chain", "draw")
        coords = {"chain": np.arange(chains), "draw": np.arange(draws)}
        if self.sites is None:
            posterior = xr.Dataset(
                {"theta": (sample_dims + ("theta_dim",), theta)}, coords=coords | {"theta_dim": list(self.theta_names)}
            )
        else:
            posterior = _site_dataset(self.site_map, constrain(self.site_map, theta), coords, constrained=True)
        gradient = {"optimum": (("chain", "draw", "param"), self.optimum_chains)}
        if self.hessian_chains is not None:
            gradient["hessian"] = (("chain", "draw", "param"), self.hessian_chains)
        if self.extra_noise_chains is not None:
            gradient["extra_noise"] = (("chain", "draw", "param"), self.extra_noise_chains)
        model_coords = {
            "chain": np.arange(self.optimum_chains.shape[0]),
            "draw": np.arange(self.optimum_chains.shape[1]),
            "param": list(self.param_names),
        }
        posterior.attrs["sample_dims"] = list(sample_dims)
        groups = {
            "/": xr.Dataset(attrs=self._attrs()),
            "posterior": posterior,
            GROUP: xr.Dataset(gradient, coords=model_coords),
        }
        if self.iterates is not None:
            groups[ITERATES] = self._iterates_dataset()
        for (group, name), values in zip(LOG_VARIABLES.items(), (self.log_prior, self.log_likelihood), strict=True):
            if values is not None:
                groups[group] = xr.Dataset(
                    {name: (("chain", "draw"), values)}, coords={k: model_coords[k] for k in ("chain", "draw")}
                )
        return xr.DataTree.from_dict(groups)

    def prior_sensitivity(self, key, **options):
        """ArviZ's power-scaling sensitivity of each site to the gradient model's prior and to the trace
        (`az.psense_summary` of `to_arviz(key)`; options go to it): how far each site's posterior moves when the
        prior on (φ*, a, u), or the trace's likelihood, is raised to a power near 1. A prior sensitivity above the
        threshold (0.05) with a small likelihood one is "strong prior / weak likelihood": the trace says little, the
        intervals are mostly the prior's. A pandas DataFrame, one row per site element; a ValueError for a posterior
        without the log densities (a baseline, or a file written before they were kept)."""
        if self.log_prior is None or self.log_likelihood is None:
            raise ValueError(
                f"this {self.kind} keeps no log prior and log-likelihood of its draws (a baseline, or a file written "
                "before they were kept): refit the trace with the gradient model (exact, laplace or nuts)"
            )
        return az.psense_summary(self.to_arviz(key), **options)

    def _iterates_dataset(self) -> xr.Dataset:
        """μ_t per site, unconstrained, (chain 1, draw T, *unconstrained shape); `mu` (1, T, theta_dim) without
        a site map."""
        mu = np.asarray(self.iterates, np.float64)[None]
        coords = {"chain": [0], "draw": np.arange(mu.shape[1])}
        if self.sites is None:
            dataset = xr.Dataset(
                {"mu": (("chain", "draw", "theta_dim"), mu)}, coords=coords | {"theta_dim": list(self.theta_names)}
            )
        else:
            dataset = _site_dataset(self.site_map, self.site_map.unflatten(mu), coords, constrained=False)
        dataset.attrs["sample_dims"] = ["chain", "draw"]
        dataset.attrs["description"] = (
            "DPVI iterates μ_t (unconstrained), one chain whose draws are the steps t in order (every step of a "
            "trace, or the sample rows of a trace summary)"
        )
        return dataset

    def _attrs(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "method": self.method,
            "variational_family": self.family,
            "factor": self.factor,
            "diagnostics_type": type(self.diagnostics).__name__,
            "prior": "" if self.prior is None else self.prior,
            "diagnostics": json.dumps(plain(dict(self.diagnostics))),
            "info": json.dumps(plain(self.info)),
            **site_attrs(self.sites),
            "checks": "null" if self.checks is None else json.dumps(plain(self.checks.to_dict())),
            "theta_verdicts": "null" if self.checks is None else json.dumps(list(self.checks.theta_verdicts())),
            "notes": notes_json(self.notes),
        }

    def save(self, path: str | os.PathLike, key, *, overwrite: bool = False) -> None:
        """Write `to_arviz(key)` to a netCDF file (.nc, h5netcdf) atomically; `load_posterior` reads it back. An
        existing file is replaced only with `overwrite=True` (checked before the draws are made)."""
        path = Path(path)
        if path.suffix != ".nc":
            raise ValueError(f"posterior files are netCDF: use a .nc path, not {path.name!r}")
        if not path.parent.is_dir():
            raise ValueError(f"cannot save {path}: the directory {path.parent} does not exist; create it first")

        def write(temporary: Path) -> None:
            tree = self.to_arviz(key)
            tree.attrs[CHECKSUM] = tree_checksum(tree, READ_GROUPS)
            tree.to_netcdf(temporary, engine="h5netcdf")

        atomic_write(path, write, overwrite=overwrite)


def trace_facts(trace: Run, **more) -> dict[str, Any]:
    """The run's settings a posterior carries: privacy level and size (and `more`, e.g. the burn-in)."""
    s = trace.settings
    return {
        "epsilon": s.epsilon,
        "delta": s.delta,
        "noise_multiplier": s.noise_multiplier,
        "clip": s.clip,
        "sampling_rate": s.sampling_rate,
        "n_examples": s.n_examples,
        "steps": trace.steps,
    } | more


def _site_dataset(site_map: SiteMap, values: Mapping[str, np.ndarray], coords, *, constrained: bool) -> xr.Dataset:
    """{site: (chain, draw, *shape)} as a Dataset with dims (chain, draw, site_dim_0, …); a labelled vector site's
    elements (constrained) take its labels as coordinates."""
    variables, labels = {}, {}
    for site in site_map.sites:
        value = values[site.name]
        dims = tuple(f"{site.name}_dim_{i}" for i in range(value.ndim - 2))
        variables[site.name] = (("chain", "draw") + dims, value)
        if constrained and site.labels is not None and len(site.shape) == 1:
            labels[dims[0]] = list(site.labels)
    return xr.Dataset(variables, coords=dict(coords) | labels)


def trace_iterates(trace: Run) -> np.ndarray:
    """The run's iterates μ_t (T, d) a posterior keeps (a view: nothing is copied); a windowed trace's are its
    sample's (R, d), thinned (`Run.iterates`)."""
    return trace.iterates()[:, : trace.dim]


def mixture_quantile(means: np.ndarray, sds: np.ndarray, probability: float) -> np.ndarray:
    """The `probability` quantile of (1/K) Σ_k N(means_k, sds_k²) per column: bisection on the CDF, (d,).

    means, sds (K, d); a component with sd 0 is a point mass (a sandwich's where the extra noise is 0). The
    quantile lies between the extreme components' own quantiles; 60 halvings of that bracket give it to machine
    precision.
    """
    z = math.sqrt(2.0) * special.erfinv(2.0 * probability - 1.0)
    low = np.min(means + z * sds, axis=0)
    high = np.max(means + z * sds, axis=0)
    for _ in range(60):
        middle = 0.5 * (low + high)
        with np.errstate(divide="ignore", invalid="ignore"):
            cdf = np.where(sds > 0, special.ndtr((middle - means) / sds), middle >= means)
        below = np.mean(cdf, axis=0) < probability
        low, high = np.where(below, middle, low), np.where(below, high, middle)
    return 0.5 * (low + high)
