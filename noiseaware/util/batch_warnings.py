"""Warnings of a batch of fits, gathered into one complete, actionable line per distinct warning.

A method warns about one problem's fit with a `FitWarning`: what happened (`kind`), the parameters concerned,
an optional number (divergent transitions, added up over problems; or an R-hat, of which the largest is
kept) and what to do (`advice`). `gather` folds the warnings caught while fitting M problems into one line
per distinct warning, with the number of problems that raised it and the parameters named (with their own
counts, the most frequent first; beyond MAX_NAMED of them, their number and the first few):

    weak identification in 11 of 20 traces (mu:rate in 9, rho:rate in 4): … record a longer trace …
    weak identification in 3 of 20 traces (57 parameters: mu:theta[age] in 3, …, and 52 more): …

Any other warning (a library's) is one line per distinct message with its count; a numpy RuntimeWarning
(an overflow, a division by zero) says where it arose, since it means an intermediate value went non-finite.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Literal

__all__ = ["CaughtWarning", "FitWarning", "caught_warnings", "gather"]

Combine = Literal["sum", "max"]
MAX_NAMED = 5
"""The most parameters one warning line names; beyond it, the line counts them and names the first few."""


class FitWarning(UserWarning):
    """A warning about one problem's fit, in parts that `gather` adds up over the problems of a batch.

    kind: what happened, a short noun phrase ("weak identification"); advice: what it means and what to do;
    parameters: the names of the parameters concerned (may be empty); value: an optional number with how it
    combines over problems: "sum" (a count, shown as "N in all") or "max" (shown as "largest X"). A
    FitWarning re-issued from its text alone (`warnings.warn(text, FitWarning)`) is that text.
    """

    def __init__(
        self,
        kind: str,
        advice: str = "",
        parameters: Sequence[str] = (),
        value: float | None = None,
        combine: Combine = "sum",
    ):
        self.kind, self.advice, self.parameters = kind, advice, tuple(parameters)
        self.value, self.combine = value, combine
        parts = dict.fromkeys(self.parameters, 1)
        super().__init__(_line(kind, advice, parts, value, combine, 1, 1, "") if advice else kind)

    def __reduce__(self):
        """Pickled by its parts (a study's worker sends its warnings to the process that gathers them)."""
        return FitWarning, (self.kind, self.advice, self.parameters, self.value, self.combine)


@dataclasses.dataclass(frozen=True)
class CaughtWarning:
    """What `gather` reads of a caught warning, in a form that pickles (`warnings.WarningMessage` need not)."""

    message: FitWarning | str
    category: type
    filename: str
    lineno: int


def caught_warnings(caught: Sequence[warnings.WarningMessage]) -> tuple[CaughtWarning, ...]:
    """The caught warnings as picklable `CaughtWarning`s (a library's warning keeps its text only)."""
    return tuple(
        CaughtWarning(
            w.message if isinstance(w.message, FitWarning) else str(w.message),
            w.category,
            str(w.filename),
            int(w.lineno),
        )
        for w in caught
    )


def gather(
    caught: Sequence[warnings.WarningMessage | CaughtWarning], count: int, unit: str = "traces"
) -> list[tuple[type, str]]:
    """One (category, line) per distinct warning among `caught`, the warnings of a batch of `count` problems
    (`unit`: what the problems are called), in the order they first appeared.

    FitWarnings of one kind and advice become one line: the number of problems that raised them (each
    problem raises a kind at most once), each parameter with the number of problems it was named in, and
    their values summed or maximised. Other warnings are counted by their message; whitespace is collapsed.
    """
    groups: dict[tuple, list] = {}  # in the order of first appearance; FitWarnings by their parts, others by text
    for caught_warning in caught:
        message = caught_warning.message
        if isinstance(message, FitWarning):
            key = (caught_warning.category, message.kind, message.advice, message.combine)
        else:
            key = (caught_warning.category, _foreign_text(caught_warning))
        groups.setdefault(key, []).append(message)
    lines = []
    for key, group in groups.items():
        if len(key) == 2:
            category, text = key
            lines.append((category, text if count == 1 else f"{text} (in {len(group)} of {count} {unit})"))
            continue
        category, kind, advice, combine = key
        parameters: dict[str, int] = {}
        for fit_warning in group:
            for name in fit_warning.parameters:
                parameters[name] = parameters.get(name, 0) + 1
        values = [w.value for w in group if w.value is not None]
        value = (sum(values) if combine == "sum" else max(values)) if values else None
        lines.append((category, _line(kind, advice, parameters, value, combine, len(group), count, unit)))
    return list(dict.fromkeys(lines))  # a warning re-issued from its text reads as the original: once


def _line(
    kind: str, advice: str, parameters: dict[str, int], value, combine: Combine, times: int, count: int, unit: str
) -> str:
    """kind[ in times of count unit][ (parameters; value)]: advice."""
    parts = []
    if parameters:
        parts.append(_parameters_text(parameters, count))
    if value is not None:
        number = f"{value:.4g}"
        parts.append((f"{number} in all" if count > 1 else number) if combine == "sum" else f"largest {number}")
    where = f" in {times} of {count} {unit}" if count > 1 else ""
    detail = f" ({'; '.join(parts)})" if parts else ""
    return f"{kind}{where}{detail}" + (f": {advice}" if advice else "")


def _parameters_text(parameters: dict[str, int], count: int) -> str:
    """The parameters named by a warning, the most often named first (a stable sort: ties in the order they
    appeared), with their counts when there are several problems; beyond MAX_NAMED, counted with the first few."""
    named = sorted(parameters.items(), key=lambda item: -item[1])
    shown = [name if count == 1 else f"{name} in {n}" for name, n in named[:MAX_NAMED]]
    if len(named) <= MAX_NAMED:
        return ", ".join(shown)
    return f"{len(named)} parameters: {', '.join(shown)} and {len(named) - MAX_NAMED} more"


def _foreign_text(caught_warning: warnings.WarningMessage | CaughtWarning) -> str:
    """A library's warning as one line; a RuntimeWarning (numpy's non-finite intermediate values) says where."""
    text = " ".join(str(caught_warning.message).split())
    if issubclass(caught_warning.category, RuntimeWarning):
        return f"numerical warning at {caught_warning.filename}:{caught_warning.lineno}: {text}"
    return text
