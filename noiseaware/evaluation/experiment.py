"""The experiment driver shared by coverage and calibration: every method on the same problems, then a score.

    for each method:  outcomes = method.fit_batch(batch, keys, options)     (same traces for every method)
                      scores   = score(method, outcomes, draw key)          (TARP, or calibration metrics)

Method m's keys come from fold_in(key, crc32(name)), so a method's numbers do not depend on which other
methods run beside it. Problem i of M uses split(k, M)[i] (the key itself for a batch of one, e.g. a
non-private reference fitted once on shared data). Failures are counted, never dropped; warnings are
gathered per method, one line per distinct warning with the number of problems that raised it; the typed
diagnostics of the fits are summarised by their own type, and a trace method's record says how many traces
each trace check (`na.diagnose`) fired on ("trace_checks").
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from ..methods.base import Batch, Method, Outcome, Registry, fit_problems, split_keys
from ..recording.dpvi import record_dpvi
from ..trace import BURN_IN, CHECKS, diagnose_if_long_enough
from ..util.batch_warnings import gather

__all__ = [
    "DPVI_SETTINGS",
    "MethodRun",
    "check_methods",
    "check_overrides",
    "checks_cell",
    "method_stream",
    "run_methods",
    "with_progress",
]


@dataclasses.dataclass(frozen=True)
class MethodRun[Score]:
    """One method's part of an experiment: its score, failed problems, diagnostics summary and timings."""

    score: Score
    failures: int
    diagnostics: dict[str, Any]
    fit_seconds: float
    score_seconds: float


def method_stream(name: str) -> int:
    """A key offset per method name: a method's numbers do not depend on which other methods run."""
    return zlib.crc32(name.encode())


def check_methods(
    methods: Sequence[str | Method],
    registry: Registry,
    model: str | None,
    epsilon: float | None,
    method_options: Mapping[str, Any] | None,
) -> tuple[list[Method], dict[str, Any]]:
    """Resolve and check every method and its options before any work: (methods, {name: options object})."""
    resolved = registry.resolve(methods)
    given = dict(method_options or {})
    unknown = sorted(set(given) - {m.name for m in resolved})
    if unknown:
        raise ValueError(f"method_options names methods that do not run: {unknown}")
    options = {}
    for method in resolved:
        options[method.name] = method.make_options(given.get(method.name))
        method.check(model, getattr(options[method.name], "epsilon", None) or epsilon)
    return resolved, options


DPVI_SETTINGS = tuple(
    name
    for name in inspect.signature(record_dpvi).parameters
    if name not in ("model", "data", "key", "epsilon", "noise_multiplier", "delta", "progress")
)
"""The DPVI settings a study's keyword overrides may replace (record_dpvi's, less the privacy level)."""


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """A ValueError, before any work, for a keyword that is not a DPVI setting (e.g. a method's option)."""
    unknown = sorted(set(overrides) - set(DPVI_SETTINGS))
    if unknown:
        raise ValueError(
            f"unknown settings {unknown}: keyword arguments replace DPVI settings ({', '.join(DPVI_SETTINGS)}); "
            "a method's options go in method_options, e.g. method_options={'exact': {'prior': 'paper'}}"
        )


def run_methods[Score](
    batch: Batch,
    methods: Sequence[Method],
    options: Mapping[str, Any],
    *,
    key,
    score: Callable[[Method, list[Outcome], jax.Array], tuple[Score, int]],
) -> dict[str, MethodRun[Score]]:
    """Fit every method on `batch` and score it: {name: MethodRun}.

    key: the experiment's fit and draw keys (k_fit, k_draw). score(method, outcomes, draw key) returns
    (its score, the number of further failures it found, e.g. non-finite draws).
    """
    k_fit, k_draw = key
    runs: dict[str, MethodRun[Score]] = {}
    checks: dict[float, dict[str, int]] = {}  # the trace checks' counts, per burn-in (computed once each)
    for method in methods:
        stream = method_stream(method.name)
        count = 1 if batch.shared_data and not method.private else len(batch)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outcomes = fit_problems(
                method, batch, split_keys(jax.random.fold_in(k_fit, stream), count), options[method.name]
            )
        fit_seconds = time.perf_counter() - start
        start = time.perf_counter()
        result, more_failures = score(method, outcomes, jax.random.fold_in(k_draw, stream))
        diagnostics = summarise_diagnostics(outcomes) | {"warnings": method_warnings(method, caught, count)}
        if method.reads == "trace" and batch.traces:
            burn_in = getattr(options[method.name], "burn_in", BURN_IN)
            if burn_in not in checks:
                checks[burn_in] = check_counts(batch.traces, burn_in)
            diagnostics["trace_checks"] = checks[burn_in]
        runs[method.name] = MethodRun(
            score=result,
            failures=sum(isinstance(o, Exception) for o in outcomes) + more_failures,
            diagnostics=diagnostics,
            fit_seconds=fit_seconds,
            score_seconds=time.perf_counter() - start,
        )
    return runs


def check_counts(traces, burn_in: float) -> dict[str, int]:
    """How many of the traces each trace check (`na.diagnose`) fired on, and on how many any fired; "traces" counts
    the traces checked (those with at least MIN_STEPS steps after the burn-in)."""
    reports = [r for r in (diagnose_if_long_enough(trace, burn_in) for trace in traces) if r is not None]
    counts = {name: sum(name in report.fired for report in reports) for name in CHECKS}
    return {"traces": len(reports), "any": sum(not report.ok for report in reports)} | counts


def checks_cell(diagnostics: Mapping[str, Any]) -> str:
    """A results table's cell for a method's trace checks: "2/20 (drift 2)", or "" for a method without traces."""
    counts = diagnostics.get("trace_checks")
    if not counts:
        return ""
    fired = ", ".join(f"{name} {n}" for name, n in counts.items() if name in CHECKS and n)
    return f"{counts['any']}/{counts['traces']}" + (f" ({fired})" if fired else "")


def with_progress(options, progress):
    """A method's options with the study's progress bar, where the method has one (NUTS) not already on."""
    if any(field.name == "progress" for field in dataclasses.fields(options)) and not options.progress:
        return dataclasses.replace(options, progress=progress)
    return options


def summarise_diagnostics(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The fits' typed diagnostics folded by their own type's `summarise` (fits of one method share a type)."""
    records = [o.diagnostics for o in outcomes if not isinstance(o, Exception)]
    return type(records[0]).summarise(records) if records else {}


def method_warnings(method: Method, caught: Sequence[warnings.WarningMessage], count: int) -> list[str]:
    """The warnings of one method's fits of `count` problems, one complete line per distinct warning with the
    number of problems that raised it (`batch_warnings.gather`)."""
    unit = "traces" if method.reads == "trace" else "data sets"
    return [text for _, text in gather(caught, count, unit)]
