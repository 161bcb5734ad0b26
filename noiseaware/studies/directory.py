"""A study directory: the plan of a study and one verified result file per finished task.

    DIR/study.json        what the study is (kind, description, versions, plan id, its tasks with labels)
    DIR/plan.pkl          the plan itself (its specs, to merge and to report from the directory alone)
    DIR/tasks/<id>.task   each finished task's result (`files`), written by the worker that ran it
    DIR/events.jsonl      a line per task started, finished or failed (for `report` and for the record)

A directory holds one plan: running the same plan again resumes it (finished tasks are read, not rerun, and
the temporary file of a result cut short by a kill is removed); another plan is refused before any work. A
result file that does not verify is moved aside to <id>.task.corrupt (never deleted) and its task runs again.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import cloudpickle

from ..util.files import atomic_write, write_json
from ..util.fingerprint import fingerprint
from .files import CorruptResult, read_result
from .tasks import VERSIONS, Task

__all__ = ["Plan", "PlanMismatch", "StudyDirectory"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """A study: its tasks and how their results merge. merge(plan, {task id: result}) → the study's results;
    description: plain data saying what the study is (study.json, messages); kind: "coverage", "calibration"."""

    kind: str
    description: Mapping[str, Any]
    tasks: tuple[Task, ...]
    merge: Callable[[Plan, Mapping[str, Any]], Any]
    parts: tuple[Plan, ...] = ()

    @classmethod
    def combined(cls, plans: Sequence[Plan]) -> Plan:
        """One study of several plans' tasks (e.g. one coverage plan per model), run together so that workers
        never wait between them; its merge gives each plan's merged results, in order."""
        kinds = {plan.kind for plan in plans}
        return cls(
            "+".join(sorted(kinds)),
            {"studies": [dict(plan.description) for plan in plans]},
            tuple(task for plan in plans for task in plan.tasks),
            _merge_each,
            tuple(plans),
        )

    @property
    def id(self) -> str:
        """The fingerprint of the kind and the task ids: two plans with the same tasks are the same study."""
        return fingerprint({"kind": self.kind, "tasks": [task.id for task in self.tasks]})


class PlanMismatch(ValueError):
    """The directory holds another study than the one asked for."""


class StudyDirectory:
    """The files of one study (module doc)."""

    def __init__(self, path):
        self.path = Path(path)

    @property
    def tasks_dir(self) -> Path:
        return self.path / "tasks"

    def result_path(self, task: Task) -> Path:
        return self.tasks_dir / f"{task.id}.task"

    def exists(self) -> bool:
        return (self.path / "study.json").exists()

    def holds(self, plan: Plan, *, resume: bool = True) -> bool:
        """Whether the directory already holds `plan` (a study to resume); nothing is written. Another plan, or
        the same plan with resume=False, is a PlanMismatch / FileExistsError that says what to do."""
        if not self.exists():
            return False
        held = self.description()
        if held.get("plan") != plan.id:
            raise PlanMismatch(
                f"{self.path} holds another study ({_what(held)}), not this one ({_what(self._record(plan))}): "
                "give another output directory, or rerun that study with exactly its arguments to resume it"
            )
        if not resume:
            raise FileExistsError(
                f"{self.path} already holds this study: resume it (the default), or choose another directory"
            )
        return True

    def prepare(self, plan: Plan, *, resume: bool = True) -> bool:
        """Make the directory hold `plan`: True when it already did (a resumed study), checked by `holds`."""
        if self.holds(plan, resume=resume):
            for stale in self.tasks_dir.glob(".*.tmp"):  # a result being written when a worker was killed
                stale.unlink(missing_ok=True)
            return True
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(f"{self.path} is a file: give a directory for the study")
        self.tasks_dir.mkdir(parents=True, exist_ok=True)
        payload = cloudpickle.dumps(plan)
        atomic_write(self.path / "plan.pkl", lambda temporary: temporary.write_bytes(payload), overwrite=True)
        write_json(self.path / "study.json", self._record(plan))  # last: its presence marks a prepared study
        return False

    def plan(self) -> Plan:
        """The plan stored in the directory."""
        if not self.exists():
            raise FileNotFoundError(f"{self.path} holds no study (no study.json): run a study with --out {self.path}")
        return pickle.loads((self.path / "plan.pkl").read_bytes())

    def description(self) -> dict[str, Any]:
        return json.loads((self.path / "study.json").read_text())

    def load(self, task: Task) -> tuple[Any, float] | None:
        """Task's verified result and seconds, or None when it has not finished; a result file that does not
        verify is moved aside (<id>.task.corrupt), logged, and None returned, so the task runs again."""
        path = self.result_path(task)
        if not path.exists():
            return None
        try:
            return read_result(path, task.id)
        except (CorruptResult, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as error:
            path.replace(path.with_name(path.name + ".corrupt"))
            self.log(task, "corrupt", str(error))
            return None

    def log(self, task: Task, event: str, detail: str = "") -> None:
        """Append one event line (time, task id and label, event, detail) to events.jsonl."""
        line = {"time": round(time.time(), 3), "task": task.id, "label": task.label, "event": event}
        with open(self.path / "events.jsonl", "a") as handle:
            handle.write(json.dumps(line | ({"detail": detail} if detail else {})) + "\n")

    def events(self) -> list[dict[str, Any]]:
        """The lines of events.jsonl, oldest first ([] before any; a line cut short by a kill is skipped)."""
        path = self.path / "events.jsonl"
        if not path.exists():
            return []
        events = []
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return events

    def _record(self, plan: Plan) -> dict[str, Any]:
        return {
            "plan": plan.id,
            "kind": plan.kind,
            "description": dict(plan.description),
            "versions": VERSIONS,
            "tasks": [{"id": task.id, "label": task.label} for task in plan.tasks],
        }


def _merge_each(plan: Plan, results: Mapping[str, Any]) -> list[Any]:
    """The merged results of each part of a combined plan."""
    return [part.merge(part, results) for part in plan.parts]


def _what(record: Mapping[str, Any]) -> str:
    """A study in a few words, from its study.json record."""
    description = record.get("description", {})
    return f"{record.get('kind', '?')} " + ", ".join(f"{k} {v}" for k, v in description.items() if k != "plan")
