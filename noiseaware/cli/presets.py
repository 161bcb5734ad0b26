"""--preset for a built-in model: the tuned preset at the requested ε where one is shipped, else the paper's.

`record`, `preflight` and `coverage` use the tuned preset (`noiseaware.tuning.presets`: settings found by
`na.tune` and checked on 200 fresh simulations) when it applies — a built-in model, a privacy level given as ε,
a tuned preset shipped at every requested ε, the N and transforms it was tuned for — and otherwise the
research preset, saying which and why on stderr. `--preset tuned` insists (an error where it does not apply);
`--preset research` reproduces the paper.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..models.benchmark import BenchmarkModel
from ..tuning.presets import PRESETS, tuned_epsilons, tuned_model, tuned_preset

__all__ = ["add_preset", "no_preset", "preset_models"]


def add_preset(parser) -> None:
    parser.add_argument(
        "--preset",
        choices=PRESETS,
        help="settings of a built-in model: tuned (found on simulations and checked at the requested ε; the "
        "default where one is shipped) or research (the paper's; the default elsewhere)",
    )


def no_preset(args) -> None:
    """Refuse --preset for a model of the user's own (`package.module:name`), before any work."""
    if args.preset is not None:
        raise ValueError("--preset chooses a built-in model's settings; a model of yours has none: drop --preset")


def preset_models(
    research: BenchmarkModel, preset: str | None, epsilons: Sequence[float] | None, obstacle: str | None = None
) -> dict[float | None, BenchmarkModel]:
    """A built-in model per requested ε (key None when the levels are not given as ε) with its preset.

    research: the built-in with its research preset (as the command sized it); preset: "tuned", "research" or
    None (tuned where it applies); obstacle: why the tuned preset cannot apply here (e.g. an N other than the
    one it was tuned for), or None. Prints the preset used, and why, on stderr.
    """
    name = research.name
    if preset == "research":
        return {eps: research for eps in epsilons or (None,)}
    if obstacle is None and epsilons is None:
        obstacle = "the privacy level is not given as ε"
    if obstacle is None:
        missing = [eps for eps in epsilons if eps not in tuned_epsilons(name)]
        if missing and preset == "tuned":
            tuned_preset(name, missing[0])  # raises, naming the shipped levels and how to tune
        if missing:
            shipped = ", ".join(f"{e:g}" for e in tuned_epsilons(name)) or "none"
            obstacle = f"none is shipped at ε = {', '.join(f'{e:g}' for e in missing)} (shipped at: {shipped})"
    if obstacle is not None:
        if preset == "tuned":
            raise ValueError(f"--preset tuned: {obstacle}; drop --preset, or use --preset research")
        print(
            f"preset: research (the paper's settings; no tuned preset applies: {obstacle}); check them with "
            f"`noiseaware preflight --model {name} --epsilon …`",
            file=sys.stderr,
        )
        return {eps: research for eps in epsilons or (None,)}
    models = {eps: tuned_model(name, eps) for eps in epsilons}
    for eps in epsilons:
        check = tuned_preset(name, eps).check
        print(
            f"preset: tuned at ε = {eps:g} (checked on {check.simulations} simulations: coverage RMSE "
            f"{check.coverage_rmse[0]:.3f}, {check.verdict}; --preset research for the paper's settings)",
            file=sys.stderr,
        )
    return models
