"""Posteriors that are mixtures over the VI optimum φ* (docs/method.md §3): noise-aware, naive and DPVIm.

With draws φ*_k = (μ*_k, ρ*_k), k = 1..K, the posterior over the unconstrained θ (d,) is

    p̂(θ | trace) = (1/K) Σ_k N(θ; μ*_k, diag(softplus(ρ*_k)²)),

so E[θ] = E[μ*] and Var[θ] = Var[μ*] + E[softplus(ρ*)²]. `NoiseAwarePosterior` draws φ* from the
gradient model; `NaivePosterior` is the last iterate (K = 1, no Hessian); `DPVImPosterior` spreads φ* by
the converged tail of the trace. One file format holds all three; `load_posterior` returns the right type.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from scipy import special

from ..trace import Trace
from ..trace.sites import SiteMap, SiteSpec
from ..util.diagnostics import Diagnostics, NoDiagnostics, diagnostics_type
from ..util.files import atomic_write, plain
from ..util.keys import as_key, standard_normal
from ..util.tables import text_table
from .base import interval_table, tail_probability

__all__ = [
    "DPVImPosterior",
    "MixturePosterior",
    "NaivePosterior",
    "NoiseAwarePosterior",
    "comparison_table",
    "load_posterior",
    "trace_facts",
]

SCHEMA = "noiseaware-posterior"
SCHEMA_VERSION = 1
GROUP = "gradient_model"
DEFAULT_THETA_DRAWS = 4000


@dataclasses.dataclass(frozen=True)
class MixturePosterior:
    """A posterior over θ from a trace: draws of the VI optimum φ* (and of the Hessian diagonal A).

    optimum_chains (C, K, P), hessian_chains (C, K, P) or None (naive), extra_noise_chains (C, K, P) or
    None: draws per chain. method: "exact", "laplace", "nuts", "naive", ...; prior: the gradient-model
    prior it used (a preset name or a Prior's repr; None for the naive baseline). param_names (P,) label
    φ = (μ, ρ); sites map θ (d,) to the model's named sites (None when the trace had no site map).
    diagnostics: the route's facts (R-hat, ESS, divergences, grid sizes …); info: facts of the trace
    (ε, δ, σ, steps, burn-in).
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

    kind: ClassVar[str] = "posterior over the VI optimum"

    def __post_init__(self):
        if not isinstance(self.diagnostics, Diagnostics):
            raise TypeError(
                f"diagnostics must be a noiseaware Diagnostics record; got {type(self.diagnostics).__name__}"
            )
        optimum = np.asarray(self.optimum_chains, np.float64)
        if optimum.ndim != 3 or optimum.shape[-1] % 2 or optimum.shape[1] < 1:
            raise ValueError(f"optimum_chains must be (chains, draws, P) with P = 2d even; got shape {optimum.shape}")
        if not np.all(np.isfinite(optimum)):
            raise ValueError("optimum_chains holds non-finite draws: the fit failed; refit or check the trace")
        object.__setattr__(self, "optimum_chains", optimum)
        for name in ("hessian_chains", "extra_noise_chains"):
            value = getattr(self, name)
            if value is not None:
                value = np.asarray(value, np.float64)
                if value.shape != optimum.shape:
                    raise ValueError(f"{name} must have the shape of optimum_chains {optimum.shape}; got {value.shape}")
                object.__setattr__(self, name, value)
        if len(self.param_names) != optimum.shape[-1]:
            raise ValueError(f"param_names has {len(self.param_names)} labels for P = {optimum.shape[-1]} parameters")
        object.__setattr__(self, "param_names", tuple(self.param_names))
        if self.sites is not None and SiteMap(tuple(self.sites)).dim != self.dim:
            raise ValueError(f"the sites describe d = {SiteMap(tuple(self.sites)).dim}, the draws d = {self.dim}")

    # ------------------------------------------------------------------ shapes and draws

    @property
    def n_params(self) -> int:
        """P = 2d."""
        return self.optimum_chains.shape[-1]

    @property
    def dim(self) -> int:
        """d, the dimension of θ."""
        return self.n_params // 2

    @property
    def site_map(self) -> SiteMap | None:
        return None if self.sites is None else SiteMap(tuple(self.sites))

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

    def _mixture(self) -> tuple[np.ndarray, np.ndarray]:
        """The components' means μ*_k and sds softplus(ρ*_k), (C·K, d) each."""
        draws = self.optimum_draws
        return draws[:, : self.dim], np.logaddexp(0.0, draws[:, self.dim :])

    def sample(self, key, n: int = 20000) -> np.ndarray:
        """n draws of θ (n, d), unconstrained: k uniform over the K draws, θ = μ*_k + softplus(ρ*_k) ⊙ z."""
        means, sds = self._mixture()
        pick, noise = jax.random.split(as_key(key))
        with jax.enable_x64(True):
            k = np.asarray(jax.random.randint(pick, (n,), 0, means.shape[0], jnp.int64))
        return means[k] + sds[k] * standard_normal(noise, (n, self.dim))

    def constrained_sample(self, key, n: int = 20000) -> dict[str, np.ndarray]:
        """n draws of θ mapped to the model's own space: {site: (n, *site shape)}."""
        return self._constrain(self._require_sites("constrained_sample"), self.sample(key, n))

    @staticmethod
    def _constrain(site_map: SiteMap, theta: np.ndarray) -> dict[str, np.ndarray]:
        """θ (…, d) float64 → {site: value in the model's own space}, computed in float64."""
        with jax.enable_x64(True):
            return {name: np.asarray(value) for name, value in site_map.constrain(jnp.asarray(theta)).items()}

    def _require_sites(self, what: str) -> SiteMap:
        if self.sites is None:
            raise ValueError(
                f"{what} needs the model's site map, which this trace did not record: record with noiseaware, "
                "or pass sites=... to Trace.from_arrays"
            )
        return self.site_map

    # ------------------------------------------------------------------ summaries

    @property
    def theta_mean(self) -> np.ndarray:
        """E[θ] = E[μ*], (d,)."""
        return self._mixture()[0].mean(axis=0)

    @property
    def theta_sd(self) -> np.ndarray:
        """sd[θ] = sqrt(Var[μ*] + E[softplus(ρ*)²]), (d,)."""
        means, sds = self._mixture()
        return np.sqrt(means.var(axis=0) + np.mean(sds**2, axis=0))

    def interval(self, level: float = 0.9, *, key=None) -> tuple[np.ndarray, np.ndarray]:
        """The central `level` credible interval of each θ_j, (d,) ends: exact quantiles of the mixture (no key)."""
        alpha, mixture = tail_probability(level), self._mixture()
        return mixture_quantile(*mixture, alpha), mixture_quantile(*mixture, 1.0 - alpha)

    def optimum_interval(self, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """The central `level` interval of each φ*_j from its draws, (P,) ends (a point for the naive baseline)."""
        alpha = tail_probability(level)
        return tuple(np.quantile(self.optimum_draws, [alpha, 1.0 - alpha], axis=0))

    def summary(self, level: float = 0.9, *, key=None) -> str:
        """A table per θ coordinate: mean, sd and the central `level` interval, under a header line."""
        table = interval_table(self.theta_names, self.theta_mean, self.theta_sd, *self.interval(level), level)
        return f"{self.describe()}\n{table}"

    def describe(self) -> str:
        """One line: method, prior, number of draws and the main diagnostics."""
        chains, draws = self.optimum_chains.shape[:2]
        parts = [f"method {self.method}"]
        if self.prior is not None:
            parts.append(f"prior {self.prior}")
        parts.append(f"{chains} × {draws} draws of φ*" if chains > 1 else f"{draws} draws of φ*")
        for key in ("max_rhat", "min_ess", "divergences"):
            if key in self.diagnostics:
                value = self.diagnostics[key]
                parts.append(f"{key.replace('_', ' ')} {value:.4g}" if isinstance(value, float) else f"{key} {value}")
        return f"{self.kind}: " + ", ".join(parts)

    # ------------------------------------------------------------------ ArviZ and files

    def to_arviz(self, key) -> xr.DataTree:
        """An ArviZ DataTree: group `posterior` holds θ by site name in the model's own space (one θ per φ*
        draw, paired with it, or 4000 for the naive baseline) — or `theta` with coordinate names when there is
        no site map;
        group `gradient_model` holds optimum, hessian and extra_noise (chain, draw, param); the root's attrs
        hold the method, prior, diagnostics and trace facts."""
        chains, draws = self.optimum_chains.shape[:2]
        if chains * draws == 1:
            chains, draws = 1, DEFAULT_THETA_DRAWS
            theta = self.sample(key, draws)[None]
        else:
            # θ[c, k] ~ N(μ*[c, k], softplus(ρ*[c, k])²): paired with its φ* draw, so chains stay chains
            mu, rho = self.optimum_chains[..., : self.dim], self.optimum_chains[..., self.dim :]
            theta = mu + np.logaddexp(0.0, rho) * standard_normal(as_key(key), mu.shape)
        sample_dims = ("chain", "draw")
        coords = {"chain": np.arange(chains), "draw": np.arange(draws)}
        if self.sites is None:
            posterior = xr.Dataset(
                {"theta": (sample_dims + ("theta_dim",), theta)}, coords=coords | {"theta_dim": list(self.theta_names)}
            )
        else:
            posterior = xr.Dataset(
                {
                    name: (sample_dims + tuple(f"{name}_dim_{i}" for i in range(value.ndim - 2)), value)
                    for name, value in self._constrain(self.site_map, theta).items()
                },
                coords=coords,
            )
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
        return xr.DataTree.from_dict(
            {
                "/": xr.Dataset(attrs=self._attrs()),
                "posterior": posterior,
                GROUP: xr.Dataset(gradient, coords=model_coords),
            }
        )

    def _attrs(self) -> dict[str, Any]:
        sites = self.sites or ()
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "kind": type(self).__name__,
            "method": self.method,
            "diagnostics_type": type(self.diagnostics).__name__,
            "prior": "" if self.prior is None else self.prior,
            "diagnostics": json.dumps(plain(dict(self.diagnostics))),
            "info": json.dumps(plain(self.info)),
            "site_names": json.dumps([s.name for s in sites]) if self.sites is not None else "null",
            "site_shapes": json.dumps([list(s.shape) for s in sites]),
            "site_transforms": json.dumps([s.transform for s in sites]),
        }

    def save(self, path: str | os.PathLike, key) -> None:
        """Write `to_arviz(key)` to a netCDF file (.nc, h5netcdf) atomically; `load_posterior` reads it back."""
        path = Path(path)
        if path.suffix != ".nc":
            raise ValueError(f"posterior files are netCDF: use a .nc path, not {path.name!r}")
        if not path.parent.is_dir():
            raise ValueError(f"cannot save {path}: the directory {path.parent} does not exist; create it first")
        tree = self.to_arviz(key)
        atomic_write(path, lambda temporary: tree.to_netcdf(temporary, engine="h5netcdf"))


@dataclasses.dataclass(frozen=True)
class NoiseAwarePosterior(MixturePosterior):
    """The noise-aware posterior: K draws of φ* (and A, u) from the gradient model fitted to a trace."""

    kind: ClassVar[str] = "noise-aware posterior"


@dataclasses.dataclass(frozen=True)
class NaivePosterior(MixturePosterior):
    """The naive baseline: the last iterate's q_{φ_T} (K = 1, no Hessian), unaware of the DP noise."""

    kind: ClassVar[str] = "naive posterior (last DPVI iterate, ignores the DP noise)"


@dataclasses.dataclass(frozen=True)
class DPVImPosterior(MixturePosterior):
    """The DPVIm-style baseline: φ spread around a centre by the variance of the converged trace tail."""

    kind: ClassVar[str] = "DPVIm-style posterior"


def trace_facts(trace: Trace, **more) -> dict[str, Any]:
    """The trace's settings a posterior carries: privacy level and size (and `more`, e.g. the burn-in)."""
    return {
        "epsilon": trace.epsilon,
        "delta": trace.delta,
        "noise_multiplier": trace.noise_multiplier,
        "clip": trace.clip,
        "sampling_rate": trace.sampling_rate,
        "n_examples": trace.n_examples,
        "steps": trace.steps,
    } | more


KINDS = {cls.__name__: cls for cls in (NoiseAwarePosterior, NaivePosterior, DPVImPosterior)}
"""The mixture posteriors by class name, as saved in a posterior file's `kind` attribute."""
_KIND_OF_METHOD = {"naive": "NaivePosterior", "dpvim": "DPVImPosterior"}


def load_posterior(path: str | os.PathLike) -> MixturePosterior:
    """Read a posterior written by `MixturePosterior.save` (noise-aware, naive or DPVIm), validating its schema."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no posterior file at {path}: check the path")
    try:
        tree = xr.open_datatree(path, engine="h5netcdf")
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} is not a readable netCDF posterior file ({error})") from None
    with tree:
        attrs = dict(tree.attrs)
        if attrs.get("schema") != SCHEMA or attrs.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"{path} is not a noiseaware posterior (schema {attrs.get('schema')!r} version "
                f"{attrs.get('schema_version')!r}; expected {SCHEMA!r} version {SCHEMA_VERSION})"
            )
        if GROUP not in tree.children or "optimum" not in tree[GROUP].data_vars:
            raise ValueError(f"{path} lacks the {GROUP}/optimum draws: the file is incomplete; save it again")
        model = tree[GROUP].to_dataset()
        names = json.loads(attrs["site_names"])
        sites = (
            None
            if names is None
            else tuple(
                SiteSpec(name, tuple(shape), transform)
                for name, shape, transform in zip(
                    names, json.loads(attrs["site_shapes"]), json.loads(attrs["site_transforms"])
                )
            )
        )
        method = str(attrs["method"])
        kind = KINDS[str(attrs.get("kind", _KIND_OF_METHOD.get(method, "NoiseAwarePosterior")))]
        diagnostics = diagnostics_type(str(attrs.get("diagnostics_type", ""))).from_mapping(
            json.loads(attrs["diagnostics"])
        )
        return kind(
            optimum_chains=model["optimum"].values,
            hessian_chains=model["hessian"].values if "hessian" in model else None,
            extra_noise_chains=model["extra_noise"].values if "extra_noise" in model else None,
            method=method,
            param_names=tuple(str(name) for name in model["param"].values),
            sites=sites,
            prior=str(attrs["prior"]) or None,
            diagnostics=diagnostics,
            info=json.loads(attrs["info"]),
        )


def comparison_table(posteriors: Mapping[str, MixturePosterior], level: float = 0.9, truth=None) -> str:
    """Side-by-side central `level` intervals of θ per method (and the true θ when given)."""
    names = next(iter(posteriors.values())).theta_names
    columns = {label: post.interval(level) for label, post in posteriors.items()}
    header = ["θ (unconstrained)"] + [f"{label} {100 * level:g}%" for label in columns]
    rows = []
    for j, name in enumerate(names):
        row = [name] + [f"[{low[j]:.4g}, {high[j]:.4g}]" for low, high in columns.values()]
        if truth is not None:
            row.append(f"{float(np.asarray(truth)[j]):.4g}")
        rows.append(row)
    if truth is not None:
        header.append("truth")
    return text_table(header, rows)


def mixture_quantile(means: np.ndarray, sds: np.ndarray, probability: float) -> np.ndarray:
    """The `probability` quantile of (1/K) Σ_k N(means_k, sds_k²) per column: bisection on the CDF, (d,).

    means, sds (K, d). The quantile lies between the extreme components' own quantiles; 60 halvings of
    that bracket give it to machine precision.
    """
    z = math.sqrt(2.0) * special.erfinv(2.0 * probability - 1.0)
    low = np.min(means + z * sds, axis=0)
    high = np.max(means + z * sds, axis=0)
    for _ in range(60):
        middle = 0.5 * (low + high)
        below = np.mean(special.ndtr((middle - means) / sds), axis=0) < probability
        low, high = np.where(below, middle, low), np.where(below, high, middle)
    return 0.5 * (low + high)
