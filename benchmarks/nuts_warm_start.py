"""NUTS from the exact start against the cold start: time per posterior, mixing, and agreement with exact.

    python benchmarks/nuts_warm_start.py [--models linreg-10d,gamma-exponential] [--traces 50] [--repeats 2]
        [--configs warm,cold] [--out benchmarks/results/nuts_warm_start.json]

Traces: `--traces` simulations per model, recorded with the research presets at the research σ for ε = 1
(37.81), T = 10⁴ (not timed). Each configuration fits them with `na.fit_batch(traces, "nuts", ...)` (blackjax,
vmapped, chunks of 50) once to compile and `repeats` more times with other keys: the time per posterior is the
fastest repeat over the number of traces (the machine is shared, and the minimum is the least noisy estimate;
the median is recorded too). Mixing: the largest R-hat and the smallest bulk ESS over traces and sites, the
median over traces of each trace's smallest ESS, the divergent transitions, and the mean leapfrog steps per draw.
Agreement with the exact route (its repair off, so both fit the same model; its moments carry no Monte Carlo
error): per trace and coordinate, z = (NUTS − exact) / MCSE for φ*'s mean (MCSE sd/sqrt(bulk ESS)) and sd
(ArviZ's MCSE); where NUTS samples the posterior the z are ≈ N(0, 1), so their rms is ≈ 1.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from _common import chosen, machine, merge_results, results_path
from arviz_stats.base import array_stats

import noiseaware as na

RESEARCH_SIGMA_EPS1 = 37.81
CONFIGS = {
    "warm": {},
    "cold": {"start": "prior"},
}
"""The nuts route's default (the exact start and its warm-up) and the cold start (the prior means, 1000 steps of
window adaptation: the route's default before the warm start)."""


def _traces(model: str, runs: int, seed: int) -> list:
    bm = na.models.get(model)
    _, data = jax.vmap(bm.simulate)(jax.random.split(jax.random.key(seed), runs))
    keys = jax.random.split(jax.random.key(seed + 1), runs)
    return na.record_dpvi_batch(bm.model, data, keys=keys, noise_multiplier=RESEARCH_SIGMA_EPS1, **bm.dpvi_settings)


def _agreement(posteriors: list, exact: list) -> dict:
    """rms and largest |z| of NUTS's φ* means and sds against exact's, over traces and coordinates."""
    z_mean, z_sd = [], []
    for nuts, reference in zip(posteriors, exact):
        draws = nuts.optimum_chains
        mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
        ess = nuts.diagnostics["ess_bulk"]["optimum"]
        z_mean.append((mean - reference.diagnostics["optimum_mean"]) / (sd / np.sqrt(ess)))
        error = array_stats.mcse(draws, chain_axis=0, draw_axis=1, method="sd")
        z_sd.append((sd - reference.diagnostics["optimum_sd"]) / error)
    z_mean, z_sd = np.concatenate(z_mean), np.concatenate(z_sd)
    return {
        "z_mean_rms": round(float(np.sqrt(np.mean(z_mean**2))), 3),
        "z_mean_max": round(float(np.max(np.abs(z_mean))), 3),
        "z_sd_rms": round(float(np.sqrt(np.mean(z_sd**2))), 3),
        "z_sd_max": round(float(np.max(np.abs(z_sd))), 3),
    }


def _mixing(posteriors: list) -> dict:
    diagnostics = [p.diagnostics for p in posteriors]
    return {
        "max_rhat": round(max(d["max_rhat"] for d in diagnostics), 4),
        "min_ess": round(min(d["min_ess"] for d in diagnostics), 1),
        "median_min_ess": round(float(np.median([d["min_ess"] for d in diagnostics])), 1),
        "divergences": int(sum(d["divergences"] for d in diagnostics)),
        "traces_with_divergences": int(sum(d["divergences"] > 0 for d in diagnostics)),
        "leapfrogs_per_draw": round(float(np.mean([np.mean(d["leapfrogs"]) for d in diagnostics])), 2),
        "step_size_median": round(float(np.median([np.mean(d["step_size"]) for d in diagnostics])), 4),
        "warmup": diagnostics[0]["warmup"],
        "cold_coordinates": int(sum(d["cold_coordinates"] for d in diagnostics)),
    }


def run_config(traces: list, exact: list, options: dict, seed: int, repeats: int) -> dict:
    def call(key):
        return na.fit_batch(traces, "nuts", key=key, **options)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        call(seed)
        first = time.perf_counter() - start
        times = []
        for i in range(repeats):
            start = time.perf_counter()
            posteriors = call(seed + 1 + i)
            times.append(time.perf_counter() - start)
    count = len(traces)
    return {
        "options": options,
        "s_per_posterior": round(min(times) / count, 4),
        "s_per_posterior_median": round(float(np.median(times)) / count, 4),
        "compile_s": round(max(first - float(np.median(times)), 0.0), 1),
        "repeats": repeats,
        **_mixing(posteriors),
        **_agreement(posteriors, exact),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="linreg-10d,gamma-exponential")
    parser.add_argument("--traces", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per configuration after the first")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {','.join(CONFIGS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "nuts_warm_start.json")
    args = parser.parse_args()
    configs = chosen(parser, args.configs, CONFIGS, "configs")
    command = (
        f"python benchmarks/nuts_warm_start.py --models {args.models} --traces {args.traces} "
        f"--repeats {args.repeats} --configs {args.configs} --seed {args.seed}"
    )
    header = f"{'model':<18} {'config':<5} {'s/post':>7} {'leapfrogs':>9} {'max R-hat':>9} {'min ESS':>8} {'div':>4}"
    print(header + f" {'z mean rms':>10} {'z sd rms':>8}")
    for model in args.models.split(","):
        traces = _traces(model, args.traces, args.seed)
        exact = na.fit_batch(traces, "exact", key=args.seed, repair=False)
        for config in configs:
            r = run_config(traces, exact, CONFIGS[config], args.seed, args.repeats)
            r |= {
                "model": model,
                "traces": args.traces,
                "n_params": traces[0].n_params,
                "steps": traces[0].steps,
                "noise_multiplier": RESEARCH_SIGMA_EPS1,
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "command": command,
                "machine": machine(),
            }
            print(
                f"{model:<18} {config:<5} {r['s_per_posterior']:>7.3f} {r['leapfrogs_per_draw']:>9.1f} "
                f"{r['max_rhat']:>9.4f} {r['min_ess']:>8.0f} {r['divergences']:>4} {r['z_mean_rms']:>10.2f} "
                f"{r['z_sd_rms']:>8.2f}",
                flush=True,
            )
            merge_results(args.out, {f"{model}/{config}": r})
    print(f"wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
