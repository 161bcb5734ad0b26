"""How a batch of simulations should share one compiled DPVI program, per built-in model: vmap or lax.map.

    python benchmarks/batch_strategy.py [--cases M1,M2,M3,linreg-10d,logistic-3d] [--batch 8] [--repeats 3]

For each model at its preset for ε = 1, `record_dpvi_batch` records `--batch` simulated data sets with each
strategy of `recording.dpvi.BATCH_STRATEGIES` ("vmap": vectorised, every step of every run waits for the run whose
Poisson sample needs the most chunks; "map": lax.map, one after another in one program), after compiling, and
reports the minimum over `--repeats` rounds of the wall time per simulation, the first call (compile included),
the faster strategy and the model's `BenchmarkModel.batch`. The traces are identical either way (checked here:
the largest difference of the iterates). Writes benchmarks/results/batch_strategy.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import numpy as np
from _common import chosen, merge_results, provenance

import noiseaware as na
from noiseaware.recording.dpvi import BATCH_STRATEGIES, record_dpvi_batch
from noiseaware.tuning.facts import simulate

CASES = ("M1", "M2", "M3", "linreg-10d", "logistic-3d")


def run_case(name: str, batch: int, repeats: int, command: str) -> dict:
    bm = na.models.get(name, epsilon=1.0)
    settings = {k: v for k, v in bm.dpvi_settings.items() if k != "preflight"}
    _, data = simulate(bm, batch, 0)
    keys = jax.random.split(jax.random.key(1), batch)
    out, params = {}, {}
    for strategy in BATCH_STRATEGIES:
        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            traces = record_dpvi_batch(bm.model, data, keys=keys, epsilon=1.0, batch=strategy, **settings)
            times.append(time.perf_counter() - start)
        params[strategy] = np.stack([t.params for t in traces])
        out[strategy] = {"first_call_s": round(times[0], 2), "per_simulation_s": round(min(times[1:]) / batch, 4)}
    fastest = min(out, key=lambda s: out[s]["per_simulation_s"])
    return {
        "model": bm.name,
        "batch": batch,
        "repeats": repeats,
        **out,
        "map_over_vmap": round(out["map"]["per_simulation_s"] / out["vmap"]["per_simulation_s"], 2),
        "fastest": fastest,
        "model_batch": bm.batch,
        "max_difference": float(np.max(np.abs(params["map"] - params["vmap"]))),
        **provenance(command),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--batch", type=int, default=8, help="simulations per program (the tuner's batch)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "batch_strategy.json")
    args = parser.parse_args()
    command = "python benchmarks/batch_strategy.py " + f"--cases {args.cases} --batch {args.batch}"
    print(f"{'model':<22} {'vmap s/sim':>10} {'map s/sim':>10} {'map/vmap':>9} {'fastest':>8} {'model uses':>10}")
    for name in chosen(parser, args.cases, CASES):
        row = run_case(name, args.batch, args.repeats, command)
        merge_results(args.out, {name: row})
        print(
            f"{row['model']:<22} {row['vmap']['per_simulation_s']:>10.3f} {row['map']['per_simulation_s']:>10.3f} "
            f"{row['map_over_vmap']:>9.2f} {row['fastest']:>8} {row['model_batch']:>10}",
            flush=True,
        )


if __name__ == "__main__":
    main()
