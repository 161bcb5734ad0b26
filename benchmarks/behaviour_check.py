"""Same numbers bit for bit before and after a refactor: digests of a small Table 1, a small Adult calibration, and
fits and checks of traces and of their summaries.

    python benchmarks/behaviour_check.py [--write] [--out benchmarks/results/behaviour_check.json]

Runs `na.coverage` for M1 at ε = 1, M2 at ε = 0.3 and M3 at ε = 0.1 (M = 50 simulations, R = 20, K = 20 000,
`na.models.get(name)` with `na.coverage`'s defaults otherwise, key 0) with every trace method (exact, nuts, laplace,
naive, dpvim, random-scaling), and `na.calibration` on UCI Adult at ε = 1 (2 runs, exact, laplace, naive and dpvim,
key 0). Each array of each result (ECP curves per reference rule, the marginal curves, the width ratios; the
calibration's metrics and curves) is reduced to the sha256 of its float64 bytes, beside its rounded headline number.
Fits and checks (`RUNS`: M1 at ε = 1 and the 10D regression at ε = 1, key 1, each as its trace and as
`na.windowed(trace)`): every statistic of `na.diagnose` and the mean and sd of 2 000 draws of the exact, laplace and
nuts fits (with and without the model, key 2). A trace's digests must agree bit for bit; a summary's numbers are the
same up to float rounding, so theirs are compared to `SUMMARY_RTOL` relative (their digests are stored too).
With --write the digests are stored in --out; without it they are compared with the stored ones, and every array
that changed is named (exit status 1). Refactors that must not change behaviour are checked with it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np
from _common import machine, read_results, results_path, write_json

import noiseaware as na

TABLE1 = (("gamma-exponential", 1.0), ("beta-bernoulli", 0.3), ("dirichlet-categorical", 0.1))
TRACE_METHODS = ("exact", "nuts", "laplace", "naive", "dpvim", "random-scaling")
CALIBRATION_METHODS = ("exact", "laplace", "naive", "dpvim")
RUNS = (("gamma-exponential", 1.0), ("linreg-10d", 1.0))
RUN_METHODS = ("exact", "laplace", "nuts")
SUMMARY_RTOL = 1e-6
"""How far (relative, or absolute on a scale of the array's largest entry) a summary's numbers may move."""


def digest(array) -> str:
    """sha256 of the array's float64 bytes (C order), its first 16 hex digits."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(array, np.float64)).tobytes()).hexdigest()[:16]


def digests(tree) -> dict | str:
    """The same nesting of mappings with every array replaced by its digest."""
    if isinstance(tree, dict) or hasattr(tree, "items"):
        return {str(k): digests(v) for k, v in tree.items()}
    return digest(tree)


def coverage_digests(simulations: int) -> dict:
    out = {}
    for model, epsilon in TABLE1:
        start = time.time()
        result = na.coverage(
            na.models.get(model), methods=TRACE_METHODS, epsilon=epsilon, simulations=simulations, key=0, progress=True
        )
        out[f"{model}@{epsilon:g}"] = {
            "rmse": {m: round(result.rmse[m][0], 4) for m in result.methods},
            "failures": dict(result.failures),
            "curves": digests(result.curves),
            "marginal_curves": digests(result.marginal_curves),
            "width_ratio": digests(result.width_ratio),
            "seconds": round(time.time() - start, 1),
        }
    return out


def calibration_digests(runs: int) -> dict:
    start = time.time()
    result = na.calibration(na.datasets.adult(), methods=CALIBRATION_METHODS, epsilon=1.0, runs=runs, key=0)
    return {
        "adult@1": {
            "metrics": digests(result.metrics),
            "curves": digests(result.curves),
            "failures": dict(result.failures),
            "seconds": round(time.time() - start, 1),
        }
    }


def run_numbers(trace, bm) -> dict:
    """The checks' statistics and the fits' draw means and sds of one trace or summary, as lists of floats."""
    report = na.diagnose(trace)
    out = {"checks": {k: np.asarray(v, np.float64).tolist() for k, v in report.statistics.items()}}
    out["flags"] = {k: np.asarray(v, np.float64).tolist() for k, v in report.flags.items()}
    for method in RUN_METHODS:
        for model in (None, bm):
            post = na.fit(trace, method, key=2, model=model, checks="off")
            draws = np.asarray(post.sample(jax.random.key(3), 2_000), np.float64)
            name = f"{method}{'+model' if model is not None else ''}"
            out[name] = {"mean": draws.mean(axis=0).tolist(), "sd": draws.std(axis=0).tolist()}
    return out


def run_digests() -> dict:
    out = {}
    for model, epsilon in RUNS:
        start = time.time()
        bm = na.models.get(model, epsilon=epsilon)
        _, data = bm.simulate(0)
        trace = na.record_dpvi(bm.model, data, epsilon=epsilon, key=1, **bm.dpvi_settings)
        summary = na.windowed(trace)
        values = run_numbers(summary, bm)
        out[f"runs/{model}@{epsilon:g}"] = {
            "trace": digests(run_numbers(trace, bm)),
            "summary": digests(values),
            "summary_values": values,
            "seconds": round(time.time() - start, 1),
        }
    return out


def close(stored, now, path: str = "") -> list[str]:
    """The paths of a summary's numbers that moved by more than SUMMARY_RTOL."""
    if isinstance(stored, dict) and isinstance(now, dict):
        return [p for k in sorted(set(stored) | set(now)) for p in close(stored.get(k), now.get(k), f"{path}/{k}")]
    a, b = np.asarray(stored, np.float64), np.asarray(now, np.float64)
    if a.shape != b.shape:
        return [path]
    scale = np.nanmax(np.abs(a)) if a.size and np.any(np.isfinite(a)) else 0.0
    same = np.isclose(a, b, rtol=SUMMARY_RTOL, atol=SUMMARY_RTOL * scale, equal_nan=True)
    return [] if np.all(same) else [path]


def changed(stored, now, path: str = "") -> list[str]:
    """The paths whose digests differ between two nested results (timings and machine ignored)."""
    if isinstance(stored, dict) and isinstance(now, dict):
        if "summary_values" in stored or "summary_values" in now:
            return [f"{path}/trace"] * (stored.get("trace") != now.get("trace")) + close(
                stored.get("summary_values"), now.get("summary_values"), f"{path}/summary"
            )
        keys = (set(stored) | set(now)) - {"seconds", "_meta"}
        return [p for k in sorted(keys) for p in changed(stored.get(k), now.get(k), f"{path}/{k}")]
    return [] if stored == now else [path]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the digests instead of comparing with them")
    parser.add_argument("--simulations", type=int, default=50)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "behaviour_check.json")
    parser.add_argument("--only-runs", action="store_true", help="the fits and checks of traces and summaries only")
    args = parser.parse_args()
    now = run_digests()
    if not args.only_runs:
        now |= coverage_digests(args.simulations) | calibration_digests(args.runs)
    if args.write:
        sizes = f"--simulations {args.simulations} --runs {args.runs}"
        now["_meta"] = {
            "command": f"python benchmarks/behaviour_check.py --write {sizes}",
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": machine(),
        }
        write_json(args.out, now)
        print(json.dumps({k: v.get("rmse", "") for k, v in now.items() if k != "_meta"}, indent=1))
        print(f"wrote {results_path(args.out)}")
        return
    stored = read_results(args.out)
    if args.only_runs:  # the fits and checks alone: the stored Table 1 and calibration are not compared
        stored = {k: v for k, v in stored.items() if k in now or k == "_meta"}
    differences = changed(stored, now)
    for path in differences:
        print(f"changed: {path}")
    print(f"{len(differences)} arrays changed against {args.out}" if differences else "bit for bit the same")
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
