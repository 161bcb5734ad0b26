"""Atomic file writes: a result file is either complete or absent, never partial."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write"]


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
