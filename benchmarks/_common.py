"""What every benchmark script records beside its numbers: the machine, and an atomic JSON write."""

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


def write_json(path: Path, payload: dict) -> None:
    """noiseaware's atomic JSON write, creating the results folder first; a results file is rewritten in place
    (a script saves after each case, and `merge_results` keeps the cases not rerun)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_json(path, payload, overwrite=True)


def read_results(path: Path) -> dict:
    """A results file's contents, or {} when it does not exist yet."""
    return json.loads(path.read_text()) if path.exists() else {}


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
