"""Coverage benchmark: TARP RMSE of each method per model and ε (the paper's Tables 1 and 2).

    python benchmarks/coverage.py --models gamma-exponential --epsilons 0.1,0.3,1.0 \
        --methods exact,nuts,laplace,naive,dpvim [--simulations 500 --repeats 20 --draws 20000] \
        [--sigma research|tight] [--settings preset|tuned] [--family mean-field|full-rank|low-rank:r]
        [--out benchmarks/results/table1.json]

Research scale by default: M = 500 simulations, R = 20 reference draws, K = 20 000 θ draws per posterior,
T = 10⁴, the research presets, and the research σ (360, 117.5, 37.81 for ε = 0.1, 0.3, 1.0; `--sigma
tight` calibrates σ with our accountant instead). `--settings tuned` runs the model as a user writes it
(`na.models.get(model, preset=False)`: numpyro's transforms) with its tuned preset at that ε (the settings
`benchmarks/tuning.py` chose and `--ship` put in noiseaware/tuning/presets/: what `noiseaware coverage` and
`record` use by default), stored as "<method>/tuned". `--family`
records with another variational family (the settings' (μ, ρ) values extend to its factor block by
record_dpvi's rule), stored as "<method>/<family>". `--clients M` splits the data over M clients for dp-pvi and
na-dp-pvi, stored as "<method>/clients=M"; `--options JSON` passes further method options (e.g. the bootstrap's
replicates), recorded in the stored command. Results are
merged into --out as {model: {epsilon: {method: {...}}}} with the settings, seeds, reference rules and wall
times, and each method's median 90 % interval width over the non-private posterior's per coordinate
(`width_ratio`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from _common import machine, read_results, results_path, write_json

import noiseaware as na
from noiseaware.evaluation.coverage import CoverageDesign
from noiseaware.inference.gradient_model import PRIORS
from noiseaware.inference.priors import SCALE_MODELS, resolve_prior
from noiseaware.util.defaults import field_default

RESEARCH_SIGMA = {0.1: 360.0, 0.3: 117.5, 1.0: 37.81}
FEDERATED = ("dp-pvi", "na-dp-pvi")
"""The methods that split the data over `--clients` clients (stored as "<method>/clients=M")."""
WARNINGS_KEPT = 5
"""Distinct warning messages stored per entry (their number is stored beside them)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gamma-exponential,beta-bernoulli,dirichlet-categorical")
    parser.add_argument("--epsilons", default="0.1,0.3,1.0")
    parser.add_argument("--methods", default="exact,nuts,laplace,naive,dpvim")
    parser.add_argument("--simulations", type=int, default=field_default(CoverageDesign, "simulations"))
    parser.add_argument("--repeats", type=int, default=field_default(CoverageDesign, "references"))
    parser.add_argument("--draws", type=int, default=field_default(CoverageDesign, "samples"))
    parser.add_argument("--prior", default="default", choices=tuple(PRIORS))
    parser.add_argument(
        "--scale-model",
        default="linear",
        choices=SCALE_MODELS,
        help="the routes' scale rows (Prior.scale_model, docs/method.md §2.9, §2.11), stored as <method>/<prior>/<it>",
    )
    parser.add_argument("--no-repair", action="store_true", help="exact route without its repair of curved scale rows")
    parser.add_argument("--sigma", default="research", choices=("research", "tight"))
    parser.add_argument("--settings", default="preset", choices=("preset", "tuned"))
    parser.add_argument("--family", default="mean-field", help="mean-field, full-rank or low-rank:r")
    parser.add_argument("--clients", type=int, default=4, help="clients M of the federated methods dp-pvi, na-dp-pvi")
    parser.add_argument(
        "--options", type=json.loads, default={}, help='more method options, e.g. \'{"bootstrap": {"replicates": 20}}\''
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "table1.json")
    args = parser.parse_args()
    command = (
        f"python benchmarks/coverage.py --models {args.models} --epsilons {args.epsilons} --methods "
        f"{args.methods} --simulations {args.simulations} --repeats {args.repeats} --draws {args.draws} "
        f"--prior {args.prior} --sigma {args.sigma} --settings {args.settings} --family {args.family} "
        f"--clients {args.clients} --seed {args.seed} --out {args.out}"
        + ("" if args.scale_model == "linear" else f" --scale-model {args.scale_model}")
        + (" --no-repair" if args.no_repair else "")
        + (f" --options '{json.dumps(args.options)}'" if args.options else "")
    )
    kind, _, rank = args.family.partition(":")
    family = {} if kind == "mean-field" else {"family": kind} | ({"rank": int(rank)} if rank else {})
    results = read_results(args.out)
    for model in args.models.split(","):
        bm = na.models.get(model, preset=args.settings == "preset")
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            settings = {} if args.settings == "preset" else dict(tuned_settings(bm, epsilon))
            level = {"noise_multiplier": RESEARCH_SIGMA[epsilon]} if args.sigma == "research" else {"epsilon": epsilon}
            prior = dataclasses.replace(resolve_prior(args.prior), scale_model=args.scale_model)
            options = method_options(args.methods.split(","), epsilon, prior, args.clients)
            if args.no_repair and "exact" in options:
                options["exact"]["repair"] = False
            for name, values in args.options.items():
                options[name] = options.get(name, {}) | values
            start = time.perf_counter()
            result = na.coverage(
                bm,
                methods=args.methods.split(","),
                simulations=args.simulations,
                references=args.repeats,
                samples=args.draws,
                key=args.seed,
                progress=True,
                method_options=options,
                **level,
                **settings,
                **family,
            )
            wall = time.perf_counter() - start
            print(f"\n{model}, ε = {epsilon:g} (σ = {result.settings['noise_multiplier']:.4g}), {wall:.0f} s")
            print(result.table(), flush=True)
            trace_rule = result.rmse_under("trace")
            marginal = result.marginal_rmse("research")
            widths = result.median_width_ratio()
            for method, (mean, sd) in result.rmse.items():
                results.setdefault(model, {}).setdefault(f"{epsilon:g}", {})[
                    method
                    + ("" if args.prior == "default" else f"/{args.prior}")
                    + ("" if args.scale_model == "linear" else f"/{args.scale_model}")
                    + ("/no-repair" if args.no_repair else "")
                    + ("" if args.settings == "preset" else "/tuned")
                    + ("" if kind == "mean-field" else f"/{args.family}")
                    + (f"/clients={args.clients}" if method in FEDERATED else "")
                ] = {
                    "rmse_mean": round(mean, 4),
                    "rmse_sd": round(sd, 4),
                    "rmse_trace_reference_mean": round(trace_rule[method][0], 4),
                    "rmse_trace_reference_sd": round(trace_rule[method][1], 4),
                    "marginal_rmse": [round(float(v), 4) for v in marginal[method]],
                    "width_ratio": [round(float(v), 4) for v in widths.get(method, [])],
                    "ecp_mean": [round(float(v), 4) for v in result.ecp[method].mean(axis=0)],
                    "failures": result.failures[method],
                    "diagnostics": {k: v for k, v in result.diagnostics[method].items() if k != "warnings"},
                    "warnings": result.diagnostics[method]["warnings"][:WARNINGS_KEPT],
                    "distinct_warnings": len(result.diagnostics[method]["warnings"]),
                    "seconds": {
                        "dpvi_all_simulations": round(result.seconds["dpvi"], 1),
                        "fit": round(result.seconds[method], 1),
                        "draws_and_tarp": round(result.seconds[f"tarp_{method}"], 1),
                        "wall_this_epsilon_all_methods": round(wall, 1),
                    },
                    "sigma": f"{args.sigma} ({result.settings['noise_multiplier']:.4g})",
                    "reference_rule": "research; trace rule beside it",
                    "prior": args.prior,
                    "scale_model": args.scale_model,
                    "M": args.simulations,
                    "R": args.repeats,
                    "K": args.draws,
                    "T": result.settings["steps"],
                    "seed": args.seed,
                    "command": command,
                    "date": time.strftime("%Y-%m-%d %H:%M"),
                    "machine": machine(),
                }
            write_json(args.out, results)
    print(f"wrote {results_path(args.out)}")


def tuned_settings(bm: na.models.BenchmarkModel, epsilon: float) -> na.TunedSettings:
    """The built-in tuned preset of `bm` at ε (`benchmarks/tuning.py --ship` put it in the package)."""
    return na.tuning.tuned_preset(bm.name, epsilon)


def method_options(methods: list[str], epsilon: float, prior: na.Prior, clients: int) -> dict[str, dict]:
    """Each method's options: the gradient-model prior of the three routes (with prior "paper", Laplace in the
    research code's "paper" style, as the published paper-prior rows ran); the ε that the research σ stands
    for for the methods that run their own mechanism at that ε; the clients of the federated methods."""
    options: dict[str, dict] = {}
    for name in methods:
        method = na.DEFAULT_REGISTRY[name]
        if method.needs_epsilon:
            options[name] = {"epsilon": epsilon} | ({"clients": clients} if name in FEDERATED else {})
        elif name in ("exact", "laplace", "nuts"):
            options[name] = {"prior": prior} | (
                {"style": "paper"} if name == "laplace" and prior == PRIORS["paper"] else {}
            )
    return options


if __name__ == "__main__":
    main()
