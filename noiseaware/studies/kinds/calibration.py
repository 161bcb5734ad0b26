"""Calibration studies as tasks: per privacy level, parts of the DPVI runs; the non-private reference once.

    calibration_study(data, levels=[("epsilon", 1.0), …], out=DIR, executor=…)  → {level: CalibrationResult}

The kind "calibration" (`kinds`): a spec is na.calibration's `CalibrationSpec` at one level; a part is
`calibration_part(spec, part)` (record the part's runs, fit and score every trace method); "nonprivate", fitted
once on the training data, is a spec of its own whose result joins every level's (`collect`). Merged with
`merge_calibration`, the function `na.calibration` uses in one process: with the same chunk a study gives its
numbers bit for bit. Each level prints its table and writes DIR/calibration-DATASET-eps-E.json, .nc (an ArviZ
DataTree) and .png.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from ...datasets import Dataset
from ...evaluation.calibration_experiment import (
    CalibrationSpec,
    calibration_part,
    calibration_record,
    calibration_spec,
    merge_calibration,
)
from ...evaluation.calibration_result import CalibrationResult
from ...evaluation.experiment import warning_lines
from ...methods.base import Method
from ...plots import plot_calibration
from ...util.keys import key_repr, key_text
from ..kind import Entry, StudyKind, register_kind
from ..levels import Level, as_level, epsilon_text, level_tag, level_text
from ..plan import Plan, kind_plan
from ..runner import run_study

__all__ = ["CALIBRATION", "REFERENCE", "calibration_plan", "calibration_study"]

REFERENCE = "nonprivate"
"""The non-private reference: fitted once for all levels."""


def _label(record: Mapping[str, Any]) -> str:
    level = "non-private reference" if record["level"] is None else level_text(*record["level"])
    return f"{record['dataset']} {level}"


def _stem(record: Mapping[str, Any]) -> str:
    return f"calibration-{record['dataset']}-{level_tag(*record['level'])}"


def _collect(entries: list[Entry]) -> list[Entry]:
    """Each level's entry with the reference's methods beside its own (None until both are merged); the
    reference's own entry is folded in, or stands for every level when no trace method runs."""
    reference = [(s, r) for s, r in entries if s["level"] is None]
    levels = [(s, r) for s, r in entries if s["level"] is not None]
    if not reference:
        return levels
    ref_record, ref_result = reference[0]
    if not levels:
        return [(ref_record | {"level": level}, ref_result) for level in ref_record["levels"]]
    return [(s, None if r is None or ref_result is None else r.merge(ref_result)) for s, r in levels]


def _render(record: Mapping[str, Any], result: CalibrationResult) -> tuple[str, list[str]]:
    """One level's heading and table of methods, and the methods' warnings."""
    s = result.settings
    sigma = "" if s["noise_multiplier"] is None else f", σ = {s['noise_multiplier']:.4g}, T = {s['steps']}"
    heading = (
        f"{s['dataset']} ({s['n_train']} train, {s['n_test']} test, d = {s['dim']}, {s['scaling']}), ε = "
        f"{epsilon_text(s['epsilon'])}{sigma}, R = {s['runs']}, K = {s['samples']}, {key_text(record['key'])}"
        + (f"; DPVI {result.seconds['dpvi']:.0f} s" if "dpvi" in result.seconds else "")
    )
    return f"{heading}\n{result.table()}", warning_lines(result.diagnostics)


CALIBRATION = register_kind(
    StudyKind(
        name="calibration",
        unit="runs",
        run_part=calibration_part,
        record=calibration_record,
        merge=merge_calibration,
        label=_label,
        render=_render,
        stem=_stem,
        outputs={".json": CalibrationResult.to_json, ".nc": CalibrationResult.to_netcdf, ".png": plot_calibration},
        collect=_collect,
    )
)


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
    specs: list[CalibrationSpec] = []
    if REFERENCE in names:
        own = {REFERENCE: options[REFERENCE]} if REFERENCE in options else None
        reference_arguments = {k: v for k, v in arguments.items() if k in ("runs", "samples", "bins", "binning")}
        specs.append(calibration_spec(data, methods=(REFERENCE,), key=key, method_options=own, **reference_arguments))
    if traced:
        own = {k: v for k, v in options.items() if k != REFERENCE}
        specs += [
            calibration_spec(data, methods=traced, key=key, method_options=own, **{name: value}, **arguments)
            for name, value in levels
        ]
    description = {
        "dataset": data.name,
        "levels": [[name, value] for name, value in levels],
        "methods": names,
        "key": key_repr(key),
    }
    plan = kind_plan(CALIBRATION.name, specs, description)
    if REFERENCE in names:  # the reference alone is reported at every level asked for
        stored = [[name, value] for name, value in levels]
        records = (plan.spec_records[0] | {"levels": stored},) + plan.spec_records[1:]
        plan = Plan(plan.kind, plan.description, plan.tasks, plan.specs, records, plan.identities)
    return plan


def calibration_study(
    data: Dataset,
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
) -> dict[Level, CalibrationResult]:
    """Calibration on `data` at each level, run as tasks in the study directory `out` (module doc); like
    `coverage_study` for executors, resuming and failures."""
    plan = calibration_plan(data, levels=levels, key=key, **arguments)
    entries = run_study(plan, out, executor=executor, slots=slots, resume=resume, progress=progress, verify=verify)
    return {as_level(record["level"]): result for record, result in entries}
