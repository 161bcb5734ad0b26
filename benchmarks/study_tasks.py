"""Per-task cost of Tables 2 and 3 as studies, on one pinned core (what one worker of a cluster does).

    python benchmarks/study_tasks.py [--table2-chunk 25] [--table3-chunk 2] [--out benchmarks/results/study_tasks.json]

Runs one task of each study twice in this process, pinned to one core (`na.studies.pin_threads`): Table 2
(linreg-10d at the research σ for ε = 1, the five trace methods, simulations 0..chunk−1 of M = 500) and
Table 3 (Adult, σ for ε = 1, the four trace methods and NUTS, runs 0..chunk−1 of R = 20). The first run
includes compilation (a worker's first task of a kind), the second is a warm task; both are stored with the
seconds per simulation (or run), from which docs/studies.md projects Tables 2 and 3 on 10 and 100 workers.
Table 1's per-task costs come from benchmarks/study_engine.py (its cluster run: one pinned core per worker).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _common import machine, write_json
from coverage import RESEARCH_SIGMA, method_options

import noiseaware as na
from noiseaware.evaluation.calibration_experiment import calibration_part, calibration_spec
from noiseaware.evaluation.coverage import coverage_part, coverage_spec
from noiseaware.studies import pin_threads

METHODS = ["exact", "nuts", "laplace", "naive", "dpvim"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table2-chunk", type=int, default=25)
    parser.add_argument("--table3-chunk", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "study_tasks.json")
    args = parser.parse_args()
    cores = pin_threads(0, len(os.sched_getaffinity(0)))  # one core, before the first computation
    results = {
        "command": f"python benchmarks/study_tasks.py --table2-chunk {args.table2_chunk} --table3-chunk "
        f"{args.table3_chunk}",
        "pinned_cores": cores,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    spec = coverage_spec(
        na.models.get("linreg-10d"), methods=METHODS, noise_multiplier=RESEARCH_SIGMA[1.0], simulations=500,
        key=0, chunk=args.table2_chunk, method_options=method_options(METHODS, 1.0, "default", clients=4),
    )  # fmt: skip
    results["table2"] = timed(lambda: coverage_part(spec, spec.parts[0]), args.table2_chunk, "simulations")
    print("Table 2 task:", results["table2"], flush=True)
    write_json(args.out, results)
    data = na.datasets.adult()
    cal = calibration_spec(
        data, methods=["exact", "nuts", "laplace", "naive", "dpvim"], noise_multiplier=RESEARCH_SIGMA[1.0], runs=20,
        key=0, chunk=args.table3_chunk,
    )  # fmt: skip
    results["table3"] = timed(lambda: calibration_part(cal, cal.parts[0]), args.table3_chunk, "runs")
    print("Table 3 task:", results["table3"], flush=True)
    write_json(args.out, results)


def timed(task, size: int, unit: str) -> dict:
    """Seconds of a cold (compiling) and a warm run of `task`, and the warm seconds per unit of work."""
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        task()
        seconds.append(round(time.perf_counter() - start, 1))
    return {"size": size, "unit": unit, "cold_seconds": seconds[0], "warm_seconds": seconds[1],
            f"warm_seconds_per_{unit[:-1]}": round(seconds[1] / size, 2)}  # fmt: skip


if __name__ == "__main__":
    main()
