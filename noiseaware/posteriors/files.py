"""Posterior files: `load_posterior` reads what `MixturePosterior.save` and `save_draws` write.

A file of θ draws (`save_draws`: a posterior known by its draws) loads as a `DrawsPosterior`. A mixture's file
(h5netcdf) holds a noise-aware, naive or DPVIm posterior: the root's attributes (schema, type, method, prior,
diagnostics, trace facts, the site map), group `gradient_model` with the draws of φ* (and A, u), and, when kept,
group `dpvi` with the trace's iterates μ_t; `posterior` holds θ draws for ArviZ and is not read back. Files
written before the iterates, the site labels or the trace checks were kept load without them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr

from ..checks import TraceDiagnosis
from ..trace.families import MEAN_FIELD
from ..trace.sites import SiteSpec
from ..util.diagnostics import diagnostics_type
from ..util.notes import notes_from_json
from .draws import (
    BASELINE_SCHEMA,
    DRAWS_GROUP,
    DRAWS_SCHEMA,
    DrawsPosterior,
    check_checksum,
    read_draws,
    sites_from_attrs,
)
from .mixture import (
    DPVIM,
    GROUP,
    ITERATES,
    LOG_LIKELIHOOD,
    LOG_PRIOR,
    LOG_VARIABLES,
    NAIVE,
    NOISE_AWARE,
    PVI,
    RANDOM_SCALING,
    READ_GROUPS,
    SCHEMA,
    SCHEMA_VERSION,
    MixturePosterior,
)

__all__ = ["load_posterior"]

DRAWS_SCHEMAS = (DRAWS_SCHEMA, BASELINE_SCHEMA)
"""The schemas of files of θ draws: `save_draws`'s own, and the data baselines'."""


OLDER_KINDS = {
    "NoiseAwarePosterior": NOISE_AWARE,
    "NaivePosterior": NAIVE,
    "DPVImPosterior": DPVIM,
    "RandomScalingPosterior": RANDOM_SCALING,
    "PVIPosterior": PVI,
}
"""The kinds of files written when each kind had its own class (their `kind` attribute named the class)."""
OLDEST_KINDS = {"naive": "NaivePosterior", "dpvim": "DPVImPosterior", "random-scaling": "RandomScalingPosterior"}
"""The class of files written before they named it, by their method."""


def load_posterior(path: str | os.PathLike) -> MixturePosterior | DrawsPosterior:
    """Read a posterior file, validating its schema: what `MixturePosterior.save` writes (noise-aware, naive,
    DPVIm, …) as a `MixturePosterior` of its kind, and what a posterior known by its draws writes (`save_draws`: the
    non-private reference, DP-SGLD, the bootstrap and the data baselines) as a `DrawsPosterior`."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no posterior file at {path}: check the path")
    try:
        tree = xr.open_datatree(path, engine="h5netcdf")
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} is not a readable netCDF posterior file ({error})") from None
    with tree:
        attrs = dict(tree.attrs)
        if attrs.get("schema") in DRAWS_SCHEMAS or _older_draws_file(tree, attrs):
            return read_draws(tree, path)
        version = attrs.get("schema_version")
        if attrs.get("schema") != SCHEMA or version not in range(1, SCHEMA_VERSION + 1):
            raise ValueError(
                f"{path} is not a noiseaware posterior (schema {attrs.get('schema')!r} version {version!r}; "
                f"expected {SCHEMA!r} version 1 to {SCHEMA_VERSION}, or a file of draws, "
                f"{' or '.join(map(repr, DRAWS_SCHEMAS))})"
            )
        if GROUP not in tree.children or "optimum" not in tree[GROUP].data_vars:
            raise ValueError(f"{path} lacks the {GROUP}/optimum draws: the file is incomplete; save it again")
        check_checksum(tree, READ_GROUPS, path, int(version))
        try:
            return _mixture(tree, attrs)
        except KeyError as error:
            raise ValueError(
                f"{path} lacks the attribute or variable {error}: the file is incomplete; save it again"
            ) from None
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path} holds an attribute that is not JSON ({error}): the file is damaged; save it again"
            ) from None


def _mixture(tree: xr.DataTree, attrs: dict) -> MixturePosterior:
    """The MixturePosterior of an opened file of schema SCHEMA; a KeyError or JSONDecodeError where a part of it is
    missing or damaged (`load_posterior` names the file and the part)."""
    model = tree[GROUP].to_dataset()
    sites = sites_from_attrs(attrs)
    iterates = _read_iterates(tree[ITERATES].to_dataset(), sites) if ITERATES in tree.children else None
    method = str(attrs["method"])
    kind = str(attrs.get("kind", OLDEST_KINDS.get(method, "NoiseAwarePosterior")))
    diagnostics = diagnostics_type(str(attrs.get("diagnostics_type", ""))).from_mapping(
        json.loads(attrs["diagnostics"])
    )
    checks = json.loads(attrs.get("checks", "null"))  # older files: no trace checks
    logs = {
        group: tree[group].dataset[name].values if group in tree.children else None  # older files: none
        for group, name in LOG_VARIABLES.items()
    }
    return MixturePosterior(
        kind=OLDER_KINDS.get(kind, kind),
        optimum_chains=model["optimum"].values,
        hessian_chains=model["hessian"].values if "hessian" in model else None,
        extra_noise_chains=model["extra_noise"].values if "extra_noise" in model else None,
        method=method,
        param_names=tuple(str(name) for name in model["param"].values),
        sites=sites,
        prior=str(attrs["prior"]) or None,
        diagnostics=diagnostics,
        info=json.loads(attrs["info"]),
        iterates=iterates,
        checks=None if checks is None else TraceDiagnosis.from_dict(checks),
        family=str(attrs.get("variational_family", MEAN_FIELD)),  # older files: mean-field
        factor=str(attrs.get("factor", "mean")),
        notes=notes_from_json(attrs.get("notes")),
        log_prior=logs[LOG_PRIOR],
        log_likelihood=logs[LOG_LIKELIHOOD],
    )


def _older_draws_file(tree: xr.DataTree, attrs: dict) -> bool:
    """A `DrawsPosterior` file written before such files had a schema: θ draws and the method, no schema."""
    return "schema" not in attrs and "method" in attrs and DRAWS_GROUP in tree.children and "theta" in tree[DRAWS_GROUP]


def _read_iterates(dataset: xr.Dataset, sites: tuple[SiteSpec, ...] | None) -> np.ndarray:
    """μ_t (T, d) from a file's `dpvi` group (the inverse of `MixturePosterior._iterates_dataset`)."""
    if sites is None:
        return dataset["mu"].values[0]
    steps = dataset.sizes["draw"]
    return np.concatenate([dataset[site.name].values[0].reshape(steps, site.size) for site in sites], axis=1)
