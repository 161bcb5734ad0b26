"""Renamed public names: each old name stays one release as an alias that warns (`warn_renamed`) and then
does what the new name does."""

from __future__ import annotations

import warnings

__all__ = ["warn_renamed"]


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """A DeprecationWarning that `old` is now `new`, called from inside the alias; stacklevel 3 points at the
    alias's caller."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=stacklevel)
