"""Whether a model is the one a set of traces was recorded with: its latent sites (names, shapes, transforms) are
theirs. Checked once, where a batch that takes its prior from its model is made (`Batch`), and by the command line
when it looks up `--model`."""

from __future__ import annotations

from collections.abc import Sequence

from ..trace import Trace

__all__ = ["check_model_matches"]


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
