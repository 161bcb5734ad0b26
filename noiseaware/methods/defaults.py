"""The sample sizes the methods share, the research settings: their options classes read them from here."""

from __future__ import annotations

__all__ = ["DRAWS", "WARMUP"]

DRAWS = 4000
"""K, draws per posterior: of φ* (the routes, per chain), of φ (DPVIm), of θ (the non-private NUTS)."""
WARMUP = 1000
"""NUTS adaptation steps per chain (the nuts route and the non-private reference)."""
