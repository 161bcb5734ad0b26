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
    choose_preset(bm, ε, …) what `na.models.preset_at` asks of this module (registered on import): the tuned
                            model at ε with the line that names it, or the research one and why
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from types import MappingProxyType

from .. import models
from ..models.benchmark import BenchmarkModel
from ..models.presets import PresetChoice, use_preset_source
from ..util.hints import hint
from .tuned import SettingsFileError, TunedSettings

__all__ = ["PRESET_DIR", "preset_path", "choose_preset", "tuned_epsilons", "tuned_model", "tuned_preset"]

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


def shipped_level(name: str, epsilon: float) -> float | None:
    """The level of a tuned preset of built-in model `name` shipped at ε (equal up to rounding, 1e-9), or None."""
    return next((level for level in tuned_epsilons(name) if math.isclose(level, epsilon, rel_tol=1e-9)), None)


def tuned_preset(name: str, epsilon: float) -> TunedSettings:
    """The shipped TunedSettings of built-in model `name` at ε (checked against the model, fingerprint verified)."""
    shipped = tuned_epsilons(name)
    level = shipped_level(name, epsilon)
    if level is None:
        tune_command = f"noiseaware tune --model {name} --epsilon {epsilon:g} --out FILE, then --settings FILE"
        raise SettingsFileError(
            f"no tuned preset of {models.get(name).name} is shipped at ε = {epsilon:.12g} (shipped at: "
            f"{_levels(shipped)}): "
            f"tune it ({hint(f'na.tune(model, epsilon={epsilon:g}, key=…)', tune_command)}), or use the paper's "
            f"settings ({hint(f'na.models.get({name!r}, preset={"research"!r})', '--preset research')})"
        )
    return _load(name, level)


@functools.cache
def _load(name: str, epsilon: float) -> TunedSettings:
    shipped = TunedSettings.load(preset_path(name, epsilon), models.get(name, preset=False), verify=False)
    return dataclasses.replace(shipped, verified=True)  # made by the package's tuner and shipped with it


def tuned_model(name: str, epsilon: float) -> BenchmarkModel:
    """Built-in model `name` as a user writes it, with its tuned preset at ε as `dpvi_settings` (carrying the
    check's fingerprint, so recording with it raises no SettingsHint)."""
    bm = models.get(name, preset=False)
    settings = dict(bm.dpvi_settings) | dict(tuned_preset(name, epsilon))
    return dataclasses.replace(bm, dpvi_settings=MappingProxyType(settings), preset="tuned")


def choose_preset(bm: BenchmarkModel, epsilon: float | None, obstacle: str | None) -> PresetChoice:
    """Built-in `bm` at ε: its tuned preset shipped at ε, with the line that names it (the check behind it);
    else its research preset with the reason: `obstacle`, none shipped at ε, or an N other than the tuned one."""
    level = None if obstacle is not None or epsilon is None else shipped_level(bm.name, epsilon)
    tuned = None if level is None else tuned_preset(bm.name, level)
    reason = obstacle
    if reason is None and tuned is None:
        reason = f"none is shipped at ε = {epsilon:.12g} (shipped at: {_levels(tuned_epsilons(bm.name))})"
    if reason is None and bm.n_examples != tuned.n_examples:
        reason = f"it was tuned for N = {tuned.n_examples} examples, not N = {bm.n_examples}"
    if reason is not None:
        research = bm if bm.preset == "research" else _research_like(bm)
        return PresetChoice(research, "research", f"the paper's settings; no tuned preset applies: {reason}", reason)
    check = tuned.check
    why = (
        f"tuned at ε = {level:g} (checked on {check.simulations} simulations: coverage RMSE "
        f"{check.coverage_rmse[0]:.3f}, {check.verdict})"
    )
    return PresetChoice(dataclasses.replace(tuned_model(bm.name, level), by_epsilon=True), "tuned", why)


def _research_like(bm: BenchmarkModel) -> BenchmarkModel:
    """Built-in `bm`'s research preset at `bm`'s own N and covariates (a model chosen at another ε may carry a
    tuned preset; the size the user gave it stays)."""
    research = models.get(bm.name)
    return dataclasses.replace(research, n_examples=bm.n_examples, covariates=bm.covariates)


def _levels(levels) -> str:
    return ", ".join(f"{level:g}" for level in levels) or "none"


use_preset_source(choose_preset)
