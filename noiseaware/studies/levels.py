"""Privacy levels of a study: ("epsilon", ε) or ("noise_multiplier", σ), as the command line gives them."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Level", "epsilon_text", "level_tag", "level_text"]

Level = tuple[str, float]
"""A privacy level: ("epsilon", ε) or ("noise_multiplier", σ)."""


def level_text(name: str, value: float) -> str:
    """ε = 1 or σ = 37.81."""
    return f"ε = {value:g}" if name == "epsilon" else f"σ = {value:g}"


def level_tag(name: str, value: float) -> str:
    """The file-name tag of a privacy level: eps-E or sigma-S."""
    return f"eps-{value:g}" if name == "epsilon" else f"sigma-{value:g}"


def epsilon_text(epsilon: float | None) -> str:
    """ε as a table shows it ("unknown" for a run given by σ alone)."""
    return "unknown" if epsilon is None else f"{epsilon:g}"


def as_level(stored: Sequence) -> Level:
    """A level as stored in plan.json ([name, value]) back as a Level tuple."""
    name, value = stored
    return (str(name), float(value))
