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
from ..inference.statistics import centred_phiphi, ols_fit
from ..trace import Trace
from ..util.notes import Note

__all__ = ["MODEL_TAIL", "MODEL_CONTRADICTED", "check_model_matches", "contradicted_means", "model_contradiction"]

MODEL_TAIL = 1e-3
"""The chance that a trace recorded with the model is taken for another's: each of its d μ rows is flagged at a
two-sided tail probability below MODEL_TAIL / d (Bonferroni), so at most MODEL_TAIL per trace."""
ROOTED = 2.0
"""A μ row's root is compared only where its slope is this many standard errors above 0."""
RELAXATIONS = 10.0
"""…and where the kept trace spans this many of the row's relaxation times n·λ_j·b_j (docs/method.md §2.12): over
fewer the trace's mean, and so its root, still carries its start and its slow wander more than the root's se says
(the rarely seen coordinates of a bag of words span about 5; M1's research traces 18–94). A trace without its
step sizes (an adaptive optimizer's) is not compared."""
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


def contradicted_means(model: GradientModel, dim: int, learning_rate) -> np.ndarray:
    """z_j (d,) of the μ rows 0 … d−1 of a gradient model built with the model's prior: (μ̂*_j − m_j) / √(se_j² + s_j²),
    μ̂*_j = φ̄_j + x̄_j − ḡ_j/b_j the trace's own least-squares root of its row (G on φ with a free intercept,
    `ols_fit`: slope b_j with standard error τ_j, residual sd r_j), se_j = √(r_j²/n + ḡ_j² τ_j²/b_j²) / |b_j| its
    delta-method standard error, N(m_j, s_j²) the prior on μ*_j; learning_rate λ (P,) or None. 0 where the slope is
    not ROOTED standard errors above 0 or the trace spans fewer than RELAXATIONS relaxation times of the row."""
    s = model.stats
    slope, residual = (np.asarray(x, np.float64)[:dim] for x in ols_fit(s))
    weight = np.asarray(s.sum_ww, np.float64)[:dim]
    mean_phi = np.asarray(s.sum_phi, np.float64)[:dim] / weight
    mean_g = np.asarray(s.sum_g, np.float64)[:dim] / weight
    spread = np.sqrt(np.maximum(np.asarray(centred_phiphi(s), np.float64)[:dim], 0.0))
    residual_sd = np.sqrt(np.maximum(residual, 0.0))
    slope_se = residual_sd / np.maximum(spread, np.finfo(np.float64).tiny)
    steps = np.zeros(dim) if learning_rate is None else np.asarray(learning_rate, np.float64)[:dim]
    rooted = (slope > ROOTED * slope_se) & (weight * steps * slope >= RELAXATIONS)
    safe = np.where(rooted, slope, 1.0)
    root = np.asarray(s.centre, np.float64)[:dim] + mean_phi - mean_g / safe
    # the delta method on x* = x̄ − ḡ/b: the mean gradient's noise and the slope's
    se = np.hypot(residual_sd / np.sqrt(weight), mean_g * slope_se / safe) / np.abs(safe)
    loc, sd = np.asarray(model.optimum_loc, np.float64)[:dim], np.asarray(model.optimum_sd, np.float64)[:dim]
    return np.where(rooted, (root - loc) / np.hypot(se, sd), 0.0)


def model_contradiction(model: GradientModel, trace) -> Note | None:
    """The note naming the μ rows of `trace` whose own estimate its gradient model's prior (the model's) puts beyond
    its MODEL_TAIL / d tail (`contradicted_means`), with the largest distance; None where there are none."""
    dim, param_names = trace.family.dim, trace.param_names
    z = np.abs(contradicted_means(model, dim, trace.settings.plain_sgd_rate))
    far = np.flatnonzero(z > stats.norm.isf(MODEL_TAIL / (2 * dim)))
    if not far.size:
        return None
    names = [param_names[j] for j in far]
    return Note(
        "model contradicted by the trace", MODEL_CONTRADICTED, parameters=names, value=float(z.max()), combine="max"
    )
