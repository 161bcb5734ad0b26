"""The gradient model's three routes as methods: exact quadrature, Laplace and NUTS (docs/method.md §2).

Each fits the same Bayesian linear gradient model to every trace of a batch in one vmapped computation
and returns `NoiseAwarePosterior`s. Their options share the gradient-model settings (prior, burn-in, K
draws of φ*) and add the route's own. Warnings that concern the model (weakly identified slopes) or the
route (grid edges, mixing) are raised per trace; `fit`/`fit_batch` and the experiments gather them.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from ..inference import exact, laplace, nuts
from ..inference.draws import Draws
from ..inference.gradient_model import GradientModel, Prior, gradient_model, resolve_prior, slope_estimates
from ..posteriors.mixture import NoiseAwarePosterior, trace_facts
from ..trace import BURN_IN, Trace
from ..util.diagnostics import MAX_RHAT
from ..util.progress import Progress
from .base import Batch, Method, Outcome

__all__ = [
    "EXACT",
    "ExactOptions",
    "GradientModelOptions",
    "LAPLACE",
    "LaplaceOptions",
    "MIN_STEPS",
    "NUTS",
    "NutsOptions",
]

MIN_STEPS = 50
WEAK_SLOPE = 2.0
EDGE_MASS = 1e-6


@dataclasses.dataclass(frozen=True)
class GradientModelOptions:
    """prior: "default", "paper" (the research settings) or a `Prior`; burn_in: the fraction of the trace
    dropped; draws: K draws of φ* per chain."""

    prior: str | Prior = "default"
    burn_in: float = BURN_IN
    draws: int = 4000


@dataclasses.dataclass(frozen=True)
class ExactOptions(GradientModelOptions):
    """Adaptive quadrature: nodes for the Hessian and the extra noise, and refinement passes of the grid."""

    hessian_nodes: int = 96
    extra_nodes: int = 32
    passes: int = 3


@dataclasses.dataclass(frozen=True)
class LaplaceOptions(GradientModelOptions):
    """style "full" (a Gaussian over all unknowns) or "paper" (the research code's Laplace: u = 0, the
    μ* marginal only); max_steps of the Newton solve."""

    style: Literal["full", "paper"] = "full"
    max_steps: int = 100


@dataclasses.dataclass(frozen=True)
class NutsOptions(GradientModelOptions):
    """NUTS: warmup, chains, backend ("blackjax": vmapped over traces in chunks of `chunk`; "numpyro": one
    trace after another), target acceptance, dense mass matrix, and a progress bar over traces."""

    warmup: int = 1000
    chains: int = 1
    backend: Literal["blackjax", "numpyro"] = "blackjax"
    target_accept: float = 0.8
    dense_mass: bool = False
    chunk: int = 50
    progress: Progress = False


def _route(
    name: str,
    solve: Callable[..., list[Draws | ValueError]],
    route_options: Callable[[object], dict],
    warn: Callable[[Sequence[Outcome], list[GradientModel], tuple[str, ...]], None],
    options: type,
    description: str,
) -> Method:
    """A gradient-model method: the models of all traces, one batched solve, posteriors and warnings."""

    def fit_batch(batch: Batch, keys, opts: GradientModelOptions) -> list[Outcome]:
        prior = resolve_prior(opts.prior)
        models = [_gradient_model(trace, prior, opts.burn_in) for trace in batch.traces]
        if len({model.n_params for model in models}) > 1:
            raise TypeError("a batch needs traces of one model (the same number of parameters P); fit the others apart")
        results = solve(models, keys=keys, draws=opts.draws, **route_options(opts))
        label = opts.prior if isinstance(opts.prior, str) else repr(opts.prior)
        outcomes = [
            result if isinstance(result, Exception) else _posterior(trace, result, name, label, opts.burn_in)
            for trace, result in zip(batch.traces, results)
        ]
        names = batch.traces[0].param_names if batch.traces else ()
        for model in models:
            _warn_weak_slopes(model, names)
        warn(outcomes, models, names)
        return outcomes

    return Method(name, fit_batch, options, "trace", description=description)


def _gradient_model(trace: Trace, prior: Prior, burn_in: float) -> GradientModel:
    kept = trace.steps - int(np.floor(burn_in * trace.steps))
    if kept < MIN_STEPS:
        raise ValueError(
            f"the trace has {trace.steps} steps, {kept} after a burn-in of {burn_in:g}: the gradient model needs "
            f"at least {MIN_STEPS} stationary steps (thousands for useful intervals); record a longer trace"
        )
    return gradient_model(trace, prior, burn_in)


def _posterior(trace: Trace, result: Draws, method: str, prior: str, burn_in: float) -> NoiseAwarePosterior:
    return NoiseAwarePosterior(
        optimum_chains=result.optimum,
        hessian_chains=result.hessian,
        extra_noise_chains=result.extra_noise,
        method=method,
        param_names=trace.param_names,
        sites=trace.sites,
        prior=prior,
        diagnostics=result.diagnostics,
        info=trace_facts(trace, burn_in=burn_in),
    )


def _warn_weak_slopes(model: GradientModel, param_names) -> None:
    """Warn about coordinates whose gradients barely respond to the parameter (|â|/τ < 2): their Hessian,
    and so their optimum, is known mainly from the prior."""
    slope, se = slope_estimates(model.stats)
    weak = np.flatnonzero(slope / se < WEAK_SLOPE)
    if weak.size:
        names = ", ".join(param_names[j] for j in weak)
        warnings.warn(
            f"the gradients of {names} carry little signal about the Hessian (slope < {WEAK_SLOPE:g} standard "
            "errors from 0): their optima are barely identified and their intervals are wide; a longer trace "
            "or a larger privacy budget helps",
            stacklevel=2,
        )


def _warn_grid_edges(outcomes: Sequence[Outcome], models, param_names) -> None:
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            continue
        wide = np.flatnonzero(np.asarray(outcome.diagnostics.edge_mass) > EDGE_MASS)
        if wide.size:
            warnings.warn(
                f"the quadrature grid of {', '.join(param_names[j] for j in wide)} ends where the posterior still "
                f"has mass (> {EDGE_MASS:g}): increase passes or hessian_nodes/extra_nodes, or cross-check with "
                "method='nuts'",
                stacklevel=2,
            )


def _warn_mixing(outcomes: Sequence[Outcome], models, param_names) -> None:
    """One warning each for the traces with R-hat above 1.01 and with divergent transitions."""
    fitted = [o.diagnostics for o in outcomes if not isinstance(o, Exception)]
    if not fitted:
        return
    count = len(outcomes)
    rhat = np.array([d.max_rhat for d in fitted])
    divergent = np.array([d.divergences for d in fitted])
    of = "" if count == 1 else f"{int(np.sum(~(rhat <= MAX_RHAT)))} of {count} traces: "
    if np.any(~(rhat <= MAX_RHAT)):
        warnings.warn(
            f"{of}max R-hat {np.nanmax(rhat):.4g} > {MAX_RHAT:g}: the chains disagree; run more warmup "
            "and draws, or use method='exact'",
            stacklevel=2,
        )
    if np.any(divergent):
        of = "" if count == 1 else f"{int(np.sum(divergent > 0))} of {count} traces: "
        warnings.warn(
            f"{of}{int(divergent.sum())} divergent transitions: the draws may be biased; compare with method='exact'",
            stacklevel=2,
        )


def _no_warning(outcomes, models, param_names) -> None:
    """The Laplace route reports its failures as failed fits, with nothing more to warn about."""


EXACT = _route(
    "exact",
    exact.fit_exact_batch,
    lambda o: {"hessian_nodes": o.hessian_nodes, "extra_nodes": o.extra_nodes, "passes": o.passes},
    _warn_grid_edges,
    ExactOptions,
    "noise-aware: closed-form φ* given A, adaptive quadrature over A and u (no sampling error in moments)",
)
LAPLACE = _route(
    "laplace",
    laplace.fit_laplace_batch,
    lambda o: {"style": o.style, "max_steps": o.max_steps},
    _no_warning,
    LaplaceOptions,
    "noise-aware: Newton MAP and a Gaussian over all unknowns, per coordinate",
)
NUTS = _route(
    "nuts",
    nuts.fit_nuts_batch,
    lambda o: {
        "warmup": o.warmup,
        "chains": o.chains,
        "backend": o.backend,
        "target_accept": o.target_accept,
        "dense_mass": o.dense_mass,
        "chunk": o.chunk,
        "progress": o.progress,
    },
    _warn_mixing,
    NutsOptions,
    "noise-aware: NUTS on the gradient model (blackjax, vmapped over traces)",
)
