"""The model's own prior on real data: calibration on UCI Adult with and without it (why calibration studies keep
the trace-centred prior; docs/results.md).

    python benchmarks/model_prior_adult.py [--runs 6] [--epsilon 0.1] [--out benchmarks/results/model_prior_adult.json]

R DPVI runs on Adult's 30 162 training rows (the adult-logistic research preset, research σ for ε), each fitted by
the exact route twice: `na.fit_batch(traces)` (φ*'s prior centred on the trace, what a calibration study uses) and
`na.fit_batch(traces, model=bm)` (the model's own prior: μ* ~ N(0, 1) from θ's prior, ρ* and the slopes from the
curvature of data the model simulates with its synthetic stand-in design), and, beside them, the model's prior with
the slopes' floor widened to 3 (how much of the difference is the slopes' prior). Printed and stored: the
calibration RMSE of the predictive probabilities on the 15 060 test rows (10 equal-count bins; mean and sd over the
runs, ×10⁻³). Seed 0.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import numpy as np
from _common import machine, write_json

import noiseaware as na
import noiseaware.inference.model_prior as model_prior
from noiseaware.evaluation.calibration import calibration_metrics, predictive_probabilities

RESEARCH_SIGMA = {0.1: 360.0, 0.3: 117.5, 1.0: 37.81}


def calibration_rmse(traces, data, **fit) -> list[float]:
    """The calibration RMSE of each trace's exact-route posterior predictive on the test rows."""
    posts = na.fit_batch(traces, "exact", key=0, checks="off", **fit)
    return [
        calibration_metrics(data.y_test, predictive_probabilities(np.asarray(post.sample(jax.random.key(r), 4000)),
                                                                  data.X_test)).calibration_rmse
        for r, post in enumerate(posts)
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "model_prior_adult.json")
    args = parser.parse_args()
    data, bm = na.datasets.adult(), na.models.get("adult-logistic")
    start = time.time()
    train = {"X": np.repeat(data.X_train[None], args.runs, 0), "y": np.repeat(data.y_train[None], args.runs, 0)}
    traces = na.record_dpvi_batch(
        bm.model, train, keys=jax.random.split(jax.random.key(0), args.runs),
        noise_multiplier=RESEARCH_SIGMA[args.epsilon], **bm.dpvi_settings,
    )  # fmt: skip
    print(f"{args.runs} DPVI runs: {time.time() - start:.0f} s")
    rows = {"trace prior": calibration_rmse(traces, data), "model prior": calibration_rmse(traces, data, model=bm)}
    model_prior.SLOPE_PRIOR_SD = 3.0
    rows["model prior, slopes' floor 3"] = calibration_rmse(traces, data, model=bm)
    results = {
        "epsilon": args.epsilon, "sigma": RESEARCH_SIGMA[args.epsilon], "runs": args.runs, "seed": 0,
        "calibration_rmse_e3": {k: [round(1e3 * float(np.mean(v)), 1), round(1e3 * float(np.std(v, ddof=1)), 1)]
                                for k, v in rows.items()},
        "command": f"python benchmarks/model_prior_adult.py --runs {args.runs} --epsilon {args.epsilon}",
        "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(),
    }  # fmt: skip
    for name, (mean, sd) in results["calibration_rmse_e3"].items():
        print(f"{name:32s} calibration RMSE {mean:6.1f} ± {sd:5.1f} ×10⁻³")
    write_json(args.out, results)


if __name__ == "__main__":
    main()
