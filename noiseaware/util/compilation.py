"""A persistent JAX compilation cache: each program is compiled once per machine, not once per process.

    na.use_compilation_cache()              # ~/.cache/noiseaware/jax-<jax version> (or $XDG_CACHE_HOME/…)
    na.use_compilation_cache("/scratch/jax")  # a folder of your choice, e.g. one shared by a cluster's workers
    NOISEAWARE_JAX_CACHE=/path | off        # the folder for the command line, a study's workers and the tests

The command line, a study's local workers and the test suite turn it on; in Python it is opt-in. XLA's
compiled programs are written by JAX's own file cache, keyed by the program, the compile options and the
versions of jax and jaxlib (a folder per jax version keeps an upgrade from filling it with dead entries). With
a size limit set, JAX's cache takes a file lock for every read and write, so processes may share a folder.
Whoever can write the folder can put a program there that this process then runs (JAX's docs say so): a folder is
created for the user alone (mode 0o700), and one that another user owns, or that its group or others may write,
is not used (a warning says why and what to do; compiling still works).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache

__all__ = [
    "CACHE_ENV",
    "MAX_BYTES",
    "MIN_COMPILE_SECONDS",
    "default_cache_directory",
    "shared_cache_directory",
    "use_compilation_cache",
]

CACHE_ENV = "NOISEAWARE_JAX_CACHE"
"""The environment variable naming the cache folder, or "off" to compile without it."""
MAX_BYTES = 2 * 1024**3
"""The cache's size limit (least recently used entries go first); it also turns on JAX's file lock."""
MIN_COMPILE_SECONDS = 1.0
"""Programs that compile faster than this are not written. With a size limit JAX's cache sums the folder's files
on every write, so a cache of every small program (an eager operation, a reshape) costs more than it saves on a
cold run: a test of the exact route's grids took 17 s with every program written, 12.7 s without a cache."""


def default_cache_directory() -> Path | None:
    """The folder `use_compilation_cache` uses when given none: $NOISEAWARE_JAX_CACHE, else
    $XDG_CACHE_HOME/noiseaware/jax-<version> (default ~/.cache); None when the variable says "off"."""
    named = os.environ.get(CACHE_ENV, "").strip()
    if named.lower() == "off":
        return None
    if named:
        return Path(named).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "noiseaware" / f"jax-{jax.__version__}"


def shared_cache_directory() -> Path | None:
    """The folder this process's workers should use: the one this process compiles into, else the default."""
    active = jax.config.jax_compilation_cache_dir
    return Path(active) if active else default_cache_directory()


def use_compilation_cache(directory: str | os.PathLike | None = None) -> Path | None:
    """Keep compiled XLA programs in `directory` (default: `default_cache_directory()`) for every later
    compilation in this process, and return the folder (None: the cache is off). Calling it again with the
    same folder does nothing; a folder that cannot be created leaves the cache off (compiling still works)."""
    folder = default_cache_directory() if directory is None else Path(directory).expanduser()
    if folder is None:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        status = folder.stat()
    except OSError:
        return None
    if status.st_uid != os.getuid() or status.st_mode & 0o022:
        who = "another user owns it" if status.st_uid != os.getuid() else "its group or others may write it"
        warnings.warn(
            f"compiling without the cache folder {folder}: {who} "
            f"(mode {oct(status.st_mode & 0o777)}), and whoever can write it could put a program there that this "
            f"process would run; make it yours alone (chmod go-w {folder}) or name another ({CACHE_ENV}=/path)",
            UserWarning,
            stacklevel=2,
        )
        return None
    if jax.config.jax_compilation_cache_dir != str(folder):
        jax.config.update("jax_compilation_cache_dir", str(folder))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
        compilation_cache.reset_cache()  # JAX opens its cache once; a new folder takes effect from the next compile
    return folder
