"""The built-in models' tuned presets: settings `na.tune` found once per model and privacy level, shipped as data.

Each file in `noiseaware/tuning/presets/` is a `TunedSettings` file (JSON with its fingerprint) for a built-in
model as a user writes it (`na.models.get(name, preset=False)`: numpyro's transforms) at one ε, whose fresh
check on 200 simulations had no findings. `benchmarks/tuning.py --ship` writes them, and
`benchmarks/coverage.py --preset tuned` measures them beside the research preset (docs/results.md).

    tuned_preset(name, ε)   the TunedSettings (a SettingsFileError when none is shipped at that ε, naming the
                            levels that are and how to tune the others)
    tuned_model(name, ε)    the model with those settings as its preset: what `record`, `preflight` and
                            `coverage` use for a built-in model unless told `--preset research`
    tuned_epsilons(name)    the levels with a shipped preset
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from types import MappingProxyType

from .. import models
from ..models.benchmark import BenchmarkModel
from ..util.hints import hint
from .tuned import SettingsFileError, TunedSettings

__all__ = ["PRESETS", "PRESET_DIR", "preset_path", "tuned_epsilons", "tuned_model", "tuned_preset"]

PRESETS = ("tuned", "research")
"""The presets of a built-in model: settings tuned on simulations at the requested ε, or the paper's."""
PRESET_DIR = Path(__file__).parent / "presets"


def preset_path(name: str, epsilon: float) -> Path:
    """Where the tuned preset of built-in model `name` at ε lives (whether or not it exists)."""
    return PRESET_DIR / f"{models.get(name).name}-eps{epsilon:g}.json"


@functools.cache
def tuned_epsilons(name: str) -> tuple[float, ...]:
    """The privacy levels at which built-in model `name` has a tuned preset, ascending."""
    canonical = models.get(name).name
    levels = [float(path.stem.rsplit("-eps", 1)[1]) for path in PRESET_DIR.glob(f"{canonical}-eps*.json")]
    return tuple(sorted(levels))


def tuned_preset(name: str, epsilon: float) -> TunedSettings:
    """The shipped TunedSettings of built-in model `name` at ε (checked against the model, fingerprint verified)."""
    shipped = tuned_epsilons(name)
    match = [level for level in shipped if math.isclose(level, epsilon, rel_tol=1e-9)]
    if not match:
        tune_command = f"noiseaware tune --model {name} --epsilon {epsilon:g} --out FILE, then --settings FILE"
        levels = ", ".join(f"{level:g}" for level in shipped) or "none"
        raise SettingsFileError(
            f"no tuned preset of {models.get(name).name} is shipped at ε = {epsilon:g} (shipped at: {levels}): "
            f"tune it ({hint(f'na.tune(model, epsilon={epsilon:g}, key=…)', tune_command)}), or use the paper's "
            f"settings ({hint(f'na.models.get({name!r})', '--preset research')})"
        )
    return _load(name, match[0])


@functools.cache
def _load(name: str, epsilon: float) -> TunedSettings:
    return TunedSettings.load(preset_path(name, epsilon), models.get(name, preset=False))


def tuned_model(name: str, epsilon: float) -> BenchmarkModel:
    """Built-in model `name` as a user writes it, with its tuned preset at ε as `dpvi_settings` (carrying the
    check's fingerprint, so recording with it raises no SettingsHint)."""
    bm = models.get(name, preset=False)
    settings = dict(bm.dpvi_settings) | dict(tuned_preset(name, epsilon))
    return dataclasses.replace(bm, dpvi_settings=MappingProxyType(settings))
