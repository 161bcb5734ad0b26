"""Each case's seconds on another device beside this repository's CPU results (what bench_gpu.sh prints last).

    python benchmarks/compare_devices.py benchmarks/results/gpu [--cpu benchmarks/results]

Reads bench_dpvi.json, bench_fit.json and table1.json from both folders and prints one table: the case, the
seconds in each folder (the recorder's run time, a fit's fastest run, a Table 1 cell's wall time for all its
methods at one ε), the ratio CPU / other, and the backend each was measured on. A case missing on one side
shows "—". The CPU numbers were measured when their results files were written (their dates are in them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _common import read_results

from noiseaware.util.tables import text_table


def _seconds(folder: Path) -> dict[str, tuple[float, str]]:
    """{case: (seconds, backend)} from a folder's results files."""
    found = {}
    for name, measure in (("bench_dpvi", "run_s"), ("bench_fit", "run_s")):
        for case, entry in read_results(folder / f"{name}.json").get("results", {}).items():
            found[f"{name}: {case}"] = (entry[measure], entry["machine"]["jax_backend"])
    for model, levels in read_results(folder / "table1.json").items():
        for epsilon, methods in levels.items():
            entry = next(iter(methods.values()))
            seconds = entry["seconds"]["wall_this_epsilon_all_methods"]
            found[f"table1: {model} ε = {epsilon}"] = (seconds, entry["machine"]["jax_backend"])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the folder of the other device's results")
    parser.add_argument("--cpu", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    cpu, other = _seconds(args.cpu), _seconds(args.other)
    rows = []
    for case in [*other, *(c for c in cpu if c not in other)]:
        mine, theirs = cpu.get(case), other.get(case)
        ratio = f"{mine[0] / theirs[0]:.1f}×" if mine and theirs and theirs[0] > 0 else "—"
        rows.append(
            [
                case,
                f"{mine[0]:.3g} ({mine[1]})" if mine else "—",
                f"{theirs[0]:.3g} ({theirs[1]})" if theirs else "—",
                ratio,
            ]
        )
    print(text_table(["case", "CPU s (backend)", "other s (backend)", "speed-up"], rows))
    print(
        "case: script and case; seconds: the recorder's run, a fit's fastest run, or a Table 1 cell's wall time "
        "(all its methods at one ε); speed-up: CPU seconds / other seconds."
    )


if __name__ == "__main__":
    main()
