"""Privacy levels of a study: ("epsilon", ε) or ("noise_multiplier", σ), as the command line gives them."""

from __future__ import annotations

from typing import Any

__all__ = ["Level", "level_of", "level_text"]

Level = tuple[str, float]
"""A privacy level: ("epsilon", ε) or ("noise_multiplier", σ)."""


def level_of(spec: Any) -> Level:
    """The level a coverage or calibration spec was asked for: its ε when given, else its σ."""
    return ("epsilon", spec.epsilon) if spec.epsilon is not None else ("noise_multiplier", spec.noise_multiplier)


def level_text(name: str, value: float) -> str:
    """ε = 1 or σ = 37.81."""
    return f"ε = {value:g}" if name == "epsilon" else f"σ = {value:g}"
