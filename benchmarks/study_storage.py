"""What storing results as data costs a study: a Table 1 sized task's result written and read as .npz + JSON
(`noiseaware.studies.files`, the study folder's format) against the cloudpickle bytes it replaced.

    python benchmarks/study_storage.py [--model dirichlet-categorical] [--simulations 100] [--repeats 20]
        [--out benchmarks/results/study_storage.json]

Runs one part of a coverage study (M = --simulations in one task, R = 20, K = 20 000, methods exact, laplace,
naive and dpvim, at the research σ of ε = 1, T = 10⁴), then writes and reads its result --repeats times each
way and prints the median milliseconds, the bytes on disk, the task's own seconds, and whether the result
read back merges to the same ECP curves bit for bit.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import cloudpickle
import numpy as np
from _common import machine, write_json
from coverage import RESEARCH_SIGMA

import noiseaware as na
from noiseaware.evaluation.coverage import coverage_part, coverage_record, coverage_spec, merge_coverage
from noiseaware.studies.files import read_result, write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="dirichlet-categorical")
    parser.add_argument("--simulations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "study_storage.json")
    args = parser.parse_args()
    methods = ("exact", "laplace", "naive", "dpvim")
    spec = coverage_spec(na.models.get(args.model), key=0, noise_multiplier=RESEARCH_SIGMA[1.0], methods=methods,
                         simulations=args.simulations, chunk=args.simulations)  # fmt: skip
    start = time.perf_counter()
    part = coverage_part(spec, spec.parts[0])
    task_seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "task.npz"
        data_write = timed(lambda: write_result(path, "task", part, task_seconds), args.repeats)
        data_read = timed(lambda: read_result(path, "task"), args.repeats)
        data_bytes = path.stat().st_size
        back, _ = read_result(path, "task")
    pickle_write = timed(lambda: cloudpickle.dumps(part), args.repeats)
    payload = cloudpickle.dumps(part)
    pickle_read = timed(lambda: cloudpickle.loads(payload), args.repeats)
    summary = coverage_record(spec)
    before, after = merge_coverage(summary, [part]), merge_coverage(summary, [back])
    identical = (
        all(
            np.array_equal(getattr(before, table)[rule][m], getattr(after, table)[rule][m], equal_nan=True)
            for table in ("curves", "marginal_curves")
            for rule in before.curves
            for m in before.methods
        )
        and before.diagnostics == after.diagnostics
    )
    results = {
        "command": f"python benchmarks/study_storage.py --model {args.model} --simulations {args.simulations} "
        f"--repeats {args.repeats}",
        "task_seconds": round(task_seconds, 2),
        "data_write_ms": data_write,
        "data_read_ms": data_read,
        "data_bytes": data_bytes,
        "pickle_dumps_ms": pickle_write,
        "pickle_loads_ms": pickle_read,
        "pickle_bytes": len(payload),
        "storage_share_of_task": round((data_write + data_read) / 1000 / task_seconds, 5),
        "merged_identical": bool(identical),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    for key, value in results.items():
        if key != "machine":
            print(f"{key}: {value}")
    write_json(args.out, results)


def timed(action, repeats: int) -> float:
    """The median milliseconds of `repeats` calls of `action`."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return round(1000 * statistics.median(seconds), 2)


if __name__ == "__main__":
    main()
