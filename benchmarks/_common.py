"""What every benchmark script records beside its numbers: the machine, and an atomic JSON write."""

from __future__ import annotations

import json
import os
import platform
import tempfile
from pathlib import Path

import jax

import noiseaware as na


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "noiseaware": na.__version__,
        "x64": bool(jax.config.jax_enable_x64),
    }


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
        json.dump(payload, handle, indent=2)
    os.replace(handle.name, path)


def merge_results(path: Path, results: dict) -> None:
    """Update the results file's `results` mapping with `results`, keeping cases not rerun."""
    previous = json.loads(path.read_text()).get("results", {}) if path.exists() else {}
    write_json(path, {"results": {**previous, **results}})
