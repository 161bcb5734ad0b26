"""Posteriors known by stored draws of θ (MCMC chains, released draws): `DrawsPosterior`, its resampling,
intervals and file.

θ draws (C, K, d) in the model's unconstrained space. `resample` draws from the stored draws (without
replacement while n ≤ C·K); intervals are empirical quantiles; summaries are those of the stored draws (no
key: nothing is drawn; MCSE from their effective sample size); `save_draws` writes an ArviZ DataTree whose
`posterior` group holds θ (chain, draw, theta_dim).

Every posterior file carries `checksum`, the fingerprint of what a reader takes from it (the root's attributes and
the groups it reads, `tree_checksum`); from schema version 2 a file without it, or whose content no longer matches
it, is refused (`check_checksum`); version 1 files, written before, load without one.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import xarray as xr

from ..trace.sites import SiteSpec
from ..util.diagnostics import Diagnostics, NoDiagnostics, diagnostics_type
from ..util.files import atomic_write, plain
from ..util.fingerprint import fingerprint
from ..util.keys import as_key
from ..util.notes import Note, notes_from_json, notes_json
from .base import PosteriorBase, tail_probability
from .summary import INTERVAL_LEVEL

__all__ = [
    "BASELINE_SCHEMA",
    "CHECKSUM",
    "DRAWS_SCHEMA",
    "DRAWS_SCHEMA_VERSION",
    "DRAWS_KIND",
    "DrawsPosterior",
    "check_checksum",
    "draws_attrs",
    "draws_interval",
    "read_draws",
    "resample",
    "save_draws",
    "site_attrs",
    "sites_from_attrs",
    "tree_checksum",
]

DRAWS_SCHEMA = "noiseaware-draws-posterior"
BASELINE_SCHEMA = "noiseaware-baseline-posterior"
"""The schema of the data baselines' files of draws written before every file of draws had one schema: read back
like any file of draws."""
DRAWS_SCHEMA_VERSION = 2
"""Version 2 files carry a checksum; version 1 files (none) are still read."""
CHECKSUM = "checksum"
"""The root attribute holding a posterior file's `tree_checksum`."""
DRAWS_GROUP = "posterior"
DRAWS_KIND = "posterior known by its draws"
OLDER_CLASSES = ("DrawsPosterior",)
"""What older files of draws wrote as their `kind`: a class name, not a kind."""


def resample(draws: np.ndarray, key, n: int) -> np.ndarray:
    """n of the stored draws (n, d) from draws (S, d): without replacement when n ≤ S, with it otherwise."""
    index = jax.random.choice(as_key(key), draws.shape[0], (n,), replace=n > draws.shape[0])
    return draws[np.asarray(index)]


def draws_interval(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Quantiles α/2 and 1 − α/2 of draws (S, d) per coordinate, (d,) each."""
    alpha = tail_probability(level)
    low, high = np.quantile(draws, [alpha, 1.0 - alpha], axis=0)
    return low, high


def site_attrs(sites: Sequence[SiteSpec] | None) -> dict[str, str]:
    """The model's sites as a posterior file's root attributes (JSON text; "null" names for unknown sites)."""
    known = tuple(sites or ())
    return {
        "site_names": json.dumps([s.name for s in known]) if sites is not None else "null",
        "site_shapes": json.dumps([list(s.shape) for s in known]),
        "site_transforms": json.dumps([s.transform for s in known]),
        "site_labels": json.dumps([None if s.labels is None else list(s.labels) for s in known]),
    }


def sites_from_attrs(attrs: Mapping[str, Any]) -> tuple[SiteSpec, ...] | None:
    """The sites `site_attrs` wrote (files written before site labels were kept load without them)."""
    names = json.loads(attrs.get("site_names", "null"))
    if names is None:
        return None
    return tuple(
        SiteSpec(name, tuple(shape), transform, None if labels is None else tuple(labels))
        for name, shape, transform, labels in zip(
            names,
            json.loads(attrs["site_shapes"]),
            json.loads(attrs["site_transforms"]),
            json.loads(attrs.get("site_labels", "null")) or [None] * len(names),
        )
    )


def save_draws(
    path: str | os.PathLike,
    theta: np.ndarray,
    theta_names: Sequence[str],
    attrs: Mapping[str, Any],
    *,
    sites: Sequence[SiteSpec] | None = None,
    overwrite: bool = False,
) -> None:
    """Write θ draws (chain, draw, d) as an ArviZ-style DataTree to a .nc file (h5netcdf), atomically: group
    `posterior` holds `theta` (chain, draw, theta_dim) labelled by theta_names; the root holds `attrs` and the
    model's `sites` (`site_attrs`). `load_posterior` reads it back as a `DrawsPosterior`. An existing file is
    replaced only with `overwrite=True`."""
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
    root = {"schema": DRAWS_SCHEMA, "schema_version": DRAWS_SCHEMA_VERSION} | dict(attrs) | site_attrs(sites)
    tree = xr.DataTree.from_dict({"/": xr.Dataset(attrs=root), DRAWS_GROUP: posterior})
    tree.attrs[CHECKSUM] = tree_checksum(tree, (DRAWS_GROUP,))
    atomic_write(path, lambda temporary: tree.to_netcdf(temporary, engine="h5netcdf"), overwrite=overwrite)


def tree_checksum(tree: xr.DataTree, groups: Sequence[str]) -> str:
    """The fingerprint of what a reader takes from a posterior file: the root's attributes but `checksum` and each
    of `groups` present (its variables' and coordinates' values, dtypes and shapes), the same before writing and
    after reading back (attributes and coordinates as plain lists and numbers, however netCDF stores them)."""

    def plain_value(value):
        return value if isinstance(value, str) else np.asarray(value).tolist()

    attrs = {name: plain_value(value) for name, value in tree.attrs.items() if name != CHECKSUM}
    content = {}
    for group in groups:
        if group in tree.children:
            dataset = tree[group].dataset
            content[group] = {
                "data": {name: np.asarray(array.values) for name, array in dataset.data_vars.items()},
                "coords": {name: array.values.tolist() for name, array in dataset.coords.items()},
            }
    return fingerprint({"attrs": attrs, "groups": content})


def check_checksum(tree: xr.DataTree, groups: Sequence[str], path: Path, version: int) -> None:
    """A ValueError naming the file when a file of schema `version` ≥ 2 lacks its checksum or no longer matches it."""
    if version < 2:
        return
    if CHECKSUM not in tree.attrs:
        raise ValueError(
            f"{path} lacks its checksum (the attribute {CHECKSUM!r}, which every posterior file of version {version} "
            "carries): the file was edited or damaged after it was written; save the posterior again"
        )
    if tree_checksum(tree, groups) != str(tree.attrs[CHECKSUM]):
        raise ValueError(
            f"{path} does not match its checksum: its draws or attributes were changed after it was written; save "
            "the posterior again (or ask whoever sent it for the file as written)"
        )


def read_draws(tree: xr.DataTree, path: Path) -> DrawsPosterior:
    """The `DrawsPosterior` of a file `save_draws` wrote (a baseline's saved draws included, and files written before
    they had a schema or sites), opened as `tree`; a file of another schema version is refused."""
    attrs = dict(tree.attrs)
    version = attrs.get("schema_version", 1)
    if version not in range(1, DRAWS_SCHEMA_VERSION + 1):
        raise ValueError(
            f"{path} is a file of draws of schema version {version}; this noiseaware reads versions 1 to "
            f"{DRAWS_SCHEMA_VERSION}: read it with the noiseaware that wrote it"
        )
    if DRAWS_GROUP not in tree.children or "theta" not in tree[DRAWS_GROUP].data_vars:
        raise ValueError(f"{path} lacks the {DRAWS_GROUP}/theta draws: the file is incomplete; save it again")
    check_checksum(tree, (DRAWS_GROUP,), path, int(version))
    theta = tree[DRAWS_GROUP]["theta"]
    diagnostics = diagnostics_type(str(attrs.get("diagnostics_type", ""))).from_mapping(
        json.loads(attrs.get("diagnostics", "{}"))
    )
    kind = str(attrs.get("description", attrs.get("kind", DRAWS_KIND)))  # older baseline files: "description"
    return DrawsPosterior(
        theta.values,
        str(attrs.get("method", "unknown")),
        tuple(str(name) for name in theta["theta_dim"].values),
        diagnostics,
        sites_from_attrs(attrs),
        kind=DRAWS_KIND if kind in OLDER_CLASSES else kind,
        notes=notes_from_json(attrs.get("notes")),
    )


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class DrawsPosterior(PosteriorBase):
    """A posterior known by its draws θ (chains, draws, d): the non-private reference, DP-SGLD, the bootstrap,
    the Bernstein–Sheldon Gibbs samplers, OPS.

    method: the registered method that made it; names: θ's coordinate names (default: the site map's, else
    'theta[j]'); diagnostics: its typed record (whose `describe` gives the description's details); sites: the
    model's sites (None when unknown); kind: what it is, in words; notes: the fit's remarks (`Note`s). Draws,
    intervals and summaries come from the stored draws: no key is needed.
    """

    chains: np.ndarray
    method: str
    names: tuple[str, ...] | None = None
    diagnostics: Diagnostics = NoDiagnostics()
    sites: tuple[SiteSpec, ...] | None = None
    kind: str = DRAWS_KIND
    notes: tuple[Note, ...] = ()

    def __post_init__(self):
        chains = np.asarray(self.chains, np.float64)
        if chains.ndim != 3 or chains.shape[0] * chains.shape[1] < 1:
            raise ValueError(f"chains must be (chains, draws, d) with at least one draw; got shape {chains.shape}")
        object.__setattr__(self, "chains", chains)
        if self.names is not None:
            object.__setattr__(self, "names", tuple(self.names))
            if len(self.names) != chains.shape[-1]:
                raise ValueError(f"names has {len(self.names)} labels for d = {chains.shape[-1]}")
        if self.sites is not None:
            object.__setattr__(self, "sites", tuple(self.sites))
            if self.site_map.dim != chains.shape[-1]:
                raise ValueError(f"the sites describe d = {self.site_map.dim}, the draws d = {chains.shape[-1]}")

    @property
    def theta_names(self) -> tuple[str, ...]:
        if self.names is not None:
            return self.names
        if self.sites is not None:
            return self.site_map.theta_names()
        return tuple(f"theta[{j}]" for j in range(self.chains.shape[-1]))

    @property
    def draws(self) -> np.ndarray:
        """All draws, chains concatenated: (C·K, d)."""
        return self.chains.reshape(-1, self.chains.shape[-1])

    def _sample(self, key, n: int) -> np.ndarray:
        """n of the stored draws (n, d), without replacement when n ≤ C·K, with it otherwise."""
        return resample(self.draws, key, n)

    def _summary_draws(self, key, n: int) -> tuple[np.ndarray, bool]:
        """The stored chains (C, K, d), MCMC draws (key and n unused: nothing is drawn)."""
        return self.chains, False

    def interval(self, level: float = INTERVAL_LEVEL, *, key=None) -> tuple[np.ndarray, np.ndarray]:
        """Quantiles α/2 and 1 − α/2 of the stored draws, (d,) each (no key: nothing is drawn)."""
        return draws_interval(self.draws, level)

    def describe(self) -> str:
        """One line: the kind, the method and the diagnostics' details (default: the number of draws)."""
        chains, draws = self.chains.shape[:2]
        details = self.diagnostics.describe(self) or [f"{chains} × {draws} draws of θ"]
        return f"{self.kind}: " + ", ".join([f"method {self.method}", *details])

    def save(self, path: str | os.PathLike, key=None, *, overwrite: bool = False) -> None:
        """Write the draws to a netCDF file (.nc) atomically (no key: the draws are stored as they are); an
        existing file is replaced only with `overwrite=True`."""
        save_draws(path, self.chains, self.theta_names, draws_attrs(self), sites=self.sites, overwrite=overwrite)


def draws_attrs(post, **more) -> dict[str, Any]:
    """The root attributes of a file of a posterior's draws: its kind, method, diagnostics and notes (and `more`)."""
    return {
        "kind": post.kind,
        "method": post.method,
        "diagnostics_type": type(post.diagnostics).__name__,
        "diagnostics": json.dumps(plain(dict(post.diagnostics))),
        "notes": notes_json(post.notes),
    } | more
