"""A fit's remarks as data (`Note`), and those of a batch gathered into one complete, actionable line each.

A method remarks on one problem's fit with a `Note` kept on its posterior (`posterior.notes`), the way blackjax
keeps divergences in `NUTSInfo` until someone reads them: what happened (`kind`), the parameters concerned, an
optional number (divergent transitions, added up over problems; or an R-hat, of which the largest is kept) and
what to do (`advice`). Nothing is raised as a warning while fitting; `na.fit` issues a batch's notes at the end
as `FitWarning`s, a study stores them with its results, the tuner counts them. `gather` folds the notes of M
problems into one line per distinct note, with the number of problems that made it and the parameters named
(each with its own count, the most frequent first; beyond MAX_NAMED, the first few and how many more):

    weak identification in 11 of 20 traces (mu:rate in 9, rho:rate in 4): … record a longer trace …
    weak identification in 3 of 3 traces (mu:b[0] in 3, mu:b[1] in 3, …, and 95 more of 100 parameters): …

At the command line's edge, where Python's warnings are caught and printed, `gather` also takes caught warnings:
a library's is one line per distinct message with its count, and a numpy RuntimeWarning (an overflow, a division
by zero) says where it arose, since it means an intermediate value went non-finite.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Iterable, Sequence
from typing import Literal

from .files import plain

__all__ = ["FitWarning", "Note", "gather", "issue", "named", "notes_from_json", "notes_json", "notes_of", "tally"]

Combine = Literal["sum", "max"]
MAX_NAMED = 10
"""The most parameters a line names one by one; more are counted, the first NAMED_FIRST of them named."""
NAMED_FIRST = 5


def named(names) -> str:
    """The names joined by commas, or, past MAX_NAMED, the first NAMED_FIRST and a count: "a, b, c, d, e, …, and 95
    more of 100 parameters" (a model of 10⁵ coordinates must not print them all)."""
    names = list(names)
    if len(names) <= MAX_NAMED:
        return ", ".join(names)
    return ", ".join(names[:NAMED_FIRST]) + f", …, and {len(names) - NAMED_FIRST} more of {len(names)} parameters"


@dataclasses.dataclass(frozen=True)
class Note:
    """A remark about one problem's fit, in parts that `gather` adds up over the problems of a batch.

    kind: what happened, a short noun phrase ("weak identification"); advice: what it means and what to do;
    parameters: the names of the parameters concerned (may be empty); value: an optional number with how it
    combines over problems: "sum" (a count, shown as "N in all") or "max" (shown as "largest X").
    """

    kind: str
    advice: str = ""
    parameters: tuple[str, ...] = ()
    value: float | None = None
    combine: Combine = "sum"

    def __post_init__(self):
        object.__setattr__(self, "parameters", tuple(self.parameters))
        if self.combine not in ("sum", "max"):
            raise ValueError(f"a note's value combines by 'sum' or 'max', not {self.combine!r}")

    def __str__(self) -> str:
        """The note of one problem as its line: kind (parameters; value): advice."""
        return _line(self.kind, self.advice, dict.fromkeys(self.parameters, 1), self.value, self.combine, 1, 1, "")


class FitWarning(UserWarning):
    """The warning a `Note` is issued as (`issue`); `note` keeps its parts. A FitWarning re-issued from its text
    alone (`warnings.warn(text, FitWarning)`) is that text."""

    def __init__(self, note: Note | str):
        self.note = note if isinstance(note, Note) else None
        super().__init__(str(note))


def notes_json(notes: Sequence[Note]) -> str:
    """The notes as a JSON list of their fields (a posterior file's `notes` attribute)."""
    return json.dumps([plain(dataclasses.asdict(note)) for note in notes])


def notes_from_json(text: str | None) -> tuple[Note, ...]:
    """The notes `notes_json` wrote (None, a file written before notes were kept: none)."""
    return tuple(Note(**fields) for fields in json.loads(text or "[]"))


def notes_of(outcome) -> tuple[Note, ...]:
    """The notes a fit's outcome carries (a posterior's `notes`; none for a FitFailure or a plug-in's posterior
    without them)."""
    return tuple(getattr(outcome, "notes", ()) or ())


def issue(notes: Sequence[Note], count: int, unit: str = "traces", stacklevel: int = 2) -> None:
    """Warn once per distinct note among the notes of `count` problems, as `gather`'s lines (a `FitWarning`
    holding the note itself for a batch of one); stacklevel as `warnings.warn`'s, counted from `issue`."""
    if count == 1:
        for note in dict.fromkeys(notes):
            warnings.warn(FitWarning(note), stacklevel=stacklevel)
        return
    for _, _, line in _gathered(notes, count, unit):
        warnings.warn(line, FitWarning, stacklevel=stacklevel)


def gather(items: Iterable[Note | warnings.WarningMessage], count: int, unit: str = "traces") -> list[tuple[type, str]]:
    """One (category, line) per distinct note among `items`, the notes (or, at the command line's edge, the
    caught warnings) of a batch of `count` problems (`unit`: what the problems are called), in the order they
    first appeared.

    Notes of one kind and advice become one line: the number of problems that made them (each problem makes a
    kind at most once), each parameter with the number of problems it was named in, and their values summed or
    maximised. Other warnings are counted by their message; whitespace is collapsed.
    """
    lines = [(category or FitWarning, line) for category, _, line in _gathered(items, count, unit)]
    return list(dict.fromkeys(lines))  # a warning re-issued from its text reads as the original: once


def tally(notes: Iterable[Note], count: int, unit: str = "traces") -> tuple[tuple[int, str], ...]:
    """(problems, line) per distinct note (as `gather`): how many of the `count` problems made it, and its line,
    e.g. (12, "weak identification in 12 of 24 simulations (mu:rate in 12): …")."""
    return tuple((times, line) for _, times, line in _gathered(notes, count, unit))


def _as_note(item) -> Note | None:
    """A note, or a caught warning's note (a FitWarning issued from a Note), else None."""
    if isinstance(item, Note):
        return item
    message = getattr(item, "message", None)
    return message.note if isinstance(message, FitWarning) else None


def _gathered(items, count: int, unit: str) -> list[tuple[type | None, int, str]]:
    """(category — None for a note —, problems that made it, line) per distinct note or warning, in the order
    they first appeared."""
    groups: dict[tuple, list] = {}  # in the order of first appearance; notes by their parts, others by text
    for item in items:
        note = _as_note(item)
        if note is not None:
            groups.setdefault((None, note.kind, note.advice, note.combine), []).append(note)
        else:
            groups.setdefault((item.category, _foreign_text(item)), []).append(item)
    lines = []
    for key, group in groups.items():
        if len(key) == 2:
            category, text = key
            lines.append((category, len(group), text if count == 1 else f"{text} (in {len(group)} of {count} {unit})"))
            continue
        _, kind, advice, combine = key
        parameters: dict[str, int] = {}
        for note in group:
            for name in note.parameters:
                parameters[name] = parameters.get(name, 0) + 1
        values = [note.value for note in group if note.value is not None]
        value = (sum(values) if combine == "sum" else max(values)) if values else None
        lines.append((None, len(group), _line(kind, advice, parameters, value, combine, len(group), count, unit)))
    return lines


def _line(
    kind: str, advice: str, parameters: dict[str, int], value, combine: Combine, times: int, count: int, unit: str
) -> str:
    """kind[ in times of count unit][ (parameters; value)]: advice."""
    parts = []
    if parameters:  # the most often named first (a stable sort: ties in the order they appeared)
        ordered = sorted(parameters.items(), key=lambda item: -item[1])
        parts.append(named(name if count == 1 else f"{name} in {n}" for name, n in ordered))
    if value is not None:
        number = f"{value:.4g}"
        parts.append((f"{number} in all" if count > 1 else number) if combine == "sum" else f"largest {number}")
    where = f" in {times} of {count} {unit}" if count > 1 else ""
    detail = f" ({'; '.join(parts)})" if parts else ""
    return f"{kind}{where}{detail}" + (f": {advice}" if advice else "")


def _foreign_text(caught: warnings.WarningMessage) -> str:
    """A caught warning as one line; a RuntimeWarning (numpy's non-finite intermediate values) says where."""
    text = " ".join(str(caught.message).split())
    if issubclass(caught.category, RuntimeWarning):
        return f"numerical warning at {caught.filename}:{caught.lineno}: {text}"
    return text
