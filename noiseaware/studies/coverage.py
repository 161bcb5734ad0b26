"""Coverage studies as tasks: one task per privacy level and part of the simulations, merged exactly.

    coverage_study(bm, levels=[("epsilon", 1.0), …], out=DIR, executor=…)  → {level: CoverageResult}

Task (level, part) is `coverage_part(spec, part)` (simulate, record, fit every method, TARP fractions), named
by the fingerprint of the level's `CoverageSpec` and the part; the results merge with `merge_coverage`, the
function `na.coverage` uses in one process, so with the same chunk a study gives `na.coverage`'s numbers bit
for bit, wherever its tasks ran and however often it was resumed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from ..evaluation.coverage import coverage_part, coverage_spec, merge_coverage
from ..evaluation.result import CoverageResult
from ..models.benchmark import BenchmarkModel
from ..util.keys import key_repr
from .directory import Plan
from .levels import Level, level_of, level_text
from .runner import run_study
from .tasks import part_tasks, parts_by_spec

__all__ = ["coverage_plan", "coverage_study"]


def coverage_plan(bm: BenchmarkModel, *, levels: Sequence[Level], key, **arguments) -> Plan:
    """The plan of a coverage study of `bm` at each level: na.coverage's arguments (methods, simulations,
    references, samples, chunk, method_options, DPVI overrides, …), every one checked before any work."""
    specs = [coverage_spec(bm, key=key, **{name: value}, **arguments) for name, value in levels]
    tasks = [
        task
        for level, spec in zip(levels, specs)
        for task in part_tasks(coverage_part, spec, f"{bm.name} {level_text(*level)}", "simulations")
    ]
    first = specs[0]
    description = {
        "model": bm.name,
        "levels": [[name, value] for name, value in levels],
        "methods": [m.name for m in first.methods],
        "simulations": first.simulations,
        "chunk": first.chunk,
        "key": key_repr(key),
    }
    return Plan("coverage", description, tuple(tasks), _merge)


def coverage_study(
    bm: BenchmarkModel,
    *,
    levels: Sequence[Level],
    key,
    out,
    executor: Executor | None = None,
    slots: int = 1,
    resume: bool = True,
    progress: bool = False,
    **arguments,
) -> dict[Level, CoverageResult]:
    """Coverage of `bm` at each level, run as tasks in the study directory `out` (module doc).

    executor and slots: from `open_executor` (default: in-process). Finished tasks found in `out` are reused;
    a directory holding another study is refused. Raises StudyError, after keeping every finished task, when
    a task failed twice. Returns {level: CoverageResult}, the same numbers as na.coverage with the same chunk.
    """
    plan = coverage_plan(bm, levels=levels, key=key, **arguments)
    return run_study(plan, out, executor=executor, slots=slots, resume=resume, progress=progress)


def _merge(plan: Plan, results: Mapping[str, Any]) -> dict[Level, CoverageResult]:
    """{level: CoverageResult} of every level all of whose parts are in `results` (task id → CoveragePart)."""
    return {
        level_of(spec): merge_coverage(spec, parts)
        for spec, parts in parts_by_spec(plan.tasks, results)
        if parts is not None
    }
