"""The repair of a gradient model's scale rows where the trace says they are curved in ρ (docs/method.md §2.9):
those rows refitted linear in ψ = softplus(ρ)² and taken from that fit where its evidence is larger. It takes the
kept traces of a batch, their results and keys, the route's solver and `build(trace, prior)`, the gradient model of
a trace under another prior (or its FitFailure).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..inference.draws import Draws
from ..inference.gradient_model import Prior, scale_coordinates, select_rows
from ..util.errors import FitFailure
from ..util.notes import Note
from .base import outcome_of

REPAIR_EVIDENCE = math.log(3.0)
"""log Bayes factor from which a scale row is refitted linear in softplus(ρ)²: 3 to 1 (on traces drawn from the
paper's model, and on M1–M3's research traces, no row reached it: docs/gradient-model.md)."""
REPAIR_NOTE = (
    "the gradient of these scale coordinates is curved in ρ (Bayes factor > 3 for the gradient model with the "
    "row linear in ψ = softplus(ρ)², Prior(scale_model='variance'), docs/method.md §2.9); those rows were fitted "
    "that way instead of linear in ρ; repair=False keeps the paper's model"
)


def repair_scale_rows(traces, results, keys, prior: Prior, opts, solve, build):
    """Refit the traces with their scale rows linear in ψ = softplus(ρ)² and, row by row, keep that fit where its
    evidence beats the paper's model by REPAIR_EVIDENCE (the rows are independent given the trace, so a posterior
    may take some rows from each fit): the results, and per trace the note naming the rows repaired (None where
    none was)."""
    variance = dataclasses.replace(prior, scale_model="variance")
    scale = np.flatnonzero(scale_coordinates(traces[0]))  # only these rows differ between the two models
    if not scale.size:  # a point trace has no scale rows to repair
        return results, [None] * len(results)
    others = [outcome_of(lambda t=trace: build(t, variance)) for trace in traces]
    built = [i for i, model in enumerate(others) if not isinstance(model, FitFailure)]  # ψ can freeze where ρ moves
    if built:
        solved = solve([select_rows(others[i], scale) for i in built], keys=keys[np.asarray(built)], options=opts)
        for i, result in zip(built, solved):
            others[i] = result
    repaired, notes = [], []
    for trace, linear, curved in zip(traces, results, others):
        better = (
            np.zeros(scale.size, bool)
            if isinstance(linear, FitFailure) or isinstance(curved, FitFailure)
            else curved.diagnostics["log_evidence"] - linear.diagnostics["log_evidence"][scale] > REPAIR_EVIDENCE
        )
        if not better.any():
            repaired.append(linear)
            notes.append(None)
            continue
        names = np.asarray(trace.param_names)[scale[better]].tolist()
        notes.append(Note("curvature repaired", REPAIR_NOTE, parameters=names))
        repaired.append(take_rows(linear, curved, scale, better))
    return repaired, notes


def take_rows(linear: Draws, curved: Draws, scale: np.ndarray, better: np.ndarray) -> Draws:
    """The draws and exact diagnostics of `linear` with the coordinates scale[better] taken from `curved`, a fit of
    the coordinates `scale` (index array, (S,)) alone; better (S,) bool."""
    size = linear.optimum.shape[-1]

    def take(whole, part):
        if not isinstance(whole, np.ndarray) or whole.shape[-1:] != (size,):
            return whole
        out = np.array(whole, copy=True)
        out[..., scale[better]] = np.asarray(part)[..., better]
        return out

    fields = {name: take(value, curved.diagnostics[name]) for name, value in linear.diagnostics.items()}
    return Draws(
        take(linear.optimum, curved.optimum),
        take(linear.hessian, curved.hessian),
        take(linear.extra_noise, curved.extra_noise),
        type(linear.diagnostics)(**{**fields, "scale_model": "repaired"}),
    )
