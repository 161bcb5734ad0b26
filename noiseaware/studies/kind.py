"""The study contract: what a kind of study declares, and the registry of kinds.

A kind is a small record of pure functions, in the spirit of optax's `GradientTransformation`:

    spec.parts                            the parts of a spec (slices of its simulations, runs or trials)
    run_part(spec, part)     → Part       one task's work, on any worker; Part is data (`util.codec`)
    record(spec)             → dict       the spec's record, plain JSON data: all that `merge` and `render` need
    merge(record, [Part])    → Result     the parts in order, merged exactly
    collect([(record, Result | None)])    the results a study reports (e.g. a shared reference joined to each)
    label(record)            → str        "M1, ε = 1" (tasks, progress, messages)
    render(record, Result)   → (text, [warning lines])   the tables a command prints
    stem(record)             → str        the output files' common name, e.g. "coverage-M1-eps-1"
    outputs                  {suffix: write(Result, path, *, overwrite)}  the output files and their writers
    design, plan(design) → Plan           optional: the kind's settings as a frozen dataclass (defaults and
                                          help in its fields) and its plan; `noiseaware study KIND` builds its
                                          flags from the design's fields

A spec is a frozen dataclass whose `canonical` data (`util.fingerprint`) determines its results: it names the
tasks, and plan.json keeps it beside the spec's record, so a study folder is reported from data alone. A new kind is
one module in `noiseaware/studies/kinds/` that builds a `StudyKind` and calls `register_kind`: `noiseaware.studies`
imports every module there, so the kind runs from Python (`run_study(kind.plan(design), out)`), from the command
line (`noiseaware study KIND`) and in `noiseaware report` with nothing else to edit. `summary`, the old name of
`record`, is a deprecated alias (a field name given to `StudyKind`, and an attribute).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..util.deprecation import warn_renamed

__all__ = ["KINDS", "StudyKind", "get_kind", "register_kind"]

Entry = tuple[Mapping[str, Any], Any]


def _as_is(entries: list[Entry]) -> list[Entry]:
    return entries


class _Contract(NamedTuple):
    """The fields of a `StudyKind` (module doc)."""

    name: str
    unit: str
    run_part: Callable[[Any, slice], Any]
    record: Callable[[Any], dict[str, Any]]
    merge: Callable[[Mapping[str, Any], Sequence[Any]], Any]
    label: Callable[[Mapping[str, Any]], str]
    render: Callable[[Mapping[str, Any], Any], tuple[str, list[str]]]
    stem: Callable[[Mapping[str, Any]], str]
    outputs: Mapping[str, Callable[..., Any]]
    collect: Callable[[list[Entry]], list[Entry]] = _as_is
    design: type | None = None
    plan: Callable[[Any], Any] | None = None
    description: str = ""


class StudyKind(_Contract):
    """One kind of study (module doc); unit: what a part counts ("simulations", "runs"); description: one line
    for `noiseaware study --help`."""

    __slots__ = ()

    def __new__(cls, *args, summary: Callable[[Any], dict[str, Any]] | None = None, **fields):
        if summary is not None:
            warn_renamed("StudyKind(summary=…)", "StudyKind(record=…)")
            fields["record"] = summary
        return super().__new__(cls, *args, **fields)

    @property
    def summary(self) -> Callable[[Any], dict[str, Any]]:
        """Deprecated alias of `record`."""
        warn_renamed("StudyKind.summary", "StudyKind.record")
        return self.record

    def files(self, record: Mapping[str, Any]) -> list[str]:
        """The names of the output files of one spec (from its record), checked before any work."""
        return [self.stem(record) + suffix for suffix in self.outputs]

    def save(self, record: Mapping[str, Any], result: Any, directory: Path, overwrite: bool) -> None:
        """Write one spec's output files into `directory`."""
        for name, write in zip(self.files(record), self.outputs.values()):
            write(result, Path(directory) / name, overwrite=overwrite)


KINDS: dict[str, StudyKind] = {}
"""The registered kinds by name."""


def register_kind(kind: StudyKind) -> StudyKind:
    """Add `kind` to the registry (a kind of the same name is replaced: a plug-in may refine a built-in)."""
    if not isinstance(kind, StudyKind):
        raise TypeError(f"register_kind takes a StudyKind; got {type(kind).__name__}")
    if (kind.design is None) != (kind.plan is None):
        raise TypeError(f"kind {kind.name!r}: a design and its plan come together (give both, or neither)")
    KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> StudyKind:
    """The registered kind `name`; a KeyError naming the known ones."""
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"unknown kind of study {name!r}: known kinds are {', '.join(sorted(KINDS))}") from None
