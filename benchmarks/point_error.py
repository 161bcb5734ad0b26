"""Point estimates on M1–M3: OPS as an estimator against the Laplace mechanism on sufficient statistics (Foulds et al.
2016, seed 001), beside the non-private posterior mean.

    python benchmarks/point_error.py [--models m1,m2,m3 --epsilons 0.1,0.3,1.0 --simulations 500 --seed 0]

For each simulation θ ~ prior, x ~ p(x | θ) (N = 5 000), and each estimator, the error of its estimate of the
model's own parameter (λ for M1, p for M2, p₁ and p₂ for M3) against the truth; printed and stored per estimator as
the RMSE over simulations (per coordinate) with its bootstrap-free se (sd of squared errors / (2·RMSE·√M)):

    ops k=1          the one released OPS draw (ε for one draw: the truncated posterior tempered to ε)
    ops k=10 mean    the mean of k = 10 OPS draws at ε/10 each
    laplace-ssp      the posterior mean of bs2018-naive: the conjugate update of the Laplace-released Σ t(x)
    non-private      the exact posterior mean (no privacy), the floor every private estimator sits above
Results: benchmarks/results/point_error.json with the command, seed and machine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import numpy as np
from _common import machine, read_results, results_path, write_json

import noiseaware as na
from noiseaware.baselines.bernstein_sheldon import bs2018_naive_batch
from noiseaware.baselines.ops import OPSSettings, ops_batch

SAMPLES = 4000
"""Draws per posterior whose mean is its point estimate."""


def estimates(posteriors, key) -> np.ndarray:
    """Each posterior's mean of the model's parameters, (M, k): the constrained draws' average."""
    out = []
    for m, posterior in enumerate(posteriors):
        draws = posterior.constrained_sample(jax.random.fold_in(key, m), SAMPLES)
        out.append(np.concatenate([np.reshape(v, (SAMPLES, -1)) for v in draws.values()], axis=1).mean(axis=0))
    return free(np.asarray(out))


def free(values: np.ndarray) -> np.ndarray:
    """The free coordinates (M, k): a simplex's first two of three, anything else as it is."""
    return values[:, :2] if values.shape[1] == 3 else values


def nonprivate_mean(name: str, x: np.ndarray) -> np.ndarray:
    """The exact posterior mean of λ (M1: Gamma(8 + N, 2 + Σx)) or p (M2: Beta(10 + k, 10 + N − k); M3: Dirichlet(5 +
    counts), its first two coordinates), (M, k)."""
    n = x.shape[1]
    if name == "gamma-exponential":
        return ((8.0 + n) / (2.0 + x.sum(axis=1)))[:, None]
    if name == "beta-bernoulli":
        return ((10.0 + x.sum(axis=1)) / (20.0 + n))[:, None]
    counts = np.stack([(x == v).sum(axis=1) for v in range(3)], axis=1)
    return ((5.0 + counts) / (15.0 + n))[:, :2]


def truth_of(bm, theta: np.ndarray) -> np.ndarray:
    """The model's parameters (M, k) at the unconstrained truths θ (M, d) (M3: p₁, p₂ of the simplex)."""
    rows = []
    for row in theta:
        constrained = bm.site_map.constrain(row)
        rows.append(np.concatenate([np.ravel(v) for v in constrained.values()]))
    return free(np.asarray(rows))


def rmse(errors: np.ndarray) -> tuple[list[float], list[float]]:
    """RMSE per coordinate over simulations (M, k) and its se by the delta method."""
    squared = errors**2
    value = np.sqrt(squared.mean(axis=0))
    se = squared.std(axis=0, ddof=1) / (2 * value * np.sqrt(len(errors)))
    return [round(float(v), 6) for v in value], [round(float(s), 6) for s in se]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gamma-exponential,beta-bernoulli,dirichlet-categorical")
    parser.add_argument("--epsilons", default="0.1,0.3,1.0")
    parser.add_argument("--simulations", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "point_error.json")
    args = parser.parse_args()
    command = (
        f"python benchmarks/point_error.py --models {args.models} --epsilons {args.epsilons} "
        f"--simulations {args.simulations} --seed {args.seed} --out {args.out}"
    )
    results = read_results(args.out)
    for name in args.models.split(","):
        bm = na.models.get(name)
        key = jax.random.key(args.seed)
        theta, data = jax.vmap(bm.simulate)(jax.random.split(key, args.simulations))
        x, truth = np.asarray(data["x"]), truth_of(bm, np.asarray(theta))
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            start = time.perf_counter()
            keys = jax.random.split(jax.random.fold_in(key, int(epsilon * 1000)), args.simulations)
            one = ops_batch(bm.name, x, keys=keys, epsilon=epsilon, settings=OPSSettings(draws=1))
            ten = ops_batch(bm.name, x, keys=keys, epsilon=epsilon, settings=OPSSettings(draws=10))
            laplace = bs2018_naive_batch(bm.name, x, keys=keys, epsilon=epsilon, delta=None)
            rows = {
                "ops k=1": estimates(one, key),
                "ops k=10 mean": estimates(ten, key),
                "laplace-ssp": estimates(laplace, key),
                "non-private": nonprivate_mean(bm.name, x),
            }
            entry = {}
            print(f"\n{name}, ε = {epsilon:g}: RMSE of the estimate against the truth (± se), per parameter")
            for estimator, estimate in rows.items():
                value, se = rmse(estimate - truth)
                entry[estimator] = {"rmse": value, "se": se}
                shown = ", ".join(f"{v:.4g} ± {s:.2g}" for v, s in zip(value, se))
                print(f"  {estimator:14s} {shown}")
            entry |= {
                "M": args.simulations,
                "seed": args.seed,
                "seconds": round(time.perf_counter() - start, 1),
                "command": command,
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "machine": machine(),
            }
            results.setdefault(name, {})[f"{epsilon:g}"] = entry
            write_json(args.out, results)
    print(f"wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
