"""Safe file writes and JSON-ready values.

Nothing is lost: a write never replaces an existing file unless told to (`overwrite=True`; on the command
line `--force`), and never an input of the same run, even when told to (`check_output`). Nothing is
partial: a result file is written under a temporary name beside the target and renamed onto it, so it is
either complete or absent. Errors name the target, never the temporary file.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["OVERWRITE_FIX", "atomic_write", "check_output", "check_output_directory", "plain", "write_json"]

OVERWRITE_FIX = "pass overwrite=True (command line: --force) to replace it"
"""How to replace an existing file: the second half of every 'exists' error."""


def check_output(path: str | os.PathLike, *, overwrite: bool = False, inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """`path` as a Path once it is known to be writable, checked before any work.

    The directory must exist and accept a new file (probed by creating and removing one), `path` must
    not be a directory, nor an existing file unless `overwrite`, nor one of `inputs` (the same file by
    resolved path or inode) even with `overwrite`. Raises ValueError (an input), FileNotFoundError,
    IsADirectoryError, FileExistsError or the OSError of the probe, each naming `path`.
    """
    path = Path(path)
    for source in inputs:
        if _same_file(path, Path(source)):
            named = "" if str(source) == str(path) else f" ({source})"
            raise ValueError(
                f"{path} is an input of this run{named}: write the output to another file (an input is never "
                "replaced, not even with overwrite=True or --force)"
            )
    directory = path.parent
    if not directory.is_dir():
        raise FileNotFoundError(f"cannot write {path}: the directory {directory} does not exist; create it first")
    if path.is_dir():
        raise IsADirectoryError(f"cannot write {path}: it is a directory; name a file")
    if not overwrite and os.path.lexists(path):
        raise FileExistsError(_exists_message(path))
    _probe(directory, path)
    return path


def check_output_directory(path: str | os.PathLike) -> Path:
    """`path` as a Path once it is known to be a directory that accepts new files, or one that can be created
    (its nearest existing ancestor is a directory that accepts new ones); creates nothing.

    Raises NotADirectoryError (`path` or an ancestor is a file) or the OSError of the probe, naming `path`.
    """
    path = Path(path)
    ancestor = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
    if not ancestor.is_dir():
        raise NotADirectoryError(f"cannot create the directory {path}: {ancestor} is a file")
    _probe(ancestor, path)
    return path


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None], *, overwrite: bool = False) -> None:
    """`write(temporary)` a temporary file beside `path`, fsync it and move it onto `path`; on error remove it.

    An existing `path` is a FileExistsError unless `overwrite` (checked before `write` runs, and again
    atomically when the file is moved into place: a file created meanwhile is not replaced). An OSError of
    the write names `path`, not the temporary file.
    """
    path = Path(path)
    if not overwrite and os.path.lexists(path):
        raise FileExistsError(_exists_message(path))
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        try:
            open(temporary, "xb").close()  # a clean error (permission, no directory) before `write` runs;
            temporary.unlink()  # `write` creates the file itself (some writers refuse an existing one)
            write(temporary)
            with open(temporary, "rb") as handle:
                os.fsync(handle.fileno())
        except OSError as error:
            raise _naming(error, path, temporary) from error
        _move(temporary, path, overwrite)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike, payload: Any, *, overwrite: bool = False) -> None:
    """Atomically write `payload` as indented JSON, after converting it with `plain`; an existing `path` is
    replaced only with `overwrite`."""
    text = json.dumps(plain(payload), indent=2)
    atomic_write(Path(path), lambda temporary: temporary.write_text(text), overwrite=overwrite)


def plain(value: Any) -> Any:
    """A JSON-ready copy of `value`, recursively: numpy and jax scalars become Python numbers and their arrays
    nested lists, tuples lists, mappings dicts with str keys; str, int, float, bool and None are kept.
    Any other type is a TypeError that names it."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if hasattr(value, "__array__"):  # numpy and jax arrays and scalars
        return np.asarray(value).tolist()
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def _move(temporary: Path, path: Path, overwrite: bool) -> None:
    """Rename `temporary` onto `path`; without `overwrite` by a hard link, which fails if `path` exists."""
    if overwrite:
        os.replace(temporary, path)
        return
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise FileExistsError(_exists_message(path)) from None
    except OSError:  # a file system without hard links: check, then rename
        if os.path.lexists(path):
            raise FileExistsError(_exists_message(path)) from None
        os.replace(temporary, path)
        return
    temporary.unlink()


def _probe(directory: Path, target: Path) -> None:
    """Create and remove a file in `directory`; its OSError (permission, read-only file system) names `target`."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".noiseaware-probe-", dir=directory)
    except OSError as error:
        raise _naming(error, target) from error
    os.close(handle)
    os.unlink(probe)


def _same_file(path: Path, source: Path) -> bool:
    if path.resolve() == source.resolve():
        return True
    try:
        return os.path.samefile(path, source)
    except OSError:  # either is missing
        return False


def _exists_message(path: Path) -> str:
    return f"{path} exists; {OVERWRITE_FIX}"


def _naming(error: OSError, path: Path, temporary: Path | None = None) -> OSError:
    """`error` of the same type, reading 'cannot write PATH: reason' (the temporary name replaced by `path`)."""
    reason = error.strerror or str(error)
    if temporary is not None:
        reason = reason.replace(str(temporary), str(path))
    message = f"cannot write {path}: {reason}"
    try:
        named = type(error)(message)
    except TypeError:  # a library's OSError subclass with its own constructor
        named = OSError(message)
    named.errno = error.errno
    return named
