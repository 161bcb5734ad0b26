"""Whether a model is the one a set of traces was recorded with: its latent sites (names, shapes, transforms) are
theirs (`check_model_matches`, once, where a batch that takes its prior from its model is made, and by the command
line when it looks up `--model`), and its prior on the VI optimum does not put a trace's own estimate of μ* in its
far tail (`contradicted_means`, on each trace's gradient model, before it is solved).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from ..inference.gradient_model import GradientModel
from ..inference.statistics import ols_fit
from ..trace import Trace
from ..util.notes import Note

__all__ = ["MODEL_TAIL", "MODEL_CONTRADICTED", "check_model_matches", "contradicted_means", "model_contradiction"]

MODEL_TAIL = 1e-3
"""The chance that a trace recorded with the model is taken for another's: each of its d μ rows is flagged at a
two-sided tail probability below MODEL_TAIL / d (Bonferroni), so at most MODEL_TAIL per trace."""
MODEL_CONTRADICTED = (
    "the model's prior on the VI optimum puts the trace's own estimate of these μ* in its far tail (the largest "
    "distance, in sds of the prior and the estimate together, is the value): the trace was not recorded with this "
    "model (a prior changed after recording, another likelihood), so the model's prior was not used for this trace, "
    "whose gradient model was fitted with priors centred on the trace; pass the model the trace was recorded with"
)


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


def contradicted_means(model: GradientModel, dim: int) -> np.ndarray:
    """z_j (d,) of the μ rows 0 … d−1 of a gradient model built with the model's prior: (μ̂*_j − m_j) / √(se_j² + s_j²),
    μ̂*_j the trace's own least-squares root of its row (G on φ with a free intercept, `ols_fit`), se_j = r_j /
    (√n |b_j|) its standard error (r_j the residual sd, b_j the slope), N(m_j, s_j²) the prior on μ*_j. 0 where the
    slope is not 2 standard errors above 0: such a row has no root to speak of."""
    s = model.stats
    slope, residual = (np.asarray(x, np.float64)[:dim] for x in ols_fit(s))
    weight = np.asarray(s.sum_ww, np.float64)[:dim]
    mean_phi = np.asarray(s.sum_phi, np.float64)[:dim] / weight
    mean_g = np.asarray(s.sum_g, np.float64)[:dim] / weight
    spread = np.sqrt(np.maximum(np.asarray(s.sum_phiphi, np.float64)[:dim] / weight - mean_phi**2, 0.0) * weight)
    residual_sd = np.sqrt(np.maximum(residual, 0.0))
    rooted = slope > 2.0 * residual_sd / np.maximum(spread, np.finfo(np.float64).tiny)
    safe = np.where(rooted, slope, 1.0)
    root = np.asarray(s.centre, np.float64)[:dim] + mean_phi - mean_g / safe
    se = residual_sd / (np.sqrt(weight) * np.abs(safe))
    loc, sd = np.asarray(model.optimum_loc, np.float64)[:dim], np.asarray(model.optimum_sd, np.float64)[:dim]
    return np.where(rooted, (root - loc) / np.hypot(se, sd), 0.0)


def model_contradiction(model: GradientModel, trace) -> Note | None:
    """The note naming the μ rows of `trace` whose own estimate its gradient model's prior (the model's) puts beyond
    its MODEL_TAIL / d tail (`contradicted_means`), with the largest distance; None where there are none."""
    dim, param_names = trace.family.dim, trace.param_names
    z = np.abs(contradicted_means(model, dim))
    far = np.flatnonzero(z > stats.norm.isf(MODEL_TAIL / (2 * dim)))
    if not far.size:
        return None
    names = [param_names[j] for j in far]
    return Note(
        "model contradicted by the trace", MODEL_CONTRADICTED, parameters=names, value=float(z.max()), combine="max"
    )
