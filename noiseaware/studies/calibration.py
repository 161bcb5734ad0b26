"""Calibration studies as tasks: per privacy level, parts of the DPVI runs; the non-private reference once.

    calibration_study(data, levels=[("epsilon", 1.0), …], out=DIR, executor=…)  → {level: CalibrationResult}

Task (level, part) is `calibration_part(spec, part)` (record the part's runs, fit and score every trace
method); "nonprivate", fitted once on the training data, is a task of its own whose result joins every
level's. Merged with `merge_calibration`, the function `na.calibration` uses in one process: with the same
chunk a study gives its numbers bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from ..datasets import Dataset
from ..evaluation.calibration_experiment import calibration_part, calibration_spec, merge_calibration
from ..evaluation.calibration_result import CalibrationResult
from ..methods.base import Method
from ..util.keys import key_repr
from .directory import Plan
from .levels import Level, level_of, level_text
from .runner import run_study
from .tasks import part_tasks, parts_by_spec

__all__ = ["REFERENCE", "calibration_plan", "calibration_study"]

REFERENCE = "nonprivate"
"""The non-private reference: fitted once for all levels."""


def calibration_plan(
    data: Dataset,
    *,
    levels: Sequence[Level],
    key,
    methods: Sequence[str | Method] = ("exact", "naive"),
    method_options: Mapping[str, Any] | None = None,
    **arguments,
) -> Plan:
    """The plan of a calibration study of `methods` on `data` at each level: na.calibration's arguments
    (runs, samples, bins, binning, chunk, delta, DPVI overrides, …), every one checked before any work."""
    names = [m if isinstance(m, str) else m.name for m in methods]
    traced = [m for m, name in zip(methods, names) if name != REFERENCE]
    options = dict(method_options or {})
    specs: list[tuple[Level | None, Any]] = []
    if REFERENCE in names:
        own = {REFERENCE: options[REFERENCE]} if REFERENCE in options else None
        reference_arguments = {k: v for k, v in arguments.items() if k in ("runs", "samples", "bins", "binning")}
        specs.append((None, calibration_spec(data, methods=(REFERENCE,), key=key, method_options=own,
                                             **reference_arguments)))  # fmt: skip
    if traced:
        own = {k: v for k, v in options.items() if k != REFERENCE}
        for name, value in levels:
            spec = calibration_spec(data, methods=traced, key=key, method_options=own, **{name: value}, **arguments)
            specs.append(((name, value), spec))
    tasks = [
        task
        for level, spec in specs
        for task in part_tasks(
            calibration_part,
            spec,
            f"{data.name} {'non-private reference' if level is None else level_text(*level)}",
            "runs",
        )  # fmt: skip
    ]
    description = {
        "dataset": data.name,
        "levels": [[name, value] for name, value in levels],
        "methods": names,
        "key": key_repr(key),
    }
    return Plan("calibration", description, tuple(tasks), _merge)


def calibration_study(
    data: Dataset,
    *,
    levels: Sequence[Level],
    key,
    out,
    executor: Executor | None = None,
    slots: int = 1,
    resume: bool = True,
    progress: bool = False,
    **arguments,
) -> dict[Level, CalibrationResult]:
    """Calibration on `data` at each level, run as tasks in the study directory `out` (module doc); like
    `coverage_study` for executors, resuming and failures."""
    plan = calibration_plan(data, levels=levels, key=key, **arguments)
    return run_study(plan, out, executor=executor, slots=slots, resume=resume, progress=progress)


def _merge(plan: Plan, results: Mapping[str, Any]) -> dict[Level, CalibrationResult]:
    """{level: CalibrationResult, the reference's methods beside the level's} for every level whose tasks (and
    the reference's) have all finished; every level is the reference alone when no trace method runs."""
    groups = parts_by_spec(plan.tasks, results)
    merged = {}
    reference = None
    for spec, parts in groups:
        if parts is None:
            continue
        result = merge_calibration(spec, parts)
        if not spec.traced:
            reference = result
            continue
        merged[level_of(spec)] = result
    if any(not spec.traced for spec, _ in groups) and reference is None:
        return {}
    if not any(spec.traced for spec, _ in groups):
        return {tuple(level): reference for level in plan.description["levels"]}
    return {level: r.merge(reference) if reference is not None else r for level, r in merged.items()}
