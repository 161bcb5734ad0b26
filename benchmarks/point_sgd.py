"""Error bars for a plain DP-SGD run (a point estimate, no VI): coverage and width of each method on the same traces.

    python benchmarks/point_sgd.py [--simulations 200] [--epsilons 0.3,1,3] [--dims 5] [--kappa 0.01]

A logistic regression with known θ₀ (d coefficients drawn N(0, 0.5²) with seed 0; features 0 and 1 correlated 0.7;
N = 2 000; prior N(0, 5²) per coefficient), written as a numpyro model and run by `na.record_dpvi(...,
family="point")`: DP-SGD on the negative log joint with Poisson batches (q = 0.05), per-example clipping at C = 2
(the gradients' norms stay below it: clipping is inactive), σ from the accountant for ε at δ = 10⁻⁵ over T = 4 000
steps, plain SGD with step size κ/(q λ_max(H)), κ the fastest coordinate's relaxation per step, from θ = 0. Each
data set is drawn with its own key (simulation m: key m), its run with key 10⁶ + m, its fit with key 2·10⁶ + m.
Rows, per coordinate, central 90 % intervals:

* `laplace`: `na.fit(trace)`, the noise-aware Laplace posterior, against θ₀; `laplace_hat`: its draws of θ̂ alone
  (`post.optimum_interval`), the DP noise's share, against the non-private MAP θ̂ of the same data;
* `sandwich`: `na.fit(trace, method="sandwich")`, against θ₀;
* `random_scaling`: `na.fit(trace, method="random-scaling")` (the iterates alone), against θ̂;
* `naive`: the last iterate ± 1.645 sd of the non-private Hessian at it (what a user with the data and no DP
  correction would report), against θ̂;
* `nonprivate`: the non-private MAP ± 1.645 sd of its Laplace approximation, against θ₀ (the target width).

Stored per (d, ε, κ): each row's coverage and median width per coordinate, the fits that failed, σ and the seconds.
Resumable: a case already in the results file is skipped unless `--again`.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from _common import merge_results, provenance, read_results, results_path
from scipy import optimize, stats

import noiseaware as na

RESULTS = Path(__file__).parent / "results" / "point_sgd.json"
N, Q, T, CLIP, PRIOR_SD, DELTA = 2000, 0.05, 4000, 2.0, 5.0, 1e-5
Z90 = stats.norm.ppf(0.95)
RUN = {"family": "point", "steps": T, "sampling_rate": Q, "clip": CLIP, "mc_draws": 1, "init": 0.0}
"""The DP-SGD run's settings besides ε and the step size."""
ROWS = ("laplace", "laplace_hat", "sandwich", "random_scaling", "naive", "nonprivate")


def logistic(X, y=None):
    """θ ~ N(0, 5² I); y_i ~ Bernoulli(sigmoid(X_i·θ))."""
    theta = numpyro.sample("theta", dist.Normal(0.0, PRIOR_SD).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=X @ theta), obs=y)


def design(theta0, rng):
    d = theta0.size
    X = rng.normal(size=(N, d))
    X[:, 1] = 0.7 * X[:, 0] + 0.7 * X[:, 1]
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1) / (0.9 * CLIP))[:, None]  # |g_i| ≤ |x_i| < C: no clipping
    y = (rng.uniform(size=N) < 1.0 / (1.0 + np.exp(-X @ theta0))).astype(np.float64)
    return X, y


def hessian(X, theta):
    p = 1.0 / (1.0 + np.exp(-X @ theta))
    return (X * (p * (1 - p))[:, None]).T @ X + np.eye(X.shape[1]) / PRIOR_SD**2


def map_fit(X, y):
    def loss(t):
        return -(y * (X @ t) - np.logaddexp(0.0, X @ t)).sum() + t @ t / (2 * PRIOR_SD**2)

    def grad(t):
        return X.T @ (1.0 / (1.0 + np.exp(-X @ t)) - y) + t / PRIOR_SD**2

    return optimize.minimize(loss, np.zeros(X.shape[1]), jac=grad, method="L-BFGS-B").x


def interval_row(low, high, target):
    return (low < target) & (target < high), high - low


def one_simulation(m, theta0, epsilon, kappa):
    rng, d = np.random.default_rng(m), theta0.size
    X, y = design(theta0, rng)
    hat = map_fit(X, y)
    H = hessian(X, hat)
    rate = kappa / (Q * np.linalg.eigvalsh(H).max())
    data = {"X": jnp.asarray(X), "y": jnp.asarray(y)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = na.record_dpvi(logistic, data, key=10**6 + m, epsilon=epsilon, delta=DELTA, learning_rate=rate, **RUN)
        out, failed = {}, []
        for row, method, target in (
            ("laplace", "exact", theta0),
            ("sandwich", "sandwich", theta0),
            ("random_scaling", "random-scaling", hat),
        ):
            try:
                post = na.fit(trace, method=method, key=2 * 10**6 + m, checks="off", progress=False)
            except na.FitFailure as failure:
                failed.append(f"{row}: {failure.reason}")
                continue
            low, high = post.interval(0.9)
            out[row] = interval_row(low, high, target)
            if row == "laplace":  # the components' means θ̂_k alone: the DP noise's share, of the MAP
                low, high = post.optimum_interval(0.9)
                out["laplace_hat"] = interval_row(low[:d], high[:d], hat)
    last = np.asarray(trace.params[-1], np.float64)
    sd_last = np.sqrt(np.diag(np.linalg.inv(hessian(X, last))))
    out["naive"] = interval_row(last - Z90 * sd_last, last + Z90 * sd_last, hat)
    sd = np.sqrt(np.diag(np.linalg.inv(H)))
    out["nonprivate"] = interval_row(hat - Z90 * sd, hat + Z90 * sd, theta0)
    return out, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=200)
    parser.add_argument("--epsilons", default="0.3,1,3")
    parser.add_argument("--dims", default="5")
    parser.add_argument("--kappa", type=float, default=0.01)
    parser.add_argument("--again", action="store_true", help="rerun cases already in the results file")
    args = parser.parse_args()
    stored = read_results(results_path(RESULTS)).get("results", {})
    for d in map(int, args.dims.split(",")):
        theta0 = np.random.default_rng(0).normal(0.0, 0.5, d)
        for epsilon in map(float, args.epsilons.split(",")):
            name = f"d{d}-eps{epsilon:g}-kappa{args.kappa:g}-M{args.simulations}"
            if name in stored and not args.again:
                print(f"{name}: stored (--again reruns it)")
                continue
            start = time.time()
            runs, failures = [], []
            for m in range(args.simulations):
                out, failed = one_simulation(m, theta0, epsilon, args.kappa)
                runs.append(out)
                failures += failed
                if (m + 1) % 20 == 0:
                    print(f"d = {d}, ε = {epsilon:g}: {m + 1} of {args.simulations} ({time.time() - start:.0f} s)")
            cell = {
                "d": d,
                "epsilon": epsilon,
                "kappa": args.kappa,
                "noise_multiplier": na.noise_multiplier(epsilon, DELTA, Q, T),
                "simulations": args.simulations,
                "failed": failures,
                "seconds": round(time.time() - start, 1),
            }
            print(f"{name}: σ = {cell['noise_multiplier']:.3g}, {len(failures)} failed fits")
            for row in ROWS:
                done = [r[row] for r in runs if row in r]
                covered = np.mean([c for c, _ in done], axis=0)
                width = np.median([w for _, w in done], axis=0)
                cell[row] = {"coverage": covered.round(3).tolist(), "median_width": width.round(4).tolist()}
                print(f"  {row:>15}: 90 % coverage {np.round(covered, 2)}  median width {np.round(width, 3)}")
            command = (
                f"python benchmarks/point_sgd.py --simulations {args.simulations} --epsilons {epsilon:g} --dims {d} "
                f"--kappa {args.kappa:g}"
            )
            merge_results(RESULTS, {name: cell | provenance(command)})


if __name__ == "__main__":
    main()
