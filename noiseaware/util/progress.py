"""Progress reporting at chunk boundaries of long compiled loops (never inside them)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

Progress = bool | Callable[[int, int], None]

BUSY_DELAY = 5.0
"""Seconds a block without steps to count (a compile, a solve) runs before `busy` shows its line."""
TICK = 5.0
"""Seconds between redraws of a bar whose steps are long (a study's task, a part of simulations), so that its
elapsed time keeps moving."""


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
            with every(TICK, bar.refresh):
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
def every(seconds: float, action: Callable[[], None]) -> Iterator[None]:
    """Call `action` every `seconds` from a daemon thread while the block runs (a bar's redraw, a clock's tick)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(seconds):
            action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def busy(description: str, progress: Progress, delay: float = BUSY_DELAY) -> Iterator[None]:
    """While the block runs, a tqdm line on stderr counting its seconds, shown once it has run `delay` s: work with
    no steps to count (compiling and solving a fit) is never silent for long. Nothing unless progress is True."""
    if progress is not True:
        yield
        return
    with tqdm(desc=description, file=sys.stderr, unit="s", delay=delay, bar_format="{desc}: {elapsed} elapsed") as bar:
        with every(1.0, lambda: bar.update(1)):
            yield
