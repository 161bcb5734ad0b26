"""The slope's feedback bias: how far the least-squares slope of G on φ lies from the truth when the kept trace spans
few relaxation times.

    python benchmarks/feedback_bias.py [--steps 3200 --replicates 4000 --seed 0]

Every row of the gradient model is a regression G_t = b (φ_t − φ*) + e_t, e_t ~ N(0, v), on a regressor the noise
feeds back into: plain SGD steps φ_{t+1} = φ_t − λ G_t, so φ_t is an AR(1) with relaxation κ = λb per step. The
gradient model fits the row with a free intercept (φ* unknown), which is the autoregression whose least-squares
coefficient is biased towards a unit root (Kendall 1954: E ρ̂ − ρ ≈ −(1 + 3ρ)/n), so b̂ = (1 − ρ̂)/λ is biased upward,
by about 4/(nκ) in the mean. Simulated here from the stationary law, for n = `--steps` kept steps and n·κ relaxation
times: the median and mean of b̂/b, Kendall's 1 + 4/(nκ), and E[Σ_t e_t (φ_t − φ̄)]·b/v, the term that the centring on
φ̄ adds to the cross sum (≈ 1 − 1/(nκ)). λ and v drop out (b̂/b depends on nκ and n only).
Results: benchmarks/results/feedback_bias.json with the command, seed and machine.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
from _common import provenance, results_path, write_json

RELAXATIONS = (3.0, 6.4, 10.0, 30.0, 100.0)


def slopes(relaxations: float, steps: int, replicates: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """b̂/b (replicates,) of the row's least-squares fit with an intercept, and Σ_t e_t (φ_t − φ̄)·b/v (replicates,),
    for traces of `steps` kept steps spanning `relaxations` = n·κ relaxation times (λ = v = 1)."""
    kappa = relaxations / steps
    noise = rng.standard_normal((replicates, steps))
    phi = np.empty((replicates, steps))
    x = rng.standard_normal(replicates) / np.sqrt(kappa * (2.0 - kappa))  # the stationary law, λ²v/(κ(2 − κ))
    for t in range(steps):
        phi[:, t] = x
        x = x - (kappa * x + noise[:, t])
    centred = phi - phi.mean(axis=1, keepdims=True)
    grads = kappa * phi + noise
    slope = np.sum(grads * centred, axis=1) / np.sum(centred**2, axis=1)
    return slope / kappa, np.sum(noise * centred, axis=1) * kappa


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3200)
    parser.add_argument("--replicates", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "feedback_bias.json")
    args = parser.parse_args()
    command = (
        f"python benchmarks/feedback_bias.py --steps {args.steps} --replicates {args.replicates} --seed {args.seed} "
        f"--out {os.path.relpath(args.out)}"
    )
    rng = np.random.default_rng(args.seed)
    rows = []
    print(f"{args.replicates} stationary traces of n = {args.steps} kept steps per row")
    print(f"{'n·κ':>6} {'median b̂/b':>11} {'mean b̂/b':>10} {'1 + 4/(nκ)':>11} {'E Σ e(φ − φ̄)·b/v':>18}")
    for relaxations in RELAXATIONS:
        ratio, cross = slopes(relaxations, args.steps, args.replicates, rng)
        row = {
            "relaxations": relaxations,
            "median_ratio": round(float(np.median(ratio)), 3),
            "mean_ratio": round(float(np.mean(ratio)), 3),
            "kendall": round(1.0 + 4.0 / relaxations, 3),
            "centring_term": round(float(np.mean(cross)), 3),
        }
        rows.append(row)
        print(
            f"{relaxations:6g} {row['median_ratio']:11.3f} {row['mean_ratio']:10.3f} {row['kendall']:11.3f} "
            f"{row['centring_term']:18.3f}"
        )
    print("n·κ: relaxation times the kept trace spans (na.diagnose reports n·κ⁺ per coordinate); b̂/b: the")
    print("least-squares slope over the true one; 1 + 4/(nκ): Kendall's approximation of its mean")
    write_json(args.out, {"rows": rows, "steps": args.steps, "replicates": args.replicates, "seed": args.seed}
               | provenance(command))  # fmt: skip
    print(f"wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
