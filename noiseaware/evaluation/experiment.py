"""The experiment driver shared by coverage and calibration: every method on the same problems, then a score.

    for each method:  outcomes = fit_each(method, batch, keys, options)    (same traces for every method)
                      scores   = score(method, outcomes, draw keys)         (TARP, or calibration metrics)

An experiment runs in chunks of its problems (`fit_part`, one task of a study each) that `merge_parts` joins
exactly; `run_methods` is the experiment in one chunk. Method m's keys come from fold_in(key, crc32(name)),
so a method's numbers do not depend on which other methods run beside it. Problem i of M uses split(k, M)[i]
whichever chunk it is in (the fit key itself for a batch of one, e.g. a non-private reference fitted once on
shared data). Failures are counted, never dropped; the fits' notes are
gathered per method, one line per distinct note with the number of problems that made it; the typed
diagnostics of the fits are aggregated by their own type (`Diagnostics.aggregate`), and a trace method's record
says how many traces each trace check (`na.diagnose`) fired on ("trace_checks").
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..checks import CHECKS, diagnose_if_long_enough
from ..methods.base import Batch, Method, Outcome, Registry, failure_reasons, split_keys
from ..methods.fit_loop import fit_each
from ..recording.config import setting_names
from ..recording.dpvi import RUN_KEYWORDS
from ..trace import BURN_IN
from ..util.codec import data_type
from ..util.diagnostics import NoDiagnostics
from ..util.errors import FitFailure
from ..util.notes import Note, gather, notes_of

__all__ = [
    "DPVI_SETTINGS",
    "MethodPart",
    "MethodRun",
    "check_methods",
    "check_overrides",
    "checks_cell",
    "fit_part",
    "merge_parts",
    "method_reads",
    "method_stream",
    "run_methods",
    "split_design",
    "warning_lines",
    "with_progress",
]


@dataclasses.dataclass(frozen=True)
class MethodRun[Score]:
    """One method's part of an experiment: its score, failed problems, aggregated diagnostics and timings."""

    score: Score
    failures: int
    diagnostics: dict[str, Any]
    fit_seconds: float
    score_seconds: float


NON_FINITE_DRAWS = "non-finite draws"
"""The failure reason of a fit whose posterior gave non-finite θ draws (found by the score, not the fit)."""


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


DPVI_SETTINGS = setting_names() + RUN_KEYWORDS
"""The DPVI settings a study's keyword overrides may replace (`na.DPVISettings`' fields and record_dpvi's
non_private, allow_weak_privacy and preflight)."""


def check_overrides(overrides: Mapping[str, Any], also: Sequence[str] = ()) -> None:
    """A ValueError, before any work, for a keyword that is not a DPVI setting (e.g. a method's option); also: the
    other keywords the caller takes, named in the message."""
    unknown = sorted(set(overrides) - set(DPVI_SETTINGS))
    if unknown:
        other = f"the fields of its design ({', '.join(also)}) and " if also else ""
        raise ValueError(
            f"unknown settings {unknown}: a study takes {other}DPVI settings ({', '.join(DPVI_SETTINGS)}); a "
            "method's options go in method_options, e.g. method_options={'exact': {'prior': 'paper'}}"
        )


def split_design[D](design: type[D], arguments: Mapping[str, Any]) -> tuple[D, dict[str, Any]]:
    """A study's keyword arguments as (its design: the fields of the frozen dataclass `design`, defaults for the
    rest; the DPVI settings they replace), checked by `check_overrides` before any work."""
    fields = [field.name for field in dataclasses.fields(design)]
    overrides = {name: value for name, value in arguments.items() if name not in fields}
    check_overrides(overrides, fields)
    values = {name: value for name, value in arguments.items() if name in fields}
    if "methods" in values:
        methods = values["methods"]
        values["methods"] = (methods,) if isinstance(methods, (str, Method)) else tuple(methods)
    return design(**values), overrides


@data_type
@dataclasses.dataclass(frozen=True)
class MethodPart[Score]:
    """One method's work on a chunk of an experiment's problems, before the chunks are merged (`merge_parts`).

    score: a pytree of arrays whose leading axis is the chunk's problems; records: the fits' typed diagnostics;
    notes: the notes the fits kept (`Note`s, their posteriors' `notes`); problems: problems fitted (1 for a
    shared reference); checks: the trace checks' counts on the chunk's traces, for a trace method; reasons:
    {reason: count} of the fits that failed (`FitFailure.reason`; non-finite draws found by the score count as
    "non-finite draws"). Everything is data (`util.codec`): a study's worker stores it in the study folder, from
    which the process that merges reads it.
    """

    score: Score
    failures: int
    reasons: Mapping[str, int]
    records: tuple
    notes: tuple[Note, ...]
    problems: int
    checks: Mapping[str, int] | None
    fit_seconds: float
    score_seconds: float


def fit_part[Score](
    batch: Batch,
    methods: Sequence[Method],
    options: Mapping[str, Any],
    *,
    key,
    score: Callable[[Method, list[Outcome], jax.Array], tuple[Score, int]],
    offset: int = 0,
    total: int | None = None,
) -> dict[str, MethodPart[Score]]:
    """Fit every method on the problems offset..offset+len(batch) of an experiment of `total` and score them.

    key: the experiment's fit and draw keys (k_fit, k_draw); problem i of the experiment uses
    split(fold_in(k, crc32(name)), total)[i] of each, wherever its chunk runs. score(method, outcomes, keys)
    gets one draw key per outcome and returns (a pytree with a leading problem axis, further failures, e.g.
    non-finite draws). A non-private reference on shared data is fitted once, in the chunk at offset 0.
    """
    k_fit, k_draw = key
    total = len(batch) if total is None else total
    parts: dict[str, MethodPart[Score]] = {}
    checks: dict[float, dict[str, int]] = {}  # the trace checks' counts, per burn-in (computed once each)
    for method in methods:
        stream = method_stream(method.name)
        shared = batch.shared_data and not method.private
        if shared and offset > 0:
            continue
        count, whole = (1, 1) if shared else (len(batch), total)
        window = slice(offset, offset + count)  # a shared reference runs in the chunk at offset 0
        fit_keys = split_keys(jax.random.fold_in(k_fit, stream), whole)[window]
        draw_keys = jax.random.split(jax.random.fold_in(k_draw, stream), whole)[window]
        start = time.perf_counter()
        outcomes, _ = fit_each(method, batch, fit_keys, options[method.name])
        fit_seconds = time.perf_counter() - start
        start = time.perf_counter()
        result, more_failures = score(method, outcomes, draw_keys)
        method_checks = None
        if method.reads == "trace" and batch.traces:
            burn_in = getattr(options[method.name], "burn_in", BURN_IN)
            if burn_in not in checks:
                checks[burn_in] = check_counts(batch.traces, burn_in)
            method_checks = checks[burn_in]
        parts[method.name] = MethodPart(
            score=result,
            failures=sum(isinstance(o, FitFailure) for o in outcomes) + more_failures,
            reasons=failure_reasons(outcomes) | ({NON_FINITE_DRAWS: more_failures} if more_failures else {}),
            records=tuple(o.diagnostics for o in outcomes if not isinstance(o, FitFailure)),
            notes=tuple(note for outcome in outcomes for note in notes_of(outcome)),
            problems=count,
            checks=method_checks,
            fit_seconds=fit_seconds,
            score_seconds=time.perf_counter() - start,
        )
    return parts


def merge_parts[Score](
    parts: Sequence[Mapping[str, MethodPart[Score]]], methods: Mapping[str, str]
) -> dict[str, MethodRun[Score]]:
    """The chunks of an experiment, in problem order, as one MethodRun per method (methods: {name: what it reads},
    `method_reads`): scores concatenated along their problem axis, failures and trace-check counts added,
    diagnostics aggregated and warnings gathered over all problems. Exact: the same parts give the same numbers
    wherever and in which order they ran."""
    runs: dict[str, MethodRun[Score]] = {}
    for name, reads in methods.items():
        own = [part[name] for part in parts if name in part]
        count = sum(p.problems for p in own)
        records = [r for p in own for r in p.records]
        diagnostics = aggregate_records(records) | {
            "warnings": method_warnings(reads, [note for p in own for note in p.notes], count)
        }
        if own and own[0].checks is not None:
            diagnostics["trace_checks"] = _added([p.checks for p in own])
        reasons = _added([p.reasons for p in own])
        if reasons:
            diagnostics["failure_reasons"] = dict(sorted(reasons.items(), key=lambda item: -item[1]))
        runs[name] = MethodRun(
            score=jax.tree.map(lambda *leaves: np.concatenate(leaves), *(p.score for p in own)) if own else None,
            failures=sum(p.failures for p in own),
            diagnostics=diagnostics,
            fit_seconds=sum(p.fit_seconds for p in own),
            score_seconds=sum(p.score_seconds for p in own),
        )
    return runs


def run_methods[Score](
    batch: Batch,
    methods: Sequence[Method],
    options: Mapping[str, Any],
    *,
    key,
    score: Callable[[Method, list[Outcome], jax.Array], tuple[Score, int]],
) -> dict[str, MethodRun[Score]]:
    """Fit every method on all of `batch` and score it: {name: MethodRun} (`fit_part` on one chunk, merged)."""
    return merge_parts([fit_part(batch, methods, options, key=key, score=score)], method_reads(methods))


def method_reads(methods: Sequence[Method]) -> dict[str, str]:
    """{name: what the method reads ("trace" or "data")}: all that merging a method's parts needs of it."""
    return {method.name: method.reads for method in methods}


def _added(counts: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """Counts of several chunks added key by key, over the keys of any of them in the order they first appear
    (trace checks: the same keys in every chunk; failure reasons: those that occurred)."""
    names = dict.fromkeys(name for c in counts for name in c)
    return {name: sum(c.get(name, 0) for c in counts) for name in names}


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


def aggregate_diagnostics(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The fits' typed diagnostics folded by their own type's `aggregate` (fits of one method share a type)."""
    return aggregate_records([o.diagnostics for o in outcomes if not isinstance(o, FitFailure)])


def aggregate_records(records: Sequence[Any]) -> dict[str, Any]:
    """Diagnostics records of one method's fits folded by their type's `aggregate` ({} for none); fits with nothing to
    report (`NoDiagnostics`: a trace whose posterior is its model's prior, drawn without a solver) are left out."""
    records = [r for r in records if not isinstance(r, NoDiagnostics)]
    return type(records[0]).aggregate(records) if records else {}


def method_warnings(reads: str, notes: Sequence[Note], count: int) -> list[str]:
    """The notes of one method's fits of `count` problems (of a method that reads `reads`), one complete line
    per distinct note with the number of problems that made it (`notes.gather`)."""
    unit = "traces" if reads == "trace" else "data sets"
    return [text for _, text in gather(notes, count, unit)]


def warning_lines(diagnostics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The methods' warnings in an experiment's diagnostics as `warning: methods: …` lines, complete: one per
    distinct warning (already gathered over the problems, with their count), the methods that raised the very
    same warning named together (`warning: exact, laplace: weak identification in …`), and each method's failed
    fits by reason (`warning: exact: failed fits: no finite optimum 3`)."""
    methods_of: dict[str, list[str]] = {}
    for method, facts in diagnostics.items():
        reasons = facts.get("failure_reasons", {})
        lines = list(facts.get("warnings", []))
        if reasons:
            lines.append("failed fits: " + ", ".join(f"{reason} {count}" for reason, count in reasons.items()))
        for line in lines:
            methods_of.setdefault(" ".join(line.split()), []).append(method)
    return [f"warning: {', '.join(methods)}: {line}" for line, methods in methods_of.items()]
