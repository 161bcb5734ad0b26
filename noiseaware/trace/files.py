"""Trace files: the fields ⇄ Trace conversion and the .npz / .nc (netCDF4 via h5netcdf) formats.

A file holds the schema's fields (docs/trace-format.md): the arrays params, grads (T, P), final_params,
grad_scale, learning_rate and the labels param_names (P,), the per-site columns site_names, site_shapes
(JSON lists), site_transforms and the optional site_labels (a JSON list of element labels, or null, per
site), and the scalar settings, among them variational_family and (from schema version 2) param_layout, the
family's blocks of φ as JSON, checked against the family on reading, and (from version 3) the producer's
convention as convention_<field> scalars with batch_sizes (T,) (`convention`). Files of versions 1 (mean-field
only) and 2 are still read. In .nc the arrays are variables on the dims
step/param/site (param_names is the `param` coordinate) and the scalars global attributes. Nothing is ever
pickled; every failure is a TraceError.

Why this module is long: both file formats, their writers and readers, and the checks a file must pass before
it becomes a trace are one contract; split, the two formats' field lists would drift apart.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5netcdf
import h5py
import numpy as np

from ..util.files import atomic_write
from .convention import Convention, ConventionError
from .sites import SiteSpec
from .validation import TraceError

if TYPE_CHECKING:
    from .data import TraceData

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "check_readable",
    "read_fields",
    "read_npz",
    "read_trace",
    "trace_fields",
    "trace_from_fields",
    "write_npz",
    "write_trace",
    "written_version",
]

SCHEMA = "noiseaware.trace"
SCHEMA_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)
"""Version 1: mean-field traces only, no param_layout. Version 2 adds the full-rank and low-rank families. Version 3
adds the producer's convention (normaliser, clipping unit, neighbouring relation, sampling, noise structure,
producer) and batch_sizes; files of versions 1 and 2 read with the default convention (noisy sums, per-example
clipping, add/remove, Poisson, i.i.d., producer unknown). Version 4 adds the settings that vary per step
(step_noise_multipliers, step_clips, step_grad_scales). Version 5 adds the released counts of clipped examples
(clipped_counts, count_noise_multiplier). Each trace is written in the oldest version that holds it (3 without
either), which older noiseaware reads (`written_version`)."""
STEP_FIELDS = ("step_noise_multipliers", "step_clips", "step_grad_scales")
"""The per-step settings (version 4), present only when they vary."""
COUNT_FIELDS = ("clipped_counts", "count_noise_multiplier")
"""The released counts of clipped examples and their noise sd (version 5), present only when the run released them."""
CONVENTION_FIELDS = tuple(field.name for field in dataclasses.fields(Convention))
"""The convention's fields, stored as convention_<name> (absent: the field's default)."""
REQUIRED_FIELDS = ("params", "grads", "noise_multiplier", "clip", "sampling_rate", "n_examples")
OPTIONAL_FIELDS = (
    "schema",
    "schema_version",
    "steps",
    "final_params",
    "grad_scale",
    "learning_rate",
    "epsilon",
    "delta",
    "accountant",
    "mc_draws",
    "optimizer",
    "variational_family",
    "param_layout",
    "param_names",
    "site_names",
    "site_shapes",
    "site_transforms",
    "site_labels",
    "batch_sizes",
    *(f"convention_{f}" for f in CONVENTION_FIELDS),
    *STEP_FIELDS,
    *COUNT_FIELDS,
)
_ARRAY_FIELDS = (
    "params",
    "grads",
    "final_params",
    "grad_scale",
    "learning_rate",
    "batch_sizes",
    "clipped_counts",
    *STEP_FIELDS,
)
_SITE_FIELDS = ("site_names", "site_shapes", "site_transforms")
_NC_DIMS = {
    "params": ("step", "param"),
    "grads": ("step", "param"),
    "final_params": ("param",),
    "grad_scale": ("param",),
    "learning_rate": ("param",),
    "batch_sizes": ("step",),
    "step_noise_multipliers": ("step",),
    "step_clips": ("step",),
    "step_grad_scales": ("step", "param"),
    "clipped_counts": ("step",),
    "param_names": ("param",),
    "site_names": ("site",),
    "site_shapes": ("site",),
    "site_transforms": ("site",),
    "site_labels": ("site",),
}
_NC_VARIABLE = {"param_names": "param"}
"""Fields stored in .nc under another variable name: the `param` coordinate holds the labels."""
_NC_FIELD = {variable: field for field, variable in _NC_VARIABLE.items()}
_NC_IGNORED_VARIABLE_ATTRS = ("_FillValue",)
"""Variable attributes that netCDF writers add on their own (xarray writes a NaN _FillValue)."""
WINDOWED_HINT = "a windowed trace (window sums and sample rows): read it with noiseaware.WindowedTrace.load"
_FORMAT_NAMES = {
    ".npz": "a numpy .npz archive",
    ".nc": "netCDF4 (HDF5-based; netCDF3 is not read: with xarray use to_netcdf(engine='h5netcdf'))",
}


def write_trace(trace: TraceData, path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Write `trace` to `path` (.nc or .npz) atomically: a failed write leaves the target untouched; an existing
    file is replaced only with `overwrite=True` (else FileExistsError)."""
    path = Path(path)
    write, _ = _format(path)
    if not path.parent.is_dir():
        raise TraceError(f"cannot save {path}: the directory {path.parent} does not exist; create it first")
    fields = trace_fields(trace)
    atomic_write(path, lambda temporary: write(temporary, fields), overwrite=overwrite)


def read_trace(path: str | os.PathLike, trace_type: type[TraceData]) -> TraceData:
    """A validated `trace_type` read from the trace file `path` (.nc or .npz); errors are prefixed by the path."""
    path = Path(path)
    _, read = _format(path)
    check_readable(path, "trace", ".nc or .npz", "Trace.save or noiseaware record")
    try:
        return trace_from_fields(read_fields(read, path), trace_type)
    except TraceError as error:
        raise TraceError(f"{path}: {error}") from None


def check_readable(path: Path, noun: str, suffixes: str, writer: str) -> None:
    """A TraceError unless `path` is a non-empty file: a directory, a missing or an empty file named as such."""
    if path.is_dir():
        raise TraceError(f"{path} is a directory, not a {noun} file: give the path of a {suffixes} file")
    if not path.is_file():
        raise TraceError(f"no {noun} file at {path}: check the path")
    if path.stat().st_size == 0:
        raise TraceError(f"{path} is empty (0 bytes), not a {noun}: write it again ({writer})")


# ---------------------------------------------------------------- fields (shared by both formats)


def trace_fields(trace: TraceData) -> dict[str, np.ndarray]:
    """Every schema field that `trace` holds, as numpy arrays: 0-d for scalars, fixed-width unicode
    for strings; absent optionals are omitted."""
    sites = trace.sites or ()
    values = (
        {
            "schema": SCHEMA,
            "schema_version": written_version(trace),
            "params": trace.params,
            "grads": trace.grads,
            "noise_multiplier": trace.noise_multiplier,
            "clip": trace.clip,
            "sampling_rate": trace.sampling_rate,
            "n_examples": trace.n_examples,
            "final_params": trace.final_params,
            "grad_scale": trace.grad_scale,
            "learning_rate": trace.learning_rate,
            "epsilon": trace.epsilon,
            "delta": trace.delta,
            "accountant": trace.accountant,
            "mc_draws": trace.mc_draws,
            "optimizer": trace.optimizer,
            "variational_family": trace.variational_family,
            "param_layout": json.dumps(trace.family.layout()),
            "param_names": list(trace.param_names),
            "site_names": [site.name for site in sites] or None,
            "site_shapes": [json.dumps(list(site.shape)) for site in sites] or None,
            "site_transforms": [site.transform for site in sites] or None,
            "site_labels": _site_labels(sites),
            "batch_sizes": trace.batch_sizes,
        }
        | {name: getattr(trace, name) for name in STEP_FIELDS + COUNT_FIELDS}
        | {f"convention_{name}": getattr(trace.convention, name) for name in CONVENTION_FIELDS}
    )
    return {name: np.asarray(value) for name, value in values.items() if value is not None}


def written_version(trace: TraceData) -> int:
    """The schema version `trace` is written in: 5 when it holds clipped counts, 4 when its settings vary per step,
    else 3."""
    if trace.clipped_counts is not None:
        return 5
    return 4 if any(getattr(trace, name) is not None for name in STEP_FIELDS) else 3


def _site_labels(sites: tuple[SiteSpec, ...]) -> list[str] | None:
    """The site_labels column: per site a JSON list of its element labels, or "null"; None when no site has labels."""
    if all(site.labels is None for site in sites):
        return None
    return [json.dumps(None if site.labels is None else list(site.labels)) for site in sites]


def trace_from_fields(fields: Mapping[str, Any], trace_type: type[TraceData]) -> TraceData:
    """A validated `trace_type` from a file's fields {name: array or scalar}; checks the schema and unknown and
    missing fields."""
    fields = dict(fields)
    schema = _item("schema", fields.pop("schema", SCHEMA))
    version = _item("schema_version", fields.pop("schema_version", SCHEMA_VERSION))
    _check_schema(schema, version)
    layout = fields.pop("param_layout", None)
    unknown = sorted(set(fields) - set(REQUIRED_FIELDS + OPTIONAL_FIELDS))
    if unknown:
        raise TraceError(
            f"unknown field(s) {unknown}: a trace holds only DP-released values "
            f"({', '.join(REQUIRED_FIELDS + OPTIONAL_FIELDS)}) — never data, per-example quantities, clean "
            "gradients or RNG keys/seeds; remove the field(s)"
        )
    missing = [name for name in REQUIRED_FIELDS if name not in fields]
    if missing:
        raise TraceError(f"required field(s) {missing} are missing; a trace needs {', '.join(REQUIRED_FIELDS)}")
    steps = fields.pop("steps", None)
    convention = _convention_from_fields({name: fields.pop(f"convention_{name}", None) for name in CONVENTION_FIELDS})
    sites = _sites_from_fields(*(fields.pop(name, None) for name in _SITE_FIELDS), fields.pop("site_labels", None))
    decoded = {name: _decode(name, value) for name, value in fields.items()}
    trace = trace_type(**decoded, sites=sites, convention=convention)
    if steps is not None:
        _check_steps(_item("steps", steps), trace)
    if version == 1 and trace.family.kind != "mean-field":
        raise TraceError(
            f"schema_version 1 holds mean-field traces only, but variational_family is {trace.variational_family!r}; "
            "write the file as schema_version 2"
        )
    if layout is not None:
        _check_layout(_item("param_layout", layout), trace)
    return trace


def _convention_from_fields(values: Mapping[str, Any]) -> Convention:
    """The stored convention (absent fields take their defaults); TraceError for one that cannot be."""
    given = {name: _item(f"convention_{name}", value) for name, value in values.items() if value is not None}
    numbers = {"microbatch_size": int, "batch_divisor": float}
    try:
        return Convention(**{name: numbers.get(name, str)(value) for name, value in given.items()})
    except ConventionError as error:
        raise TraceError(f"convention: {error}") from None


def _check_layout(text, trace: TraceData) -> None:
    """param_layout (JSON) must be the layout of the family the trace names, with its d."""
    try:
        layout = json.loads(text)
    except (TypeError, json.JSONDecodeError):
        raise TraceError(f"param_layout is not JSON ({text!r}); write json.dumps of the family's layout") from None
    expected = trace.family.layout()
    if layout != expected:
        raise TraceError(
            f"param_layout {layout} does not match the {trace.variational_family!r} family with P = {trace.n_params} "
            f"parameters, whose layout is {expected}; fix variational_family or param_layout"
        )


def _check_steps(steps, trace: TraceData) -> None:
    if steps != trace.steps:
        raise TraceError(f"steps is {steps!r} but params has {trace.steps} rows; drop steps or fix it")


def _check_schema(schema, version) -> None:
    if schema != SCHEMA:
        other = {"posterior": "a posterior: read it with noiseaware.load_posterior", "summary": WINDOWED_HINT}
        kind = next((f" but {hint}" for word, hint in other.items() if word in str(schema)), "")
        raise TraceError(f"schema is {schema!r}, not {SCHEMA!r}; this file is not a noiseaware trace{kind}")
    if version not in READABLE_VERSIONS:
        raise TraceError(
            f"schema_version {version!r} is not supported; this noiseaware reads schema_versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}: upgrade noiseaware or rewrite the file in version "
            f"{SCHEMA_VERSION}"
        )


def _decode(name: str, value):
    if name in _ARRAY_FIELDS:
        return np.asarray(value)
    if name == "param_names":
        return _strings(name, value)
    return _item(name, value)


def _item(name: str, value):
    """A single value (number or str) from a 0-d array, a one-element array, a scalar or bytes."""
    array = np.asarray(value)
    if array.size != 1:
        raise TraceError(f"{name} has shape {array.shape}; it must be a single value")
    item = array.reshape(()).item()
    return item.decode() if isinstance(item, bytes) else item


def _strings(name: str, value) -> tuple[str, ...]:
    array = np.asarray(value)
    if array.ndim != 1:
        raise TraceError(f"{name} has shape {array.shape}; it must be a 1-D array of strings")
    items = [item.decode() if isinstance(item, bytes) else item for item in array.tolist()]
    if not all(isinstance(item, str) for item in items):
        raise TraceError(f"{name} holds non-strings; write it as a 1-D array of strings")
    return tuple(items)


def _sites_from_fields(names, shapes, transforms, labels) -> tuple[SiteSpec, ...] | None:
    given = [value is not None for value in (names, shapes, transforms)]
    if not any(given):
        if labels is not None:
            raise TraceError(f"site_labels labels the sites, but {', '.join(_SITE_FIELDS)} are absent: write them too")
        return None
    if not all(given):
        raise TraceError(f"{', '.join(_SITE_FIELDS)} come together (one entry per site): write all three or none")
    fields = _SITE_FIELDS + (("site_labels",) if labels is not None else ())
    columns = [_strings(name, value) for name, value in zip(fields, (names, shapes, transforms, labels))]
    if len({len(column) for column in columns}) != 1:
        lengths = [len(column) for column in columns]
        raise TraceError(f"{', '.join(fields)} have lengths {lengths}; they need one entry per site")
    if labels is None:
        columns.append([None] * len(columns[0]))
    return tuple(
        _site(name, _shape(name, shape), transform, _labels(name, text))
        for name, shape, transform, text in zip(*columns)
    )


def _site(name: str, shape: tuple[int, ...], transform: str, labels: list[str] | None) -> SiteSpec:
    try:
        return SiteSpec(name, shape, transform, labels)
    except ValueError as error:
        raise TraceError(f"site_labels of site {name!r}: {error}") from None


def _labels(site: str, text: str | None) -> list[str] | None:
    """A site_labels entry: a JSON list of strings, or "null" for a site without labels."""
    if text is None:
        return None
    try:
        labels = json.loads(text)
    except json.JSONDecodeError:
        labels = False
    if labels is not None and not isinstance(labels, list):
        raise TraceError(
            f"site_labels entry {text!r} of site {site!r} must be a JSON list of strings such as "
            "'[\"age\", \"bias\"]', or 'null' for a site without labels"
        )
    return labels


def _shape(site: str, text: str) -> tuple[int, ...]:
    try:
        shape = json.loads(text)
    except json.JSONDecodeError:
        shape = None
    if not isinstance(shape, list) or not all(type(k) is int and k >= 0 for k in shape):  # not true/false
        raise TraceError(
            f"site_shapes entry {text!r} of site {site!r} must be a JSON list of sizes such as '[]' or '[3]'"
        )
    return tuple(shape)


# ---------------------------------------------------------------- files


def _format(path: Path) -> tuple[Callable[[Path, dict], None], Callable[[Path], dict]]:
    formats = {".npz": (write_npz, read_npz), ".nc": (_write_nc, _read_nc)}
    suffix = path.suffix.lower()
    if suffix not in formats:
        raise TraceError(f"{path} has suffix {path.suffix!r}; a trace file ends in .nc (netCDF4) or .npz (numpy)")
    return formats[suffix]


def read_fields(read: Callable[[Path], dict], path: Path) -> dict[str, Any]:
    """read(path), with any failure of the file itself turned into a TraceError."""
    try:
        return read(path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        if isinstance(error, TraceError):
            raise
        raise TraceError(
            f"could not be read as a {path.suffix} trace ({error}); the file is corrupted or not "
            f"{_FORMAT_NAMES[path.suffix.lower()]}: write it as described in docs/trace-format.md"
        ) from None


def write_npz(path: Path, fields: dict[str, np.ndarray]) -> None:
    with open(path, "xb") as handle:
        np.savez(handle, **fields)


def read_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {name: _npz_member(archive, name) for name in archive.files}


def _npz_member(archive, name: str) -> np.ndarray:
    try:
        return archive[name]
    except ValueError as error:
        raise TraceError(
            f"field {name!r} is a Python object array ({error}), and traces are never unpickled; write "
            "strings as fixed-width unicode arrays, e.g. np.array(['a', 'b'])"
        ) from None


def _write_nc(path: Path, fields: dict[str, np.ndarray]) -> None:
    """Arrays become variables on dims step/param/site (param_names as the `param` coordinate),
    scalars and strings global attributes."""
    arrays = {name: value for name, value in fields.items() if name in _NC_DIMS}
    with h5netcdf.File(path, "w") as file:
        file.dimensions = {dim: n for name, value in arrays.items() for dim, n in zip(_NC_DIMS[name], value.shape)}
        for name, value in arrays.items():
            if value.dtype.kind == "U":
                value, dtype = value.astype(object), h5py.string_dtype()
            else:
                dtype = value.dtype
            file.create_variable(_NC_VARIABLE.get(name, name), _NC_DIMS[name], dtype=dtype, data=value)
        for name, value in fields.items():
            if name not in arrays:
                file.attrs[name] = value.item()


def _read_nc(path: Path) -> dict[str, Any]:
    fields = {}
    with h5netcdf.File(path, "r") as file:
        for variable_name, variable in file.variables.items():
            name = _NC_FIELD.get(variable_name, variable_name)
            extra = sorted(set(variable.attrs) - set(_NC_IGNORED_VARIABLE_ATTRS))
            if extra:
                raise TraceError(
                    f"variable {variable_name!r} carries attributes {extra}; a trace holds only the schema's "
                    "fields: remove them"
                )
            if name in _NC_DIMS and variable.dimensions != _NC_DIMS[name]:
                raise TraceError(
                    f"variable {variable_name!r} has dims {variable.dimensions}; it must have dims {_NC_DIMS[name]}"
                )
            _add(fields, name, variable[...])
        for name, value in file.attrs.items():
            _add(fields, name, value)
    return fields


def _add(fields: dict, name: str, value) -> None:
    if name in fields:
        raise TraceError(
            f"field {name!r} appears twice (a variable and an attribute, or both param and param_names); keep one"
        )
    fields[name] = value
