"""The tuner's simulated candidates on other processes, kept in a journal file so that a search resumes.

journal: DIR/trials.journal (Optuna's JournalFileBackend: an append-only log, safe for several processes on
         one file system), or a temporary one when no storage is given. Each simulated candidate is an Optuna
         trial of the search's study: its searched values as params, its prediction, and one user attribute
         per finished part of its simulations (`Score.to_record`, plain JSON); it is told COMPLETE with its
         width after the last rung, PRUNED when successive halving drops it.
run:     the parts of a rung as tasks, `slots` at a time on any concurrent.futures executor (a Dask client's:
         the same cluster as a coverage study); the calling process writes the journal.
resume:  the same search (same study name) reads the parts it finished and runs only the rest; a candidate
         left RUNNING by a killed process keeps its finished parts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, wait
from pathlib import Path

import cloudpickle
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState

from ..util.in_process import InProcessExecutor
from .halving import Evaluation
from .score import Score
from .space import SEARCHED, SearchSpace

__all__ = ["TrialStore", "journal", "run_tasks"]

MAX_FAILURES = 3
"""Failed tasks (raised) a rung tolerates, each run again, before the search stops with the last error."""


def journal(path: str | os.PathLike) -> optuna.storages.JournalStorage:
    """Optuna storage in the journal file `path` (created with its folder when missing)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


class TrialStore:
    """The search's simulated candidates as the trials of an Optuna study (module doc): in the journal `path`, or
    in memory (None)."""

    def __init__(self, path: str | os.PathLike | None, name: str, space: SearchSpace):
        storage = None if path is None else journal(path)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(study_name=name, storage=storage, direction="minimize", load_if_exists=True)
        self.distributions = {name: FloatDistribution(*getattr(space, name), log=True) for name in SEARCHED} | {
            "steps": CategoricalDistribution(list(space.steps)),
            "sampling_rate": CategoricalDistribution(list(space.sampling_rate)),
        }
        self._trials = {t.user_attrs["candidate"]: t for t in self.study.get_trials(deepcopy=False)}
        self._open: dict[int, optuna.trial.Trial] = {}

    def finished_part(self, number: int, part: slice) -> Score | None:
        """The stored score of candidate `number` over simulations `part`, None when it was not finished."""
        trial = self._trials.get(number)
        record = None if trial is None else trial.user_attrs.get(_part_name(part))
        return None if record is None else Score.from_record(record)

    def save(self, evaluation: Evaluation, part: slice, score: Score) -> None:
        """Keep a finished part of a candidate's simulations (its trial is opened on its first part)."""
        self._trial(evaluation).set_user_attr(_part_name(part), score.to_record())

    def close(self, evaluation: Evaluation, complete: bool) -> None:
        """Tell the study how a candidate ended: COMPLETE with its width, or PRUNED by successive halving."""
        stored = self._trials.get(evaluation.number)
        if stored is not None and stored.state != TrialState.RUNNING:
            return
        trial = self._trial(evaluation)
        if complete:
            self.study.tell(trial, evaluation.score.width)
        else:
            self.study.tell(trial, state=TrialState.PRUNED)

    def _trial(self, evaluation: Evaluation) -> optuna.trial.Trial:
        number = evaluation.number
        if number in self._open:
            return self._open[number]
        stored = self._trials.get(number)
        if stored is not None:  # left running by a killed process
            trial = optuna.trial.Trial(self.study, stored._trial_id)
        else:
            self.study.enqueue_trial(evaluation.candidate.as_point())
            trial = self.study.ask(self.distributions)
            trial.set_user_attr("candidate", number)
            trial.set_user_attr("predicted", evaluation.predicted)
        self._open[number] = trial
        return trial


def _part_name(part: slice) -> str:
    return f"part {part.start}-{part.stop}"


def run_tasks(
    function: Callable, payloads: Sequence, executor: Executor | None, slots: int, on_result: Callable
) -> None:
    """function(payload) for each payload, `slots` at a time on `executor` (default: in this process, one after
    another); on_result(index, result) in this process as each finishes. A task that raises is run again, up to
    MAX_FAILURES in all, then the last error is raised."""
    executor = executor or InProcessExecutor()
    local = isinstance(executor, InProcessExecutor)
    pending = list(enumerate(payloads))
    running: dict = {}
    failures = 0
    while pending or running:
        while pending and len(running) < max(1, slots):
            index, payload = pending.pop(0)
            if local:
                future = executor.submit(function, payload)
            else:  # another process: models may be closures
                future = executor.submit(_unpacked, (function, cloudpickle.dumps(payload)))
            running[future] = (index, payload)
        finished, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in finished:
            index, payload = running.pop(future)
            error = future.exception()
            if error is None:
                on_result(index, future.result())
                continue
            failures += 1
            if failures >= MAX_FAILURES:
                raise RuntimeError(f"{failures} tuning tasks failed; the last: {error}") from error
            print(f"a tuning task failed ({type(error).__name__}: {error}); running it again", file=sys.stderr)
            pending.append((index, payload))


def _unpacked(packed: tuple):
    """On a worker: the task `run_tasks` pickled (our own bytes, made in this run)."""
    function, payload = packed
    return function(cloudpickle.loads(payload))
