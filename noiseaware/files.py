"""Atomic file writes: a result file is either complete or absent, never partial."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["atomic_write", "write_json"]


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
    """Atomically write `payload` as indented JSON; numpy scalars and arrays become plain numbers and lists."""
    atomic_write(Path(path), lambda temporary: temporary.write_text(json.dumps(payload, indent=2, default=_plain)))


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")
