"""A study's plan: its kind, its specs and their tasks, and the plain record that plan.json keeps of it.

    plan = kind_plan(kind, specs, description)     one task per spec and part, named by the spec's canonical
                                                   data, the part and VERSIONS (`tasks`)
    plan.record()                                  plan.json: kind, description, versions, each spec's record
                                                   (`StudyKind.record`, under the key SPEC_RECORD) and
                                                   canonical data, the tasks (id, label, spec, part), and
                                                   the sha256 of all that (`content_checksum`)
    merge_record(record, {task id: result})        [(spec record, merged result or None)] by the kind's contract

Merging reads the record, never the live specs, so a study merged in the process that ran it and one merged
from its folder by `noiseaware report` are the same computation on the same data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..util.deprecation import warn_renamed
from ..util.files import plain
from ..util.fingerprint import canonical, digest, fingerprint
from .kind import get_kind
from .tasks import VERSIONS, Task, make_task

__all__ = ["FORMAT", "SPEC_RECORD", "Plan", "content_checksum", "differences", "kind_plan", "merge_record"]

FORMAT = "noiseaware-study 2"
SPEC_RECORD = "summary"
"""The key of a spec's record in plan.json (its name in the study folders already written, so they read as
before and keep their checksums)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """A study: kind (a registered `StudyKind`'s name, or any name for loose tasks); description: plain data
    saying what the study is (messages, plan.json); tasks; specs (live, to run), spec_records and identities
    (their records, `StudyKind.record`, and canonical data, stored) for a kind's plan. `summaries`, the old name
    of `spec_records`, is a deprecated alias."""

    kind: str
    description: Mapping[str, Any]
    tasks: tuple[Task, ...]
    specs: tuple[Any, ...] = ()
    spec_records: tuple[Mapping[str, Any], ...] = ()
    identities: tuple[Any, ...] = ()

    @property
    def summaries(self) -> tuple[Mapping[str, Any], ...]:
        """Deprecated alias of `spec_records`."""
        warn_renamed("Plan.summaries", "Plan.spec_records")
        return self.spec_records

    @classmethod
    def combined(cls, plans: Sequence[Plan]) -> Plan:
        """One study of several plans of one kind (e.g. a coverage plan per model), run together so that workers
        never wait between them: their specs and tasks in order."""
        kinds = {plan.kind for plan in plans}
        if len(kinds) != 1:
            raise ValueError(f"plans of one kind combine; got {sorted(kinds)}")
        tasks, offset = [], 0
        for plan in plans:
            tasks += [dataclasses.replace(task, group=task.group + offset) for task in plan.tasks]
            offset += len(plan.specs)
        return cls(
            plans[0].kind,
            {"studies": [dict(plan.description) for plan in plans]},
            tuple(tasks),
            tuple(s for plan in plans for s in plan.specs),
            tuple(s for plan in plans for s in plan.spec_records),
            tuple(i for plan in plans for i in plan.identities),
        )

    @property
    def id(self) -> str:
        """The fingerprint of the kind and the task ids: two plans with the same tasks are the same study."""
        return fingerprint({"kind": self.kind, "tasks": [task.id for task in self.tasks]})

    def record(self) -> dict[str, Any]:
        """What plan.json holds (module doc): plain data only."""
        body = {
            "format": FORMAT,
            "plan": self.id,
            "kind": self.kind,
            "description": dict(self.description),
            "versions": VERSIONS,
            "specs": [
                {SPEC_RECORD: dict(spec_record), "identity": identity}
                for spec_record, identity in zip(self.spec_records, self.identities)
            ],
            "tasks": [
                {"id": t.id, "label": t.label, "spec": t.group, "part": None if t.part is None else list(t.part)}
                for t in self.tasks
            ],
        }
        return body | {"checksum": content_checksum(body)}


def content_checksum(record: Mapping[str, Any]) -> str:
    """The sha256 of a plan record's JSON form, its own "checksum" left out: finds an edit of any field (a
    label, a spec's level), not forgery (anyone can recompute it)."""
    return digest(plain({key: value for key, value in record.items() if key != "checksum"}))


def kind_plan(kind_name: str, specs: Sequence[Any], description: Mapping[str, Any]) -> Plan:
    """The plan of `specs` of a registered kind: a task per spec and part, `kind.run_part(spec, part)`, named by
    the spec's canonical data (computed once per spec, so a data set is hashed once) and the part."""
    kind = get_kind(kind_name)
    tasks: list[Task] = []
    spec_records, identities = [], []
    for group, spec in enumerate(specs):
        identity = canonical(spec)
        spec_record = kind.record(spec)
        label = kind.label(spec_record)
        for part in spec.parts:
            tasks.append(
                make_task(
                    kind.run_part,
                    (spec, part),
                    {"kind": kind.name, "spec": identity, "part": [part.start, part.stop]},
                    f"{label}, {kind.unit} {part.start}–{part.stop - 1}",
                    group,
                    (part.start, part.stop),
                )
            )
        spec_records.append(spec_record)
        identities.append(identity)
    return Plan(kind.name, dict(description), tuple(tasks), tuple(specs), tuple(spec_records), tuple(identities))


def merge_record(record: Mapping[str, Any], results: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Any]]:
    """[(spec record, merged result, or None while a part is missing)] of every spec of a plan record, after the
    kind's `collect` (module doc)."""
    kind = get_kind(record["kind"])
    entries = []
    for group, spec in enumerate(record["specs"]):
        parts = [results.get(t["id"]) for t in record["tasks"] if t["spec"] == group]
        done = parts and all(p is not None for p in parts)
        entries.append((spec[SPEC_RECORD], kind.merge(spec[SPEC_RECORD], parts) if done else None))
    return kind.collect(entries)


def differences(old: Any, new: Any, where: str = "", limit: int = 6) -> list[str]:
    """The paths at which two plain-data values differ, with both values shortened: "versions.noiseaware:
    0.1.0+ab… → 0.1.0+cd…" (at most `limit`)."""
    found: list[str] = []
    _differ(old, new, where, found, limit)
    return found


def _differ(old: Any, new: Any, where: str, found: list[str], limit: int) -> None:
    if len(found) >= limit or old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            _differ(
                old.get(key, "(absent)"),
                new.get(key, "(absent)"),
                f"{where}.{key}" if where else str(key),
                found,
                limit,
            )
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            _differ(a, b, f"{where}[{i}]", found, limit)
        return
    found.append(f"{where or 'value'}: {_short(old)} → {_short(new)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"
