"""Sensitivity of NA-DPVI's coverage to its settings, on one set of simulations per (model, ε).

    python benchmarks/sensitivity.py --model gamma-exponential --epsilon 0.1 [--seeds 0,1] \
        [--variants default,burn-in-0.5,width-4,no-extra-noise,paper]

Each seed simulates M traces once (research σ, the research preset) and scores every variant of the
exact route on them with the research reference rule, so differences between variants are not
simulation noise. Results are merged into benchmarks/results/sensitivity.json as
{model: {ε: {seed: {variant: {...}}}}}.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax
from _common import machine, read_results, results_path, write_json

import noiseaware as na
from noiseaware.evaluation import evaluate, simulate_traces
from noiseaware.evaluation.coverage import CoverageDesign
from noiseaware.util.defaults import field_default

RESEARCH_SIGMA = {0.1: 360.0, 0.3: 117.5, 1.0: 37.81}
VARIANTS = {
    "default": {},
    "burn-in-0.5": {"burn_in": 0.5},
    "width-4": {"prior": na.Prior(hessian_width=4.0)},
    "no-extra-noise": {"prior": na.Prior(extra_noise="none")},
    "optimum-sd-0.3": {"prior": na.Prior(optimum_sd=0.3)},
    "paper": {"prior": "paper"},
}
"""Variants of the exact route: its options (ExactOptions fields), each run as a method of the variant's name."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gamma-exponential")
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--simulations", type=int, default=field_default(CoverageDesign, "simulations"))
    parser.add_argument("--repeats", type=int, default=field_default(CoverageDesign, "references"))
    parser.add_argument("--draws", type=int, default=field_default(CoverageDesign, "samples"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sensitivity.json")
    args = parser.parse_args()
    command = (
        f"python benchmarks/sensitivity.py --model {args.model} --epsilon {args.epsilon:g} --seeds {args.seeds} "
        f"--variants {args.variants} --simulations {args.simulations} --repeats {args.repeats} "
        f"--draws {args.draws}"
    )
    variants = args.variants.split(",")
    # each variant is the exact route under its own name, with its options: a Method record, no registry changed
    exact = na.DEFAULT_REGISTRY["exact"]
    methods = [dataclasses.replace(exact, name=name) for name in variants]
    method_options = {name: VARIANTS[name] for name in variants}
    bm = na.models.get(args.model)
    results = read_results(args.out)
    for seed in (int(s) for s in args.seeds.split(",")):
        start = time.perf_counter()
        sims = simulate_traces(
            bm,
            noise_multiplier=RESEARCH_SIGMA[args.epsilon],
            delta=1e-5,
            simulations=args.simulations,
            key=jax.random.split(jax.random.key(seed), 4)[0],
            epsilon=args.epsilon,
            progress=True,
            **bm.dpvi_settings,
        )
        dpvi = time.perf_counter() - start
        result = evaluate(
            sims, methods, references=args.repeats, samples=args.draws, key=seed, method_options=method_options
        )
        print(f"\n{args.model}, ε = {args.epsilon:g}, seed {seed} (DPVI {dpvi:.0f} s)")
        print(result.table(), flush=True)
        slot = results.setdefault(args.model, {}).setdefault(f"{args.epsilon:g}", {}).setdefault(str(seed), {})
        for variant, (mean, sd) in result.rmse.items():
            slot[variant] = {
                "rmse_mean": round(mean, 4),
                "rmse_sd": round(sd, 4),
                "ecp_mean": [round(float(v), 4) for v in result.ecp[variant].mean(axis=0)],
                "failures": result.failures[variant],
                "options": {k: repr(v) for k, v in VARIANTS[variant].items()},
                "M": args.simulations,
                "R": args.repeats,
                "K": args.draws,
                "sigma": RESEARCH_SIGMA[args.epsilon],
                "reference_rule": "research",
                "command": command,
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "machine": machine(),
            }
        write_json(args.out, results)
    print(f"wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
