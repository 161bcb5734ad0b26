"""Coverage of φ* by each inference route and prior, on traces drawn exactly from the gradient model.

    python benchmarks/route_coverage.py [--traces 200] [--seed 11] [--out benchmarks/results/route_coverage.json]

The four-coordinate Ornstein–Uhlenbeck traces of the test suite (tests/ou.py; T = 4000). For each trace
and coordinate, P(φ*_j ≤ truth | trace) comes from the route: exact (the grid's CDF, no Monte Carlo
error), Laplace (its Gaussian marginal; "paper" style: μ* marginal with u = 0, ρ* at the mode, so only
the μ coordinates have an interval), NUTS (vmapped blackjax, 500 warmup + 2000 draws; the rank of the
truth among the draws). The central 90 % / 50 % intervals cover the truth iff |P − ½| < level/2.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _common import machine, merge_results, results_path
from scipy import stats

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from ou import OPTIMUM, ou_traces  # noqa: E402

from noiseaware.inference.exact import GRID_DEFAULTS, exact_cdf, exact_grid  # noqa: E402
from noiseaware.inference.gradient_model import gradient_model  # noqa: E402
from noiseaware.inference.laplace import laplace_approximation  # noqa: E402
from noiseaware.inference.nuts import nuts_blackjax_draws  # noqa: E402

TRUTH = np.asarray(OPTIMUM)


def _exact(models, key):
    return jax.vmap(lambda m: exact_cdf(exact_grid(m, **GRID_DEFAULTS), jnp.asarray(TRUTH)))(models)


def _laplace(models, key):
    fit = jax.vmap(laplace_approximation)(models)
    return stats.norm.cdf((TRUTH - np.asarray(fit.mode[..., 0])) / np.sqrt(np.asarray(fit.covariance[..., 0, 0])))


def _laplace_paper_style(models, key):
    """u = 0 (the research Laplace never moved u), μ* marginal only; ρ* has no interval (NaN)."""
    pits = _laplace(dataclasses.replace(models, extra_noise="none"), key)
    return np.where(np.arange(TRUTH.size) < TRUTH.size // 2, pits, np.nan)


def _nuts(models, key):
    keys = jax.random.split(key, models.optimum_loc.shape[0])
    run = jax.vmap(lambda m, k: nuts_blackjax_draws(m, k, warmup=500, draws=2000))(models, keys)
    return np.mean(np.asarray(run.optimum)[:, 0] <= TRUTH, axis=1)


CASES = {
    "exact/default": (_exact, "default"),
    "exact/paper": (_exact, "paper"),
    "laplace-full/default": (_laplace, "default"),
    "laplace-full/paper": (_laplace, "paper"),
    "laplace-paper-style/paper": (_laplace_paper_style, "paper"),
    "nuts-blackjax/default": (_nuts, "default"),
}


def coverage(pits: np.ndarray) -> dict:
    result = {}
    for level in (0.9, 0.5):
        covered = np.abs(pits - 0.5) < level / 2
        has_interval = ~np.isnan(pits)
        result[f"coverage_{level:g}"] = [
            round(float(covered[has, j].mean()), 4) if has.any() else None for j, has in enumerate(has_interval.T)
        ]
        result[f"pooled_{level:g}"] = round(float(covered[has_interval].mean()), 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "route_coverage.json")
    args = parser.parse_args()
    command = f"python benchmarks/route_coverage.py --traces {args.traces} --seed {args.seed}"
    traces = ou_traces(args.traces, steps=4000, seed=args.seed)
    results = {}
    print(f"{args.traces} OU traces (seed {args.seed}): 90 % coverage per coordinate, pooled 90 % / 50 %")
    for name, (route, prior) in CASES.items():
        start = time.perf_counter()
        with jax.enable_x64(True):
            models = [jax.tree_util.tree_map(jnp.asarray, gradient_model(t, prior)) for t in traces]
            stacked = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *models)
            pits = np.asarray(route(stacked, jax.random.key(args.seed)))
        r = coverage(pits)
        results[f"seed{args.seed}/{name}"] = r | {
            "route": name.split("/")[0],
            "prior": prior,
            "traces": args.traces,
            "steps": 4000,
            "seed": args.seed,
            "truth": TRUTH.tolist(),
            "command": command,
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": machine(),
            "seconds": round(time.perf_counter() - start, 1),
        }
        print(f"  {name:<26} {r['coverage_0.9']}  pooled {r['pooled_0.9']:.3f} / {r['pooled_0.5']:.3f}", flush=True)
    merge_results(args.out, results)
    print(f"wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
