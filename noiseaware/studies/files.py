"""A task's result file: a header line that names the task and checks the payload, then the pickled result.

    NOISEAWARE-TASK 1 {"id": …, "sha256": …, "bytes": n, "seconds": s}\n<n bytes of cloudpickle>

Written atomically (a temporary file renamed into place), so a file is whole or absent; read back only when
its header names the task asked for and the payload's length and sha256 match, so a truncated, edited or
misplaced file is found before anything is unpickled. A study directory is trusted like code: its results
are pickles.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cloudpickle

from ..util.files import atomic_write

__all__ = ["MAGIC", "CorruptResult", "read_result", "write_result"]

MAGIC = b"NOISEAWARE-TASK 1 "


class CorruptResult(ValueError):
    """A result file that does not verify (wrong task, truncated, or changed after it was written)."""


def write_result(path: Path, task_id: str, result: Any, seconds: float) -> None:
    """Write `result` of task `task_id` to `path` atomically (an existing file, e.g. a corrupt one, is replaced)."""
    payload = cloudpickle.dumps(result)
    header = {"id": task_id, "sha256": hashlib.sha256(payload).hexdigest(), "bytes": len(payload), "seconds": seconds}
    data = MAGIC + json.dumps(header).encode() + b"\n" + payload
    atomic_write(path, lambda temporary: temporary.write_bytes(data), overwrite=True)


def read_header(path: Path) -> tuple[dict[str, Any], bytes]:
    """The header and payload of a result file, checked for form, length and sha256 (CorruptResult otherwise)."""
    data = path.read_bytes()
    line, _, payload = data.partition(b"\n")
    if not line.startswith(MAGIC):
        raise CorruptResult(f"{path} is not a noiseaware task result")
    try:
        header = json.loads(line[len(MAGIC) :])
    except json.JSONDecodeError as error:
        raise CorruptResult(f"{path}: unreadable header ({error})") from None
    if len(payload) != header.get("bytes") or hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise CorruptResult(f"{path}: the result does not match its checksum (truncated or changed)")
    return header, payload


def read_result(path: Path, task_id: str) -> tuple[Any, float]:
    """The result of task `task_id` stored at `path` and its seconds, after the checks of `read_header`."""
    header, payload = read_header(path)
    if header.get("id") != task_id:
        raise CorruptResult(f"{path} holds task {header.get('id')}, not {task_id}")
    return cloudpickle.loads(payload), float(header.get("seconds", 0.0))
