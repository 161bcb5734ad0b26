"""Defaults written once: `field_default` reads an options or settings class's own, for wrappers and command lines
that offer it; DRAWS, WARMUP and WARM_START_WARMUP are the research sample sizes that routes, baselines, options
and posteriors share."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["DRAWS", "WARMUP", "WARM_START_WARMUP", "field_default"]

DRAWS = 4000
"""K, draws per posterior: of φ* (the routes, per chain), of φ (DPVIm), of θ (the non-private NUTS, a mixture's
θ draws per φ* draw, a calibration study's predictive)."""
WARMUP = 1000
"""NUTS adaptation steps per chain from a cold start (the nuts route's start="prior", the non-private reference)."""
WARM_START_WARMUP = 300
"""NUTS adaptation steps per chain of the nuts route from its default start, the exact posterior's (step size only:
the mass matrix is the identity there, docs/method.md §2.7)."""


def field_default(owner: type, name: str) -> Any:
    """The default of field `name` of the dataclass `owner` (an options, settings or design class). A field
    without a default is a bug of the caller (TypeError)."""
    default = {f.name: f.default for f in dataclasses.fields(owner)}[name]
    if default is dataclasses.MISSING:
        raise TypeError(f"{owner.__qualname__}.{name} has no default")
    return default
