"""`Diagnostics`: the typed facts a fit reports, one frozen dataclass per kind of fit.

Each kind (exact quadrature, Laplace, NUTS, DPVIm, Gibbs samplers …) subclasses `Diagnostics`; fields are
attributes (`post.diagnostics.max_rhat`), the record also reads as a mapping (`post.diagnostics["max_rhat"]`,
`dict(post.diagnostics)`) for tables and JSON, and `aggregate` folds the records of many fits of one
method into the facts a study reports (counts of non-converged fits, worst R-hat …). Subclasses register
themselves by class name, so a saved posterior's diagnostics come back as the same type. `summarise`, the old
name of `aggregate`, is a deprecated alias (a subclass that still defines it has it read as its `aggregate`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from .deprecation import warn_renamed

__all__ = ["MAX_RHAT", "Diagnostics", "MixingDiagnostics", "NoDiagnostics", "diagnostics_type"]

_TYPES: dict[str, type[Diagnostics]] = {}


@dataclasses.dataclass(frozen=True)
class Diagnostics(Mapping[str, Any]):
    """Base of every diagnostics record: a frozen dataclass that also reads as a mapping of its fields."""

    NAME: ClassVar[str] = "none"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _TYPES[cls.__name__] = cls
        if "summarise" in vars(cls) and "aggregate" not in vars(cls):
            # stacklevel 4: past ABCMeta.__new__ (a Mapping), at the class statement
            warn_renamed(f"{cls.__qualname__}.summarise", f"{cls.__qualname__}.aggregate", stacklevel=4)
            cls.aggregate = vars(cls)["summarise"]

    def __getitem__(self, name: str) -> Any:
        if name not in self._names():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Diagnostics:
        """The record from a mapping of its fields (lists become float64/int/bool arrays): the inverse of dict(self)."""
        return cls(**{name: _array(values[name]) for name in cls._names() if name in values})

    @classmethod
    def aggregate(cls, records: Sequence[Diagnostics]) -> dict[str, Any]:
        """The facts of many fits of one method that a study reports (none by default)."""
        return {}

    @classmethod
    def summarise(cls, records: Sequence[Diagnostics]) -> dict[str, Any]:
        """Deprecated alias of `aggregate`."""
        warn_renamed(f"{cls.__qualname__}.summarise", f"{cls.__qualname__}.aggregate")
        return cls.aggregate(records)

    def describe(self, posterior) -> list[str]:
        """The parts of `posterior`'s one-line description (after its kind) that these facts give, e.g. ["method
        dpvim", "1000 draws of φ: …"]; [] (the default) leaves the description to the posterior."""
        return []


@dataclasses.dataclass(frozen=True)
class NoDiagnostics(Diagnostics):
    """A fit with nothing to report (the naive last iterate)."""


def diagnostics_type(name: str) -> type[Diagnostics]:
    """The registered `Diagnostics` subclass called `name` (NoDiagnostics for an unknown name)."""
    return _TYPES.get(name, NoDiagnostics)


def _array(value):
    if isinstance(value, list):
        return np.asarray(value)
    return value


MAX_RHAT = 1.01
"""R-hat above this flags chains that disagree."""


@dataclasses.dataclass(frozen=True)
class MixingDiagnostics(Diagnostics):
    """Facts of an MCMC fit: the largest split R-hat and the smallest ESS over all coordinates."""

    max_rhat: float
    min_ess: float

    @classmethod
    def aggregate(cls, records: Sequence[MixingDiagnostics]) -> dict[str, Any]:
        """Worst R-hat and the number of fits above 1.01; smallest and median of the per-fit smallest ESS."""
        if not records:
            return {}
        rhat = np.array([r.max_rhat for r in records], np.float64)
        ess = np.array([r.min_ess for r in records], np.float64)
        return {
            "max_rhat": float(np.max(rhat)),
            f"simulations_rhat_above_{MAX_RHAT:g}": int(np.sum(rhat > MAX_RHAT)),
            "min_ess": float(np.min(ess)),
            "median_min_ess": float(np.median(ess)),
        }
