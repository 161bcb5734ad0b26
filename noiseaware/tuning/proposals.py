"""The tuner's candidates judged on their predictions, before any simulation (docs/tuning.md §3).

judged:            a candidate's settings (`space`) and what the facts predict of its traces (`predict`),
                   with its predicted constraints;
predicted_search:  START and DESIGN, then Optuna's seeded TPE minimising the predicted width under the
                   predicted constraints: hundreds of candidates in seconds;
simulation_order:  the order in which the search simulates them: the first candidate, then the predicted-
                   feasible by predicted width, then the rest by predicted violation, each SPREAD apart from
                   those before it.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import optuna

from .constraints import predicted_constraints
from .halving import Evaluation
from .predict import predict
from .space import SEARCHED, Candidate, SearchSpace, settings_for

__all__ = ["PREDICTION_STARTUP", "SPREAD", "judged", "predicted_search", "simulation_order"]

PREDICTION_STARTUP = 64
"""Random candidates judged before TPE proposes from the predictions."""
SPREAD = 0.15
"""The smallest distance, in the unit cube of the searched ranges (log scale), between two simulated candidates
(relaxed when too few candidates are that far apart)."""


def predicted_search(
    first: list[dict], space: SearchSpace, count: int, seed: int, judge, advance=lambda n: None
) -> list[Evaluation]:
    """`count` candidates judged on their predictions (judge(candidate) → Evaluation): `first`, then Optuna's TPE
    (seeded; PREDICTION_STARTUP random points first), minimising the predicted width under the predicted
    constraints; advance(1) after each. Cheap: no simulation is run."""
    with warnings.catch_warnings():  # Optuna marks constraints_func experimental: not ours to show
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=PREDICTION_STARTUP,
            multivariate=True,
            constraints_func=lambda trial: trial.user_attrs["constraints"],
        )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=sampler)
    for point in first[:count]:
        study.enqueue_trial(Candidate.from_point(point, space).as_point())
    pool: list[Evaluation] = []

    def objective(trial: optuna.Trial) -> float:
        evaluation = dataclasses.replace(judge(Candidate.from_trial(trial, space)), number=len(pool))
        pool.append(evaluation)
        advance(1)
        trial.set_user_attr("constraints", evaluation.predicted["constraints"])
        width = evaluation.predicted["predicted_width"]
        return width if np.isfinite(width) else 1e6

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.optimize(objective, n_trials=count)
    return pool


def judged(candidate: Candidate, facts, bm, base, sigmas, simulations: int) -> Evaluation:
    """A candidate's settings and prediction (`Prediction.as_row`, with its `predicted_constraints`)."""
    sigma = sigmas[(candidate.steps, candidate.sampling_rate)]
    settings = settings_for(candidate, facts, bm.site_map, sigma, base)
    prediction = predict(facts, settings, sigma)
    row = {**prediction.as_row(), "constraints": predicted_constraints(prediction, simulations)}
    return Evaluation(-1, candidate, settings, row)


def simulation_order(pool: list[Evaluation]) -> list[int]:
    """The order in which candidates are simulated: the first (START or the caller's) first; then the predicted-
    feasible ones by predicted width, then the rest by summed predicted violation; each kept SPREAD apart (in the
    unit cube of the searched ranges) from those before it, the ones too close appended after."""

    def rank(e: Evaluation):
        violation = sum(max(v, 0.0) for v in e.predicted["constraints"])
        width = e.predicted["predicted_width"]
        return (violation > 0, violation if violation > 0 else (width if np.isfinite(width) else np.inf))

    order = [0] + sorted(range(1, len(pool)), key=lambda i: rank(pool[i]))
    units = np.array([_unit(e.candidate) for e in pool])
    kept, close = [], []
    for i in order:
        if kept and np.min(np.linalg.norm(units[kept] - units[i], axis=1)) < SPREAD:
            close.append(i)
        else:
            kept.append(i)
    return kept + close


def _unit(candidate: Candidate) -> np.ndarray:
    """A candidate's searched values in the unit cube of log ranges (`SearchSpace` defaults' widths)."""
    space = SearchSpace()
    return np.array(
        [
            math.log(getattr(candidate, name) / low) / math.log(high / low)
            for name, (low, high) in zip(SEARCHED, space.ranges())
        ]
    )
