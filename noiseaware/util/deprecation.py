"""Old public names kept for one release: a module's `__getattr__` that returns the new object with a warning."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["deprecated_names"]


def deprecated_names(module: str, aliases: Mapping[str, tuple[str, Any]]) -> Callable[[str], Any]:
    """A module `__getattr__` for `module` (its dotted name): `aliases` {old name: (new name, object)} return the
    object with a DeprecationWarning naming the new name; any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        if name in aliases:
            new, value = aliases[name]
            warnings.warn(f"{module}.{name} is deprecated: use {new}", DeprecationWarning, stacklevel=2)
            return value
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
