"""Tasks: one unit of a study's work, named by a fingerprint of everything that determines its result.

    make_task(function, arguments, identity, label)    result = function(*arguments)
    id = fingerprint(identity ∪ VERSIONS)

identity is plain data (a spec's `canonical` data and the part), so the same work asked for again, in another
process or session, has the same id and is found in the study directory; other code (noiseaware's source, or a
version of jax, numpyro, numpy) is other work. Tasks travel to workers as cloudpickle bytes, inside one run
only (Dask's transport; methods and models may be closures): a study folder never holds a pickle. `execute`
runs one on a worker and writes its result file there (data, atomically), so a result survives the process
that asked for it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import cloudpickle

from ..util.fingerprint import fingerprint, source_digest
from .files import write_result

__all__ = ["VERSIONS", "Task", "execute", "make_task", "pack"]

VERSIONS = {"noiseaware": source_digest()} | {name: version(name) for name in ("jax", "jaxlib", "numpyro", "numpy")}
"""What enters every task's id besides its own identity: noiseaware's version and source digest, and the versions
of the numerical packages. A result computed by other code is never reused."""


@dataclasses.dataclass(frozen=True)
class Task:
    """One unit of work: result = function(*arguments); id names it (module doc); label says what it is; group
    and part: which spec of its plan it belongs to and which of that spec's parts it is ((start, stop))."""

    id: str
    label: str
    function: Callable[..., Any]
    arguments: tuple
    group: int = 0
    part: tuple[int, int] | None = None


def make_task(
    function: Callable[..., Any], arguments: tuple, identity: Any, label: str, group: int = 0, part=None
) -> Task:
    """A Task whose id is the fingerprint of `identity` (plain data, or anything `canonical` names) and VERSIONS."""
    return Task(fingerprint({"identity": identity, "versions": VERSIONS}), label, function, arguments, group, part)


def pack(task: Task) -> bytes:
    """The task as the bytes `execute` receives: cloudpickle, handed to a worker in memory by the executor
    within one run (Dask's and the process pool's transport), never written to or read from a study folder."""
    return cloudpickle.dumps(task)


def execute(payload: bytes, path: str) -> None:
    """Run a task packed by `pack` (bytes handed over in memory, not read from any file) on a worker and write its
    result file to `path` as data (`files.write_result`; the study reads it from there). Anything but bytes (a
    path, an open file: what a study folder could hand over) is refused before it is read."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"execute runs the bytes `pack` made within one run, got {type(payload).__name__}: a study folder holds "
            "data only and is never unpickled"
        )
    task: Task = cloudpickle.loads(payload)
    start = time.perf_counter()
    result = task.function(*task.arguments)
    write_result(Path(path), task.id, result, time.perf_counter() - start)
