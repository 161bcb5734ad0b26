"""--preset for a built-in model: the tuned preset at the requested ε where one is shipped, else the paper's.

`record`, `preflight` and `coverage` choose as Python does (`noiseaware.models.presets.preset_at`): the tuned
preset (`noiseaware.tuning.presets`: settings found by `na.tune` and checked on 200 fresh simulations) when it
applies — a built-in model, a privacy level given as ε, a tuned preset shipped at every requested ε, the N and
transforms it was tuned for — and otherwise the research preset, saying which and why on stderr. `--preset
tuned` insists (an error where it does not apply); `--preset research` reproduces the paper.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

from ..models.benchmark import BenchmarkModel
from ..models.presets import PRESETS, chosen_by_epsilon, preset_at

__all__ = ["add_preset", "no_preset", "preset_models"]


def add_preset(parser) -> None:
    parser.add_argument(
        "--preset",
        choices=PRESETS,
        help="settings of a built-in model: auto (the default: tuned at the requested ε where one is shipped, "
        "research elsewhere), tuned (found on simulations and checked at the requested ε), or research (the "
        "paper's)",
    )


def no_preset(args) -> None:
    """Refuse --preset for a model of the user's own (`package.module:name`), before any work."""
    if args.preset is not None:
        raise ValueError("--preset chooses a built-in model's settings; a model of yours has none: drop --preset")


def preset_models(
    research: BenchmarkModel, preset: str | None, epsilons: Sequence[float] | None, obstacle: str | None = None
) -> dict[float | None, BenchmarkModel]:
    """A built-in model per requested ε (key None when the levels are not given as ε) with its preset.

    research: the built-in with its research preset (as the command sized it); preset: "auto" (None), "tuned"
    or "research"; obstacle: why the tuned preset cannot apply here (e.g. an N other than the one it was tuned
    for), or None. The research preset at every ε unless a tuned one applies at all of them. Prints the preset
    used, and why, on stderr.
    """
    bm = chosen_by_epsilon(research, preset or "auto")
    choices = {eps: preset_at(bm, eps, obstacle=obstacle, insist=preset == "tuned") for eps in epsilons or (None,)}
    if any(choice.preset != "tuned" for choice in choices.values()):
        why = next(choice.why for choice in choices.values() if choice.preset != "tuned")
        hint = "" if preset == "research" else f"; check them with `noiseaware preflight --model {bm.name} --epsilon …`"
        print(f"preset: research ({why}){hint}", file=sys.stderr)
        return {eps: dataclasses.replace(research, preset="research") for eps in choices}
    for choice in choices.values():
        print(f"preset: {choice.why}; --preset research for the paper's settings", file=sys.stderr)
    return {eps: choice.model for eps, choice in choices.items()}
