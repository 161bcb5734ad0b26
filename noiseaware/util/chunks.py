"""Chunks of a range of problems: the unit of one compiled batch, and of one task of a study."""

from __future__ import annotations

__all__ = ["chunk_slices"]


def chunk_slices(stop: int, size: int, start: int = 0) -> list[slice]:
    """[start, start + size), [start + size, start + 2 size), … up to `stop` (the last one may be shorter)."""
    return [slice(first, min(first + size, stop)) for first in range(start, stop, size)]
