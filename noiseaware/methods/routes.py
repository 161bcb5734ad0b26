"""The gradient model's three routes as methods: exact quadrature, Laplace and NUTS (docs/method.md §2), and the
sandwich of a point trace (§6), the exact route read the frequentist way.

Each fits the same Bayesian linear gradient model to every trace of a batch in one vmapped computation
and returns noise-aware `MixturePosterior`s (for a plain DP-SGD trace of a point estimate, its noise-aware Laplace
posterior or sandwich: `posteriors.laplace`). Their options share the gradient-model settings (prior, burn-in, K
draws of φ*) and add the route's own. Warnings that concern the model (weakly identified slopes) or the
route (grid edges, mixing) are `Note`s kept on each posterior (`post.notes`); `fit` issues them as warnings,
the studies and the tuner count them.

Why this module is long: the routes share one batch fit (models, contradicted and uninformative traces, the repair,
the notes, the posterior of each trace's family), and its options classes are the routes' public settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import ClassVar, Literal

import jax
import numpy as np

from ..checks import MIN_STEPS
from ..inference import exact, laplace, nuts
from ..inference.blocks import BLOCK
from ..inference.draws import Draws, prior_draws, summed_log_densities
from ..inference.gradient_model import (
    GradientModel,
    Prior,
    gradient_model,
    resolve_prior,
    slope_estimates,
)
from ..inference.statistics import solves_partial_rows
from ..inference.stein import shared_curvature_notes
from ..posteriors.laplace import POINT_KINDS, point_components
from ..posteriors.mixture import MixturePosterior
from ..trace import BURN_IN, kept_steps
from ..trace.run import Run, varying_settings_reason
from ..util.checks import choice, flag, fraction, positive_int, probability
from ..util.defaults import DRAWS, WARMUP
from ..util.diagnostics import MAX_RHAT
from ..util.errors import VARYING_SETTINGS, FitFailure
from ..util.notes import Note
from ..util.progress import Progress, check_progress
from .base import Batch, Method, Outcome, outcome_of
from .model_match import model_contradiction
from .model_prior import model_prior_of
from .reach import PRIOR_ONLY_ADVICE, is_uninformative, uninformative_failure, uninformative_note
from .repairs import repair_scale_rows

__all__ = [
    "EXACT",
    "ExactOptions",
    "GradientModelOptions",
    "LAPLACE",
    "LaplaceOptions",
    "MIN_STEPS",
    "NUTS",
    "NutsOptions",
    "check_constant_settings",
]

WEAK_SLOPE = 2.0
EDGE_MASS = 1e-6


@dataclasses.dataclass(frozen=True)
class GradientModelOptions:
    """prior: "default", "paper" (the research settings) or a `Prior`; burn_in: the fraction of the trace
    dropped; draws: K draws of φ* per chain."""

    prior: str | Prior = "default"
    burn_in: float = BURN_IN
    draws: int = DRAWS

    min_draws: ClassVar[int] = 1

    def __post_init__(self):
        resolve_prior(self.prior)  # an unknown preset names the presets
        fraction("burn_in", self.burn_in, hint="the share of the trace dropped before the fit, e.g. burn_in=0.2")
        positive_int(
            "draws", self.draws, minimum=self.min_draws, hint=f"the number K of draws of φ*, e.g. draws={DRAWS}"
        )


@dataclasses.dataclass(frozen=True)
class ExactOptions(GradientModelOptions):
    """Adaptive quadrature: nodes for the Hessian and the extra noise, and refinement passes of the grid. repair:
    a scale coordinate ρ whose trace favours the gradient model with its row linear in softplus(ρ)² 3 to 1
    (`Prior(scale_model="variance")`, docs/method.md §2.9) is fitted that way, and the fit says so. block: the
    coordinates solved per compiled program (`inference.blocks`: memory bounded for large P); progress: a bar over
    the blocks of a long fit; devices: how many of jax's devices share the blocks, one thread each (None: all; the
    same draws on any number)."""

    hessian_nodes: int = exact.GRID_DEFAULTS["hessian_nodes"]
    extra_nodes: int = exact.GRID_DEFAULTS["extra_nodes"]
    passes: int = exact.GRID_DEFAULTS["passes"]
    repair: bool = True
    block: int = BLOCK
    progress: Progress = False
    devices: int | None = None

    def __post_init__(self):
        super().__post_init__()
        flag("repair", self.repair)
        positive_int("block", self.block, hint=f"the coordinates fitted per compiled program, e.g. block={BLOCK}")
        check_progress(self.progress)
        if self.devices is not None:
            positive_int("devices", self.devices, hint="how many of jax.devices() share the blocks, e.g. devices=2")
            if self.devices > len(jax.devices()):
                raise ValueError(
                    f"devices={self.devices}, but jax has {len(jax.devices())} device(s) here; pass at most that, or "
                    "None for all of them"
                )
        for name in ("hessian_nodes", "extra_nodes"):
            positive_int(name, getattr(self, name), minimum=3, hint="a grid axis needs at least 3 nodes")
        positive_int("passes", self.passes, hint="the number of placements of the grid, e.g. passes=3")


@dataclasses.dataclass(frozen=True)
class LaplaceOptions(GradientModelOptions):
    """style "full" (a Gaussian over all unknowns) or "paper" (the research code's Laplace: u = 0, the
    μ* marginal only); max_steps of the Newton solve."""

    style: Literal["full", "paper"] = "full"
    max_steps: int = 100

    def __post_init__(self):
        super().__post_init__()
        choice("Laplace style", self.style, laplace.STYLES)
        positive_int("max_steps", self.max_steps, hint="the most Newton steps of the mode search, e.g. max_steps=100")


@dataclasses.dataclass(frozen=True)
class NutsOptions(GradientModelOptions):
    """NUTS: start ("exact": at the exact route's posterior, step-size adaptation only; "prior": the cold start at
    the prior means, Stan's window adaptation), warmup and target acceptance (None: the start's own,
    `nuts.START_DEFAULTS`), chains, backend ("blackjax": vmapped over traces in chunks of `chunk`; "numpyro": one
    trace after another), dense mass matrix (the cold start's adaptation only), and a progress bar over traces."""

    start: Literal["exact", "prior"] = "exact"
    warmup: int | None = None
    chains: int = 1
    backend: Literal["blackjax", "numpyro"] = "blackjax"
    target_accept: float | None = None
    dense_mass: bool = False
    chunk: int = 50
    progress: Progress = False

    min_draws: ClassVar[int] = 4  # R-hat and ESS split each chain in halves

    def __post_init__(self):
        super().__post_init__()
        choice("start", self.start, nuts.STARTS)
        if self.warmup is not None:
            positive_int("warmup", self.warmup, hint=f"the number of adaptation steps per chain, e.g. warmup={WARMUP}")
        positive_int("chains", self.chains)
        choice("backend", self.backend, nuts.BACKENDS)
        if self.target_accept is not None:
            probability("target_accept", self.target_accept, hint="the target acceptance rate, e.g. target_accept=0.9")
        flag("dense_mass", self.dense_mass)
        if self.dense_mass and self.start == "exact":
            raise ValueError(nuts.DENSE_FROM_EXACT)
        positive_int("chunk", self.chunk, hint="the number of traces per compiled NUTS program, e.g. chunk=50")
        check_progress(self.progress)


def _route(
    name: str,
    solve: Callable[..., list[Draws | FitFailure]],
    remarks: Callable[[Draws, Sequence[str]], list[Note]],
    options: type,
    description: str,
    reading: str = "laplace",
) -> Method:
    """A gradient-model method: the models of all traces, one batched solve, posteriors with their notes (weak
    slopes, the repair, and the route's own `remarks` on its solution). A trace whose model cannot be set up (a
    coordinate that never moved, …) gets its FitFailure; the others are solved. reading: what a point trace's
    posterior is, "laplace" (every route) or "sandwich" (the method of that name, point traces only)."""

    def fit_batch(batch: Batch, keys, opts: GradientModelOptions) -> list[Outcome]:
        prior = resolve_prior(opts.prior)
        if (prior.terms != ("diagonal",) or prior.scale_model != "linear") and name != "exact":
            raise ValueError(
                f"the gradient model with extra terms ({', '.join(prior.terms)}) or scale_model="
                f"{prior.scale_model!r} is solved by the exact route only: use method='exact', or a prior without "
                f"them (Prior(terms=('diagonal',), scale_model='linear')) for method={name!r}"
            )
        if solve is not exact.fit_exact_batch and any(solves_partial_rows(prior.scale_model, t) for t in batch.traces):
            raise ValueError(
                f"a point trace's coupled coordinates are drawn jointly by the exact route only: use method='exact' "
                f"(or 'sandwich') for it, not {name!r}"
            )
        if len({trace.n_params for trace in batch.traces}) > 1:
            raise TypeError("a batch needs traces of one model (the same number of parameters P); fit the others apart")
        if getattr(opts, "style", None) == "paper" and any(t.family.kind != "mean-field" for t in batch.traces):
            raise ValueError(
                "style='paper' is the research code's Laplace for mean-field traces (φ* = (μ*, ρ*) in halves); "
                "use style='full' (the default) for a full-rank or low-rank trace"
            )
        model_prior = model_prior_of(batch, prior)
        outcomes: list[Outcome | GradientModel] = [
            outcome_of(lambda t=t: _gradient_model(t, prior, opts.burn_in, model_prior)) for t in batch.traces
        ]
        # a trace the model's prior contradicts is fitted with priors centred on it, and says so
        contradicted = {}
        for m, (trace, model) in enumerate(zip(batch.traces, outcomes)):
            note = None if isinstance(model, FitFailure) or model_prior is None else model_contradiction(model, trace)
            if note is not None:
                contradicted[m] = note
                outcomes[m] = outcome_of(lambda t=trace: _gradient_model(t, prior, opts.burn_in, None))
        kept = [m for m, model in enumerate(outcomes) if not isinstance(model, FitFailure)]
        # an uninformative trace (`reach`) has the model's prior as its posterior: drawn, not solved
        said = {m: uninformative_note(batch.traces[m], opts.burn_in, PRIOR_ONLY_ADVICE) for m in kept}
        flat = [m for m in kept if said[m] is not None]
        for m in flat:
            model = outcomes[m]
            notes = (said[m], *shared_curvature_notes(model, batch.traces[m].param_names))
            draws = prior_draws(model, keys[m], opts.draws)
            logs = summed_log_densities(model, draws, [], None)
            outcomes[m] = _posterior(
                batch.traces[m], draws, name, "model's prior only", opts.burn_in, True, notes, logs
            )
        kept = [m for m in kept if m not in flat]
        models = [outcomes[m] for m in kept]
        kept_traces, kept_keys = [batch.traces[m] for m in kept], keys[np.asarray(kept, int)]
        results = solve(models, keys=kept_keys, options=opts) if kept else []
        repaired: list[Note | None] = [None] * len(kept)
        repairs = bool(getattr(opts, "repair", False))

        own = {id(batch.traces[m]) for m in contradicted}

        def build(trace: Run, form: Prior) -> GradientModel:
            return _gradient_model(trace, form, opts.burn_in, None if id(trace) in own else model_prior)

        if kept and repairs and prior.scale_model == "linear" and prior.terms == ("diagonal",):
            results, repaired = repair_scale_rows(kept_traces, results, kept_keys, prior, opts, solve, build)
        label = opts.prior if isinstance(opts.prior, str) else repr(opts.prior)
        names = batch.traces[0].param_names if batch.traces else ()
        for m, model, result, repair in zip(kept, models, results, repaired):
            if isinstance(result, FitFailure):
                outcomes[m] = result
                continue
            from_model = model_prior is not None and m not in contradicted
            notes = _weak_slopes(model, names, from_model) + shared_curvature_notes(model, names)
            notes += remarks(result, names) + ([contradicted[m]] if m in contradicted else [])
            rows = [] if repair is None else [names.index(parameter) for parameter in repair.parameters]
            logs = summed_log_densities(
                model,
                result,
                rows,
                lambda m=m: build(batch.traces[m], dataclasses.replace(prior, scale_model="variance")),
            )
            outcomes[m] = _posterior(
                batch.traces[m],
                result,
                name,
                label if repair is None else f"{label}, repaired",
                opts.burn_in,
                from_model,
                tuple(notes) + (() if repair is None else (repair,)),
                logs,
                reading,
            )
        return outcomes

    families = ("point",) if reading == "sandwich" else None
    return Method(name, fit_batch, options, "trace", description=description, reads_rows=False, families=families)


def check_constant_settings(trace: Run) -> None:
    """FitFailure (settings vary per step), naming what varies and what to do, for a trace whose σ_t, C_t or s_t
    change: the gradient model needs one noise sd σC/s per coordinate and one clipping geometry."""
    if trace.settings.varying_settings:
        needs = "the gradient model needs one noise sd σC/s per coordinate and one clipping geometry"
        raise FitFailure(VARYING_SETTINGS, varying_settings_reason(trace.settings, needs))


def _gradient_model(trace: Run, prior: Prior, burn_in: float, model_prior=None) -> GradientModel:
    check_constant_settings(trace)
    if trace.rows() is None and prior.terms != ("diagonal",):
        raise ValueError(
            f"the extra terms {', '.join(prior.terms)} of the prior are fitted from the trace's rows, which a "
            "WindowedTrace does not keep: fit it with the diagonal model (the default prior), or fit the full trace"
        )
    kept = kept_steps(trace, burn_in)
    if kept < MIN_STEPS:
        raise ValueError(
            f"the trace has {trace.steps} steps, {kept} after a burn-in of {burn_in:g}: the gradient model needs "
            f"at least {MIN_STEPS} stationary steps (thousands for useful intervals); record a longer trace"
        )
    if is_uninformative(trace, burn_in):
        if model_prior is None:
            raise uninformative_failure(trace, burn_in)
        # its posterior is the prior (`prior_draws`): the model's, on (μ*, ρ*) and the slopes
        prior = dataclasses.replace(prior, scale_model="linear", terms=("diagonal",))
    return gradient_model(trace, prior, burn_in, model_prior)


def _posterior(
    trace: Run,
    result: Draws,
    method: str,
    prior: str,
    burn_in: float,
    model_prior: bool,
    notes: tuple[Note, ...],
    logs: tuple[np.ndarray, np.ndarray],
    reading: str = "laplace",
) -> MixturePosterior:
    """The posterior of `trace` from the gradient model's draws: a mixture over the VI optimum, or for a point
    trace its noise-aware Laplace posterior or sandwich (`posteriors.laplace`, by `reading`)."""
    fields = {
        "method": method,
        "prior": prior,
        "diagnostics": result.diagnostics,
        "info": {"burn_in": burn_in, "optimum_prior": "model" if model_prior else "trace"},
    }
    if trace.family.kind != "point":
        return MixturePosterior.from_trace(
            trace,
            result.optimum,
            hessian=result.hessian,
            extra_noise=result.extra_noise,
            notes=notes,
            log_prior=logs[0],
            log_likelihood=logs[1],
            **fields,
        )
    matrix = None if result.hessian_matrix is None else result.hessian_matrix[0]
    extra = None if result.extra_noise is None else result.extra_noise[0]
    rate = float(trace.settings.sampling_rate)
    family, phi, kept, more = point_components(result.optimum[0], result.hessian[0], matrix, extra, rate, reading)
    return MixturePosterior.from_trace(
        trace,
        phi[None],
        family=family.name,
        param_names=family.param_names([name.removeprefix("mu:") for name in trace.param_names]),
        factor="mixture",
        kind=POINT_KINDS[reading],
        notes=notes + tuple(more),
        log_prior=logs[0][:, kept],
        log_likelihood=logs[1][:, kept],
        **fields,
    )


WEAK_ADVICE = (
    f"their gradients barely respond to them (slope < {WEAK_SLOPE:g} standard errors from 0), so these coordinates "
    "of the VI optimum are known mainly from the model's own prior on them; to learn them from the data, record a "
    "longer trace or spend a larger privacy budget (ε)"
)
WEAK_TRACE_ADVICE = (
    f"their gradients barely respond to them (slope < {WEAK_SLOPE:g} standard errors from 0), so their optima are "
    "known mainly from the prior, which without the model is centred on the trace's own mean: their intervals may "
    "be narrow and misplaced; fit with the trace's model (fit(trace, model=bm), noiseaware fit --model NAME), "
    "record a longer trace or spend a larger privacy budget (ε)"
)
EDGE_ADVICE = (
    f"the quadrature grid ends where the posterior still has mass (> {EDGE_MASS:g}), so it may cut off part "
    "of it; raise passes, hessian_nodes or extra_nodes, or cross-check with method='nuts'"
)
RHAT_ADVICE = "the chains disagree; run more warmup and draws (warmup=, draws=), or use method='exact'"
DIVERGENCE_ADVICE = "the draws may be biased; raise target_accept (e.g. 0.95) or warmup, or compare with method='exact'"


def _weak_slopes(model: GradientModel, param_names, model_prior: bool) -> list[Note]:
    """The note on coordinates whose gradients barely respond to the parameter (|â|/τ < 2): their Hessian, and
    so their optimum, is known mainly from the prior, the model's (model_prior) or the trace-centred one."""
    slope, se = slope_estimates(model.stats, model.noise_var, model.sampling_rate, model.scale_rows)
    weak = np.flatnonzero(slope < WEAK_SLOPE * se)
    if not weak.size:
        return []
    advice = WEAK_ADVICE if model_prior else WEAK_TRACE_ADVICE
    return [Note("weak identification", advice, tuple(param_names[j] for j in weak))]


def _grid_edges(result: Draws, param_names) -> list[Note]:
    """The note on a fit whose quadrature grid has more than EDGE_MASS on its edge, naming the coordinates."""
    wide = np.flatnonzero(np.asarray(result.diagnostics.edge_mass) > EDGE_MASS)
    return [Note("grid edge", EDGE_ADVICE, tuple(param_names[j] for j in wide))] if wide.size else []


def _mixing(result: Draws, param_names) -> list[Note]:
    """The notes on a NUTS fit with R-hat above 1.01 (its largest R-hat) and with divergent transitions (their
    number)."""
    rhat, divergences = result.diagnostics.max_rhat, int(result.diagnostics.divergences)
    notes = []
    if not rhat <= MAX_RHAT:
        largest = float(rhat) if np.isfinite(rhat) else None
        notes.append(Note(f"R-hat above {MAX_RHAT:g}", RHAT_ADVICE, value=largest, combine="max"))
    if divergences:
        notes.append(Note("divergent transitions", DIVERGENCE_ADVICE, value=divergences))
    return notes


def _no_remarks(result: Draws, param_names) -> list[Note]:
    """The Laplace route reports its failures as failed fits, with nothing more to note."""
    return []


EXACT = _route(
    "exact",
    exact.fit_exact_batch,
    _grid_edges,
    ExactOptions,
    "noise-aware: closed-form φ* given A, adaptive quadrature over A and u (no sampling error in moments)",
)
LAPLACE = _route(
    "laplace",
    laplace.fit_laplace_batch,
    _no_remarks,
    LaplaceOptions,
    "noise-aware: Newton MAP and a Gaussian over all unknowns, per coordinate",
)
SANDWICH = _route(
    "sandwich",
    exact.fit_exact_batch,
    _grid_edges,
    ExactOptions,
    "frequentist, a point trace: the exact route's θ̂ and Λ with V = Σ g_i gᵢᵀ from the extra noise, Λ⁻¹VΛ⁻¹",
    reading="sandwich",
)
NUTS = _route(
    "nuts",
    nuts.fit_nuts_batch,
    _mixing,
    NutsOptions,
    "noise-aware: NUTS on the gradient model (blackjax, vmapped over traces)",
)
