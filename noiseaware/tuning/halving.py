"""Successive halving over simulations: the tuner's candidates are simulated a few at a time, and only the
better half goes on to more simulations (docs/tuning.md §3).

    rungs:  cumulative simulations M/4, M/2, M of the search's M (each at least 2);
    rung r: every candidate still in runs DPVI and the exact fit on the simulations it has not seen up to the
            rung's size (parts of one score combine exactly, `Score.__add__`); then the candidates are ranked as
            the full search would rank them (`rank`, the ζ tests projected to M simulations) and the better
            ⌈half⌉ goes on. The last rung's candidates have seen all M simulations.

With K candidates and M simulations that is about K·M/4 + K/2·M/4 + K/4·M/2 = K·M/2 runs, where scoring each on all
M would take K·M. `run` does the work of a rung (on other processes, or from a journal: `parallel`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .score import Score
from .space import Candidate

__all__ = ["Evaluation", "halving_runs", "rung_sizes", "successive_halving"]


@dataclass
class Evaluation:
    """A candidate the search simulates: number (its trial number), candidate, settings (record_dpvi's), predicted
    (`Prediction.as_row`), score (over the simulations seen so far; None before the first rung) and rung (the
    index of the last rung it completed, −1 before)."""

    number: int
    candidate: Candidate
    settings: dict
    predicted: dict
    score: Score | None = None
    rung: int = -1

    @property
    def simulations(self) -> int:
        """The simulations its score is over."""
        return 0 if self.score is None else self.score.simulations


def rung_sizes(simulations: int) -> tuple[int, ...]:
    """The cumulative simulations of each rung: M/4, M/2, M (rounded down, at least 2, distinct)."""
    sizes = sorted({max(2, simulations // 4), max(2, simulations // 2), simulations})
    return tuple(size for size in sizes if size <= simulations)


def successive_halving(
    evaluations: list[Evaluation],
    sizes: tuple[int, ...],
    run: Callable[[list[Evaluation], slice], list[Score]],
    rank: Callable[[Evaluation], tuple],
    keep: float = 0.5,
    advance: Callable[[int], None] = lambda runs: None,
) -> None:
    """Score `evaluations` rung by rung (module doc), in place: run(evaluations, part) returns one Score per
    evaluation over simulations `part`; after each rung but the last, the ⌈keep·n⌉ best by `rank` (smallest first)
    go on. advance(runs) after each rung, with the DPVI runs it spent (a progress bar's)."""
    alive, start = list(evaluations), 0
    for r, stop in enumerate(sizes):
        todo = [e for e in alive if e.rung < r]
        for evaluation, score in zip(todo, run(todo, slice(start, stop))):
            evaluation.score = score if evaluation.score is None else evaluation.score + score
            evaluation.rung = r
        advance(len(todo) * (stop - start))
        if r < len(sizes) - 1:
            alive = sorted(alive, key=rank)[: math.ceil(keep * len(alive))]
        start = stop


def halving_runs(candidates: int, sizes: tuple[int, ...], keep: float = 0.5) -> int:
    """The DPVI runs `successive_halving` spends on `candidates` with rungs `sizes` (a progress bar's total)."""
    runs, alive, start = 0, candidates, 0
    for stop in sizes:
        runs += alive * (stop - start)
        alive, start = math.ceil(keep * alive), stop
    return runs
