"""Study engine benchmark: the paper's Tables 1–3 as studies, in one process and on a 2-worker Dask LocalCluster.

    python benchmarks/study_engine.py [--table 1|2|3] [--epsilons 0.1,0.3,1.0] [--methods …] [--simulations 500]
        [--chunk 100] [--workers 2] [--runs single,cluster] [--work /tmp/noiseaware-study-engine]
        [--out benchmarks/results/study_engine.json]

Table 1 (M1–M3) and Table 2 (the 10D regression): research σ (360, 117.5, 37.81 for ε = 0.1, 0.3, 1), M = 500,
R = 20, K = 20 000, T = 10⁴, seed 0, the five trace methods, planned as tasks (model × ε × chunk of simulations,
`na.studies.coverage_plan`, the models' plans combined). Table 3: Adult at the same σ, R = 20 runs in chunks of
--chunk runs, the five trace methods and the non-private reference (`calibration_plan`). Each run starts from
an empty study directory: in this process (the in-process executor: na.coverage's own path) and on a Dask
LocalCluster of `--workers` pinned single-thread workers. Prints and stores each run's wall time, the per-task
seconds (by model), whether the two runs' numbers are the same bit for bit, and each row's headline number
beside the one in the table's results file (benchmarks/coverage.py's table1.json / table2.json, calibration.py's
table3.json) with its standard error. A run already stored in --out is not repeated (delete its entry to rerun
it), so the script can be restarted.
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import calibration
import numpy as np
from _common import machine, read_results, write_json
from coverage import RESEARCH_SIGMA, method_options

import noiseaware as na
from noiseaware.evaluation.calibration_experiment import CalibrationDesign
from noiseaware.studies import (
    Plan,
    StudyDirectory,
    calibration_plan,
    coverage_plan,
    merge_record,
    open_executor,
    run_plan,
)
from noiseaware.util.defaults import field_default

RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Table:
    """One of the paper's tables as a study: its models (or "adult"), default chunk, and files."""

    models: str
    chunk: int
    reference: str
    out: str


TABLES = {
    "1": Table("gamma-exponential,beta-bernoulli,dirichlet-categorical", 100, "table1.json", "study_engine.json"),
    "2": Table("linreg-10d", 100, "table2.json", "study_engine_table2.json"),
    "3": Table("adult", 20, "table3.json", "study_engine_table3.json"),
}
TRACE_METHODS = "exact,nuts,laplace,naive,dpvim"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="1", choices=tuple(TABLES))
    parser.add_argument("--epsilons", default="0.1,0.3,1.0")
    parser.add_argument("--methods", default=TRACE_METHODS)
    parser.add_argument("--simulations", type=int, default=500, help="M (Tables 1 and 2); Table 3 has R = 20 runs")
    parser.add_argument("--chunk", type=int, help="simulations (runs) per task; default 100 (Table 3: 20)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", default="single,cluster")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/noiseaware-study-engine"))
    parser.add_argument("--out", type=Path, help="default benchmarks/results/study_engine[_table2|_table3].json")
    args = parser.parse_args()
    table = TABLES[args.table]
    chunk = args.chunk or table.chunk
    out = args.out or RESULTS / table.out
    epsilons = [float(e) for e in args.epsilons.split(",")]
    methods = args.methods.split(",")
    plan = table_plan(args.table, epsilons, methods, args.simulations, chunk, args.seed)
    results = read_results(out)
    results["command"] = (
        f"python benchmarks/study_engine.py --table {args.table} --epsilons {args.epsilons} --methods "
        f"{args.methods} --simulations {args.simulations} --chunk {chunk} --workers {args.workers}"
    )
    results["tasks"] = len(plan.tasks)
    results["stored_table"] = f"benchmarks/results/{table.reference}"
    results["machine"] = machine()
    work = args.work / f"table{args.table}"
    runs = results.setdefault("runs", {})
    for name in args.runs.split(","):
        if name in runs:
            print(f"{name}: stored ({runs[name]['wall_seconds']:.0f} s); delete it from {out} to rerun")
            continue
        directory = work / name
        shutil.rmtree(directory, ignore_errors=True)  # the benchmark's own scratch study: timed from empty
        start = time.perf_counter()
        with open_executor(workers=None if name == "single" else args.workers) as (executor, slots):
            run = run_plan(plan, StudyDirectory(directory), executor=executor, slots=slots, progress=True)
        merged = merge_record(plan.record(), run.results)
        wall = time.perf_counter() - start
        np.savez(work / f"{name}-numbers.npz", **numbers(merged))
        runs[name] = {
            "wall_seconds": round(wall, 1),
            "executor": "in-process" if name == "single" else f"Dask LocalCluster, {args.workers} workers × 1 thread",
            "failed_tasks": len(run.failed),
            "task_seconds_by_model": task_seconds(plan, run.seconds),
            "against_stored_table": against_table(merged, read_results(RESULTS / table.reference)),
            "date": time.strftime("%Y-%m-%d %H:%M"),
        }
        print(f"{name}: {wall:.0f} s for {len(plan.tasks)} tasks")
        for row in runs[name]["against_stored_table"]:
            print("  ", row)
        write_json(out, results)
    stored = [work / f"{n}-numbers.npz" for n in ("single", "cluster")]
    if all(path.exists() for path in stored):
        single, cluster = (np.load(path) for path in stored)
        same = sorted(single.files) == sorted(cluster.files) and all(
            np.array_equal(single[k], cluster[k], equal_nan=True) for k in single.files
        )
        results["bit_identical"] = bool(same)
        results["arrays_compared"] = len(single.files)
        results["cluster_over_single"] = round(runs["cluster"]["wall_seconds"] / runs["single"]["wall_seconds"], 3)
        ratio = results["cluster_over_single"]
        print(f"identical: {same} ({len(single.files)} arrays); cluster / single = {ratio}")
        write_json(out, results)


def table_plan(table: str, epsilons: list[float], methods: list[str], simulations: int, chunk: int, seed: int) -> Plan:
    """The study of Table `table` at the research σ of each ε (module doc)."""
    levels = [("noise_multiplier", RESEARCH_SIGMA[e]) for e in epsilons]
    if table == "3":
        traced = [m for m in methods if m != "nonprivate"]
        return calibration_plan(
            na.datasets.adult(),
            levels=levels,
            key=seed,
            methods=[*methods, "nonprivate"] if "nonprivate" not in methods else methods,
            method_options=calibration.method_options(traced, field_default(CalibrationDesign, "samples"), "default"),
            chunk=chunk,
        )
    return Plan.combined(
        [
            coverage_plan(
                na.models.get(model),
                levels=levels,
                key=seed,
                methods=methods,
                simulations=simulations,
                chunk=chunk,
                method_options=method_options(methods, epsilons[0], "default", clients=4),
            )
            for model in TABLES[table].models.split(",")
        ]
    )


def numbers(merged) -> dict[str, np.ndarray]:
    """Every ECP curve (coverage) or per-run metric (calibration) of every level and method, by a flat name."""
    out = {}
    for summary, result in merged:
        where = f"{result.settings.get('model', result.settings.get('dataset'))}|{summary.get('level', ['', ''])[1]}"
        if hasattr(result, "marginal_curves"):
            for kind, table in (("joint", result.curves), ("marginal", result.marginal_curves)):
                for rule, per_method in table.items():
                    for method, array in per_method.items():
                        out[f"{where}|{kind}|{rule}|{method}"] = array
        else:
            for method, metrics in result.metrics.items():
                for metric, array in metrics.items():
                    out[f"{where}|{metric}|{method}"] = np.asarray(array)
    return out


def against_table(merged, stored: dict) -> list[str]:
    """Each row's headline number (TARP RMSE; calibration RMSE for Adult) beside the stored table's, and the
    difference in units of the new row's standard error (sd over simulations or runs / √count)."""
    rows = []
    for summary, result in merged:
        level = summary["level"]
        epsilon = f"{_epsilon(level[1]):g}"
        if hasattr(result, "rmse"):
            model, key = result.settings["model"], "rmse_mean"
            pairs = {m: (mean, sd, len(result.ecp[m])) for m, (mean, sd) in result.rmse.items()}
            old = stored.get(model, {}).get(epsilon, {})
        else:
            model, key = "adult", "calibration_rmse_mean"
            pairs = {
                m: (*result.mean_sd(m), int(np.isfinite(result.metrics[m]["calibration_rmse"]).sum()))
                for m in result.metrics
            }
            old = stored.get(epsilon, {}) | {"nonprivate": stored.get("non-private", {}).get("nuts", {})}
        for method, (mean, sd, count) in pairs.items():
            before = old.get(method, {}).get(key)
            comparable = before is not None and sd is not None and sd > 0
            z = f", {(mean - before) / (sd / np.sqrt(count)):+.2f} se" if comparable else ""
            rows.append(f"{model} ε={epsilon} {method}: {mean:.4f} (table {before}{z})")
    return rows


def _epsilon(sigma: float) -> float:
    """The ε a research σ stands for."""
    return next(e for e, s in RESEARCH_SIGMA.items() if s == sigma)


def task_seconds(plan: Plan, seconds) -> dict[str, dict[str, float]]:
    """Per model: the mean, min and max seconds of its tasks (each a chunk of simulations at one level)."""
    by_model: dict[str, list[float]] = {}
    for task in plan.tasks:
        if task.id in seconds:
            by_model.setdefault(plan.spec_records[task.group]["model"], []).append(seconds[task.id])
    return {
        model: {
            "tasks": len(values),
            "mean": round(float(np.mean(values)), 1),
            "min": round(float(np.min(values)), 1),
            "max": round(float(np.max(values)), 1),
        }
        for model, values in by_model.items()
    }


if __name__ == "__main__":
    main()
