"""Windowed-trace files: a `WindowedTrace`'s parts ⇄ a numpy .npz archive (docs/windowed.md).

The archive holds the sample's trace fields (docs/trace-format.md; its schema version as trace_schema_version), the
windowed trace's schema and version (the file keeps its first name, "noiseaware.trace-summary"), summary_steps T,
summary_sample_steps (R,), and each window sum as sums_<name> (and sums_cross_<name> for the cross moments, sums_clipped
(W, 2) for the released counts of clipped examples).
Nothing is ever pickled; every failure is a TraceError naming the field.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from ..util.files import atomic_write
from .core import Trace
from .files import (
    SCHEMA,
    check_readable,
    read_fields,
    read_npz,
    trace_fields,
    trace_from_fields,
    write_npz,
    written_version,
)
from .sums import CrossMoments, WindowSums
from .validation import TraceError

__all__ = ["WINDOWED_SCHEMA", "WINDOWED_VERSION", "is_windowed_file", "read_windowed", "write_windowed"]

Parts = tuple[WindowSums, Trace, np.ndarray, int, np.ndarray | None]
"""A windowed trace's parts, as `WindowedTrace` takes them: its sums, its sample, the sample's steps, T and the window
sums of its clipped counts (or None)."""

WINDOWED_SCHEMA = "noiseaware.trace-summary"
WINDOWED_VERSION = 1
SUMS = tuple(name for name in WindowSums._fields if name != "cross")
CROSS = CrossMoments._fields


def write_windowed(run, path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Write `run` (a WindowedTrace) to `path` (.npz) atomically; an existing file is replaced only with
    `overwrite=True`."""
    path = _npz(path)
    if not path.parent.is_dir():
        raise TraceError(f"cannot save {path}: the directory {path.parent} does not exist; create it first")
    fields = trace_fields(run.sample)
    fields |= {
        "schema": np.array(WINDOWED_SCHEMA),
        "schema_version": np.array(WINDOWED_VERSION),
        "trace_schema_version": np.array(written_version(run.sample)),
        "summary_steps": np.array(run.steps),
        "summary_sample_steps": run.sample_steps,
    }
    fields |= {f"sums_{name}": np.asarray(getattr(run.sums, name)) for name in SUMS}
    if run.sums.cross is not None:
        fields |= {f"sums_cross_{name}": np.asarray(value) for name, value in run.sums.cross._asdict().items()}
    if run.clipped is not None:
        fields["sums_clipped"] = np.asarray(run.clipped)
    atomic_write(path, lambda temporary: write_npz(temporary, fields), overwrite=overwrite)


def read_windowed(path: str | os.PathLike) -> Parts:
    """The parts of the windowed trace in `path` (.npz), the sample validated; errors are prefixed by the path."""
    path = _npz(path)
    check_readable(path, "windowed trace", ".npz", "WindowedTrace.save")
    try:
        return _from_fields(read_fields(read_npz, path))
    except TraceError as error:
        raise TraceError(f"{path}: {error}") from None


def is_windowed_file(path: str | os.PathLike) -> bool:
    """Whether `path` is an .npz archive whose schema is a windowed trace's (False for anything else, unreadable
    files included: the trace reader then says what is wrong)."""
    path = Path(path)
    if path.suffix.lower() != ".npz" or not path.is_file():
        return False
    try:
        with np.load(path, allow_pickle=False) as archive:
            return "schema" in archive.files and str(archive["schema"]) == WINDOWED_SCHEMA
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return False


def _from_fields(fields: dict) -> Parts:
    schema = str(fields.pop("schema", ""))
    if schema != WINDOWED_SCHEMA:
        trace = "; it is a trace: read it with noiseaware.Trace.load" if schema in ("", SCHEMA) else ""
        raise TraceError(f"schema is {schema!r}, not {WINDOWED_SCHEMA!r}: this file is not a windowed trace{trace}")
    version = int(fields.pop("schema_version", -1))
    if version != WINDOWED_VERSION:
        raise TraceError(
            f"schema_version {version} is not supported; this noiseaware reads windowed traces of version "
            f"{WINDOWED_VERSION}: upgrade noiseaware or write the windowed trace again"
        )
    required = ("summary_steps", "summary_sample_steps", *(f"sums_{name}" for name in SUMS))
    missing = [name for name in required if name not in fields]
    if missing:
        raise TraceError(f"required field(s) {missing} are missing")
    steps = int(fields.pop("summary_steps"))
    kept = fields.pop("summary_sample_steps")
    sums = {name: fields.pop(f"sums_{name}") for name in SUMS}
    cross = {name: fields.pop(f"sums_cross_{name}", None) for name in CROSS}
    clipped = fields.pop("sums_clipped", None)
    present = [name for name, value in cross.items() if value is not None]
    if present and len(present) != len(CROSS):
        absent = sorted(set(CROSS) - set(present))
        raise TraceError(f"the cross moments {absent} are missing; a windowed trace keeps all of them or none")
    fields |= {"schema": SCHEMA, "schema_version": fields.pop("trace_schema_version", None)}
    sample = trace_from_fields({k: v for k, v in fields.items() if v is not None}, Trace)
    return WindowSums(**sums, cross=CrossMoments(**cross) if present else None), sample, kept, steps, clipped


def _npz(path) -> Path:
    path = Path(path)
    if path.suffix.lower() != ".npz":
        raise TraceError(f"{path} has suffix {path.suffix!r}; a windowed trace's file ends in .npz")
    return path
