"""A study directory: the plan of a study as data, one verified result file per finished task, and a lock.

    DIR/plan.json         what the study is (`Plan.record`: kind, description, versions, specs, tasks)
    DIR/tasks/<id>.npz    each finished task's result (`files`: data only), written by the worker that ran it
    DIR/events.jsonl      a line per task started, finished or failed (for `report` and for the record)
    DIR/lock              while a process runs the study: its pid, host, start time and command

Nothing in a study directory is ever unpickled: a folder copied from another machine, attached to a paper or left
on shared scratch can be reported safely. A directory holds one plan: running the same plan again resumes it
(finished tasks are read, not rerun, and the temporary file of a result cut short by a kill is removed); another
plan is refused before any work, with the differences named. One process at a time: a second is refused while
the lock names a live holder (a lock left by a dead process on this host is taken over). A result file that
does not verify is moved aside to <id>.npz.corrupt (never deleted) and its task runs again.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..util.errors import UserError
from ..util.files import write_json
from .files import SUFFIX, CorruptResult, read_result
from .plan import FORMAT, Plan, differences
from .tasks import Task

__all__ = ["PlanMismatch", "StudyDirectory", "StudyError", "StudyLocked"]


_HELD: dict[Path, int] = {}
"""The study directories whose lock this process holds, with how many blocks hold it."""


class PlanMismatch(ValueError):
    """The directory holds another study than the one asked for."""


class StudyError(RuntimeError):
    """A study that cannot go on: the message says why and what to do; its finished tasks stay on disk."""


class StudyLocked(StudyError, UserError):
    """Another process is running the study in this directory."""


class StudyDirectory:
    """The files of one study (module doc)."""

    def __init__(self, path):
        self.path = Path(path)

    @property
    def tasks_dir(self) -> Path:
        return self.path / "tasks"

    @property
    def plan_path(self) -> Path:
        return self.path / "plan.json"

    @property
    def lock_path(self) -> Path:
        return self.path / "lock"

    def result_path(self, task: Task | str) -> Path:
        return self.tasks_dir / f"{getattr(task, 'id', task)}{SUFFIX}"

    def exists(self) -> bool:
        return self.plan_path.exists()

    def holds(self, plan: Plan, *, resume: bool = True) -> bool:
        """Whether the directory already holds `plan` (a study to resume); nothing is written. Another plan is a
        PlanMismatch naming the differences; the same plan with resume=False a FileExistsError; a folder of an
        older noiseaware (a pickled plan, never read) a PlanMismatch."""
        self._refuse_pickled()
        if not self.exists():
            return False
        held = self.record()
        if held.get("plan") != plan.id:
            changed = differences(_identity(held), _identity(plan.record()))
            raise PlanMismatch(
                f"{self.path} holds another study ({_what(held)}), not this one ({_what(plan.record())}); what "
                f"differs: {'; '.join(changed) or 'the tasks'}. Give another output directory, or rerun that study "
                "with exactly its arguments and code to resume it"
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
        write_json(self.plan_path, plan.record())  # last: its presence marks a prepared study
        return False

    def record(self) -> dict[str, Any]:
        """The plan record stored in the directory (plan.json: plain data)."""
        self._refuse_pickled()
        if not self.exists():
            raise FileNotFoundError(f"{self.path} holds no study (no plan.json): run a study with --out {self.path}")
        try:
            record = json.loads(self.plan_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise PlanMismatch(f"{self.plan_path} is not a study plan ({error})") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise PlanMismatch(f"{self.plan_path} is not a study plan of format {FORMAT!r}")
        return record

    def _refuse_pickled(self) -> None:
        """PlanMismatch for a folder of an older noiseaware: its plan is a pickle, which is never read."""
        if (self.path / "plan.pkl").exists() and not self.exists():
            raise PlanMismatch(
                f"{self.path} holds a study written by an older noiseaware (a pickled plan, which is never read): "
                "give another output directory, or rerun that study there with this noiseaware"
            )

    def load(self, task: Task | str) -> tuple[Any, float] | None:
        """Task's verified result and seconds, or None when it has not finished; a result file that does not
        verify is moved aside (<id>.npz.corrupt), logged, and None returned, so the task runs again."""
        path = self.result_path(task)
        if not path.exists():
            return None
        try:
            return read_result(path, getattr(task, "id", task))
        except CorruptResult as error:
            path.replace(path.with_name(path.name + ".corrupt"))
            self.log(task, "corrupt", str(error))
            return None

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the study's lock while the block runs (re-entrant within this process): StudyLocked, before any
        work, while another live process holds it."""
        self.path.mkdir(parents=True, exist_ok=True)
        key = self.path.resolve()
        if not _HELD.get(key):
            self._take()
        _HELD[key] = _HELD.get(key, 0) + 1
        try:
            yield
        finally:
            _HELD[key] -= 1
            if not _HELD[key]:
                del _HELD[key]
                self.lock_path.unlink(missing_ok=True)

    def check_unlocked(self) -> None:
        """StudyLocked when another live process holds the lock (nothing is written)."""
        holder = self.holder()
        if holder is not None and _alive(holder):
            raise StudyLocked(_locked_message(self.lock_path, holder))

    def holder(self) -> dict[str, Any] | None:
        """What the lock file says of its holder, or None when the study is not locked."""
        try:
            holder = json.loads(self.lock_path.read_text())
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return {}
        return holder if isinstance(holder, dict) else {}

    def _take(self) -> None:
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv),
        }
        for _ in range(2):
            try:
                with open(self.lock_path, "x") as handle:
                    json.dump(me, handle)
                return
            except FileExistsError:
                holder = self.holder()
                if holder is not None and _alive(holder):
                    raise StudyLocked(_locked_message(self.lock_path, holder)) from None
                self.lock_path.unlink(missing_ok=True)  # its holder died on this host: take it over
        raise StudyLocked(f"{self.lock_path}: another process took the lock at the same moment; try again")

    def log(self, task: Task | str, event: str, detail: str = "") -> None:
        """Append one event line (time, task id and label, event, detail) to events.jsonl."""
        line = {
            "time": round(time.time(), 3),
            "task": getattr(task, "id", task),
            "label": getattr(task, "label", ""),
            "event": event,
        }
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
        return [e for e in events if isinstance(e, dict) and {"task", "event"} <= set(e)]


def _alive(holder: Mapping[str, Any]) -> bool:
    """Whether a lock's holder may still run: a live pid on this host, or any holder on another host (unknowable
    from here), or a lock file that cannot be read."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return True
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _locked_message(path: Path, holder: Mapping[str, Any]) -> str:
    who = f"process {holder.get('pid', '?')} on {holder.get('host', '?')} since {holder.get('since', '?')}"
    command = f" ({holder['command']})" if holder.get("command") else ""
    return (
        f"{path.parent} is in use by {who}{command}: wait for it to finish, or run this in another directory; if "
        f"that process is gone (e.g. its machine crashed), delete {path}"
    )


def _identity(record: Mapping[str, Any]) -> dict[str, Any]:
    """What names a plan: its kind, versions and each spec's canonical data (for naming differences)."""
    return {
        "kind": record.get("kind"),
        "versions": record.get("versions"),
        "specs": [spec.get("identity") for spec in record.get("specs", [])],
        "parts": [task.get("part") for task in record.get("tasks", [])],
    }


def _what(record: Mapping[str, Any]) -> str:
    """A study in a few words, from its plan record."""
    description = record.get("description", {})
    return f"{record.get('kind', '?')} " + ", ".join(f"{k} {v}" for k, v in description.items() if k != "plan")
