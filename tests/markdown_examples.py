"""Fenced examples of the project's Markdown files, for the tests that run them (test_readme, test_readme_cli,
test_docs): the blocks of a language, the study sizes shrunk by exact substitutions, the Python examples marked as
not run or as a file the reader saves, and a document's examples run as one script in a fresh folder.

An example that is deliberately not runnable in the test suite (it needs a cluster, or minutes of compute that
no substitution can shrink) says so in the Markdown, on the line right before its fence:

    <!-- not run: needs a Slurm cluster (dask_jobqueue) -->

The tests skip it and report the reason; every other example runs. An example whose first line names a Python
file (`# mymodels.py: …`) is that file, as the reader saves it: the tests write it into the folder, where the
examples after it import it, instead of running it.
"""

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import jax

ROOT = Path(__file__).parents[1]
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>[^\n]*?) -->\n\Z")
"""The marker, at the end of the text before a fence."""
FILE = re.compile(r"# (?P<name>[A-Za-z_]\w*\.py)\b")
"""The first line of an example that is a file the reader saves."""
SCRIPT_SECONDS = 900
"""A script that runs longer has hung (the slowest document, docs/coverage.md, takes about a minute)."""


@dataclass(frozen=True)
class Example:
    """A fenced ```python block: its code, why it is not run (None: it runs), and the file name it is saved
    under where it is a file the reader saves (None: it is run)."""

    code: str
    not_run: str | None
    file: str | None = None


def shrunk(path: Path, substitutions: Mapping[str, str]) -> str:
    """The text of `path` with each substitution made; each must occur exactly once, so an edit that drops
    one fails instead of silently running the full study."""
    text = path.read_text()
    for full, small in substitutions.items():
        assert text.count(full) == 1, f"{path.relative_to(ROOT)} should contain {full!r} exactly once"
        text = text.replace(full, small)
    return text


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def commands(block: str) -> list[list[str]]:
    """The `noiseaware …` command lines of a shell block (continuations joined, comments dropped)."""
    joined = block.replace("\\\n", " ")
    return [shlex.split(line, comments=True)[1:] for line in joined.splitlines() if line.startswith("noiseaware ")]


def python_examples(text: str) -> list[Example]:
    """The ```python blocks in order, each with the reason it is not run, if it is marked so, and the file it is
    saved as, if it is one."""
    examples = []
    for match in re.finditer(r"^```python\n(.*?)```", text, flags=re.DOTALL | re.MULTILINE):
        marker = NOT_RUN.search(text[: match.start()])
        reason = None if marker is None else marker["reason"].strip()
        assert reason != "", "a `<!-- not run: … -->` marker must say why"
        file = FILE.match(match[1])
        examples.append(Example(match[1], reason, None if file is None else file["name"]))
    return examples


def script_environment() -> dict[str, str]:
    """This process's environment for a script it starts: the worktree's package first on the path, and the
    suite's compilation settings (cache folder, threshold, optimisation effort) as JAX's own variables, so that
    the script compiles and caches as the test that starts it does."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
    if jax.config.jax_compilation_cache_dir:
        environment["JAX_COMPILATION_CACHE_DIR"] = str(jax.config.jax_compilation_cache_dir)
        environment["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = str(
            jax.config.jax_persistent_cache_min_compile_time_secs
        )
        environment["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(jax.config.jax_compilation_cache_max_size)
    environment["JAX_DISABLE_MOST_OPTIMIZATIONS"] = str(jax.config.read("jax_disable_most_optimizations")).lower()
    environment["MPLBACKEND"] = "Agg"
    return environment


def run_script(directory: Path, name: str, examples: Sequence[Example], epilogue: str = "") -> str:
    """Run a document's examples as a reader would, in `directory`: each file example saved under its name, the
    others, in order, as one script `name` (`python name`, so `__name__ == "__main__"` and spawned workers
    import it), followed by the test's own `epilogue`. Returns its standard output; fails with its output when
    it exits with an error."""
    parts = []
    for number, example in enumerate(examples):
        if example.not_run is not None:
            continue
        if example.file is not None:
            (directory / example.file).write_text(example.code)
        else:
            parts.append(f"# --- python block {number} ---\n{example.code}")
    (directory / name).write_text("\n".join([*parts, epilogue]))
    done = _python(directory, [name])
    assert done.returncode == 0, f"python {name} (in {directory}) failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done.stdout


def run_command(directory: Path, argv: Sequence[str]) -> None:
    """`noiseaware ARGV` as a reader types it, in `directory`, in a fresh process; fails with its output."""
    program = "import sys; from noiseaware.cli import main; sys.exit(main(sys.argv[1:]))"
    done = _python(directory, ["-c", program, *argv])
    assert done.returncode == 0, f"noiseaware {' '.join(argv)} failed:\n{done.stderr[-6000:]}"


def _python(directory: Path, arguments: Sequence[str]) -> subprocess.CompletedProcess:
    """This interpreter with `arguments`, in `directory`, with the suite's environment; its output captured."""
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=directory,
        env=script_environment(),
        capture_output=True,
        text=True,
        timeout=SCRIPT_SECONDS,
    )
