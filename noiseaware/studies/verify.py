"""Re-verifying a study folder from someone else: recompute a few of its finished tasks and compare.

A task's checksum finds accidents (a truncated file, flipped bytes), not forgery: whoever edits a result can
recompute it. What can be re-verified is the computation itself, since a task's result is a function of its
identity (plan, keys, code): `verify=K` recomputes K finished tasks, drawn at random by the operating system (so
whoever wrote the folder cannot know which), in a temporary folder outside the study, and compares them with the
stored results. Timings (fields named `seconds` or ending in `_seconds`) are left out; every other number must
agree to `RTOL` (the same machine gives the same bits; another CPU may differ in the last bits of a float).
A forged fraction f of the tasks escapes K draws with probability at most (1 − f)^K.

    verify_results(tasks, stored, count)   raises ResultMismatch naming each task whose recomputation differs
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..util.codec import encode
from .files import read_result
from .tasks import Task, execute, pack

__all__ = ["RTOL", "ResultMismatch", "result_differences", "verify_results"]

RTOL = 1e-6
"""Relative tolerance of a recomputed number against the stored one (absolute 1e-12 near 0)."""


class ResultMismatch(ValueError):
    """Finished tasks whose stored results differ from their recomputation: the folder was edited, or made by
    other code."""


def verify_results(tasks: Sequence[Task], stored: Mapping[str, Any], count: int) -> tuple[str, ...]:
    """Recompute `count` of `tasks` (those with a result in `stored`, {task id: result}), drawn at random, and
    compare (module doc). Returns the ids checked; raises ResultMismatch naming each that differs and where."""
    finished = [task for task in tasks if task.id in stored]
    chosen = random.SystemRandom().sample(finished, min(count, len(finished)))
    mismatches = []
    with tempfile.TemporaryDirectory(prefix="noiseaware-verify-") as scratch:
        for task in chosen:
            path = Path(scratch) / f"{task.id}.npz"
            execute(pack(task), str(path))
            recomputed, _ = read_result(path, task.id)
            found = result_differences(stored[task.id], recomputed)
            if found:
                mismatches.append(f"  {task.label}: {'; '.join(found[:3])}")
    if mismatches:
        raise ResultMismatch(
            f"{len(mismatches)} of {len(chosen)} finished tasks recomputed differ from the results stored in the "
            "study folder (edited by hand, or made by other code):\n" + "\n".join(mismatches) + "\nrun the study "
            "into a fresh folder (or with --no-resume elsewhere) rather than trust these results"
        )
    return tuple(task.id for task in chosen)


def result_differences(stored: Any, recomputed: Any) -> list[str]:
    """Where two results differ beyond RTOL, one line each naming the place and both values; timings are left
    out."""
    stored_tree, stored_arrays = encode(stored)
    recomputed_tree, recomputed_arrays = encode(recomputed)
    found: list[str] = []
    _compare(stored_tree, recomputed_tree, stored_arrays, recomputed_arrays, "result", found)
    return found


def _compare(a, b, arrays_a, arrays_b, where: str, found: list[str]) -> None:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        arrays = ("$array" in a or "$values" in a, "$array" in b or "$values" in b)
        if arrays == (True, True):
            _compare_arrays(_array(a, arrays_a), _array(b, arrays_b), where, found)
            return
        if arrays[0] != arrays[1]:
            found.append(f"{where}: stored {'an array' if arrays[0] else 'a mapping'}, recomputed the other")
            return
        if set(a) != set(b):
            found.append(f"{where}: stored fields {sorted(a)}, recomputed {sorted(b)}")
            return
        for key in a:
            if key == "seconds" or str(key).endswith("_seconds"):
                continue
            _compare(a[key], b[key], arrays_a, arrays_b, f"{where}.{key}", found)
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, arrays_a, arrays_b, f"{where}[{index}]", found)
        return
    if isinstance(a, float) and isinstance(b, float):
        _compare_arrays(np.asarray(a), np.asarray(b), where, found)
        return
    if a != b:
        found.append(f"{where}: stored {a!r}, recomputed {b!r}")


def _array(node: Mapping, arrays: Mapping[str, np.ndarray]):
    if "$array" in node:
        return arrays[node["$array"]]
    return np.asarray(node["$values"], dtype=node["dtype"]).reshape(node["shape"])


def _compare_arrays(a, b, where: str, found: list[str]) -> None:
    if a.shape != b.shape:
        found.append(f"{where}: stored shape {a.shape}, recomputed {b.shape}")
    elif not np.allclose(a, b, rtol=RTOL, atol=1e-12, equal_nan=True):
        if a.size == 1:
            found.append(f"{where}: stored {a.item():.6g}, recomputed {b.item():.6g}")
        else:
            worst = np.nanmax(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))
            found.append(f"{where}: stored and recomputed differ by up to {worst:.3g}")
