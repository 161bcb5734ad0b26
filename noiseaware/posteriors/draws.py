"""`DrawsPosterior`: a posterior known by stored draws of θ (MCMC chains), e.g. the non-private reference.

θ draws (C, K, d) in the model's unconstrained space. `sample` resamples the stored draws (without
replacement while n ≤ C·K); intervals are empirical quantiles of the draws; `save` writes an ArviZ
DataTree whose `posterior` group holds θ (chain, draw, theta_dim).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import ClassVar

import jax
import numpy as np
import xarray as xr

from ..util.diagnostics import Diagnostics, NoDiagnostics
from ..util.files import atomic_write, plain
from ..util.keys import as_key
from .base import interval_table, tail_probability

__all__ = ["DrawsPosterior"]


@dataclasses.dataclass(frozen=True, eq=False)
class DrawsPosterior:
    """θ draws (chains, draws, d), with the method that made them, coordinate names and diagnostics."""

    chains: np.ndarray
    method: str
    names: tuple[str, ...] | None = None
    diagnostics: Diagnostics = NoDiagnostics()

    kind: ClassVar[str] = "posterior known by its draws"

    def __post_init__(self):
        chains = np.asarray(self.chains, np.float64)
        if chains.ndim != 3 or chains.shape[0] * chains.shape[1] < 1:
            raise ValueError(f"chains must be (chains, draws, d) with at least one draw; got shape {chains.shape}")
        object.__setattr__(self, "chains", chains)
        if self.names is not None and len(self.names) != chains.shape[-1]:
            raise ValueError(f"names has {len(self.names)} labels for d = {chains.shape[-1]}")

    @property
    def theta_names(self) -> tuple[str, ...]:
        return tuple(self.names) if self.names is not None else tuple(f"theta[{j}]" for j in range(self.chains.shape[-1]))

    @property
    def draws(self) -> np.ndarray:
        """All draws, chains concatenated: (C·K, d)."""
        return self.chains.reshape(-1, self.chains.shape[-1])

    def sample(self, key, n: int = 20_000) -> np.ndarray:
        """n of the stored draws (n, d), without replacement when n ≤ C·K, with it otherwise."""
        flat = self.draws
        index = jax.random.choice(as_key(key), flat.shape[0], (n,), replace=n > flat.shape[0])
        return flat[np.asarray(index)]

    def interval(self, level: float = 0.9, *, key=None) -> tuple[np.ndarray, np.ndarray]:
        """Empirical central `level` interval of each θ_j from the stored draws, (d,) ends (no key needed)."""
        alpha = tail_probability(level)
        low, high = np.quantile(self.draws, [alpha, 1.0 - alpha], axis=0)
        return low, high

    def describe(self) -> str:
        chains, draws = self.chains.shape[:2]
        return f"{self.kind}: method {self.method}, {chains} × {draws} draws of θ"

    def summary(self, level: float = 0.9, *, key=None) -> str:
        """A table per θ coordinate: mean, sd and the central `level` interval, under a header line."""
        table = interval_table(self.theta_names, self.draws.mean(axis=0), self.draws.std(axis=0, ddof=1),
                               *self.interval(level), level)
        return f"{self.describe()}\n{table}"

    def to_arviz(self) -> xr.DataTree:
        """A DataTree: `posterior` holds θ (chain, draw, theta_dim); the root's attrs the method and diagnostics."""
        chains, draws = self.chains.shape[:2]
        posterior = xr.Dataset({"theta": (("chain", "draw", "theta_dim"), self.chains)},
                               coords={"chain": np.arange(chains), "draw": np.arange(draws),
                                       "theta_dim": list(self.theta_names)})
        attrs = {"kind": type(self).__name__, "method": self.method,
                 "diagnostics_type": type(self.diagnostics).__name__,
                 "diagnostics": json.dumps(plain(dict(self.diagnostics)))}
        return xr.DataTree.from_dict({"/": xr.Dataset(attrs=attrs), "posterior": posterior})

    def save(self, path: str | os.PathLike, key=None) -> None:
        """Write `to_arviz()` to a netCDF file (.nc) atomically (no key: the draws are stored as they are)."""
        path = Path(path)
        if path.suffix != ".nc":
            raise ValueError(f"posterior files are netCDF: use a .nc path, not {path.name!r}")
        if not path.parent.is_dir():
            raise ValueError(f"cannot save {path}: the directory {path.parent} does not exist; create it first")
        tree = self.to_arviz()
        atomic_write(path, lambda temporary: tree.to_netcdf(temporary, engine="h5netcdf"))
