"""A study killed halfway: `noiseaware coverage --workers 2` is sent SIGKILL (with its workers), then resumed.

    python benchmarks/study_kill.py [--simulations 120] [--chunk 10] [--kill-after 5]
        [--out benchmarks/results/study_kill.json]

The command runs M2 at σ = 37.81 (M simulations in tasks of --chunk, methods exact and naive, T = 10⁴) in a
fresh study directory, on a 2-worker Dask LocalCluster, in its own process group. When --kill-after tasks have
finished, the whole group is killed (SIGKILL: no clean-up runs). The same command is then run again. From the
study's events.jsonl: the tasks done before the kill, those in flight when it came, and the tasks the resumed
run started, of which none may be one already done. The resumed study's RMSE table is compared with an
uninterrupted in-process run of the same plan (bit for bit).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import machine, write_json

import noiseaware as na
from noiseaware.studies import StudyDirectory, merge_record

WORK = Path("/tmp/noiseaware-study-kill")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=120)
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--kill-after", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "study_kill.json")
    args = parser.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    study = WORK / "study"
    command = [
        str(Path(sys.executable).with_name("noiseaware")), "coverage", "--model", "M2", "--noise-multiplier",
        "37.81", "--methods", "exact,naive", "--simulations", str(args.simulations), "--chunk", str(args.chunk),
        "--seed", "0", "--workers", "2", "--out", str(study),
    ]  # fmt: skip
    first = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    directory = StudyDirectory(study)
    while len(tasks_with(directory.events(), "done")) < args.kill_after:
        if first.poll() is not None:
            raise SystemExit("the study finished before it could be killed: give more --simulations")
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    time.sleep(1.0)
    before = directory.events()
    done_before = tasks_with(before, "done")
    in_flight = tasks_with(before, "started") - done_before
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    resumed_seconds = time.perf_counter() - start
    started_after = tasks_with(directory.events()[len(before) :], "started")
    record = directory.record()
    reference = na.coverage(
        na.models.get("beta-bernoulli"), methods=("exact", "naive"), noise_multiplier=37.81,
        simulations=args.simulations, chunk=args.chunk, key=0,
    )  # fmt: skip
    ((_, result),) = merge_record(record, {t["id"]: directory.load(t["id"])[0] for t in record["tasks"]})
    identical = all(np.array_equal(result.curves[r][m], reference.curves[r][m]) for r in result.curves
                    for m in result.methods)  # fmt: skip
    results = {
        "command": " ".join(["noiseaware", *command[1:]]),
        "tasks": len(record["tasks"]),
        "done_before_kill": len(done_before),
        "in_flight_at_kill": len(in_flight),
        "started_after_restart": len(started_after),
        "recomputed_finished_tasks": len(started_after & done_before),
        "recomputed_in_flight_tasks": len(started_after & in_flight),
        "resumed_seconds": round(resumed_seconds, 1),
        "identical_to_uninterrupted_run": bool(identical),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(json.dumps({k: v for k, v in results.items() if k != "machine"}, indent=2))
    write_json(args.out, results)


def tasks_with(events: list[dict], kind: str) -> set[str]:
    """The task ids with an event of `kind` among the study's events."""
    return {event["task"] for event in events if event["event"] == kind}


if __name__ == "__main__":
    main()
