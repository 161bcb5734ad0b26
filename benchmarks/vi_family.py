"""How calibrated is the variational family itself? TARP of the non-private mean-field VI posterior.

    python benchmarks/vi_family.py --models dirichlet-categorical,gamma-exponential,beta-bernoulli

NA-DPVI targets q(θ | φ*), the VI posterior at the non-private optimum φ*, and widens it by its
uncertainty about φ*. As ε grows that uncertainty vanishes, so NA-DPVI's coverage tends to that of
q(θ | φ*) itself, which is miscalibrated wherever the mean-field Gaussian family cannot represent the
posterior. This script measures that limit: per simulation φ* is estimated by a non-private run
(σ = 0) at the ε = 1 learning rate of the research preset, averaged over the post-burn-in iterates (the
averaging removes the subsampling and Monte Carlo noise), and q(θ | φ*) is scored by TARP with the
research reference rule. Beside it, where a model has one, the exact conjugate posterior (its RMSE is the
finite-M floor). Results: benchmarks/results/vi_family.json.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _common import machine, read_results, write_json

import noiseaware as na
from noiseaware.evaluation import coverage_rmse, simulate_traces, tarp_repeats
from noiseaware.models.builtin import GAMMA_PRIOR
from noiseaware.recording.dpvi import build_recorder

RESEARCH_SIGMA_EPS1 = 37.81


def exact_posterior_draws(name: str, data, key, draws: int) -> np.ndarray | None:
    """Draws (M, K, d) of θ from the exact conjugate posterior of M1–M3 (None for other models)."""
    x = np.asarray(data["x"])
    keys = jax.random.split(key, x.shape[0])
    if name == "gamma-exponential":
        shape, rate = GAMMA_PRIOR[0] + x.shape[1], GAMMA_PRIOR[1] + x.sum(axis=1)
        lam = np.asarray(jax.vmap(lambda k, a: jax.random.gamma(k, a, (draws,)))(keys, jnp.full(x.shape[0], shape)))
        lam = lam / rate[:, None]
        return (lam + np.log(-np.expm1(-lam)))[..., None]
    if name == "beta-bernoulli":
        heads = x.sum(axis=1)
        p = np.asarray(
            jax.vmap(lambda k, a, b: jax.random.beta(k, a, b, (draws,)))(keys, 10.0 + heads, 10.0 + x.shape[1] - heads)
        )
        return np.log(p / (1 - p))[..., None]
    if name == "dirichlet-categorical":
        counts = np.stack([(x == j).sum(axis=1) for j in range(3)], axis=1)
        p = np.asarray(jax.vmap(lambda k, a: jax.random.dirichlet(k, a, (draws,)))(keys, jnp.asarray(5.0 + counts)))
        return np.log(p[..., :2]) - np.log(p[..., 2:])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="dirichlet-categorical,gamma-exponential,beta-bernoulli")
    parser.add_argument("--simulations", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--draws", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "vi_family.json")
    args = parser.parse_args()
    command = (
        f"python benchmarks/vi_family.py --models {args.models} --simulations {args.simulations} "
        f"--repeats {args.repeats} --draws {args.draws} --seed {args.seed}"
    )
    results = read_results(args.out)
    for name in args.models.split(","):
        start = time.perf_counter()
        bm = na.models.get(name)
        settings = dict(bm.dpvi_settings)
        k_sim, k_draw, k_ref = jax.random.split(jax.random.key(args.seed), 3)
        # the ε = 1 research learning rate, then a non-private run with it
        first = jax.tree.map(lambda a: a[0], jax.vmap(bm.simulate)(jax.random.split(k_sim, 1))[1])
        lr = build_recorder(
            bm.model, first, noise_multiplier=RESEARCH_SIGMA_EPS1, delta=1e-5, **settings
        ).settings.learning_rate
        settings.pop("lr_multiplier")
        sims = simulate_traces(
            bm,
            noise_multiplier=None,
            delta=1e-5,
            simulations=args.simulations,
            key=k_sim,
            non_private=True,
            learning_rate=lr,
            progress=True,
            **settings,
        )
        d = bm.dim
        phi = np.stack([t.params[math.floor(0.2 * t.steps) :].mean(axis=0) for t in sims.traces])
        mu, sd = phi[:, :d], np.logaddexp(0.0, phi[:, d:])
        eps = np.asarray(jax.random.normal(k_draw, (args.simulations, args.draws, d)))
        vi = mu[:, None] + sd[:, None] * eps
        _, curves = tarp_repeats(k_ref, vi, sims.truth, mu, 4 * sd, repeats=args.repeats)
        vi_rmse = np.atleast_1d(coverage_rmse(na.evaluation.LEVELS, curves.T))
        entry = {
            "vi_at_nonprivate_optimum": {
                "rmse_mean": round(float(vi_rmse.mean()), 4),
                "rmse_sd": round(float(vi_rmse.std(ddof=1)), 4),
                "ecp_mean": np.round(curves.mean(axis=0), 4).tolist(),
            }
        }
        exact = exact_posterior_draws(name, sims.batch.data, k_draw, args.draws)
        if exact is not None:
            centre, spread = exact.mean(axis=1), exact.std(axis=1)
            _, exact_curves = tarp_repeats(k_ref, exact, sims.truth, centre, 4 * spread, repeats=args.repeats)
            exact_rmse = np.atleast_1d(coverage_rmse(na.evaluation.LEVELS, exact_curves.T))
            entry["exact_posterior"] = {
                "rmse_mean": round(float(exact_rmse.mean()), 4),
                "rmse_sd": round(float(exact_rmse.std(ddof=1)), 4),
            }
            entry["vi_sd_over_exact_sd_median"] = np.round(np.median(sd / spread, axis=0), 4).tolist()
        entry |= {
            "M": args.simulations,
            "R": args.repeats,
            "K": args.draws,
            "T": settings["steps"],
            "seed": args.seed,
            "learning_rate": "research κ rule at σ = 37.81 (ε = 1)",
            "reference_rule": "research",
            "seconds": round(time.perf_counter() - start, 1),
            "command": command,
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": machine(),
        }
        results[name] = entry
        print(
            name,
            {
                k: v
                for k, v in entry.items()
                if k in ("vi_at_nonprivate_optimum", "exact_posterior", "vi_sd_over_exact_sd_median")
            },
            flush=True,
        )
        write_json(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
