"""`field_default`: a default read where it is written once, for wrappers and command lines that offer it."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

__all__ = ["field_default"]


def field_default(owner, name: str) -> Any:
    """The default of `name` in `owner`: a dataclass field's default (an options, settings or spec class) or,
    for a function, its keyword's. A name without a default is a bug of the caller (TypeError)."""
    if dataclasses.is_dataclass(owner):
        default = {f.name: f.default for f in dataclasses.fields(owner)}[name]
        missing = default is dataclasses.MISSING
    else:
        default = inspect.signature(owner).parameters[name].default
        missing = default is inspect.Parameter.empty
    if missing:
        raise TypeError(f"{owner.__qualname__}.{name} has no default")
    return default
