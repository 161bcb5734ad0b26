"""False alarms and detection of the trace checks' runaway rule (docs/diagnostics.md, "The runaway rule").

    python benchmarks/runaway.py                 # both sections; results in benchmarks/results/runaway.json

* healthy: DPVI traces of M1, M2, M3 at their research and tuned presets and of linreg-10d and logistic-3d at
  their research presets, at ε = 0.1, 0.3 and 1 (prior-predictive simulations): the growth
  max_t |φ_t − φ_0| / (1 + |φ_0|) of each trace (its largest over the coordinates) and how often the rule fired;
* learning-rate: M1 at ε = 1 with the research learning rate multiplied by 10 … 10⁶: the growth, how often the
  rule fired and which checks fired.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import jax
import numpy as np
from _common import machine, write_json

import noiseaware as na
from noiseaware.evaluation import simulate_traces
from noiseaware.tuning.presets import tuned_model

RESULTS = Path(__file__).parent / "results" / "runaway.json"
EPSILONS = (0.1, 0.3, 1.0)
TUNED = ("M1", "M2", "M3")
MULTIPLIERS = (10.0, 100.0, 1e3, 1e4, 1e6)


def traces(bm, epsilon: float, count: int, seed: int, **overrides) -> list:
    """`count` traces of `bm` on its prior-predictive data at ε (σ from the accountant), settings overridden."""
    settings = {**bm.dpvi_settings, **overrides}
    if "learning_rate" in overrides:
        settings.pop("lr_multiplier", None)
    sigma = na.noise_multiplier(epsilon, 1e-5, settings["sampling_rate"], settings["steps"])
    key = jax.random.key(seed)
    sims = simulate_traces(
        bm, noise_multiplier=sigma, epsilon=epsilon, delta=1e-5, simulations=count, key=key, chunk=count, **settings
    )
    return list(sims.batch.traces)


def growth(trace) -> float:
    params = np.asarray(trace.params, np.float64)
    return float(np.max(np.abs(params - params[0]) / (1.0 + np.abs(params[0]))))


def summary(runs: list) -> dict:
    reports = [na.diagnose(trace) for trace in runs]
    values = [growth(trace) for trace in runs]
    return {
        "traces": len(runs),
        "growth_max": max(values),
        "growth_median": float(np.median(values)),
        "runaway": sum("runaway" in report.fired for report in reports),
        "fired": dict(Counter(name for report in reports for name in report.fired)),
    }


def healthy(count: int, seed: int) -> dict:
    out = {}
    for name in ("M1", "M2", "M3", "linreg-10d", "logistic-3d"):
        for epsilon in EPSILONS:
            models = {"research": na.models.get(name)}
            if name in TUNED:
                models["tuned"] = tuned_model(name, epsilon)
            for preset, bm in models.items():
                out[f"{name} {preset} ε={epsilon:g}"] = row = summary(traces(bm, epsilon, count, seed))
                print(f"{name} {preset} ε={epsilon:g}: {row}", flush=True)
    return out


def learning_rates(count: int, seed: int) -> dict:
    bm = na.models.get("M1")
    research = np.asarray(traces(bm, 1.0, 1, seed)[0].learning_rate, np.float64)
    out = {}
    for multiplier in MULTIPLIERS:
        runs = traces(bm, 1.0, count, seed, learning_rate=research * multiplier)
        out[f"×{multiplier:g}"] = row = summary(runs)
        print(f"learning rate ×{multiplier:g}: {row}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=30, help="simulations per setting (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    results = {"machine": machine(), "traces": args.traces, "seed": args.seed}
    results["healthy"] = healthy(args.traces, args.seed)
    write_json(RESULTS, results)
    results["learning_rate"] = learning_rates(5, args.seed)
    write_json(RESULTS, results)


if __name__ == "__main__":
    main()
