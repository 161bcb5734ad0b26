"""Chunks of a range of problems: the unit of one compiled batch, and of one task of a study."""

from __future__ import annotations

import numpy as np

__all__ = ["SHORT_RUN", "chunk_slices", "padded_chunks", "run_chunks"]

SHORT_RUN = 20
"""Runs of at most this many steps go one step per chunk, so short runs of any length share one compiled program."""


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


def run_chunks(steps: int, progress=True) -> list[int]:
    """The chunk lengths of a run of `steps` steps: ≤ 20 chunks of ≤ 2 lengths (≤ 2 compilations) for a progress bar,
    else one chunk (each costs ≈ 0.5 ms CPU to start and collect: 9 % of M1's 10⁴-step run in 20 chunks); a short
    run (`SHORT_RUN`) one step per chunk either way."""
    if steps > SHORT_RUN and not progress:
        return [steps]
    size = max(1, -(-steps // SHORT_RUN))
    return [size] * (steps // size) + ([steps % size] if steps % size else [])
