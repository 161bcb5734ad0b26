"""Which model, if any, gives a batch's gradient models their prior on the VI optimum (docs/method.md §2.3): the
batch's own `model` where the prior takes it from the model and the data are the model's (`Batch.model_prior`),
after checking that the model's latent sites are the traces'."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..inference.gradient_model import Prior
from ..models.benchmark import ModelOptimumPrior
from ..trace import Trace
from .base import Batch

__all__ = ["check_model_matches", "model_prior_of"]


def model_prior_of(batch: Batch, prior: Prior) -> ModelOptimumPrior | None:
    """What the batch's model says about the VI optimum (`BenchmarkModel.optimum_prior`) where `prior` takes its
    priors from the model and the batch carries one (docs/method.md §2.3); else None (priors centred on the trace)."""
    if prior.optimum_prior != "model" or batch.model is None or not batch.model_prior or not batch.traces:
        return None
    try:  # traces recorded with settings that override the model's sites or transforms keep the trace's prior
        check_model_matches(batch.model, batch.traces)
    except ValueError:
        return None
    sizes = {trace.settings.n_examples for trace in batch.traces} - {None}
    model = batch.model
    if len(sizes) == 1 and sizes != {model.n_examples}:
        model = dataclasses.replace(model, n_examples=int(sizes.pop()))  # the curvature at the traces' public N
    return model.optimum_prior()


def check_model_matches(model, traces: Sequence[Trace]) -> None:
    """A ValueError before any work when `model`'s latent sites (names, shapes, transforms) are not those of every
    trace: its prior would then describe other coordinates."""
    expected = [(s.name, tuple(s.shape), s.transform) for s in model.site_map.sites]
    for index, trace in enumerate(traces):
        sites = (
            None
            if trace.settings.sites is None
            else [(s.name, tuple(s.shape), s.transform) for s in trace.settings.sites]
        )
        if sites != expected:
            where = "the trace" if len(traces) == 1 else f"trace {index}"
            raise ValueError(
                f"model {model.name!r} has the latent sites {expected}, but {where} was recorded with "
                f"{sites if sites is not None else 'no site map'}: its prior cannot be matched to the trace's "
                "coordinates; pass the model the trace was recorded with (the same transforms: "
                "na.models.get(name) for the research presets, preset=False for numpyro's), or no model"
            )
