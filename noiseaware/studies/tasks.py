"""Tasks: one unit of a study's work, named by a fingerprint of everything that determines its result.

    make_task(function, arguments, identity, label)    result = function(*arguments)
    id = fingerprint(identity ∪ versions of noiseaware, jax, numpyro, numpy)

identity is plain data (a spec's `canonical` data and the part), so the same work asked for again, in another
process or session, has the same id and is found in the study directory; a new package version is new work.
Tasks travel to workers as cloudpickle bytes (methods and models may be closures), and `execute` runs one on
a worker and writes its result file there (atomically), so a result survives the process that asked for it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import cloudpickle

from ..util.fingerprint import canonical, fingerprint
from .files import write_result

__all__ = ["VERSIONS", "Task", "execute", "make_task", "part_tasks", "parts_by_spec"]

VERSIONS = {name: version(name) for name in ("noiseaware", "jax", "jaxlib", "numpyro", "numpy")}
"""The package versions that enter every task's id: a result computed by other code is never reused."""


@dataclasses.dataclass(frozen=True)
class Task:
    """One unit of work: result = function(*arguments); id names it (module doc); label says what it is."""

    id: str
    label: str
    function: Callable[..., Any]
    arguments: tuple


def make_task(function: Callable[..., Any], arguments: tuple, identity: Any, label: str) -> Task:
    """A Task whose id is the fingerprint of `identity` (plain data, or anything `canonical` names) and the
    package versions."""
    return Task(fingerprint({"identity": identity, "versions": VERSIONS}), label, function, arguments)


def part_tasks(function: Callable[..., Any], spec: Any, label: str, unit: str) -> list[Task]:
    """One task per part of a coverage or calibration spec: function(spec, part), named by the spec's
    canonical data (computed once, so a data set's arrays are hashed once) and the part, labelled
    "<label> <unit> a–b"."""
    named = canonical(spec)
    return [
        make_task(
            function,
            (spec, part),
            {"spec": named, "part": [part.start, part.stop]},
            f"{label} {unit} {part.start}–{part.stop - 1}",
        )
        for part in spec.parts
    ]


def parts_by_spec(tasks: Sequence[Task], results: Mapping[str, Any]) -> list[tuple[Any, list | None]]:
    """The part tasks' results grouped by their spec, in order: [(spec, [result per part] or None when a part
    has not finished)]."""
    groups: dict[int, tuple[Any, list]] = {}
    for task in tasks:
        spec, _ = task.arguments
        groups.setdefault(id(spec), (spec, []))[1].append(results.get(task.id))
    return [(spec, None if any(r is None for r in parts) else parts) for spec, parts in groups.values()]


def execute(payload: bytes, path: str) -> None:
    """Run a pickled task on a worker and write its result file to `path` (the study reads it from there)."""
    task: Task = cloudpickle.loads(payload)
    start = time.perf_counter()
    result = task.function(*task.arguments)
    write_result(Path(path), task.id, result, time.perf_counter() - start)
