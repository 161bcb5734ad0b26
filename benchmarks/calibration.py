"""Calibration benchmark: Bayesian logistic regression on UCI Adult (the paper's Table 3).

    python benchmarks/calibration.py [--epsilons 0.1,0.3,1.0] [--methods exact,nuts,laplace,naive,dpvim] \
        [--repeats 20 --steps 10000 --draws 4000] [--scaling zscore|range] [--sigma research|tight] \
        [--reference-warmup 1000 --reference-draws 4000 | --no-reference | --reference-only] \
        [--out benchmarks/results/table3.json]

Research scale by default: R = 20 DPVI runs per ε on the 30 162 training rows (T = 10⁴, q = 0.1, δ = 1e-5,
the adult-logistic preset C = 11, s = (1, 550), v = √114, ρ₀ = −6) at the research σ (360, 117.5, 37.81 for
ε = 0.1, 0.3, 1.0; `--sigma tight` calibrates σ with our accountant instead); every method on the same R
traces, K = 4 000 draws; calibration RMSE over 10 equal-count bins of the 15 060 test rows (method.md §5).
Beside each method: the paired difference to the naive last iterate on the same traces (mean and sd over
the R repeats), and the paper's number. Once, the non-private reference: NUTS on the training data.
Results are merged into --out as {epsilon: {method: {...}}, "non-private": {"nuts": {...}}} with the
settings, seeds and seconds per stage; with --scaling range the method keys carry a "/range" suffix.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from _common import machine, read_results, results_path, write_json

import noiseaware as na
from noiseaware.evaluation.calibration_experiment import CalibrationDesign
from noiseaware.methods.reference import NonPrivateOptions
from noiseaware.models.builtin import RESEARCH_COMMON
from noiseaware.util.defaults import field_default

RESEARCH_SIGMA = {0.1: 360.0, 0.3: 117.5, 1.0: 37.81}
PAPER_TABLE3 = {  # calibration RMSE × 10⁻³, mean ± sd over 20 runs (experiments.md)
    "nuts": {"0.1": (61, 31), "0.3": (26, 5), "1": (24, 7)},
    "laplace": {"0.1": (84, 43), "0.3": (44, 11), "1": (46, 14)},
    "naive": {"0.1": (120, 65), "0.3": (67, 24), "1": (54, 17)},
    "dpvim": {"0.1": (101, 52), "0.3": (65, 25), "1": (38, 14)},
}
"""The paper's NA-DPVI (NUTS) row is the published counterpart of both our exact and nuts routes."""
PAPER_ROW = {"exact": "nuts", "nuts": "nuts", "laplace": "laplace", "naive": "naive", "dpvim": "dpvim"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", default="0.1,0.3,1.0")
    parser.add_argument("--methods", default="exact,nuts,laplace,naive,dpvim")
    parser.add_argument("--repeats", type=int, default=field_default(CalibrationDesign, "runs"))
    parser.add_argument("--steps", type=int, default=RESEARCH_COMMON["steps"])
    parser.add_argument("--draws", type=int, default=field_default(CalibrationDesign, "samples"))
    parser.add_argument("--scaling", default="zscore", choices=na.datasets.SCALINGS)
    parser.add_argument("--prior", default="default", choices=("default", "paper"))
    parser.add_argument("--sigma", default="research", choices=("research", "tight"))
    parser.add_argument("--reference-warmup", type=int, default=field_default(NonPrivateOptions, "warmup"))
    parser.add_argument("--reference-draws", type=int, default=field_default(NonPrivateOptions, "draws"))
    parser.add_argument("--no-reference", action="store_true", help="skip the non-private NUTS reference")
    parser.add_argument("--reference-only", action="store_true", help="run only the non-private NUTS reference")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "table3.json")
    args = parser.parse_args()
    command = "python " + " ".join(sys.argv)
    suffix = "" if args.scaling == "zscore" else f"/{args.scaling}"
    start = time.perf_counter()
    data = na.datasets.adult(scaling=args.scaling)
    load_seconds = time.perf_counter() - start
    common = {
        "scaling": args.scaling,
        "seed": args.seed,
        "command": command,
        "machine": machine(),
        "dataset_seconds": round(load_seconds, 1),
    }
    results = read_results(args.out)
    if not args.no_reference:
        start = time.perf_counter()
        reference = na.calibration(
            data,
            methods=("nonprivate",),
            samples=args.reference_draws,
            key=args.seed,
            method_options={"nonprivate": {"warmup": args.reference_warmup, "draws": args.reference_draws}},
            progress=True,
        )
        wall = time.perf_counter() - start
        print(f"\nnon-private reference (NUTS on the training data), {wall:.0f} s")
        print(reference.table(), flush=True)
        results.setdefault("non-private", {})[f"nuts{suffix}"] = _entry(
            reference,
            "nonprivate",
            {"fit": reference.seconds["nonprivate"], "predict": reference.seconds["predict_nonprivate"], "wall": wall},
            common
            | {
                "warmup": args.reference_warmup,
                "K": args.reference_draws,
                "sigma": "none (non-private)",
                "date": time.strftime("%Y-%m-%d %H:%M"),
            },
        )
        write_json(args.out, results)
    for epsilon in () if args.reference_only else (float(e) for e in args.epsilons.split(",")):
        level = {"noise_multiplier": RESEARCH_SIGMA[epsilon]} if args.sigma == "research" else {"epsilon": epsilon}
        start = time.perf_counter()
        methods = args.methods.split(",")
        result = na.calibration(
            data,
            methods=methods,
            runs=args.repeats,
            samples=args.draws,
            key=args.seed,
            method_options=method_options(methods, args.draws, args.prior),
            steps=args.steps,
            progress=True,
            **level,
        )
        wall = time.perf_counter() - start
        sigma = result.settings["noise_multiplier"]
        print(
            f"\nAdult, ε = {epsilon:g} (σ = {sigma:.4g}, {args.sigma}), R = {args.repeats}, T = {args.steps}, "
            f"{wall:.0f} s (DPVI {result.seconds['dpvi']:.0f} s)"
        )
        print(result.table(), flush=True)
        tag = f"{epsilon:g}"
        for method in result.methods:
            paper = PAPER_TABLE3.get(PAPER_ROW.get(method, ""), {}).get(tag)
            results.setdefault(tag, {})[f"{method}{suffix}"] = _entry(
                result,
                method,
                {
                    "dpvi_all_repeats": result.seconds["dpvi"],
                    "fit": result.seconds[method],
                    "predict": result.seconds[f"predict_{method}"],
                    "wall_this_epsilon_all_methods": wall,
                },
                common
                | {
                    "sigma": f"{args.sigma} ({sigma:.4g})",
                    "epsilon_spent": result.settings["epsilon"],
                    "prior": args.prior,
                    "R": args.repeats,
                    "T": args.steps,
                    "K": args.draws,
                    "paper_calibration_rmse_e3": None if paper is None else {"mean": paper[0], "sd": paper[1]},
                    "date": time.strftime("%Y-%m-%d %H:%M"),
                },
            )
        write_json(args.out, results)
    print(f"wrote {results_path(args.out)}")


def method_options(methods: list[str], draws: int, prior: str) -> dict[str, dict]:
    """K = `draws` draws of φ* for every method that makes them (as the published runs did), and the
    gradient-model prior of the three routes (Laplace in the research "paper" style with prior "paper")."""
    options: dict[str, dict] = {}
    for name in methods:
        fields = {f.name for f in dataclasses.fields(na.DEFAULT_REGISTRY[name].options)}
        options[name] = ({"draws": draws} if "draws" in fields else {}) | (
            {"prior": prior} if "prior" in fields else {}
        )
        if name == "laplace" and prior == "paper":
            options[name]["style"] = "paper"
    return options


def _entry(result, method: str, seconds: dict, provenance: dict) -> dict:
    """One method's row: every metric's mean and sd, the paired difference to naive, failures, provenance."""
    summary = result.headline()[method]
    entry = {k: _round(v) for k, v in summary.items() if k.endswith(("_mean", "_sd"))}
    entry |= {
        "failures": summary["failures"],
        "warnings": summary["diagnostics"].get("warnings", []),
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "bins": result.settings["bins"],
        "binning": result.settings["binning"],
    }
    return entry | provenance


def _round(value):
    return None if value is None else round(value, 5)  # headline() gives None for undefined numbers


if __name__ == "__main__":
    main()
