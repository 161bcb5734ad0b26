"""Running a plan: read the finished tasks from the study directory, submit the others to an executor.

    finished = {task: verified result file in DIR}                 (reused, never rerun)
    for each other task, `slots` at a time:  executor.submit(execute, task, DIR/tasks/<id>.task)
    a task that raises is reported with its error and submitted once more; a second failure is final

The worker writes the result file itself, so a finished task is on disk whatever happens to this process;
killed, a study loses only the tasks in flight (at most `slots`). The progress bar counts done / running /
failed tasks; every event goes to DIR/events.jsonl.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import Any

import cloudpickle
from tqdm.auto import tqdm

from .directory import Plan, StudyDirectory
from .executors import InProcessExecutor
from .tasks import Task, execute

__all__ = ["RETRIES", "StudyError", "StudyRun", "run_plan", "run_study"]

RETRIES = 1
"""Times a failed task is submitted again before its failure is final."""


class StudyError(RuntimeError):
    """Tasks of a study failed twice: the message lists each with its error; the finished ones stay on disk."""


@dataclasses.dataclass(frozen=True)
class StudyRun:
    """What a run of a plan did: results {task id: result} of every finished task; reused: ids read from the
    directory; computed: ids run now; failed: {id: error text} of tasks that failed twice; seconds {id: s}."""

    results: Mapping[str, Any]
    reused: tuple[str, ...]
    computed: tuple[str, ...]
    failed: Mapping[str, str]
    seconds: Mapping[str, float]


def run_plan(
    plan: Plan,
    directory: StudyDirectory,
    *,
    executor: Executor | None = None,
    slots: int = 1,
    resume: bool = True,
    progress: bool | Callable[[dict[str, int]], None] = False,
) -> StudyRun:
    """Run `plan` in `directory` (module doc): finished tasks are read, the others run on `executor`
    (default in-process), `slots` in flight. progress: a bar on stderr, or a callable given the counts
    {"done", "running", "failed", "total"} after each event."""
    executor = executor or InProcessExecutor()
    directory.prepare(plan, resume=resume)
    results: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    pending: list[Task] = []
    for task in plan.tasks:
        loaded = directory.load(task)
        if loaded is None:
            pending.append(task)
        else:
            results[task.id], seconds[task.id] = loaded
    reused = tuple(results)
    failed: dict[str, str] = {}
    attempts: dict[str, int] = {}
    running: dict[Future, Task] = {}
    queue = list(reversed(pending))
    with _Counter(len(plan.tasks), len(reused), progress) as counter:
        while queue or running:
            while queue and len(running) < max(1, slots):
                task = queue.pop()
                attempts[task.id] = attempts.get(task.id, 0) + 1
                directory.log(task, "started", f"attempt {attempts[task.id]}")
                counter.update(running=len(running) + 1)  # before submit: an in-process executor runs it there
                future = executor.submit(execute, cloudpickle.dumps(task), str(directory.result_path(task)))
                running[future] = task
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in finished:
                task = running.pop(future)
                error = future.exception()
                loaded = None if error else directory.load(task)
                if loaded is not None:
                    results[task.id], seconds[task.id] = loaded
                    directory.log(task, "done", f"{loaded[1]:.1f} s")
                    counter.update(done=1)
                    continue
                text = f"{type(error).__name__}: {error}" if error else "its result file did not verify"
                if attempts[task.id] <= RETRIES:
                    directory.log(task, "retry", text)
                    counter.note(f"task {task.label} failed ({text}); running it once more")
                    queue.append(task)
                else:
                    directory.log(task, "failed", text)
                    failed[task.id] = text
                    counter.update(failed=1)
            counter.update(running=len(running))
    computed = tuple(task.id for task in pending if task.id in results)
    return StudyRun(results, reused, computed, failed, seconds)


def run_study(
    plan: Plan,
    out,
    *,
    executor: Executor | None = None,
    slots: int = 1,
    resume: bool = True,
    progress: bool | Callable[[dict[str, int]], None] = False,
) -> Any:
    """Run `plan` in the study directory `out` (`run_plan`) and merge its results (plan.merge). Raises
    StudyError, after keeping every finished task, when a task failed twice."""
    run = run_plan(plan, StudyDirectory(out), executor=executor, slots=slots, resume=resume, progress=progress)
    if run.failed:
        lines = "\n".join(f"  {t.label}: {run.failed[t.id]}" for t in plan.tasks if t.id in run.failed)
        raise StudyError(
            f"{len(run.failed)} of {len(plan.tasks)} tasks failed twice:\n{lines}\nthe finished tasks are kept in "
            f"{out}: fix the cause and run the same command again to finish the study"
        )
    return plan.merge(plan, run.results)


class _Counter:
    """Progress across tasks: done (reused ones included), running, failed, on a bar or to a callable."""

    def __init__(self, total: int, done: int, progress):
        self.counts = {"done": done, "running": 0, "failed": 0, "total": total}
        self.progress = progress
        self.bar = None

    def __enter__(self):
        if self.progress is True:
            self.bar = tqdm(total=self.counts["total"], initial=self.counts["done"], desc="study", unit="task",
                            file=sys.stderr, dynamic_ncols=True)  # fmt: skip
            self._show()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()

    def update(self, *, done: int = 0, failed: int = 0, running: int | None = None) -> None:
        self.counts["done"] += done
        self.counts["failed"] += failed
        if running is not None:
            self.counts["running"] = running
        if self.bar is not None:
            self.bar.update(done)
        self._show()

    def note(self, text: str) -> None:
        """A line above the bar (or on stderr): a task's failure as it happens."""
        (self.bar.write if self.bar is not None else lambda t: print(t, file=sys.stderr))(text)

    def _show(self) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"running {self.counts['running']}, failed {self.counts['failed']}")
        elif callable(self.progress):
            self.progress(dict(self.counts))
