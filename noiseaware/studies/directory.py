"""A study directory: the plan of a study as data, one verified result file per finished task, and a lock.

    DIR/plan.json         what the study is (`Plan.record`: kind, description, versions, specs, tasks)
    DIR/tasks/<id>.npz    each finished task's result (`files`: data only), written by the worker that ran it
    DIR/events.jsonl      a line per task started, finished or failed (for `report` and for the record)
    DIR/lock              while a process runs the study: its pid, host, start time and command

Nothing in a study directory is ever unpickled: a folder copied from another machine, attached to a paper or left
on shared scratch can be reported safely. A directory holds one plan: running the same plan again resumes it
(finished tasks are read, not rerun, and the temporary file of a result cut short by a kill is removed); another
plan is refused before any work, with the differences named. One process at a time: a second is refused while
the lock names a live holder (a lock left by a dead process on this host is taken over); a lock file that cannot
be read is refused with its path and how to clear it. A result file that does not verify is moved aside to
<id>.npz.corrupt (never deleted) by the study, which says so, and its task runs again; reading a study
(`read`, `events`, `noiseaware report`) writes nothing and only names such files.

plan.json is checked before it is used: its shape, its checksum, its plan id against its tasks, and each task's
id against its spec's identity and the recorded versions, so an edited or mismatched plan is refused, not
half-read. A symbolic link in the folder that leads out of it (plan.json, events.jsonl, the lock, tasks/ or a
task file), or a hard link among them, is refused before anything is read or written: a study folder from someone
else cannot make a report or a resumed study read or append to a file elsewhere. These are checks against accident
and mismatch: a checksum anyone can recompute does not prove who wrote a file (docs/studies.md, "A study folder
from someone else"). `discard_results` deletes the finished results, for a rerun whose inputs changed in ways the
plan cannot see (`--force`).

Why this module is long: the folder's layout, the checks made before anything in it is read, its lock and its event
log keep one folder's invariants together; apart, each would re-derive the layout and its checks.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..util.errors import UserError
from ..util.files import write_json
from ..util.fingerprint import fingerprint
from .files import SUFFIX, CorruptResult, read_result
from .plan import FORMAT, SPEC_RECORD, Plan, content_checksum, differences
from .tasks import Task

__all__ = [
    "CorruptResultWarning",
    "PlanMismatch",
    "StudyDirectory",
    "StudyError",
    "StudyFolderError",
    "StudyLocked",
    "UnsafeLink",
]


_HELD: dict[Path, int] = {}
"""The study directories whose lock this process holds, with how many blocks hold it."""


class PlanMismatch(ValueError):
    """The directory holds another study than the one asked for."""


class StudyError(RuntimeError):
    """A study that cannot go on: the message says why and what to do; its finished tasks stay on disk."""


class StudyLocked(StudyError, UserError):
    """Another process is running the study in this directory (or its lock file cannot be read)."""


class StudyFolderError(StudyError, UserError):
    """A study folder whose files are not what a study writes (plan.json or events.jsonl not a file, tasks/ not a
    directory): refused before anything is read or written."""


class UnsafeLink(StudyFolderError):
    """A symbolic link in a study folder that leads out of it: refused before anything is read or written."""


class CorruptResultWarning(UserWarning):
    """A study set a task's result file aside (<id>.npz.corrupt) because it did not verify; the task runs again."""


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
        older noiseaware (a pickled plan, never read) a PlanMismatch; a link out of the folder an UnsafeLink."""
        self._refuse_pickled()
        self.check_files()
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
        """The plan record stored in the directory (plan.json: plain data), checked (module doc)."""
        self._refuse_pickled()
        self.check_files()
        if not self.exists():
            raise FileNotFoundError(f"{self.path} holds no study (no plan.json): run a study with --out {self.path}")
        try:
            record = json.loads(self.plan_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise PlanMismatch(f"{self.plan_path} is not a study plan ({error})") from None
        except IsADirectoryError:
            raise PlanMismatch(f"{self.plan_path} is a directory, not a study plan") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise PlanMismatch(f"{self.plan_path} is not a study plan of format {FORMAT!r}")
        problem = _plan_problem(record)
        if problem:
            raise PlanMismatch(
                f"{self.plan_path} was changed after the study wrote it ({problem}): it cannot be trusted to say "
                "which result belongs to which task; rerun the study into a new directory"
            )
        return record

    def check_files(self) -> None:
        """UnsafeLink naming the first symbolic link among the study's files (plan.json, events.jsonl, lock,
        tasks/ and its files) that leads out of the directory, or any of them that is a hard link (another name for
        the file elsewhere), nothing read through any link; StudyFolderError
        when plan.json or events.jsonl is not a file, or tasks/ not a directory."""
        if not self.path.is_dir():
            return
        for path, kind, wanted in (
            (self.plan_path, Path.is_file, "a file"),
            (self.path / "events.jsonl", Path.is_file, "a file"),
            (self.tasks_dir, Path.is_dir, "a directory"),
        ):
            if os.path.lexists(path) and not path.is_symlink() and not kind(path):
                raise StudyFolderError(
                    f"{path} is not {wanted}, so {self.path} is not a folder a study wrote (or it was changed "
                    "since): rerun the study into a new directory"
                )
        root = self.path.resolve()
        named = [self.plan_path, self.path / "events.jsonl", self.lock_path, self.tasks_dir]
        inside = sorted(self.tasks_dir.iterdir()) if self.tasks_dir.is_dir() and not self.tasks_dir.is_symlink() else []
        for path in named + inside:
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                raise UnsafeLink(
                    f"{path} is a symbolic link to {os.readlink(path)}, outside the study folder {self.path}: a study "
                    "folder holds its own files, and nothing is read from or written to a file elsewhere; replace "
                    "the link by the file it names (if you trust it), or rerun the study into a new directory"
                )
            if not path.is_symlink() and path.is_file() and path.stat().st_nlink > 1:
                raise UnsafeLink(
                    f"{path} is a hard link ({path.stat().st_nlink} names for one file): what a study writes to it "
                    f"would change the file elsewhere too; replace it by a copy of its own (cp {path.name} "
                    f"{path.name}.copy && mv {path.name}.copy {path.name}), or rerun the study into a new directory"
                )

    def _refuse_pickled(self) -> None:
        """PlanMismatch for a folder of an older noiseaware: its plan is a pickle, which is never read."""
        if (self.path / "plan.pkl").exists() and not self.exists():
            raise PlanMismatch(
                f"{self.path} holds a study written by an older noiseaware (a pickled plan, which is never read): "
                "give another output directory, or rerun that study there with this noiseaware"
            )

    def read(self, task: Task | str) -> tuple[Any, float] | None:
        """Task's verified result and seconds, or None when it has not finished; CorruptResult when its file does
        not verify. Writes nothing."""
        path = self.result_path(task)
        if not os.path.lexists(path):
            return None
        return read_result(path, getattr(task, "id", task))

    def load(self, task: Task | str) -> tuple[Any, float] | None:
        """`read`, for the study that runs the task: a result file that does not verify is moved aside
        (<id>.npz.corrupt), logged, a CorruptResultWarning names it, and None is returned, so the task runs again."""
        try:
            return self.read(task)
        except CorruptResult as error:
            path = self.result_path(task)
            aside = path.with_name(path.name + ".corrupt")
            copies = 0
            while os.path.lexists(aside):  # an earlier corrupt copy is kept too
                copies += 1
                aside = path.with_name(f"{path.name}.corrupt.{copies}")
            path.rename(aside)
            self.log(task, "corrupt", str(error))
            label = getattr(task, "label", "") or getattr(task, "id", task)
            warnings.warn(
                f"{error}; moved aside to {aside.name} (kept, not deleted): task {label} runs again",
                CorruptResultWarning,
                stacklevel=2,
            )
            return None

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the study's lock while the block runs (re-entrant within this process): StudyLocked, before any
        work, while another live process holds it."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.check_files()
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
        """StudyLocked when another live process holds the lock, or its file cannot be read (nothing is written)."""
        self.check_files()
        holder = self.holder()
        if holder is not None and _alive(holder):
            raise StudyLocked(_locked_message(self.lock_path, holder))

    def holder(self) -> dict[str, Any] | None:
        """What the lock file says of its holder, or None when the study is not locked; {"unreadable": why} for
        a lock file that is not a holder's record (cut short, overwritten, not a file)."""
        try:
            holder = json.loads(self.lock_path.read_text())
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (json.JSONDecodeError, UnicodeDecodeError, IsADirectoryError) as error:
            return {"unreadable": f"{type(error).__name__}: {error}"}
        if not isinstance(holder, dict) or not {"pid", "host"} <= set(holder):
            return {"unreadable": "it does not name a process and a host"}
        return holder

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
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW  # never through a link
        with os.fdopen(os.open(self.path / "events.jsonl", flags, 0o644), "a") as handle:
            handle.write(json.dumps(line | ({"detail": detail} if detail else {})) + "\n")

    def discard_results(self) -> int:
        """Delete every finished task's result (tasks/<id>.npz; files set aside as corrupt are kept), so that the
        study run next recomputes them all, and log it: for a rerun asked to replace results whose inputs changed
        in ways the plan does not see (a model that reads a file when it is called). Returns how many."""
        results = sorted(self.tasks_dir.glob(f"*{SUFFIX}")) if self.tasks_dir.is_dir() else []
        for path in results:
            path.unlink()
        if results:
            self.log("", "discarded", f"{len(results)} results, to recompute them")
        return len(results)

    def events(self) -> list[dict[str, Any]]:
        """The lines of events.jsonl, oldest first ([] before any; unreadable lines skipped: `read_events`)."""
        return self.read_events()[0]

    def read_events(self) -> tuple[list[dict[str, Any]], list[int]]:
        """(the events of events.jsonl, oldest first; the numbers of the lines skipped because they are not
        UTF-8 JSON events, e.g. a line cut short by a kill). Writes nothing."""
        path = self.path / "events.jsonl"
        if not path.is_file():
            return [], []
        events, skipped = [], []
        for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
            try:
                event = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                event = None
            if isinstance(event, dict) and isinstance(event.get("task"), str) and isinstance(event.get("event"), str):
                events.append(event)
            else:
                skipped.append(number)
        return events, skipped


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
    if "unreadable" in holder:
        return (
            f"{path.parent} has a lock file that cannot be read ({holder['unreadable']}): a study may be starting "
            f"there this moment (try again in a few seconds); if no study runs in {path.parent}, delete {path} "
            "and run the command again"
        )
    who = f"process {holder.get('pid', '?')} on {holder.get('host', '?')} since {holder.get('since', '?')}"
    command = f" ({holder['command']})" if holder.get("command") else ""
    return (
        f"{path.parent} is in use by {who}{command}: wait for it to finish, or run this in another directory; if "
        f"that process is gone (e.g. its machine crashed), delete {path}"
    )


def _plan_problem(record: Mapping[str, Any]) -> str:
    """What is wrong with a plan record's shape or ids ("" when nothing): each task an id, a label, a spec and a
    part; the plan id that of its kind and task ids; each task of a spec named by its identity, part and the
    recorded versions (`tasks.make_task`)."""
    tasks, specs = record.get("tasks"), record.get("specs")
    if not isinstance(record.get("kind"), str) or not isinstance(record.get("description"), dict):
        return "no kind or description"
    if not isinstance(tasks, list) or not isinstance(specs, list):
        return "no list of tasks or specs"
    keys = {"id": str, "label": str, "spec": int}
    if not all(isinstance(t, dict) and all(isinstance(t.get(k), v) for k, v in keys.items()) for t in tasks):
        return "a task without an id, label or spec"
    if not all(isinstance(s, dict) and isinstance(s.get(SPEC_RECORD), dict) for s in specs):
        return "a spec without its record"
    if "checksum" not in record:
        return "it has no checksum, so an edit cannot be ruled out"
    if record["checksum"] != content_checksum(record):
        return "its checksum does not match its content"
    if record.get("plan") != fingerprint({"kind": record["kind"], "tasks": [t["id"] for t in tasks]}):
        return "its plan id does not match its tasks"
    for task in tasks:
        if task["spec"] >= len(specs) or task["spec"] < 0:
            if specs:
                return f"task {task['id']} names spec {task['spec']}, of {len(specs)}"
            continue
        identity = {"kind": record["kind"], "spec": specs[task["spec"]].get("identity"), "part": task.get("part")}
        if fingerprint({"identity": identity, "versions": record.get("versions")}) != task["id"]:
            return f"task {task['label']!r} does not match its spec's identity"
    return ""


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
