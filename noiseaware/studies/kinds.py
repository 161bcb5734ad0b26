"""The study contract: what a kind of study declares, and the registry of kinds.

A kind is a small record of pure functions, in the spirit of optax's `GradientTransformation`:

    spec.parts                            the parts of a spec (slices of its simulations, runs or trials)
    run_part(spec, part)     → Part       one task's work, on any worker; Part is data (`util.codec`)
    summary(spec)            → dict       plain JSON data: all that `merge` and `render` need of the spec
    merge(summary, [Part])   → Result     the parts in order, merged exactly
    collect([(summary, Result | None)])   the results a study reports (e.g. a shared reference joined to each)
    label(summary)           → str        "M1, ε = 1" (tasks, progress, messages)
    render(summary, Result)  → (text, [warning lines])   the tables a command prints
    files(summary)           → [names]    the summary files `save` writes, checked before any work
    save(summary, Result, directory, overwrite)           writes them

A spec is a frozen dataclass whose `canonical` data (`util.fingerprint`) determines its results: it names the
tasks, and plan.json keeps it beside the summary, so a study folder is reported from data alone. A new kind is
one module that builds a `StudyKind` and one `register_kind` call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["KINDS", "StudyKind", "get_kind", "register_kind"]

Entry = tuple[Mapping[str, Any], Any]


def _as_is(entries: list[Entry]) -> list[Entry]:
    return entries


class StudyKind(NamedTuple):
    """One kind of study (module doc); unit: what a part counts ("simulations", "runs")."""

    name: str
    unit: str
    run_part: Callable[[Any, slice], Any]
    summary: Callable[[Any], dict[str, Any]]
    merge: Callable[[Mapping[str, Any], Sequence[Any]], Any]
    label: Callable[[Mapping[str, Any]], str]
    render: Callable[[Mapping[str, Any], Any], tuple[str, list[str]]]
    files: Callable[[Mapping[str, Any]], list[str]]
    save: Callable[[Mapping[str, Any], Any, Path, bool], None]
    collect: Callable[[list[Entry]], list[Entry]] = _as_is


KINDS: dict[str, StudyKind] = {}
"""The registered kinds by name."""


def register_kind(kind: StudyKind) -> StudyKind:
    """Add `kind` to the registry (a kind of the same name is replaced: a plug-in may refine a built-in)."""
    if not isinstance(kind, StudyKind):
        raise TypeError(f"register_kind takes a StudyKind; got {type(kind).__name__}")
    KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> StudyKind:
    """The registered kind `name`; a KeyError naming the known ones."""
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"unknown kind of study {name!r}: known kinds are {', '.join(sorted(KINDS))}") from None
