"""Coverage of the VI optimum φ* under candidate priors, on traces drawn exactly from the gradient model.

    python benchmarks/prior_coverage.py [--traces 400] [--out benchmarks/results/prior_coverage.json]

Ornstein–Uhlenbeck traces G_t = q A (φ_t − φ*) + e_t, φ_{t+1} = φ_t − λ s ⊙ G_t with six coordinates of
different identifiability (A, s below; λ = 10⁻³, σ = 5, C = 2, q = 0.1), in three scenarios: T = 4000
and T = 10⁴ with DP noise only, and T = 4000 with extra noise of sd 3 added to every G_tj. For each
prior the exact route gives P(φ*_j ≤ truth | trace) without Monte Carlo error; the central 90 % and
50 % intervals cover the truth when that probability lies in (0.05, 0.95) or (0.25, 0.75).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _common import machine, merge_results, results_path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from ou import ou_traces  # noqa: E402

from noiseaware.inference.exact import GRID_DEFAULTS, exact_cdf, exact_grid  # noqa: E402
from noiseaware.inference.gradient_model import Prior, gradient_model  # noqa: E402

OPTIMUM = np.array([0.5, -1.0, -3.0, -2.0, 0.3, 1.0])
HESSIAN = np.array([40.0, 400.0, 20.0, 5.0, 2.0, 100.0])
SCALE = np.array([1.0, 1.0, 50.0, 50.0, 20.0, 5.0])
SCENARIOS = {"T4000": (4000, 0.0), "T10000": (10_000, 0.0), "T4000-extra3": (4000, 3.0)}
PRIORS = {
    "paper": "paper",
    "default": "default",
    "softplus-w1": Prior(hessian_link="softplus", hessian_width=1.0),
    "softplus-w2": Prior(hessian_link="softplus", hessian_width=2.0),
    "softplus-w5": Prior(hessian_link="softplus", hessian_width=5.0),
    "exp-w1": Prior(hessian_width=1.0),
    "exp-w3": Prior(hessian_width=3.0),
    "exp-w5": Prior(hessian_width=5.0),
    "default-u1": Prior(extra_noise_scale=1.0),
    "default-no-u": Prior(extra_noise="none"),
}


def coverage(traces, prior) -> dict:
    grid = jax.jit(functools.partial(exact_grid, **GRID_DEFAULTS))
    with jax.enable_x64(True):
        pits = np.array(
            [
                np.asarray(
                    exact_cdf(grid(jax.tree_util.tree_map(jnp.asarray, gradient_model(t, prior))), jnp.asarray(OPTIMUM))
                )
                for t in traces
            ]
        )
    result = {}
    for level in (0.9, 0.5):
        covered = (pits > 0.5 - level / 2) & (pits < 0.5 + level / 2)
        result[f"coverage_{level:g}"] = np.round(covered.mean(axis=0), 4).tolist()
        result[f"pooled_{level:g}"] = round(float(covered.mean()), 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "prior_coverage.json")
    args = parser.parse_args()
    command = f"python benchmarks/prior_coverage.py --traces {args.traces} --seed {args.seed}"
    results = {}
    for scenario, (steps, extra) in SCENARIOS.items():
        traces = ou_traces(
            args.traces, steps=steps, optimum=OPTIMUM, hessian=HESSIAN, scale=SCALE, extra=extra, seed=args.seed
        )
        print(f"{scenario}: {args.traces} traces; 90 % coverage per coordinate, pooled 90 % / 50 %")
        for name, prior in PRIORS.items():
            start = time.perf_counter()
            r = coverage(traces, prior)
            results[f"seed{args.seed}/{scenario}/{name}"] = r | {
                "scenario": scenario,
                "prior": name,
                "traces": args.traces,
                "steps": steps,
                "extra_noise_sd": extra,
                "optimum": OPTIMUM.tolist(),
                "hessian": HESSIAN.tolist(),
                "grad_scale": SCALE.tolist(),
                "seed": args.seed,
                "command": command,
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "machine": machine(),
                "seconds": round(time.perf_counter() - start, 1),
            }
            print(f"  {name:<14} {r['coverage_0.9']}  pooled {r['pooled_0.9']:.3f} / {r['pooled_0.5']:.3f}", flush=True)
    merge_results(args.out, results)
    print(f"wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
