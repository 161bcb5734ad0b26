"""Which model, if any, gives a batch's gradient models their prior on the VI optimum (docs/method.md §2.3): the
batch's own `model` where the prior takes it from the model and the data are the model's (`Batch.model_prior`)."""

from __future__ import annotations

import dataclasses

from ..inference.gradient_model import Prior
from ..models.benchmark import ModelOptimumPrior
from .base import Batch

__all__ = ["model_prior_of"]


def model_prior_of(batch: Batch, prior: Prior) -> ModelOptimumPrior | None:
    """What the batch's model says about the VI optimum (`BenchmarkModel.optimum_prior`) where `prior` takes its
    priors from the model and the batch carries one (docs/method.md §2.3); else None (priors centred on the trace)."""
    if prior.optimum_prior != "model" or batch.model is None or not batch.model_prior or not batch.traces:
        return None  # the batch checked its model against its traces when it was made (`check_model_matches`)
    sizes = {trace.settings.n_examples for trace in batch.traces} - {None}
    model = batch.model
    if len(sizes) == 1 and sizes != {model.n_examples}:
        model = dataclasses.replace(model, n_examples=int(sizes.pop()))  # the curvature at the traces' public N
    return model.optimum_prior()
