"""Tuned DP-SGD settings on models given with numpyro's default transforms and no preset.

    python benchmarks/tuning.py                          # every case not yet in the results file
    python benchmarks/tuning.py --cases m1@1,m1@0.1 --force
    python benchmarks/tuning.py --table                  # the markdown table of docs/results.md from the file
    python benchmarks/tuning.py --ship                   # the passing settings become the built-in tuned presets

A case model@ε runs `na.tune(na.models.get(model, preset=False), epsilon=ε, key=0, trials=--trials,
simulations=24, check_simulations=200)`, the trials stored with each case: the search on 24 prior-predictive
simulations, then the chosen settings' check on 200 fresh ones (exact NA-DPVI, TARP coverage RMSE over 20
reference draws). For M1 and M2 the research preset is checked on the same 200 data sets
(`na.preflight(get(model), epsilon=ε, key=fold_in(0, 1))`): its coverage and posterior sd relative to the
non-private VI sd, beside the tuned settings'. Each case is saved as it finishes (a cut-off run resumes;
several processes may share the file, each with its own cases); the tuned settings go to
benchmarks/results/tuned/<model>-eps<ε>.json. `--ship` copies each of those whose check has no findings into
noiseaware/tuning/presets/ (the tuned presets `record`, `preflight` and `coverage` use for a built-in model).
Results: benchmarks/results/tuning.json, or `--out FILE` (its settings then in FILE's folder under
<stem>-settings/, so that a comparison run leaves the shipped ones alone).
"""

from __future__ import annotations

import argparse
import shutil
import time
import warnings
from pathlib import Path

import jax
from _common import machine, read_results, results_path, write_json

import noiseaware as na
from noiseaware.tuning.design import TUNING
from noiseaware.tuning.presets import PRESET_DIR

RESULTS = Path(__file__).parent / "results" / "tuning.json"
SETTINGS = Path(__file__).parent / "results" / "tuned"
CASES = (
    "m1@1", "m1@0.1", "m2@1", "m2@0.1", "m3@1", "m3@0.1",
    "logistic-3d@1", "logistic-3d@0.1", "linreg-10d@1", "linreg-10d@0.1", "linreg-10d@0.3",
    "m1@0.3", "m2@0.3", "m3@0.3",
)  # fmt: skip
TRIALS, SIMULATIONS, CHECK = TUNING.trials, TUNING.simulations, TUNING.check_simulations


def run_case(case: str, trials: int, settings_dir: Path) -> dict:
    name, eps = case.split("@")
    epsilon = float(eps)
    bm = na.models.get(name, preset=False)
    start, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", na.tuning.PreflightWarning)
        tuned = na.tune(bm, epsilon=epsilon, key=0, trials=trials, simulations=SIMULATIONS, check_simulations=CHECK)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    settings_dir.mkdir(parents=True, exist_ok=True)
    target = results_path(settings_dir / f"{bm.name}-eps{eps}.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    tuned.save(target, overwrite=True)
    out = {
        "model": bm.name,
        "epsilon": epsilon,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "check": tuned.check.to_dict(),
        "settings": dict(tuned.settings),
        "warnings": [str(w.message) for w in caught if issubclass(w.category, na.tuning.PreflightWarning)],
        "feasible_trials": sum(bool(t["feasible"]) for t in tuned.trials),
        "trials": len(tuned.trials),
        "search_seconds": tuned.provenance["search_seconds"],
        "check_seconds": tuned.provenance["check_seconds"],
        **{key: tuned.provenance[key] for key in ("predictions", "simulation_runs", "programs", "compile_seconds")},
    }
    print(f"{case}: {seconds:.0f} s; " + tuned.check.table().replace("\n", "\n  "))
    if name in ("m1", "m2"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            preset = na.preflight(
                na.models.get(name),
                epsilon=epsilon,
                simulations=CHECK,
                key=jax.random.fold_in(jax.random.key(0), 1),
            )
        out["preset_check"] = preset.to_dict()
        print("  research preset: " + preset.table().replace("\n", "\n  "))
    return out


def ship() -> None:
    """Copy every settings file whose fresh check has no findings into the package's tuned presets, unchanged
    (its fingerprint still verifies); report those left out."""
    PRESET_DIR.mkdir(exist_ok=True)
    for path in sorted(results_path(SETTINGS).glob("*.json")):
        tuned = na.TunedSettings.load(path)
        if tuned.check is None or tuned.check.findings:
            print(f"not shipped: {path.name} ({'no check' if tuned.check is None else tuned.check.verdict})")
            continue
        shutil.copyfile(path, PRESET_DIR / path.name)
        print(f"shipped: {path.name} (coverage RMSE {tuned.check.coverage_rmse[0]:.3f})")


def table(results: dict) -> str:
    """One row per case: the check's coverage RMSE, sd / VI sd, mean z², clipped %, flagged %, findings, minutes;
    for M1 and M2 the research preset's numbers on the same 200 data sets beside them."""
    lines = [
        "| model | ε | coverage RMSE (tuned) | sd / VI sd | mean z² | clipped % | flagged % | findings | minutes "
        "| preset RMSE | preset sd / VI sd | preset findings |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results.values():
        c, p = r["check"], r.get("preset_check")
        cells = [
            r["model"],
            f"{r['epsilon']:g}",
            f"{c['coverage_rmse'][0]:.3f} ± {c['coverage_rmse'][1]:.3f}",
            " / ".join(f"{v:.3g}" for v in c["sd_ratio"])
            if len(c["sd_ratio"]) <= 3
            else f"{mean(c['sd_ratio']):.3g} (mean)",
            f"{max(c['z2']):.2f}",
            f"{100 * c['clipped']:.2f}",
            f"{100 * c['flagged']:.0f}",
            str(len(c["findings"])),
            f"{r['seconds'] / 60:.1f}",
        ]
        if p:
            cells += [
                f"{p['coverage_rmse'][0]:.3f} ± {p['coverage_rmse'][1]:.3f}",
                " / ".join(f"{v:.3g}" for v in p["sd_ratio"]),
                str(len(p["findings"])),
            ]
        else:
            cells += ["", "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mean(values) -> float:
    return sum(values) / len(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--force", action="store_true", help="rerun cases already in the results file")
    parser.add_argument("--table", action="store_true", help="print the results file as a markdown table")
    parser.add_argument("--trials", type=int, default=TRIALS, help=f"candidates simulated per case (default {TRIALS})")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"results file (default {RESULTS})")
    parser.add_argument("--ship", action="store_true", help="copy the passing settings files into the package")
    args = parser.parse_args()
    results = read_results(args.out).get("results", {})
    settings_dir = SETTINGS if args.out == RESULTS else args.out.parent / f"{args.out.stem}-settings"
    if args.table:
        print(table(results))
        return
    if args.ship:
        ship()
        return
    for case in args.cases.split(","):
        if case in results and not args.force:
            continue
        result = run_case(case, args.trials, settings_dir)
        results = read_results(args.out).get("results", {})  # another process may have added cases meanwhile
        results[case] = result
        write_json(args.out, {"machine": machine(), "settings": {"simulations": SIMULATIONS,
                     "check_simulations": CHECK, "key": 0}, "results": results})  # fmt: skip


if __name__ == "__main__":
    main()
