"""Why the paper's naive Table 3 row is worse than ours: posterior predictive versus plug-in at the last iterate.

    python benchmarks/calibration_plugin.py [--epsilon 0.1] [--repeats 20] [--scaling zscore]

On the same R DPVI traces of Adult as benchmarks/calibration.py with the same seed (adult-logistic research
preset, research σ), scores three predictors built from the last iterate q(θ | φ_T) = N(μ_T, softplus(ρ_T)²):
the posterior predictive p̂ = E_q[sigmoid(x·θ)] (our `naive` row, with na.calibration's θ draws), the plug-in
p̂ = sigmoid(x·μ_T), and the plug-in at the post-burn-in mean of μ_t. Calibration RMSE over 10 equal-count
bins (method.md §5), mean ± sd over R. --repeats is R (na.calibration's runs), --draws K (its samples).
Writes benchmarks/results/table3_plugin.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np
from _common import machine, results_path, write_json

import noiseaware as na
from noiseaware.evaluation.calibration import predictive_probabilities
from noiseaware.evaluation.calibration_experiment import PRESET, CalibrationDesign, record_traces
from noiseaware.evaluation.experiment import method_stream
from noiseaware.trace import BURN_IN
from noiseaware.util.defaults import field_default
from noiseaware.util.keys import as_key

RESEARCH_SIGMA = {0.1: 360.0, 0.3: 117.5, 1.0: 37.81}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=0.1, choices=tuple(RESEARCH_SIGMA))
    parser.add_argument("--repeats", type=int, default=field_default(CalibrationDesign, "runs"))
    parser.add_argument("--draws", type=int, default=field_default(CalibrationDesign, "samples"))
    parser.add_argument("--scaling", default="zscore", choices=na.datasets.SCALINGS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "table3_plugin.json")
    args = parser.parse_args()
    start = time.perf_counter()
    data = na.datasets.adult(scaling=args.scaling)
    k_dpvi, _, k_draw = jax.random.split(as_key(args.seed), 3)  # na.calibration's: the same traces
    traces = record_traces(
        data,
        noise_multiplier=RESEARCH_SIGMA[args.epsilon],
        delta=1e-5,
        runs=args.repeats,
        key=k_dpvi,
        chunk=field_default(CalibrationDesign, "chunk"),
        progress=True,
        **na.models.get(PRESET).dpvi_settings,
    )
    # na.calibration's θ draws of its naive row: method m draws with fold_in(k_draw, method_stream(m)), run r
    # with the r-th of R split keys
    k_naive = jax.random.fold_in(k_draw, method_stream("naive"))
    scores: dict[str, list[float]] = {
        "posterior predictive (naive)": [],
        "plug-in μ_T": [],
        "plug-in mean of μ_t after burn-in": [],
    }
    d = data.dim
    for trace, key in zip(traces, jax.random.split(k_naive, len(traces))):
        mu = trace.final_iterate()[:d]
        averaged = trace.params[int(BURN_IN * trace.steps) :, :d].mean(axis=0)
        theta = np.asarray(na.naive_posterior(trace).sample(key, args.draws))
        predictions = {
            "posterior predictive (naive)": predictive_probabilities(theta, data.X_test),
            "plug-in μ_T": predictive_probabilities(mu[None], data.X_test),
            "plug-in mean of μ_t after burn-in": predictive_probabilities(averaged[None], data.X_test),
        }
        for name, p in predictions.items():
            scores[name].append(na.calibration_metrics(data.y_test, p, bins=10).calibration_rmse)
    wall = time.perf_counter() - start
    print(f"\nAdult, ε = {args.epsilon:g} (σ = {RESEARCH_SIGMA[args.epsilon]}), R = {args.repeats}, {wall:.0f} s")
    rows = {
        name: {"calibration_rmse_mean": round(float(np.mean(v)), 5), "calibration_rmse_sd": round(float(np.std(v)), 5)}
        for name, v in scores.items()
    }
    for name, row in rows.items():
        print(f"{name:36s} {1e3 * row['calibration_rmse_mean']:5.0f} ± {1e3 * row['calibration_rmse_sd']:3.0f} ×10⁻³")
    write_json(
        args.out,
        {
            "results": rows,
            "epsilon": args.epsilon,
            "sigma": RESEARCH_SIGMA[args.epsilon],
            "R": args.repeats,
            "K": args.draws,
            "scaling": args.scaling,
            "seed": args.seed,
            "seconds": round(wall, 1),
            "command": "python " + " ".join(sys.argv),
            "machine": machine(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
        },
    )
    print(f"wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
