"""`noiseaware demo` over many seeds: is its noise-aware posterior of λ ever more certain than the data? (issue 40)

    python benchmarks/demo_width.py [--seeds 20] [--epsilons 1,0.3] [--method exact]

For each ε and seed 0 … S−1, the demo's own run (`noiseaware.cli.demo.demo_run`: M1 with the preset `noiseaware
record` uses at ε, its simulation and DPVI keys from the seed, the fit with the model's prior on the VI optimum)
gives the noise-aware posterior's sd of λ (20 000 draws, the demo's key), set against the sd of the exact
non-private posterior Gamma(8 + N, 2 + Σx) of the same data. DP noise can only add uncertainty, so the ratio
should be ≥ 1; the target is a median ≥ 1 over the seeds, and the demo's own seed (0) ≥ 1. Prints one row per
seed and the median, min and share below 1 per ε; writes benchmarks/results/demo_width.json (resumable: an ε
already measured with the same seeds is kept unless --force).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _common import machine, merge_results, read_results

from noiseaware import models
from noiseaware.cli.demo import DEMO_MODEL, demo_run
from noiseaware.cli.m1_closed_form import exact_posterior
from noiseaware.cli.presets import preset_models
from noiseaware.models.builtin import GAMMA_PRIOR
from noiseaware.posteriors.base import SUMMARY_DRAWS

RESULTS = Path(__file__).parent / "results" / "demo_width.json"


def one_seed(bm, epsilon: float, seed: int, method: str) -> dict:
    """The demo's run at (ε, seed): the noise-aware and exact non-private sds of λ and their ratio."""
    run = demo_run(bm, epsilon, seed, steps=None, method=method, options={}, quiet=True)
    draws = np.asarray(run.posterior.constrained_sample(run.draw_key, SUMMARY_DRAWS)["rate"], np.float64)
    exact_sd = float(exact_posterior(np.asarray(run.data["x"], np.float64), GAMMA_PRIOR).std())
    return {
        "seed": seed,
        "noise_aware_sd": float(draws.std()),
        "exact_sd": exact_sd,
        "ratio": float(draws.std()) / exact_sd,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--epsilons", default="1,0.3")
    parser.add_argument("--method", default="exact")
    parser.add_argument("--force", action="store_true", help="measure again an ε already in the results file")
    args = parser.parse_args()
    done = read_results(RESULTS).get("results", {})
    for epsilon in (float(e) for e in args.epsilons.split(",")):
        name = f"eps{epsilon:g}-{args.method}"
        if not args.force and done.get(name, {}).get("seeds") == args.seeds:
            print(f"ε = {epsilon:g}: measured already (--force to measure again)")
            continue
        (bm,) = preset_models(models.get(DEMO_MODEL), None, [epsilon]).values()
        started = time.perf_counter()
        rows = []
        for seed in range(args.seeds):
            rows.append(one_seed(bm, epsilon, seed, args.method))
            row = rows[-1]
            print(
                f"ε = {epsilon:g} seed {seed:2d}: noise-aware sd {row['noise_aware_sd']:.4f}, exact "
                f"{row['exact_sd']:.4f}, ratio {row['ratio']:.3f}",
                flush=True,
            )
        ratios = np.array([row["ratio"] for row in rows])
        summary = {
            "median_ratio": float(np.median(ratios)),
            "min_ratio": float(ratios.min()),
            "share_below_1": float(np.mean(ratios < 1)),
            "demo_seed_ratio": rows[0]["ratio"],
        }
        print(
            f"ε = {epsilon:g}: median ratio {summary['median_ratio']:.3f}, min {summary['min_ratio']:.3f}, "
            f"{100 * summary['share_below_1']:.0f} % below 1; the demo's seed 0: {summary['demo_seed_ratio']:.3f}"
        )
        merge_results(
            RESULTS,
            {
                name: {
                    "command": f"python benchmarks/demo_width.py --seeds {args.seeds} --epsilons {epsilon:g} "
                    f"--method {args.method}",
                    "preset": bm.preset,
                    "seeds": args.seeds,
                    "summary": summary,
                    "rows": rows,
                    "seconds": round(time.perf_counter() - started, 1),
                    "machine": machine(),
                }
            },
        )


if __name__ == "__main__":
    main()
