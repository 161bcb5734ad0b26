"""Posteriors known by stored draws of θ (MCMC chains): the shared resampling, interval and file logic, and
`DrawsPosterior`, the plain such posterior (e.g. the non-private reference).

θ draws (C, K, d) in the model's unconstrained space. `resample` draws from the stored draws (without
replacement while n ≤ C·K); intervals are empirical quantiles; `save_draws` writes an ArviZ DataTree
whose `posterior` group holds θ (chain, draw, theta_dim).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import jax
import numpy as np
import xarray as xr

from ..util.diagnostics import Diagnostics, NoDiagnostics
from ..util.files import atomic_write, plain
from ..util.keys import as_key
from .base import interval_table, tail_probability

__all__ = ["DrawsPosterior", "StoredDraws", "draws_interval", "resample", "save_draws"]


def resample(draws: np.ndarray, key, n: int) -> np.ndarray:
    """n of the stored draws (n, d) from draws (S, d): without replacement when n ≤ S, with it otherwise."""
    index = jax.random.choice(as_key(key), draws.shape[0], (n,), replace=n > draws.shape[0])
    return draws[np.asarray(index)]


def draws_interval(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Quantiles α/2 and 1 − α/2 of draws (S, d) per coordinate, (d,) each."""
    alpha = tail_probability(level)
    low, high = np.quantile(draws, [alpha, 1.0 - alpha], axis=0)
    return low, high


def save_draws(
    path: str | os.PathLike, theta: np.ndarray, theta_names: Sequence[str], attrs: Mapping[str, Any]
) -> None:
    """Write θ draws (chain, draw, d) as an ArviZ-style DataTree to a .nc file (h5netcdf), atomically: group
    `posterior` holds `theta` (chain, draw, theta_dim) labelled by theta_names; the root holds `attrs`."""
    path = Path(path)
    if path.suffix != ".nc":
        raise ValueError(f"posterior files are netCDF: use a .nc path, not {path.name!r}")
    if not path.parent.is_dir():
        raise ValueError(f"cannot save {path}: the directory {path.parent} does not exist; create it first")
    theta = np.asarray(theta, np.float64)
    posterior = xr.Dataset(
        {"theta": (("chain", "draw", "theta_dim"), theta)},
        coords={"chain": np.arange(theta.shape[0]), "draw": np.arange(theta.shape[1]), "theta_dim": list(theta_names)},
    )
    posterior.attrs["sample_dims"] = ["chain", "draw"]
    tree = xr.DataTree.from_dict({"/": xr.Dataset(attrs=dict(attrs)), "posterior": posterior})
    atomic_write(path, lambda temporary: tree.to_netcdf(temporary, engine="h5netcdf"))


class StoredDraws:
    """What a posterior known by its draws `chains` (C, K, d) computes from them (mixed into such classes)."""

    chains: np.ndarray

    @property
    def draws(self) -> np.ndarray:
        """All draws, chains concatenated: (C·K, d)."""
        return self.chains.reshape(-1, self.chains.shape[-1])

    def sample(self, key, n: int = 20_000) -> np.ndarray:
        """n of the stored draws (n, d), without replacement when n ≤ C·K, with it otherwise."""
        return resample(self.draws, key, n)

    def interval(self, level: float = 0.9, *, key=None) -> tuple[np.ndarray, np.ndarray]:
        """Quantiles α/2 and 1 − α/2 of the stored draws, (d,) each (no key: nothing is drawn)."""
        return draws_interval(self.draws, level)


@dataclasses.dataclass(frozen=True, eq=False)
class DrawsPosterior(StoredDraws):
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
        return (
            tuple(self.names) if self.names is not None else tuple(f"theta[{j}]" for j in range(self.chains.shape[-1]))
        )

    def describe(self) -> str:
        chains, draws = self.chains.shape[:2]
        return f"{self.kind}: method {self.method}, {chains} × {draws} draws of θ"

    def summary(self, level: float = 0.9, *, key=None) -> str:
        """A table per θ coordinate: mean, sd and the central `level` interval, under a header line."""
        table = interval_table(
            self.theta_names, self.draws.mean(axis=0), self.draws.std(axis=0, ddof=1), *self.interval(level), level
        )
        return f"{self.describe()}\n{table}"

    def save(self, path: str | os.PathLike, key=None) -> None:
        """Write the draws to a netCDF file (.nc) atomically (no key: the draws are stored as they are)."""
        save_draws(
            path,
            self.chains,
            self.theta_names,
            {
                "kind": type(self).__name__,
                "method": self.method,
                "diagnostics_type": type(self.diagnostics).__name__,
                "diagnostics": json.dumps(plain(dict(self.diagnostics))),
            },
        )
