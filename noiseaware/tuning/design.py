"""The sizes of a settings search and of its checks, written once: `tune`, `preflight`, `privacy_utility` and
`noiseaware tune` / `noiseaware preflight` read their defaults from `TuningDesign`."""

from __future__ import annotations

import dataclasses

__all__ = ["TUNING", "TuningDesign"]


@dataclasses.dataclass(frozen=True)
class TuningDesign:
    """trials: Optuna trials of the search; simulations: prior-predictive simulations per trial;
    check_simulations: fresh simulations of the chosen settings' check; candidates: the ranked trials checked until
    one passes; preflight_simulations: of a preflight;
    curve_epsilons and curve_simulations: the privacy levels of the privacy–utility curve and the simulations
    at each; predictions: the candidates judged on their predictions before any are simulated; batch and
    check_batch: the simulations of one compiled DPVI program and exact fit in the search and in a check (the
    last batch padded): two sizes, so that every candidate and every check share programs, and a check's
    vectorised runs amortise each step's overhead over more simulations."""

    trials: int = 12
    simulations: int = 24
    check_simulations: int = 200
    candidates: int = 3
    preflight_simulations: int = 100
    curve_epsilons: tuple[float, ...] = (0.1, 0.3, 1.0, 3.0)
    curve_simulations: int = 50
    predictions: int = 512
    batch: int = 8
    check_batch: int = 50


TUNING = TuningDesign()
"""The defaults, as the signatures of the tuning functions read them."""
