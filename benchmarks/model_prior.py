"""The model's own prior on the VI optimum (docs/method.md §2.3, §2.10): TARP and marginal coverage with and without it.

    python benchmarks/model_prior.py [--cases "M1@1;M1@0.001;M1@1:clip=1e9;M1@1:n=10;M1@1:n=50"]
        [--simulations 200] [--draws 4000] [--out benchmarks/results/model_prior.json]

Per case MODEL@ε[:clip=C,n=N] (cases separated by ';'): M simulations from the model's prior at its research preset
(research σ where the paper has one, else σ calibrated to ε by the PLD accountant; clip= replaces the clip, n= the
number of examples N), one DPVI trace each, and the exact route fitted twice to the same traces: without the model
(`na.fit_batch(traces)`: φ*'s prior centred on the trace) and with it (`na.fit_batch(traces, model=bm)`: μ*, ρ* and
the slopes from the model, the μ rows net of the other coordinates' wander). Printed and stored per case and fit:
the TARP RMSE (research reference rule, R = 10 repeats, mean ± sd), each θ coordinate's 90 % interval coverage of
the truth and its mean width (unconstrained), the median ratio of that width to the non-private posterior's
(`nonprivate_width`: its Laplace sd at the MAP of the same data), and the wall time of the fits. Seed 0 throughout;
resumable: a case already in --out is skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from _common import machine, read_results, write_json

import noiseaware as na
from noiseaware.evaluation.reference_sd import nonprivate_width
from noiseaware.evaluation.simulations import simulate_traces
from noiseaware.evaluation.tarp import coverage_rmse, tarp_repeats

RESEARCH_SIGMA = {0.1: 360.0, 0.3: 117.5, 1.0: 37.81}


def evaluate(traces, truth, bm, with_model: bool, draws: int, reference: np.ndarray) -> dict:
    """TARP RMSE (R = 10), 90 % coverage and width per θ coordinate of the exact route's posteriors, and the median
    ratio of the width to the non-private posterior's (`reference`, (M, d))."""
    start = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        posts = na.fit_batch(traces, "exact", key=0, model=bm if with_model else None, on_error="skip")
    seconds = time.time() - start
    kept = [m for m, post in enumerate(posts) if post is not None]
    samples = np.stack([np.asarray(posts[m].sample(jax.random.key(m), draws)) for m in kept])
    d = truth.shape[1]
    centres = np.stack([np.asarray(traces[m].params[int(0.2 * traces[m].steps) :, :d]).mean(axis=0) for m in kept])
    levels, ecp = tarp_repeats(jax.random.key(0), samples, truth[kept], centres, 4 * samples.std(axis=1), repeats=10)
    rmse = coverage_rmse(levels, np.asarray(ecp).T)
    low, high = np.quantile(samples, [0.05, 0.95], axis=1)
    covered = (truth[kept] > low) & (truth[kept] < high)
    return {
        "tarp_rmse": [float(rmse.mean()), float(rmse.std(ddof=1))],
        "coverage90": covered.mean(axis=0).round(3).tolist(),
        "width90": (high - low).mean(axis=0).round(5).tolist(),
        "width_over_nonprivate": np.median((high - low) / reference[kept], axis=0).round(3).tolist(),
        "fits": len(kept),
        "fit_seconds": round(seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="M1@1;M1@0.001;M1@1:clip=1e9;M1@1:n=10;M1@1:n=50")
    parser.add_argument("--simulations", type=int, default=200)
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "model_prior.json")
    args = parser.parse_args()
    results = read_results(args.out)
    for case in args.cases.split(";"):
        if case in results:
            print(f"{case}: in {args.out} already")
            continue
        name, _, rest = case.partition("@")
        epsilon, _, overrides = rest.partition(":")
        epsilon, changes = float(epsilon), dict(item.split("=") for item in overrides.split(",") if item)
        bm = na.models.get(name)
        if "n" in changes:
            bm = dataclasses.replace(bm, n_examples=int(changes["n"]))
        settings = dict(bm.dpvi_settings) | ({"clip": float(changes["clip"])} if "clip" in changes else {})
        sigma = RESEARCH_SIGMA.get(epsilon) or na.noise_multiplier(
            epsilon, 1e-5, settings["sampling_rate"], settings["steps"]
        )
        level = {"noise_multiplier": sigma}
        simulations = simulate_traces(
            bm,
            delta=1e-5,
            simulations=args.simulations,
            key=jax.random.key(0),
            chunk=50,
            progress=True,
            **level,
            **settings,
        )
        traces, truth = simulations.batch.traces, np.asarray(simulations.truth)
        reference = nonprivate_width(bm.model, traces[0], simulations.batch.data, truth)
        entry = {"model": name, "epsilon": epsilon, "simulations": args.simulations, **level, **changes}
        for label, with_model in (("trace prior", False), ("model prior", True)):
            entry[label] = evaluate(traces, truth, bm, with_model, args.draws, reference)
            row = entry[label]
            print(
                f"{case} {label}: TARP {row['tarp_rmse'][0]:.4f} ± {row['tarp_rmse'][1]:.4f}; 90 % coverage "
                f"{row['coverage90']}; widths {row['width90']} ({row['width_over_nonprivate']} × non-private); "
                f"fits {row['fit_seconds']} s"
            )
        results[case] = entry
        results["_meta"] = {"machine": machine(), "command": "python benchmarks/model_prior.py " + " ".join(
            f"--{k} '{v}'" for k, v in (("cases", args.cases), ("simulations", args.simulations), ("draws", args.draws))
        )}  # fmt: skip
        write_json(args.out, results)


if __name__ == "__main__":
    main()
