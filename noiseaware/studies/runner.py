"""Running a plan: read the finished tasks from the study directory, submit the others to an executor.

    finished = {task: verified result file in DIR}                 (reused, never rerun)
    for each other task, `slots` at a time:  executor.submit(execute, task, DIR/tasks/<id>.npz)

A task whose worker was lost (killed, out of memory, a broken pool) is submitted once more. A task that raises
is a bug, not a statistical failure (methods return those as typed values, which the merge counts): the study
submits nothing more, lets the running tasks finish, and raises `TaskError` from the task's exception, so its
traceback is shown. The worker writes the result file itself, so a finished task is on disk whatever happens to
this process; killed, a study loses only the tasks in flight (at most `slots`). The whole run holds the
directory's lock. The progress bar counts done / running / failed tasks; every event goes to DIR/events.jsonl.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from typing import Any

from tqdm.auto import tqdm

from ..util.checks import positive_int
from ..util.errors import UserError
from ..util.progress import TICK, every
from .directory import StudyDirectory, StudyError
from .executors import InProcessExecutor
from .kind import KINDS
from .plan import Plan, merge_record
from .tasks import Task, execute, pack
from .verify import verify_results

__all__ = ["RETRIES", "StudyError", "StudyRun", "TaskError", "WorkersLost", "run_plan", "run_study"]

RETRIES = 1
"""Times a task whose worker was lost is submitted again before its failure is final."""
LOST_WORKER = ("KilledWorker", "BrokenProcessPool", "CommClosedError", "CancelledError")
"""Errors of the executor, not of the task's code: the task may succeed on another worker."""


class TaskError(StudyError):
    """A task raised (a bug in its code, or in noiseaware): raised from the task's own exception."""


class WorkersLost(StudyError, UserError):
    """Tasks whose workers were lost twice (killed, out of memory): rerun the command to resume the study."""


@dataclasses.dataclass(frozen=True)
class StudyRun:
    """What a run of a plan did: results {task id: result} of every finished task; reused: ids read from the
    directory; computed: ids run now; failed: {id: error text} of tasks that failed twice; seconds {id: s}."""

    results: Mapping[str, Any]
    reused: tuple[str, ...]
    computed: tuple[str, ...]
    failed: Mapping[str, str]
    seconds: Mapping[str, float]
    errors: Mapping[str, BaseException] = dataclasses.field(default_factory=dict)


def run_plan(
    plan: Plan,
    directory: StudyDirectory,
    *,
    executor: Executor | None = None,
    slots: int = 1,
    resume: bool = True,
    progress: bool | Callable[[dict[str, int]], None] = False,
    verify: int = 0,
) -> StudyRun:
    """Run `plan` in `directory` (module doc): finished tasks are read, the others run on `executor`
    (default in-process), `slots` in flight. progress: a bar on stderr, or a callable given the counts
    {"done", "running", "failed", "total"} after each event. verify: recompute this many of the finished tasks
    read from the folder, drawn at random, before trusting them (`verify.verify_results`: ResultMismatch when one
    differs)."""
    positive_int("verify", verify, minimum=0)
    with directory.lock():
        return _run(plan, directory, executor or InProcessExecutor(), slots, resume, progress, verify)


def _run(plan, directory, executor, slots, resume, progress, verify=0) -> StudyRun:
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
    if verify and reused:
        by_id = {task.id: task for task in plan.tasks}
        for task_id in verify_results(plan.tasks, results, verify):
            directory.log(by_id[task_id], "verified", "recomputed: the stored result agrees")
    failed: dict[str, str] = {}
    errors: dict[str, BaseException] = {}
    attempts: dict[str, int] = {}
    running: dict[Future, Task] = {}
    queue = list(reversed(pending))
    with _Counter(len(plan.tasks), len(reused), progress) as counter:
        while (queue and not errors) or running:
            while queue and not errors and len(running) < max(1, slots):
                task = queue.pop()
                attempts[task.id] = attempts.get(task.id, 0) + 1
                directory.log(task, "started", f"attempt {attempts[task.id]}")
                counter.update(running=len(running) + 1)  # before submit: an in-process executor runs it there
                future = executor.submit(execute, pack(task), str(directory.result_path(task)))
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
                lost = error is None or type(error).__name__ in LOST_WORKER
                if lost and attempts[task.id] <= RETRIES:
                    directory.log(task, "retry", text)
                    counter.note(f"task {task.label} failed ({text}); running it once more")
                    queue.append(task)
                else:
                    directory.log(task, "failed", text)
                    failed[task.id] = text
                    if error is not None and not lost:
                        errors[task.id] = error
                        counter.note(f"task {task.label} raised {text}: stopping the study (no new tasks)")
                    counter.update(failed=1)
            counter.update(running=len(running))
    computed = tuple(task.id for task in pending if task.id in results)
    return StudyRun(results, reused, computed, failed, seconds, errors)


def run_study(
    plan: Plan,
    out,
    *,
    executor: Executor | None = None,
    slots: int = 1,
    resume: bool = True,
    progress: bool | Callable[[dict[str, int]], None] = False,
    verify: int = 0,
) -> Any:
    """Run `plan` in the study directory `out` (`run_plan`, with its `verify`) and merge its results: [(spec
    record, result)] per spec by its kind's contract (`merge_record`), or {task id: result} for loose tasks of an
    unregistered kind. Raises
    TaskError from the first task that raised (a bug: its traceback is the cause), or StudyError when a task's
    worker was lost twice; every finished task is kept."""
    run = run_plan(
        plan, StudyDirectory(out), executor=executor, slots=slots, resume=resume, progress=progress, verify=verify
    )
    if run.failed:
        lines = "\n".join(f"  {t.label}: {run.failed[t.id]}" for t in plan.tasks if t.id in run.failed)
        keep = f"the finished tasks are kept in {out}: fix the cause and run the same command again to finish the study"
        if run.errors:
            first = next(t for t in plan.tasks if t.id in run.errors)
            raise TaskError(
                f"task {first.label} raised an error, which stops the study (a statistical failure of a fit is "
                f"counted, not raised, so this is a bug):\n{lines}\n{keep}"
            ) from run.errors[first.id]
        raise WorkersLost(f"{len(run.failed)} of {len(plan.tasks)} tasks lost their worker twice:\n{lines}\n{keep}")
    if plan.kind not in KINDS:
        return dict(run.results)
    return merge_record(plan.record(), run.results)


class _Counter:
    """Progress across tasks: done (reused ones included), running, failed, on a bar or to a callable."""

    def __init__(self, total: int, done: int, progress):
        self.counts = {"done": done, "running": 0, "failed": 0, "total": total}
        self.progress = progress
        self.bar = None
        self.stack = contextlib.ExitStack()

    def __enter__(self):
        if self.progress is True:
            self.bar = self.stack.enter_context(
                tqdm(
                    total=self.counts["total"],
                    initial=self.counts["done"],
                    desc="study",
                    unit="task",
                    file=sys.stderr,
                    dynamic_ncols=True,
                )
            )
            self._show()
            self.stack.enter_context(every(TICK, self.bar.refresh))  # a task may run minutes: the clock moves
        return self

    def __exit__(self, *exc):
        self.stack.close()

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
