"""Atomic file writes (a result file is either complete or absent, never partial) and JSON-ready values."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["atomic_write", "plain", "write_json"]


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """`write` a temporary file beside `path`, fsync it and os.replace it onto `path`; on error remove it."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(temporary)
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_json(path: Path, payload: Any) -> None:
    """Atomically write `payload` as indented JSON, after converting it with `plain`."""
    atomic_write(Path(path), lambda temporary: temporary.write_text(json.dumps(plain(payload), indent=2)))


def plain(value: Any) -> Any:
    """A JSON-ready copy of `value`, recursively: numpy and jax scalars become Python numbers and their arrays
    nested lists, tuples lists, mappings dicts with str keys; str, int, float, bool and None are kept.
    Any other type is a TypeError that names it."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if hasattr(value, "__array__"):  # numpy and jax arrays and scalars
        return np.asarray(value).tolist()
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
