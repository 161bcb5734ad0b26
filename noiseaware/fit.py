"""`fit`: a trace → its noise-aware posterior, by one of three routes to the same gradient model."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import jax
import numpy as np

from .baselines.naive import trace_facts
from .gradient_model import GradientModel, Prior, gradient_model, resolve_prior, slope_estimates
from .keys import as_key
from .posterior import NoiseAwarePosterior
from .trace import BURN_IN, Trace

__all__ = ["METHODS", "fit", "fit_batch"]

METHODS = ("exact", "laplace", "nuts")
MIN_STEPS = 50
WEAK_SLOPE = 2.0
EDGE_MASS = 1e-6
MAX_RHAT = 1.01


def fit(
    trace: Trace,
    method: str = "exact",
    *,
    prior: str | Prior = "default",
    burn_in: float = BURN_IN,
    key=0,
    draws: int = 4000,
    **options,
) -> NoiseAwarePosterior:
    """The noise-aware posterior of `trace`: (φ*, A, u) of the gradient model by `method`, then the θ mixture.

    method: "exact" (closed-form φ* and adaptive quadrature; no sampling error in its moments), "laplace"
    (Newton MAP and a Gaussian over all unknowns) or "nuts" (numpyro NUTS; backend="blackjax" for
    blackjax). prior: "default", "paper" (the research settings) or a `Prior`. draws: K draws of φ* per
    chain. options go to the route: exact (hessian_nodes, extra_nodes, passes), laplace (style, max_steps),
    nuts (warmup, chains, backend, target_accept, dense_mass, progress).
    """
    model = _model(trace, method, prior, burn_in)
    if method == "exact":
        from .inference.exact import fit_exact as route
    elif method == "laplace":
        from .inference.laplace import fit_laplace as route

        options.setdefault("style", "paper" if prior == "paper" else "full")
    else:
        from .inference.nuts import fit_nuts as route
    result = route(model, key=key, draws=draws, **options)
    _warn(method, model, result, trace.param_names)
    return _posterior(trace, result, method, prior, burn_in)


ON_ERROR = ("raise", "skip")


def fit_batch(
    traces: Sequence[Trace],
    method: str = "exact",
    *,
    prior: str | Prior = "default",
    burn_in: float = BURN_IN,
    key=0,
    draws: int = 4000,
    on_error: str = "raise",
    **options,
) -> list[NoiseAwarePosterior | None]:
    """`fit` for many traces of one model, every route vmapped over the traces and compiled once.

    exact and laplace solve all traces together; nuts runs blackjax NUTS vmapped in chunks (options:
    warmup, chains, target_accept, dense_mass, chunk, progress). Trace m uses the m-th key of
    jax.random.split(key, M), so `fit_batch([t], key=k)` and `fit(t, key=k)` give different (equally
    valid) draws. on_error="raise" raises the first failed fit's error (naming the trace); "skip" puts
    None in its place and warns with the count. Warnings are gathered: one per kind, with the number of
    traces concerned.
    """
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}; got {on_error!r}")
    models = [_model(trace, method, prior, burn_in) for trace in traces]
    if len({model.n_params for model in models}) > 1:
        raise ValueError("fit_batch needs traces of one model (the same number of parameters P); fit the others apart")
    if method == "exact":
        from .inference.exact import fit_exact_batch as route
    elif method == "laplace":
        from .inference.laplace import fit_laplace_batch as route

        options.setdefault("style", "paper" if prior == "paper" else "full")
    else:
        from .inference.nuts import fit_nuts_batch as route

        if options.pop("backend", "blackjax") != "blackjax":
            raise ValueError("fit_batch runs NUTS with the blackjax backend (vmapped over traces); "
                             "use fit(trace, 'nuts', backend='numpyro') for numpyro")
    results = route(models, key=key, draws=draws, **options)
    posteriors: list[NoiseAwarePosterior | None] = []
    failed: list[tuple[int, ValueError]] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for index, (trace, model, result) in enumerate(zip(traces, models, results)):
            if isinstance(result, ValueError):
                if on_error == "raise":
                    raise ValueError(f"trace {index}: {result}")
                failed.append((index, result))
                posteriors.append(None)
                continue
            _warn(method, model, result, trace.param_names, mixing=False)
            posteriors.append(_posterior(trace, result, method, prior, burn_in))
    _summarise_warnings(caught, len(traces))
    if method == "nuts":
        _warn_mixing_batch([p.diagnostics for p in posteriors if p is not None], len(traces))
    if failed:
        first, error = failed[0]
        warnings.warn(f"{len(failed)} of {len(traces)} fits failed and are None (first: trace {first}: {error})",
                      stacklevel=2)
    return posteriors


def _warn(method: str, model: GradientModel, result, param_names, mixing: bool = True) -> None:
    """The warnings of one fit: weak slopes (any route), grid edges (exact), mixing (nuts, unless a batch
    reports it for all its traces at once)."""
    _warn_weak_slopes(model, param_names)
    if method == "exact":
        _warn_grid_edges(result.diagnostics["edge_mass"], param_names)
    elif method == "nuts" and mixing:
        _warn_mixing(result.diagnostics)


def _summarise_warnings(caught, count: int) -> None:
    """Re-issue the per-trace warnings of a batch once each (same category), with how many of the `count`
    traces raised them."""
    tally: dict[tuple[type[Warning], str], int] = {}
    for warning in caught:
        kind = (warning.category, str(warning.message))
        tally[kind] = tally.get(kind, 0) + 1
    for (category, text), times in tally.items():
        warnings.warn(f"{times} of {count} traces: {text}", category, stacklevel=3)


def _model(trace: Trace, method: str, prior: str | Prior, burn_in: float) -> GradientModel:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: use one of {', '.join(METHODS)} (or noiseaware.naive_posterior)")
    if not isinstance(trace, Trace):
        raise TypeError(f"fit needs a noiseaware.Trace, got {type(trace).__name__}: load one with Trace.load(path)")
    _check_length(trace, burn_in)
    return gradient_model(trace, resolve_prior(prior), burn_in)


def _posterior(trace: Trace, result, method: str, prior: str | Prior, burn_in: float) -> NoiseAwarePosterior:
    return NoiseAwarePosterior(
        optimum_chains=result.optimum,
        hessian_chains=result.hessian,
        extra_noise_chains=result.extra_noise,
        method=method,
        param_names=trace.param_names,
        sites=trace.sites,
        prior=prior if isinstance(prior, str) else repr(prior),
        diagnostics=dict(result.diagnostics),
        info=trace_facts(trace, burn_in=burn_in),
    )


def _check_length(trace: Trace, burn_in: float) -> None:
    kept = trace.steps - int(np.floor(burn_in * trace.steps))
    if kept < MIN_STEPS:
        raise ValueError(
            f"the trace has {trace.steps} steps, {kept} after a burn-in of {burn_in:g}: the gradient model needs "
            f"at least {MIN_STEPS} stationary steps (thousands for useful intervals); record a longer trace"
        )


def _warn_weak_slopes(model: GradientModel, param_names) -> None:
    """Warn about coordinates whose gradients barely respond to the parameter (|â|/τ < 2): their Hessian,
    and so their optimum, is known mainly from the prior."""
    slope, se = slope_estimates(model.stats)
    weak = np.flatnonzero(slope / se < WEAK_SLOPE)
    if weak.size:
        names = ", ".join(param_names[j] for j in weak[:8]) + (" …" if weak.size > 8 else "")
        warnings.warn(
            f"the gradients of {names} carry little signal about the Hessian (slope < {WEAK_SLOPE:g} standard "
            "errors from 0): their optima are barely identified and their intervals are wide; a longer trace "
            "or a larger privacy budget helps",
            stacklevel=4,
        )


def _warn_mixing(diagnostics) -> None:
    """Warn about a sampler's R-hat above 1.01 or divergent transitions."""
    rhat, divergences = diagnostics["max_rhat"], diagnostics["divergences"]
    if not rhat <= MAX_RHAT:
        warnings.warn(f"max R-hat {rhat:.4g} > {MAX_RHAT:g}: the chains disagree; run more warmup and draws, "
                      "or use method='exact'", stacklevel=4)
    if divergences:
        warnings.warn(f"{divergences} divergent transitions: the draws may be biased; compare with method='exact'",
                      stacklevel=4)


def _warn_mixing_batch(diagnostics, count: int) -> None:
    """One warning each for the traces of a batch with R-hat above 1.01 and with divergent transitions."""
    rhat = np.array([d["max_rhat"] for d in diagnostics])
    divergent = np.array([d["divergences"] for d in diagnostics])
    if np.any(~(rhat <= MAX_RHAT)):
        warnings.warn(f"{int(np.sum(~(rhat <= MAX_RHAT)))} of {count} traces: max R-hat > {MAX_RHAT:g} (largest "
                      f"{np.nanmax(rhat):.4g}): the chains disagree; run more warmup and draws, or use method='exact'",
                      stacklevel=3)
    if np.any(divergent):
        warnings.warn(f"{int(np.sum(divergent > 0))} of {count} traces: {int(divergent.sum())} divergent transitions "
                      "in all: the draws may be biased; compare with method='exact'", stacklevel=3)


def _warn_grid_edges(edge_mass: np.ndarray, param_names) -> None:
    wide = np.flatnonzero(np.asarray(edge_mass) > EDGE_MASS)
    if wide.size:
        names = ", ".join(param_names[j] for j in wide[:8])
        warnings.warn(
            f"the quadrature grid of {names} ends where the posterior still has mass (> {EDGE_MASS:g}): "
            "increase passes or hessian_nodes/extra_nodes, or cross-check with method='nuts'",
            stacklevel=4,
        )
