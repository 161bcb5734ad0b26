"""Hints in the language of the caller: a message that tells the user what to run names the Python call, or,
while the command line runs (`speaking_cli`), the command.

    hint("na.tune", "noiseaware tune")   # "na.tune" in Python, "`noiseaware tune`" under the CLI
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["hint", "speaking_cli"]

_CLI = contextvars.ContextVar("noiseaware_cli", default=False)


def hint(python: str, cli: str) -> str:
    """`python` (what to call in Python), or `cli` in backquotes (what to run) while the command line runs."""
    return f"`{cli}`" if _CLI.get() else python


@contextmanager
def speaking_cli() -> Iterator[None]:
    """Within: hints name commands of the command line rather than Python calls."""
    token = _CLI.set(True)
    try:
        yield
    finally:
        _CLI.reset(token)
