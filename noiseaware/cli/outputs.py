"""The files a `noiseaware` command writes: each location checked before any work, nothing left by a failure.

A command names its outputs first (`Outputs.file`, `Outputs.directory`): a known suffix, a directory that
exists (or, for an output directory, can be created) and accepts new files, no existing file unless
--force, and never one of the command's inputs, not even with --force. Directories are created only when
the first result is written (`Outputs.writing`); a block of writes that fails removes the files it created
and the directories left empty, so a failing command leaves nothing behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ..util.files import check_output, check_output_directory


class Outputs:
    """The output files of one command run, checked before any work.

    force: replace existing files (--force). inputs: the command's input files, never replaced.
    """

    def __init__(self, *, force: bool, inputs: Sequence[str | os.PathLike] = ()) -> None:
        self.force = force
        self.inputs = tuple(inputs)
        self._existed: dict[Path, bool] = {}  # every planned file → whether it existed when checked
        self._missing_directories: list[Path] = []  # planned directories to create
        self._created: list[Path] = []  # directories created by `writing`, outermost first

    def file(self, name: str | os.PathLike, option: str, suffixes: Sequence[str], rule: str) -> Path:
        """The output file `name` of `option`: a suffix from `suffixes` (else ValueError `rule`) in an
        existing directory; checked as the module says."""
        path = Path(name)
        if path.suffix.lower() not in suffixes:
            raise ValueError(f"{option} {name}: {rule}")
        self._plan(path, option, directory_exists=True)
        return path

    def directory(self, name: str | os.PathLike, option: str, names: Sequence[str]) -> Path:
        """The output directory `name` of `option` (created by `writing` if missing) and its files `names`,
        each checked as the module says."""
        directory = Path(name)
        try:
            check_output_directory(directory)
        except OSError as error:
            raise _prefixed(error, option) from None
        exists = directory.is_dir()
        if not exists:
            self._missing_directories.append(directory)
        for file_name in names:
            self._plan(directory / file_name, option, directory_exists=exists)
        return directory

    @contextmanager
    def writing(self, paths: Sequence[Path] | None = None) -> Iterator[None]:
        """Create the planned directories, then run the block that writes `paths` (default: every planned
        file). If it fails, remove those of `paths` that existed neither when checked nor when the block began
        (so a file another process wrote meanwhile is never removed), and the directories this command created
        that are left empty."""
        paths = list(self._existed) if paths is None else list(paths)
        present = {path for path in paths if os.path.lexists(path)}  # now, not when checked: never another's file
        try:
            for directory in self._missing_directories:
                for missing in reversed([d for d in (directory, *directory.parents) if not d.exists()]):
                    missing.mkdir()
                    self._created.append(missing)
            self._missing_directories = []
            yield
        except BaseException:
            for path in paths:
                if not self._existed.get(path, True) and path not in present:
                    path.unlink(missing_ok=True)
            for directory in reversed(self._created):
                if directory.is_dir() and not any(directory.iterdir()):
                    directory.rmdir()
            raise

    def _plan(self, path: Path, option: str, *, directory_exists: bool) -> None:
        if path in self._existed:
            raise ValueError(f"{option}: {path} would be written twice; give distinct values")
        try:
            if directory_exists:
                check_output(path, overwrite=self.force, inputs=self.inputs)
        except FileExistsError:
            raise FileExistsError(f"{option}: {path} exists; pass --force to replace it") from None
        except (ValueError, OSError) as error:
            raise _prefixed(error, option) from None
        self._existed[path] = os.path.lexists(path)


def _prefixed(error: Exception, option: str) -> Exception:
    """`error` of the same type with its message prefixed by the option it concerns."""
    message = f"{option}: {error}"
    try:
        return type(error)(message)
    except TypeError:
        return ValueError(message)
