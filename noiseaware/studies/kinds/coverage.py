"""Coverage studies as tasks: one task per privacy level and part of the simulations, merged exactly.

    coverage_study(bm, levels=[("epsilon", 1.0), …], out=DIR, executor=…)  → {level: CoverageResult}

The kind "coverage" (`kinds`): a spec is na.coverage's `CoverageSpec` at one level; a part is
`coverage_part(spec, part)` (simulate, record, fit every method, TARP fractions); the parts merge with
`merge_coverage`, the function `na.coverage` uses in one process, so with the same chunk a study gives
`na.coverage`'s numbers bit for bit, wherever its tasks ran and however often it was resumed. Each level
prints its table and writes DIR/coverage-MODEL-eps-E.json, .csv (the ECP curves), .nc (an ArviZ DataTree) and .png.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from ...evaluation.coverage import CoverageSpec, coverage_part, coverage_record, coverage_spec, merge_coverage
from ...evaluation.experiment import warning_lines
from ...evaluation.result import CoverageResult
from ...models.benchmark import BenchmarkModel
from ...plots import plot_coverage, plot_coverage_width
from ...util.keys import key_repr, key_text
from ..kind import StudyKind, register_kind
from ..levels import Level, as_level, epsilon_text, level_tag, level_text
from ..plan import Plan, kind_plan
from ..runner import run_study

__all__ = ["COVERAGE", "coverage_plan", "coverage_study"]


def _label(record: Mapping[str, Any]) -> str:
    return f"{record['model']} {level_text(*record['level'])}"


def _stem(record: Mapping[str, Any]) -> str:
    return f"coverage-{record['model']}-{level_tag(*record['level'])}"


def _render(record: Mapping[str, Any], result: CoverageResult) -> tuple[str, list[str]]:
    """One level's heading and table of methods, and the methods' warnings."""
    s = result.settings
    heading = (
        f"{s['model']}, ε = {epsilon_text(s['epsilon'])}, σ = {s['noise_multiplier']:.4g}, M = {s['simulations']}, "
        f"R = {s['references']}, K = {s['samples']}, T = {s['steps']}, {key_text(record['key'])}; DPVI "
        f"{result.seconds['dpvi']:.0f} s"
    )
    return f"{heading}\n{result.table()}", warning_lines(result.diagnostics)


COVERAGE = register_kind(
    StudyKind(
        name="coverage",
        unit="simulations",
        run_part=coverage_part,
        record=coverage_record,
        merge=merge_coverage,
        label=_label,
        render=_render,
        stem=_stem,
        outputs={
            ".json": CoverageResult.to_json,
            ".csv": CoverageResult.to_csv,
            ".nc": CoverageResult.to_netcdf,  # the ArviZ DataTree: per method, reference draw, level, coordinate
            ".png": plot_coverage,
            "-width.png": plot_coverage_width,  # coverage against interval width, one point per method
        },
    )
)


def coverage_plan(
    bm: BenchmarkModel | Mapping[Level, BenchmarkModel], *, levels: Sequence[Level], key, **arguments
) -> Plan:
    """The plan of a coverage study of `bm` at each level: na.coverage's arguments (methods, simulations,
    references, samples, chunk, method_options, DPVI overrides, …), every one checked before any work.
    bm: one model, or {level: model} where the settings differ by level (a built-in's tuned presets)."""
    by_level = bm if isinstance(bm, Mapping) else dict.fromkeys(map(tuple, levels), bm)
    missing = [level for level in map(tuple, levels) if level not in by_level]
    if missing:
        raise ValueError(f"the models by level lack the levels {missing}")
    specs: list[CoverageSpec] = [
        coverage_spec(by_level[(name, value)], key=key, **{name: value}, **arguments) for name, value in levels
    ]
    first = specs[0]
    description = {
        "model": first.model.name,
        "levels": [[name, value] for name, value in levels],
        "methods": [m.name for m in first.methods],
        "simulations": first.simulations,
        "chunk": first.chunk,
        "key": key_repr(key),
    }
    return kind_plan(COVERAGE.name, specs, description)


def coverage_study(
    bm: BenchmarkModel | Mapping[Level, BenchmarkModel],
    *,
    levels: Sequence[Level],
    key,
    out,
    executor: Executor | None = None,
    slots: int = 1,
    resume: bool = True,
    progress: bool = True,
    verify: int = 0,
    **arguments,
) -> dict[Level, CoverageResult]:
    """Coverage of `bm` (one model, or {level: model}: `coverage_plan`) at each level, run as tasks in the study
    directory `out` (module doc).

    executor and slots: from `open_executor` (default: in-process). Finished tasks found in `out` are reused;
    a directory holding another study is refused; verify=K recomputes K of them, drawn at random, first
    (`studies.verify`: for a folder from someone else). Raises TaskError when a task raised (a bug), after keeping
    every finished task. Returns {level: CoverageResult}, the same numbers as na.coverage with the same chunk.
    """
    plan = coverage_plan(bm, levels=levels, key=key, **arguments)
    entries = run_study(plan, out, executor=executor, slots=slots, resume=resume, progress=progress, verify=verify)
    return {as_level(record["level"]): result for record, result in entries}
