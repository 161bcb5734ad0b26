"""Renamed public names: each old name stays one release as an alias that warns (`warn_renamed`) and then does what
the new name does; a module's old names are its `__getattr__` (`deprecated_names`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["deprecated_names", "warn_renamed"]


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """A DeprecationWarning that `old` is now `new`, called from inside the alias; stacklevel 3 points at the
    alias's caller."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=stacklevel)


def deprecated_names(module: str, aliases: Mapping[str, tuple[str, Any]]) -> Callable[[str], Any]:
    """A module `__getattr__` for `module` (its dotted name): `aliases` {old name: (new name, object)} return the
    object with a DeprecationWarning naming the new name; any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        if name in aliases:
            new, value = aliases[name]
            warn_renamed(f"{module}.{name}", new)
            return value
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
