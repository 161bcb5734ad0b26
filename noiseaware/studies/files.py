"""A task's result file: data only, an .npz whose member "record" (JSON) names the task and checks the rest.

    tasks/<id>.npz:  record = {"format": FORMAT, "task": id, "seconds": s, "tree": …, "sha256": …}
                     a0, a1, …  the result's arrays (`util.codec`: the tree refers to them by name)

Written atomically (a temporary file renamed into place), so a file is whole or absent. Read back with numpy's
pickle-free loader, and only when the record names the task asked for and the sha256 of the tree and the arrays
matches: a truncated, edited or misplaced file is found, and a file from a stranger can at worst hold wrong
numbers, never run code (nothing is unpickled; `codec.decode` builds only registered data types). Whatever is
wrong with a file (not a zip, an array header numpy cannot parse, a directory in its place) is one
`CorruptResult` naming the file. The checksum is unkeyed: it finds accidents (a truncated copy, a bit flipped, a
file of another task), not forgery, since whoever edits the numbers can recompute it (docs/studies.md).
"""

from __future__ import annotations

import hashlib
import json
import tokenize
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..util.codec import UndecodableData, decode, encode
from ..util.files import atomic_write

__all__ = ["FORMAT", "CorruptResult", "read_result", "write_result"]

FORMAT = "noiseaware-task 2"
SUFFIX = ".npz"
UNREADABLE = (
    OSError,  # missing, a directory, unreadable
    ValueError,  # numpy's refusals: a pickled array, a bad header; JSON
    KeyError,  # no record
    EOFError,
    zipfile.BadZipFile,
    tokenize.TokenError,  # an array header cut inside a bracket
    SyntaxError,  # an array header that is not a Python literal
    TypeError,
    MemoryError,  # a header announcing a huge shape
)
"""What reading a task file that numpy or JSON cannot parse raises: each is a `CorruptResult`."""


class CorruptResult(ValueError):
    """A result file that does not verify (wrong task, truncated, changed after it was written, or not data)."""


def write_result(path: Path, task_id: str, result: Any, seconds: float) -> None:
    """Write `result` of task `task_id` to `path` atomically (an existing file, e.g. a corrupt one, is replaced)."""
    tree, arrays = encode(result)
    record = {"format": FORMAT, "task": task_id, "seconds": seconds, "tree": tree, "sha256": _checksum(tree, arrays)}

    def write(temporary: Path) -> None:
        with open(temporary, "wb") as handle:
            np.savez(handle, record=np.array(json.dumps(record)), **arrays)

    atomic_write(path, write, overwrite=True)


def read_result(path: Path, task_id: str) -> tuple[Any, float]:
    """The result of task `task_id` stored at `path` and its seconds; CorruptResult unless the file verifies."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            record = json.loads(str(stored["record"][()]))
            arrays = {name: stored[name] for name in stored.files if name != "record"}
    except UNREADABLE as error:
        raise CorruptResult(
            f"{path} is not a readable noiseaware task result ({type(error).__name__}: {error})"
        ) from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise CorruptResult(f"{path} is not a noiseaware task result of format {FORMAT!r}")
    if record.get("task") != task_id:
        raise CorruptResult(f"{path} holds task {record.get('task')}, not {task_id}")
    if record.get("sha256") != _checksum(record.get("tree"), arrays):
        raise CorruptResult(f"{path}: the result does not match its checksum (truncated or changed)")
    try:
        return decode(record["tree"], arrays), float(record.get("seconds", 0.0))
    except (UndecodableData, KeyError, IndexError, TypeError, ValueError) as error:
        raise CorruptResult(f"{path}: not a result noiseaware wrote ({type(error).__name__}: {error})") from None


def _checksum(tree: Any, arrays: dict[str, np.ndarray]) -> str:
    """sha256 over the tree's JSON and each array's name, dtype, shape and bytes."""
    hasher = hashlib.sha256(json.dumps(tree, sort_keys=True).encode())
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        hasher.update(f"{name}|{array.dtype.str}|{array.shape}".encode() + array.tobytes())
    return hasher.hexdigest()
