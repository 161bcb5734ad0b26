"""`field_default`: a default read where it is written once, for wrappers and command lines that offer it."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["field_default"]


def field_default(owner: type, name: str) -> Any:
    """The default of field `name` of the dataclass `owner` (an options, settings or design class). A field
    without a default is a bug of the caller (TypeError)."""
    default = {f.name: f.default for f in dataclasses.fields(owner)}[name]
    if default is dataclasses.MISSING:
        raise TypeError(f"{owner.__qualname__}.{name} has no default")
    return default
