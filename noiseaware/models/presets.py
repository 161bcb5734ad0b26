"""Which preset a built-in model brings to a privacy level: the tuned one where it applies, else the paper's.

`na.models.get(name)` is a built-in whose preset is chosen by ε ("auto"; `bm.by_epsilon`): used at an ε
(`na.coverage`, `na.preflight`, a coverage study, `noiseaware record`) it carries the tuned preset shipped
at that ε where one applies, and the research preset elsewhere, with the reason (`preset_at`). The command
line makes the same choice through the same function, so Python and the CLI record, check and score the same
settings. `preset="research"` reproduces the paper; `preset="tuned"` insists (an error where none applies).

The tuned presets are data of the tuning layer (`noiseaware.tuning.presets`), which sits above this one: it
hands its chooser to `use_preset_source` when it is imported (`import noiseaware` does), and this module knows
only that protocol, `PresetSource`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from ..util.hints import hint
from .benchmark import BenchmarkModel

__all__ = [
    "PRESETS",
    "PresetChoice",
    "PresetSource",
    "chosen_by_epsilon",
    "preset_at",
    "transforms_obstacle",
    "use_preset_source",
]

PRESETS = ("auto", "tuned", "research")
"""A built-in's presets: tuned at the ε of use where one applies, else research (auto); tuned; the paper's."""


@dataclass(frozen=True)
class PresetChoice:
    """The model to use at one ε, which preset it carries ("tuned", "research" or "yours"), and why (one line);
    obstacle: why no tuned preset applies, where a built-in fell back to its research preset."""

    model: BenchmarkModel
    preset: str
    why: str
    obstacle: str | None = None


class PresetSource(Protocol):
    """The built-in `bm` with the preset it brings to ε: tuned where one is shipped and `obstacle` is None, else
    research, each with the line that says why."""

    def __call__(self, bm: BenchmarkModel, epsilon: float | None, obstacle: str | None) -> PresetChoice: ...


_SOURCE: list[PresetSource] = []


def use_preset_source(source: PresetSource) -> None:
    """Let `preset_at` choose built-ins' presets with `source` (the tuning layer's shipped presets)."""
    _SOURCE[:] = [source]


def transforms_obstacle(settings) -> str | None:
    """Why a tuned preset cannot serve settings that name their own `transforms` (the maps θ ⇄ sites it was tuned
    with would change), in the caller's language; None when they name none."""
    if "transforms" not in settings:
        return None
    return f"{hint('transforms=', '--transforms')} replaces the maps it was tuned with"


def chosen_by_epsilon(bm: BenchmarkModel, preset: str) -> BenchmarkModel:
    """Built-in `bm`, carrying its research preset, asked for `preset` ("auto", "tuned" or "research"): chosen by
    the ε of use unless "research" (`bm.by_epsilon`)."""
    return dataclasses.replace(bm, preset="research", by_epsilon=preset != "research")


def preset_at(
    bm: BenchmarkModel, epsilon: float | None, *, obstacle: str | None = None, insist: bool = False
) -> PresetChoice:
    """`bm` at privacy level ε with the preset it brings there.

    Only a built-in whose preset is chosen by ε (`bm.by_epsilon`: `na.models.get(name)`) changes: it gets the
    tuned preset shipped at ε unless `obstacle` (why a tuned preset cannot apply to this run, e.g. a method that
    draws θ under the research transforms) or ε is None (the level given as σ), and its research preset
    otherwise; `insist` makes that fallback a ValueError naming the reason. The model returned is still chosen
    by ε, so using it at another ε chooses again. Any other model is used as it is.
    """
    if not bm.by_epsilon or not _SOURCE:
        return PresetChoice(bm, bm.preset, _AS_GIVEN.get(bm.preset, f"the preset it was given ({bm.preset})"))
    if obstacle is None and epsilon is None:
        obstacle = "the privacy level is not given as ε"
    choice = _SOURCE[0](bm, epsilon, obstacle)
    if insist and choice.preset != "tuned":
        insisted = hint("preset='tuned'", "--preset tuned")
        other = hint("preset='research'", "--preset research")
        raise ValueError(
            f"{insisted}: the tuned preset of {bm.name} does not apply here: {choice.obstacle}; use {other}"
        )
    return choice


_AS_GIVEN = {
    "research": "the paper's settings",
    "tuned": "the tuned preset it was given",
    "yours": "the model's own settings",
}
