"""Defaults written once: `field_default` reads an options or settings class's own, for wrappers and command lines
that offer it; DRAWS and WARMUP are the research sample sizes that routes, baselines, options and posteriors share."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["DRAWS", "WARMUP", "field_default"]

DRAWS = 4000
"""K, draws per posterior: of φ* (the routes, per chain), of φ (DPVIm), of θ (the non-private NUTS, a mixture's
θ draws per φ* draw, a calibration study's predictive)."""
WARMUP = 1000
"""NUTS adaptation steps per chain (the nuts route and the non-private reference)."""


def field_default(owner: type, name: str) -> Any:
    """The default of field `name` of the dataclass `owner` (an options, settings or design class). A field
    without a default is a bug of the caller (TypeError)."""
    default = {f.name: f.default for f in dataclasses.fields(owner)}[name]
    if default is dataclasses.MISSING:
        raise TypeError(f"{owner.__qualname__}.{name} has no default")
    return default
