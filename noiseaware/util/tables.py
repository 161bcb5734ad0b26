"""Plain-text tables for terminal output."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["text_table"]


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: bool = True) -> str:
    """A plain text table: the first column left-aligned, the others right-aligned when `numeric`."""
    cells = [tuple(header), *map(tuple, rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    align = str.rjust if numeric else str.ljust
    return "\n".join(
        "  ".join([row[0].ljust(widths[0]), *(align(c, w) for c, w in zip(row[1:], widths[1:]))]).rstrip()
        for row in cells
    )
