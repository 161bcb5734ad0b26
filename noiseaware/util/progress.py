"""Progress reporting at chunk boundaries of long compiled loops (never inside them)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

Progress = bool | Callable[[int, int], None]


def check_progress(progress) -> None:
    """A ValueError unless `progress` is True, False or a callable(done, total)."""
    if not (isinstance(progress, bool) or callable(progress)):
        raise ValueError(f"progress must be True, False or a callable(done, total), got progress={progress!r}")


@contextmanager
def progress_bar(
    total: int, description: str, progress: Progress, unit: str = "step"
) -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`: a tqdm bar on stderr when progress is True, calls progress(done, total)
    when it is a callable, nothing when it is False."""
    if progress is True:
        with tqdm(total=total, desc=description, file=sys.stderr, unit=unit, dynamic_ncols=True) as bar:
            yield bar.update
        return
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if callable(progress):
            progress(done, total)

    yield advance
