"""`fit` and `fit_batch`: traces → posteriors by any registered method; `fit` is the batch of one.

fit(trace, "exact", key=k)                  ≡ fit_batch([trace], "exact", key=…) with keys [k]
fit_batch(traces, "exact", key=k)[m]        ≡ fit(traces[m], "exact", key=jax.random.split(k, M)[m])

`fit_loop.fit_each` is the one fit loop that `fit`, the studies' driver, the tuner's scorer and NA-DP-PVI share:
the trace checks in their mode, then the method's batched fit, each posterior with its report; nothing is warned
or caught inside it. The notes of the fits (`post.notes`) and the checks' findings are data until `fit` and `fit_batch`
issue them, once per distinct note, as `FitWarning`s.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..models.benchmark import BenchmarkModel
from ..posteriors.base import Posterior
from ..trace.run import Run
from ..util.errors import FitFailure
from ..util.keys import as_key
from ..util.notes import issue
from ..util.progress import Progress, busy, check_progress
from .base import Batch, Method, Registry, split_keys
from .fit_loop import CHECK_MODES, Checks, fit_each, fit_notes
from .registry import DEFAULT_REGISTRY

__all__ = ["check_draws_fit", "fit", "fit_batch"]

OnError = Literal["raise", "skip"]


def fit(
    trace: Run,
    method: str | Method = "exact",
    *,
    key,
    options: Any = None,
    checks: Checks = "warn",
    model: BenchmarkModel | None = None,
    registry: Registry = DEFAULT_REGISTRY,
    progress: Progress | None = None,
    **option_values,
) -> Posterior:
    """The posterior of one trace by `method` (a registered name or a `Method`), with its options.

    key: a jax PRNG key or int seed (required: the draws depend on it). options: the method's options
    object (e.g. `na.methods.ExactOptions(prior="paper")`) or a mapping; keyword options override it, e.g.
    fit(trace, "nuts", key=0, chains=4, warmup=500). A fit that fails for a statistical reason raises its
    `FitFailure` (a ValueError with a `reason`); anything else raised is a bug and propagates.
    checks: the trace checks (`na.diagnose`, at the method's burn-in) run first; "warn" (default) warns
    with each finding, "raise" raises `TraceCheckError` before any fitting, "off" skips them. The report is
    kept on the posterior (`post.checks`). model: the `BenchmarkModel` the trace was recorded with (e.g.
    `na.models.get("M1")`, or `na.models.from_numpyro(...)` of your own); under the default prior its prior on θ
    becomes the prior of the VI optimum's mean μ* (docs/method.md §2.3), so a trace that says little about a
    coordinate gives back its prior rather than a narrow interval around the iterates. Without it, μ*'s prior is
    centred on the trace. progress: a line on stderr counting the seconds of a fit that runs over 5 s (the first
    fit of a shape compiles its route) unless False; given, it is also the method's own `progress` option where it
    has one (exact's bar over the blocks of a long fit, NUTS's over traces).
    """
    return _fit(
        [trace],
        method,
        as_key(key)[None],
        options,
        registry,
        "raise",
        checks,
        option_values,
        stacklevel=3,
        model=model,
        progress=progress,
    )[0]


def fit_batch(
    traces: Sequence[Run],
    method: str | Method = "exact",
    *,
    key,
    options: Any = None,
    on_error: OnError = "raise",
    checks: Checks = "warn",
    model: BenchmarkModel | None = None,
    registry: Registry = DEFAULT_REGISTRY,
    progress: Progress | None = None,
    **option_values,
) -> list[Posterior | None]:
    """`fit` for M traces of one model in one batched computation (vmapped where the method allows).

    Trace m uses jax.random.split(key, M)[m], so the result equals M `fit` calls with those keys.
    on_error="raise" raises the first failed fit's `FitFailure` (naming the trace); "skip" puts None in its
    place and warns with the count. Warnings are gathered: one per kind, with the number of traces.
    checks: as in `fit`, per trace ("raise" names the first trace that fails); model: as in `fit`, the model
    every trace was recorded with; progress: as in `fit`.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip'; got {on_error!r}")
    traces = list(traces)
    if not traces:
        raise ValueError("fit_batch needs at least one trace")
    keys = split_keys(key, len(traces))
    return _fit(
        traces,
        method,
        keys,
        options,
        registry,
        on_error,
        checks,
        option_values,
        stacklevel=3,
        model=model,
        progress=progress,
    )


def _fit(
    traces: list[Run],
    method: str | Method,
    keys,
    options,
    registry: Registry,
    on_error: OnError,
    checks: Checks,
    option_values: Mapping[str, Any],
    stacklevel: int,
    model: BenchmarkModel | None = None,
    progress: Progress | None = None,
) -> list[Posterior | None]:
    (chosen,) = registry.resolve([method])
    if progress is not None:
        check_progress(progress)
        if "progress" in {f.name for f in dataclasses.fields(chosen.options)}:
            option_values = dict(option_values) | {"progress": progress}
    if "diagnostics" in option_values and "diagnostics" not in {f.name for f in dataclasses.fields(chosen.options)}:
        raise ValueError(
            "fit's diagnostics= is now checks=: 'warn', 'raise' or 'off', the trace checks (post.diagnostics is the "
            "fit's own record)"
        )
    if chosen.reads != "trace":
        raise ValueError(
            f"method {chosen.name!r} reads the data, not a trace: run it in na.coverage or call its "
            "baseline function on your data"
        )
    for trace in traces:
        if not isinstance(trace, Run):
            raise TypeError(
                f"fit needs a noiseaware.Trace or WindowedTrace, got {type(trace).__name__}: load one with "
                "Trace.load(path) or WindowedTrace.load(path)"
            )
        if chosen.reads_rows and trace.rows() is None:
            windowed = ", ".join(name for name, method in registry.items() if not method.reads_rows)
            raise ValueError(
                f"method {chosen.name!r} reads the full rows of a trace, which a WindowedTrace does not keep: fit a "
                f"windowed trace with {windowed}, or record the full trace for {chosen.name!r}"
            )
    if checks not in CHECK_MODES:
        raise ValueError(f"checks must be one of {', '.join(map(repr, CHECK_MODES))}; got {checks!r}")
    if model is not None:
        if not isinstance(model, BenchmarkModel):
            raise TypeError(
                f"model must be a noiseaware BenchmarkModel (na.models.get(name) or na.models.from_numpyro(...)), "
                f"got {type(model).__name__}"
            )
    settings = chosen.make_options(options, **option_values)
    if not chosen.reads_rows and traces:
        check_draws_fit(len(traces), traces[0].n_params, settings)
    what = f"fit {chosen.name}" + ("" if len(traces) == 1 else f" ×{len(traces)}")
    with busy(what, progress is not False):
        outcomes, reports = fit_each(chosen, Batch(tuple(traces), model=model), keys, settings, checks=checks)
    failed = [(m, o) for m, o in enumerate(outcomes) if isinstance(o, FitFailure)]
    if failed and on_error == "raise":
        index, failure = failed[0]
        if len(traces) == 1:
            raise failure
        raise failure.within(f"trace {index}") from failure
    notes = [note for outcome, report in zip(outcomes, reports) for note in fit_notes(outcome, report)]
    issue(notes, len(traces), stacklevel=stacklevel + 1)
    if failed:
        index, error = failed[0]
        warnings.warn(
            f"{len(failed)} of {len(traces)} fits failed and are None (first: trace {index}: {error})",
            stacklevel=stacklevel,
        )
    return [None if isinstance(o, FitFailure) else o for o in outcomes]


def check_draws_fit(traces: int, n_params: int, opts) -> None:
    """A ValueError, before any work, when the draws of φ*, A and u (float64, chains × K × P each, per trace) would
    take more than half of this machine's memory: a large model (a summary of 10⁵ parameters) needs fewer draws."""
    chains = getattr(opts, "chains", 1)
    needed = 3 * 8 * traces * chains * opts.draws * n_params
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > memory / 2:
        fitting = max(1, int(memory / 2 / (3 * 8 * traces * chains * n_params)))
        raise ValueError(
            f"{traces} fit(s) of P = {n_params} parameters with draws={opts.draws} would keep {needed / 1e9:.1f} GB of "
            f"draws, over half of this machine's {memory / 1e9:.0f} GB: pass draws={fitting} or fewer (the exact "
            "route's means and sds of φ* come from its grid whatever the draws), or fit fewer traces at once"
        )
