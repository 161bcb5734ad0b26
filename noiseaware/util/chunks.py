"""Chunks of a range of problems: the unit of one compiled batch, and of one task of a study."""

from __future__ import annotations

import numpy as np

__all__ = ["chunk_slices", "padded_chunks"]


def chunk_slices(stop: int, size: int, start: int = 0) -> list[slice]:
    """[start, start + size), [start + size, start + 2 size), … up to `stop` (the last one may be shorter)."""
    return [slice(first, min(first + size, stop)) for first in range(start, stop, size)]


def padded_chunks(count: int, size: int) -> list[tuple[np.ndarray, int]]:
    """Indices 0..count − 1 in chunks of one size (one compiled program for every chunk): `size`, or for fewer than
    `size` items the next power of two (a few small buckets rather than padding 4 items to 50): (index, kept), the
    last chunk padded by repeating its last index, whose copies the caller drops."""
    size = size if count >= size else min(size, 1 << max(count - 1, 0).bit_length())
    out = []
    for part in chunk_slices(count, size):
        kept = part.stop - part.start
        out.append((np.minimum(np.arange(part.start, part.start + size), part.stop - 1), kept))
    return out
