"""How calibrated is the variational family itself? TARP of the non-private VI posterior.

    python benchmarks/vi_family.py --models dirichlet-categorical,gamma-exponential,beta-bernoulli
    python benchmarks/vi_family.py --models dirichlet-categorical,linreg-10d --family full-rank
    python benchmarks/vi_family.py --models linreg-10d --family low-rank:2

NA-DPVI targets q(θ | φ*), the VI posterior at the non-private optimum φ*, and widens it by its
uncertainty about φ*. As ε grows that uncertainty vanishes, so NA-DPVI's coverage tends to that of
q(θ | φ*) itself, which is miscalibrated wherever the Gaussian family (mean-field by default, or --family
full-rank / low-rank:r) cannot represent the posterior. This script measures that limit: per simulation φ* is
the non-private VI optimum of `tuning.facts.simulation_facts` (annealed Adam on the full ELBO without
clipping, then Newton steps with moment-matched Monte Carlo draws), and q(θ | φ*) is scored by TARP with the
research reference rule. (Until issue 17 φ* was the average of a non-private DP-SGD run at the preset's ε = 1
step sizes and clipping; that average carries the preset's clipping bias, e.g. −0.3 posterior sds in M3's μ.)
Beside it, where a model has one, the exact conjugate posterior (its RMSE is the finite-M floor). Results:
benchmarks/results/vi_family.json, keyed by model (mean-field) or model/family.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _common import machine, read_results, results_path, write_json

import noiseaware as na
from noiseaware.evaluation import coverage_rmse, tarp_repeats
from noiseaware.evaluation.coverage import CoverageDesign
from noiseaware.models.builtin import GAMMA_PRIOR
from noiseaware.tuning.facts import simulate, simulation_facts
from noiseaware.util.defaults import field_default


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
    parser.add_argument("--simulations", type=int, default=field_default(CoverageDesign, "simulations"))
    parser.add_argument("--repeats", type=int, default=field_default(CoverageDesign, "references"))
    parser.add_argument("--draws", type=int, default=field_default(CoverageDesign, "samples"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", default="mean-field", help="mean-field, full-rank or low-rank:r")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "vi_family.json")
    args = parser.parse_args()
    command = (
        f"python benchmarks/vi_family.py --models {args.models} --simulations {args.simulations} "
        f"--repeats {args.repeats} --draws {args.draws} --seed {args.seed} --family {args.family}"
    )
    kind, _, rank = args.family.partition(":")
    family_settings = {"family": kind} | ({"rank": int(rank)} if rank else {})
    results = read_results(args.out)
    for name in args.models.split(","):
        start = time.perf_counter()
        bm = na.models.get(name)
        settings = dict(bm.dpvi_settings) | family_settings
        k_sim, k_draw, k_ref = jax.random.split(jax.random.key(args.seed), 3)
        truth, data = simulate(bm, args.simulations, k_sim)
        facts = simulation_facts(
            bm,
            truth,
            data,
            key=jax.random.fold_in(k_sim, 1),
            init=settings["init"],
            mc_draws=settings["mc_draws"],
            transforms=settings["transforms"],
            sites=settings["sites"],
            family=kind,
            rank=int(rank) if rank else None,
            progress=True,
        )
        family, phi = facts.variational_family, facts.optimum
        mu, sd = family.mean(phi), family.marginal_sd(phi)
        eps = np.asarray(jax.random.normal(k_draw, (args.simulations, args.draws, family.noise_dim)), np.float64)
        vi = family.sample(phi[:, None], eps)
        _, curves = tarp_repeats(k_ref, vi, truth, mu, 4 * sd, repeats=args.repeats)
        vi_rmse = np.atleast_1d(coverage_rmse(na.evaluation.LEVELS, curves.T))
        entry = {
            "vi_at_nonprivate_optimum": {
                "rmse_mean": round(float(vi_rmse.mean()), 4),
                "rmse_sd": round(float(vi_rmse.std(ddof=1)), 4),
                "ecp_mean": np.round(curves.mean(axis=0), 4).tolist(),
            }
        }
        exact = exact_posterior_draws(name, data, k_draw, args.draws)
        if exact is not None:
            centre, spread = exact.mean(axis=1), exact.std(axis=1)
            _, exact_curves = tarp_repeats(k_ref, exact, truth, centre, 4 * spread, repeats=args.repeats)
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
            "seed": args.seed,
            "family": family.name,
            "optimum": "simulation_facts: annealed Adam without clipping, then Newton steps (exact VI optimum)",
            "reference_rule": "research",
            "seconds": round(time.perf_counter() - start, 1),
            "command": command,
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": machine(),
        }
        results[name if kind == "mean-field" else f"{name}/{args.family}"] = entry
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
    print(f"wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
