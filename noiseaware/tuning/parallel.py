"""Optuna trials of the tuner on other processes, kept in a journal file so that a search resumes.

    storage: DIR/trials.journal (Optuna's JournalFileBackend: an append-only log, safe for several processes
             on one file system), or an in-memory-like temporary journal when no storage is given
    driver:  keeps `slots` trials in flight on the executor; each task loads the study from the journal, runs
             one trial (`run_trial`) and returns; a finished trial is in the journal whatever happens next
    resume:  the same search (same study name) finds its finished trials and runs only the rest; a trial left
             RUNNING by a killed process is marked FAIL and run again

Each trial's sampler is seeded by the search seed and the number of trials started before it; the sampler
imagines trials still running as bad (constant liar), so parallel workers do not propose the same point.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, wait
from pathlib import Path

import cloudpickle
import optuna
from optuna.trial import TrialState

from ..util.in_process import InProcessExecutor
from ..util.progress import progress_bar

__all__ = ["journal", "optimize_in_parallel", "run_trial"]

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
MAX_FAILURES = 3
"""Failed trials (raised, not pruned) a search tolerates before it stops with the last error."""


def journal(path: str | os.PathLike) -> optuna.storages.JournalStorage:
    """Optuna storage in the journal file `path` (created with its folder when missing)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


def sampler_for(seed: int, startup: int, parallel: bool = False) -> optuna.samplers.TPESampler:
    """The seeded TPE sampler of the search, with the constraints the objective records (a trial pruned on its
    prediction: the predicted ones, `search.predicted_constraints`), starting after `startup`
    trials; in parallel it imagines running trials as bad (constant liar), so workers do not repeat them."""
    with warnings.catch_warnings():  # Optuna marks constraints_func and constant_liar experimental: not ours to show
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed,
            constraints_func=lambda trial: trial.user_attrs.get(
                "constraints", trial.user_attrs.get("predicted_constraints", (1.0,) * 5)
            ),
            n_startup_trials=startup,
            constant_liar=parallel,
        )


def run_trial(payload: bytes | tuple) -> int:
    """On a worker: load the study from its journal and run one trial of the (pickled) objective; its number."""
    objective, path, name, seed, startup = cloudpickle.loads(payload) if isinstance(payload, bytes) else payload
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=name, storage=journal(path), sampler=sampler_for(seed, startup, True))
    numbers = []
    study.optimize(objective, n_trials=1, callbacks=[lambda study, trial: numbers.append(trial.number)])
    return numbers[0] if numbers else -1


def optimize_in_parallel(
    objective,
    *,
    name: str,
    storage: str | os.PathLike | None,
    first: Sequence[dict],
    trials: int,
    seed: int,
    startup: int,
    executor: Executor | None,
    slots: int,
    timeout: float | None,
    progress,
) -> optuna.Study:
    """Run the search's `trials` trials `slots` at a time on `executor` (default in-process), in the journal
    `storage` (default a temporary one), resuming a search of the same `name` found there (module doc)."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(storage) if storage is not None else Path(scratch) / "trials.journal"
        study = optuna.create_study(study_name=name, storage=journal(path), direction="minimize", load_if_exists=True)
        if not study.trials:
            for point in first:
                study.enqueue_trial(point)
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):  # left by a killed run
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        _run(
            objective,
            path,
            name,
            (seed, startup),
            trials,
            executor or InProcessExecutor(),
            slots,
            timeout,
            progress,
            study,
        )
        snapshot = optuna.create_study(study_name=name, direction="minimize")  # outlives a temporary journal
        trials = optuna.load_study(study_name=name, storage=journal(path)).trials
        for trial in trials:  # the journal keeps user attributes as JSON: its lists were the objective's tuples
            trial.user_attrs = {key: _tuples(value) for key, value in trial.user_attrs.items()}
        snapshot.add_trials(trials)
        return snapshot


def _tuples(value):
    """`value` with every list, at any depth, made a tuple again (mappings kept)."""
    if isinstance(value, list):
        return tuple(_tuples(item) for item in value)
    if isinstance(value, dict):
        return {key: _tuples(item) for key, item in value.items()}
    return value


def _run(
    objective,
    path: Path,
    name: str,
    sampler: tuple[int, int],
    trials: int,
    executor: Executor,
    slots: int,
    timeout,
    progress,
    study: optuna.Study,
) -> None:
    """Keep `slots` trials in flight until `trials` have finished (or the timeout passed); a failed trial is
    reported and another started, up to MAX_FAILURES."""
    done = len(study.get_trials(deepcopy=False, states=FINISHED))
    started = len(study.trials)
    deadline = None if timeout is None else time.monotonic() + timeout
    running: set = set()
    failures = 0
    with progress_bar(trials, "tuning", progress, unit="trial") as advance:
        advance(done)
        while done < trials:
            open_to_start = deadline is None or time.monotonic() < deadline
            while open_to_start and len(running) + done < trials and len(running) < max(1, slots):
                payload = (objective, str(path), name, sampler[0] + started, sampler[1])
                if not isinstance(executor, InProcessExecutor):  # another process: models may be closures
                    payload = cloudpickle.dumps(payload)
                running.add(executor.submit(run_trial, payload))
                started += 1
            if not running:
                return
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                error = future.exception()
                if error is None:
                    done += 1
                    advance(1)
                    continue
                failures += 1
                if failures > MAX_FAILURES:
                    raise RuntimeError(f"{failures} tuning trials failed; the last: {error}") from error
                print(f"a tuning trial failed ({type(error).__name__}: {error}); starting another", file=sys.stderr)
