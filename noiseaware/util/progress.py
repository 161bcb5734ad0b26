"""Progress reporting at chunk boundaries of long compiled loops (never inside them)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

Progress = bool | Callable[[int, int], None]

BUSY_DELAY = 10.0
"""Seconds a block without steps to count (a compile, a solve) runs before `busy` shows its line."""


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


@contextmanager
def busy(description: str, progress: Progress, delay: float = BUSY_DELAY) -> Iterator[None]:
    """While the block runs, a tqdm line on stderr counting its seconds, shown once it has run `delay` s: work with
    no steps to count (compiling and solving a fit) is never silent for long. Nothing unless progress is True."""
    if progress is not True:
        yield
        return
    stop = threading.Event()
    with tqdm(desc=description, file=sys.stderr, unit="s", delay=delay, bar_format="{desc}: {elapsed} elapsed") as bar:

        def tick() -> None:
            while not stop.wait(1.0):
                bar.update(1)

        thread = threading.Thread(target=tick, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
