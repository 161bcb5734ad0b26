"""A prototype for plain DP-SGD runs (a point estimate, no VI): can the gradient regression give honest intervals?

    python benchmarks/point_sgd.py [--simulations 200] [--epsilons 0.3,1,3] [--dims 5] [--kappa 0.01]

A logistic regression with known θ₀ (d coefficients, two of them on correlated features, N = 2 000, prior
N(0, 5²) per coefficient), fitted by DP-SGD that releases (θ_t, G_t): Poisson batches (q = 0.05), per-example
clipping at C = 2, G_t = Σ_batch clip(g_i) + N(0, σ²C²) + q·θ_t/25 (so E G_t = q ∇L(θ_t)), σ from noiseaware's
accountant for ε at δ = 10⁻⁵ over T = 4 000 steps, step size κ/(q λ_max(H)) (κ: the fastest coordinate's
relaxation per step). From the trace alone, after a burn-in of T/5: the multivariate least-squares regression
G_t − Ḡ = B (θ_t − θ̄) + e_t, its estimate θ̂ = θ̄ − B⁻¹Ḡ and Λ = B/q, and K = 2 000 draws of (B, Ḡ) from their
sampling distributions (e with the residual covariance S). Rows, per coordinate, 90 % intervals:

* `dp_hat`: the draws of θ̂ alone, against the non-private MAP θ̂ of the same data (the DP noise's share);
* `laplace`: the noise-aware Laplace posterior θ ~ N(θ̂_k, Λ_k⁻¹) over the draws, against θ₀;
* `sandwich`: N(θ̂_k, Λ_k⁻¹ V Λ_k⁻¹) with V = (S − σ²C² I)/(q(1 − q)), the subsampling variance read off the
  residuals beyond the DP noise, against θ₀;
* `nonprivate`: MAP ± 1.645 sd of the non-private Laplace approximation, against θ₀;
* `naive`: the last iterate ± 1.645 sd of the non-private Hessian at it, against θ̂;
* `random_scaling`: the kept iterates' mean ± t·(batch-means standard error, 20 batches), against θ̂.

Stored per (d, ε, κ): each row's coverage per coordinate and median width per coordinate, the share of runs with no
positive-definite draw of Λ (a failure), σ, and the seconds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from _common import merge_results, provenance
from scipy import optimize, stats

import noiseaware as na

RESULTS = Path(__file__).parent / "results" / "point_sgd.json"
N, Q, T, CLIP, PRIOR_SD, DRAWS, BATCHES = 2000, 0.05, 4000, 2.0, 5.0, 2000, 20
Z90 = stats.norm.ppf(0.95)
ROWS = ("dp_hat", "laplace", "sandwich", "nonprivate", "naive", "random_scaling")


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def map_fit(X, y):
    """The non-private MAP and the Hessian of the negative log posterior there."""
    d = X.shape[1]

    def loss(t):
        return -(y * (X @ t) - np.logaddexp(0.0, X @ t)).sum() + t @ t / (2 * PRIOR_SD**2)

    def grad(t):
        return X.T @ (sigmoid(X @ t) - y) + t / PRIOR_SD**2

    theta = optimize.minimize(loss, np.zeros(d), jac=grad, method="L-BFGS-B").x
    return theta, hessian(X, theta)


def hessian(X, theta):
    p = sigmoid(X @ theta)
    return (X * (p * (1 - p))[:, None]).T @ X + np.eye(X.shape[1]) / PRIOR_SD**2


def dp_sgd(X, y, sigma, rate, rng):
    """The released (θ_t, G_t), (T, d) each."""
    d = X.shape[1]
    theta, params, grads = np.zeros(d), np.empty((T, d)), np.empty((T, d))
    for t in range(T):
        batch = rng.uniform(size=N) < Q
        g = (sigmoid(X[batch] @ theta) - y[batch])[:, None] * X[batch]
        g = g / np.maximum(1.0, np.linalg.norm(g, axis=1) / CLIP)[:, None]
        params[t], grads[t] = theta, g.sum(0) + rng.normal(0.0, sigma * CLIP, d) + Q * theta / PRIOR_SD**2
        theta = theta - rate * grads[t]
    return params, grads


def quantiles(draws):
    return np.quantile(draws, [0.05, 0.95], axis=0)


def one_run(theta0, sigma, kappa, rng) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """Each row's (covered (d,), width (d,)) on one simulated data set and run; None where no draw of Λ is
    positive definite."""
    d = theta0.size
    X = rng.normal(size=(N, d))
    X[:, 1] = 0.7 * X[:, 0] + 0.7 * X[:, 1]
    y = (rng.uniform(size=N) < sigmoid(X @ theta0)).astype(float)
    hat, H = map_fit(X, y)
    params, grads = dp_sgd(X, y, sigma, kappa / (Q * np.linalg.eigvalsh(H).max()), rng)
    p, g = params[T // 5 :], grads[T // 5 :]
    n, mean_p, mean_g = len(p), p.mean(0), g.mean(0)
    x = p - mean_p
    sxx = x.T @ x
    B = np.linalg.solve(sxx, x.T @ (g - mean_g)).T
    resid = g - mean_g - x @ B.T
    S = resid.T @ resid / (n - d - 1)
    root_s, root_x = np.linalg.cholesky(S), np.linalg.cholesky(np.linalg.inv(sxx))
    gk = mean_g + rng.normal(size=(DRAWS, d)) @ root_s.T / np.sqrt(n)
    Bk = B + np.einsum("ij,kjl,ml->kim", root_s, rng.normal(size=(DRAWS, d, d)), root_x)
    hat_k = mean_p - np.linalg.solve(Bk, gk[..., None])[..., 0]
    lam = 0.5 * (Bk + np.transpose(Bk, (0, 2, 1))) / Q
    ok = np.all(np.linalg.eigvalsh(lam) > 0, axis=1)
    if not ok.any():
        return None
    cov = np.linalg.inv(lam[ok])
    out = {}

    def interval(name, low, high, target):
        out[name] = ((low < target) & (target < high), high - low)

    interval("dp_hat", *quantiles(hat_k), hat)
    noise = rng.normal(size=(int(ok.sum()), d))
    interval("laplace", *quantiles(hat_k[ok] + np.einsum("kij,kj->ki", np.linalg.cholesky(cov), noise)), theta0)
    V = (S - (sigma * CLIP) ** 2 * np.eye(d)) / (Q * (1 - Q))
    values, vectors = np.linalg.eigh(np.einsum("kij,jl,klm->kim", cov, V, cov))
    root = vectors * np.sqrt(np.maximum(values, 0.0))[:, None, :]
    interval("sandwich", *quantiles(hat_k[ok] + np.einsum("kij,kj->ki", root, noise)), theta0)
    sd = np.sqrt(np.diag(np.linalg.inv(H)))
    interval("nonprivate", hat - Z90 * sd, hat + Z90 * sd, theta0)
    last = params[-1]
    sd_last = np.sqrt(np.diag(np.linalg.inv(hessian(X, last))))
    interval("naive", last - Z90 * sd_last, last + Z90 * sd_last, hat)
    means = p[: n - n % BATCHES].reshape(BATCHES, -1, d).mean(1)
    half = stats.t.ppf(0.95, BATCHES - 1) * means.std(0, ddof=1) / np.sqrt(BATCHES)
    interval("random_scaling", mean_p - half, mean_p + half, hat)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=200)
    parser.add_argument("--epsilons", default="0.3,1,3")
    parser.add_argument("--dims", default="5")
    parser.add_argument("--kappa", type=float, default=0.01)
    args = parser.parse_args()
    for d in map(int, args.dims.split(",")):
        theta0 = np.random.default_rng(0).normal(0.0, 0.5, d)
        for epsilon in map(float, args.epsilons.split(",")):
            start, rng = time.time(), np.random.default_rng(1)
            sigma = na.noise_multiplier(epsilon, 1e-5, Q, T)
            runs = []
            for m in range(args.simulations):
                runs.append(one_run(theta0, sigma, args.kappa, rng))
                if (m + 1) % 50 == 0:
                    print(f"d = {d}, ε = {epsilon:g}: {m + 1} of {args.simulations} runs", flush=True)
            done = [r for r in runs if r is not None]
            cell = {
                "d": d,
                "epsilon": epsilon,
                "kappa": args.kappa,
                "noise_multiplier": sigma,
                "simulations": args.simulations,
                "failed": len(runs) - len(done),
                "seconds": round(time.time() - start, 1),
            }
            print(f"d = {d}, ε = {epsilon:g}, σ = {sigma:.3g}, κ = {args.kappa:g}: {len(done)} of {len(runs)} fitted")
            for row in ROWS if done else ():
                covered = np.mean([r[row][0] for r in done], axis=0)
                width = np.median([r[row][1] for r in done], axis=0)
                cell[row] = {"coverage": covered.round(3).tolist(), "median_width": width.round(4).tolist()}
                print(f"  {row:>15}: 90 % coverage {np.round(covered, 2)}  median width {np.round(width, 3)}")
            command = (
                f"python benchmarks/point_sgd.py --simulations {args.simulations} --epsilons {epsilon:g} --dims {d} "
                f"--kappa {args.kappa:g}"
            )
            merge_results(RESULTS, {f"d{d}-eps{epsilon:g}-kappa{args.kappa:g}": cell | provenance(command)})


if __name__ == "__main__":
    main()
