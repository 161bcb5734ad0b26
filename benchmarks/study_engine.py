"""Study engine benchmark: Table 1 as a study, in one process and on a 2-worker Dask LocalCluster.

    python benchmarks/study_engine.py [--models gamma-exponential,beta-bernoulli,dirichlet-categorical]
        [--epsilons 0.1,0.3,1.0] [--methods exact,nuts,laplace,naive,dpvim] [--simulations 500]
        [--chunk 100] [--workers 2] [--runs single,cluster] [--work /tmp/noiseaware-study-engine]
        [--out benchmarks/results/study_engine.json]

Table 1's study (research σ, M = 500, R = 20, K = 20 000, T = 10⁴, seed 0) is planned once as tasks (model ×
ε × chunk of simulations, `na.studies.coverage_plan`, the three models' plans combined) and run twice from
empty study directories: in this process (the in-process executor: na.coverage's own path) and on a Dask
LocalCluster of `--workers` pinned single-thread workers. Prints and stores each run's wall time, the ratio,
the per-task seconds (by model), and whether every ECP curve of every method is the same bit for bit. A run
already stored in --out is not repeated (delete its entry to rerun it), so the script can be restarted.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np
from _common import machine, read_results, write_json
from coverage import RESEARCH_SIGMA, method_options

import noiseaware as na
from noiseaware.studies import Plan, StudyDirectory, coverage_plan, merge_record, open_executor, run_plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gamma-exponential,beta-bernoulli,dirichlet-categorical")
    parser.add_argument("--epsilons", default="0.1,0.3,1.0")
    parser.add_argument("--methods", default="exact,nuts,laplace,naive,dpvim")
    parser.add_argument("--simulations", type=int, default=500)
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", default="single,cluster")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/noiseaware-study-engine"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "study_engine.json")
    args = parser.parse_args()
    epsilons = [float(e) for e in args.epsilons.split(",")]
    methods = args.methods.split(",")
    plans = [
        coverage_plan(
            na.models.get(model),
            levels=[("noise_multiplier", RESEARCH_SIGMA[e]) for e in epsilons],
            key=args.seed,
            methods=methods,
            simulations=args.simulations,
            chunk=args.chunk,
            method_options=method_options(methods, epsilons[0], "default"),
        )
        for model in args.models.split(",")
    ]
    plan = Plan.combined(plans)
    results = read_results(args.out)
    results["command"] = (
        f"python benchmarks/study_engine.py --models {args.models} --epsilons {args.epsilons} --methods "
        f"{args.methods} --simulations {args.simulations} --chunk {args.chunk} --workers {args.workers}"
    )
    results["tasks"] = len(plan.tasks)
    results["machine"] = machine()
    runs = results.setdefault("runs", {})
    for name in args.runs.split(","):
        if name in runs:
            print(f"{name}: stored ({runs[name]['wall_seconds']:.0f} s); delete it from {args.out} to rerun")
            continue
        directory = args.work / name
        shutil.rmtree(directory, ignore_errors=True)  # the benchmark's own scratch study: timed from empty
        start = time.perf_counter()
        with open_executor(workers=None if name == "single" else args.workers) as (executor, slots):
            run = run_plan(plan, StudyDirectory(directory), executor=executor, slots=slots, progress=True)
        merged = merge_record(plan.record(), run.results)
        wall = time.perf_counter() - start
        np.savez(args.work / f"{name}-curves.npz", **curves(merged))
        runs[name] = {
            "wall_seconds": round(wall, 1),
            "executor": "in-process" if name == "single" else f"Dask LocalCluster, {args.workers} workers × 1 thread",
            "failed_tasks": len(run.failed),
            "task_seconds_by_model": task_seconds(plan, run.seconds),
            "date": time.strftime("%Y-%m-%d %H:%M"),
        }
        print(f"{name}: {wall:.0f} s for {len(plan.tasks)} tasks")
        write_json(args.out, results)
    if {"single", "cluster"} <= set(runs):
        single, cluster = (np.load(args.work / f"{n}-curves.npz") for n in ("single", "cluster"))
        same = sorted(single.files) == sorted(cluster.files) and all(
            np.array_equal(single[k], cluster[k], equal_nan=True) for k in single.files
        )
        results["bit_identical"] = bool(same)
        results["curves_compared"] = len(single.files)
        results["cluster_over_single"] = round(runs["cluster"]["wall_seconds"] / runs["single"]["wall_seconds"], 3)
        ratio = results["cluster_over_single"]
        print(f"identical: {same} ({len(single.files)} curve arrays); cluster / single = {ratio}")
        write_json(args.out, results)


def curves(merged) -> dict[str, np.ndarray]:
    """Every ECP curve array of every model, level, rule and method, by a flat name."""
    out = {}
    for summary, result in merged:
        value = summary["level"][1]
        for kind, table in (("joint", result.curves), ("marginal", result.marginal_curves)):
            for rule, per_method in table.items():
                for method, array in per_method.items():
                    out[f"{result.settings['model']}|{value}|{kind}|{rule}|{method}"] = array
    return out


def task_seconds(plan: Plan, seconds) -> dict[str, dict[str, float]]:
    """Per model: the mean, min and max seconds of its tasks (each a chunk of simulations at one level)."""
    by_model: dict[str, list[float]] = {}
    for task in plan.tasks:
        if task.id in seconds:
            by_model.setdefault(plan.summaries[task.group]["model"], []).append(seconds[task.id])
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
