"""What every benchmark script records beside its numbers: the machine, and an atomic JSON write.

The committed results (benchmarks/results/) are rewritten only when asked: with NOISEAWARE_UPDATE_RESULTS=1 in the
environment. Otherwise a script reads and writes the same names under benchmarks/out/ (ignored by git), so running
a benchmark never replaces the numbers the docs quote (`results_path`)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import jax

import noiseaware as na
from noiseaware.util import files


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "noiseaware": na.__version__,
        "x64_global": bool(jax.config.jax_enable_x64),  # recording follows it; the fitting routes always run in float64
    }


def provenance(command: str) -> dict:
    """What a case records of how it ran: the load average, the date, the command and the machine."""
    return {
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": command,
        "machine": machine(),
    }


COMMITTED = Path(__file__).parent / "results"
"""The results the docs quote, committed with the code that produced them."""
SCRATCH = Path(__file__).parent / "out"
"""Where a run writes unless NOISEAWARE_UPDATE_RESULTS=1."""


def results_path(path: Path) -> Path:
    """`path`, or for a file under the committed results the same name under SCRATCH unless the environment sets
    NOISEAWARE_UPDATE_RESULTS=1."""
    path = Path(path).resolve()
    if os.environ.get("NOISEAWARE_UPDATE_RESULTS") == "1" or not path.is_relative_to(COMMITTED.resolve()):
        return path
    return SCRATCH.resolve() / path.relative_to(COMMITTED.resolve())


FIGURES = Path(__file__).parents[1] / "docs" / "figures"
"""The figures the docs show, drawn by the scripts that measure them."""


def figure_path(name: str) -> Path:
    """Where a script draws the docs figure `name`: docs/figures/ with NOISEAWARE_UPDATE_RESULTS=1, else the same
    name under SCRATCH/figures (its folder created)."""
    if os.environ.get("NOISEAWARE_UPDATE_RESULTS") == "1":
        return FIGURES / name
    path = SCRATCH / "figures" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_json(path: Path, payload: dict) -> None:
    """noiseaware's atomic JSON write to `results_path(path)`, creating its folder first; a results file is
    rewritten in place (a script saves after each case, and `merge_results` keeps the cases not rerun). The first
    write to a scratch file says where it went."""
    target = results_path(path)
    if target != Path(path).resolve() and not target.exists():
        print(
            f"writing {os.path.relpath(target)} (benchmarks/results/ is rewritten only with "
            "NOISEAWARE_UPDATE_RESULTS=1)",
            flush=True,
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    files.write_json(target, payload, overwrite=True)


def read_results(path: Path) -> dict:
    """A results file's contents at `results_path(path)` (what this run resumes from), or {} when it does not exist
    yet."""
    target = results_path(path)
    return json.loads(target.read_text()) if target.exists() else {}


def merge_results(path: Path, results: dict) -> None:
    """Update the results file's `results` mapping with `results`, keeping cases not rerun."""
    previous = read_results(path).get("results", {})
    write_json(path, {"results": {**previous, **results}})


def chosen(parser: argparse.ArgumentParser, value: str, known, what: str = "cases") -> list[str]:
    """The comma-separated names in `value`, each one of `known`; a usage error (parser.error) naming the others."""
    names = value.split(",")
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"unknown {what} {unknown}: choose from {', '.join(known)}")
    return names
