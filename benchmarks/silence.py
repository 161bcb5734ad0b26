"""A newcomer's walk, timed: the longest stretch each step of the README's and the docs' tours prints nothing.

    python benchmarks/silence.py [--cases record,fit,…] [--timeout 900] [--again]

Each case runs as a reader runs it (a `noiseaware …` line of the README at its documented size, or a document's
script), in one scratch folder shared by the cases in order (a later one reads what an earlier one wrote), with its
standard output and error read as they come: every chunk of output, a line or a progress bar's redraw, is an event.
Stored per case: the seconds it ran, its exit status, and its longest silence (from its start to its first output,
between two outputs, or from its last output to its end), where in the output that silence ended, and whether it is
within LIMIT. Resumable: cases already in the results file are skipped unless --again is given.
"""

from __future__ import annotations

import argparse
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import chosen, merge_results, provenance, read_results

RESULTS = Path(__file__).parent / "results" / "silence.json"
LIMIT = 15.0
"""The longest a step may print nothing, in seconds."""
CLI = [sys.executable, "-c", "import sys; from noiseaware.cli import main; sys.exit(main(sys.argv[1:]))"]
STUDY_SCRIPT = """
import noiseaware as na
from noiseaware.studies import coverage_study, open_executor

if __name__ == "__main__":
    bm = na.models.get("M1")
    with open_executor(workers=2) as (executor, slots):
        results = coverage_study(bm, levels=[("epsilon", 0.3), ("epsilon", 1.0)], key=0, out="cov-python",
                                 executor=executor, slots=slots, methods=("exact", "naive"), simulations=500)
    print(results[("epsilon", 1.0)].table())
"""
CASES = {
    "record": CLI + ["record", "--model", "M1", "--epsilon", "1", "--out", "m1.nc"],
    "fit": CLI + ["fit", "m1.nc"],
    "fit-model": CLI + ["fit", "m1.nc", "--model", "M1"],
    "record-linreg": CLI
    + [
        "record",
        "--model",
        "linreg-10d",
        "--noise-multiplier",
        "37.81",
        "--seed",
        "3",
        "--out",
        "linreg.npz",
    ],
    "fit-linreg": CLI + ["fit", "linreg.npz", "--model", "linreg-10d", "--burn-in", "0.4"],
    "preflight": CLI + ["preflight", "--model", "M1", "--epsilon", "1"],
    "coverage": CLI
    + [
        "coverage",
        "--model",
        "M1",
        "--epsilon",
        "0.1",
        "1",
        "--methods",
        "exact,nuts,naive",
        "--out",
        "coverage/",
    ],
    "demo": CLI + ["demo", "--epsilon", "0.3", "--out", "demo-eps0.3"],
    "studies-script": [sys.executable, "study.py"],
}


def silences(command: list[str], folder: Path, timeout: float) -> dict:
    """Run `command` in `folder`, timing each chunk of its output; its longest silence and where it ended."""
    environment = dict(os.environ, PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=folder, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    last, longest, before, tail = start, 0.0, "", b""
    while time.monotonic() - start < timeout:
        if not selector.select(timeout=1.0):
            continue
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            break
        now = time.monotonic()
        if now - last > longest:
            longest, before = now - last, (tail + chunk).decode(errors="replace")[-160:]
        last, tail = now, (tail + chunk)[-400:]
    status = process.wait() if time.monotonic() - start < timeout else (process.kill() or "timeout")
    end = time.monotonic()
    if end - last > longest:
        longest, before = end - last, "(the end)"
    text = " ".join(before.replace("\r", "\n").split())
    return {
        "seconds": round(end - start, 1),
        "status": status,
        "longest_silence": round(longest, 1),
        "ended_by": text[-120:],
        "within_limit": longest <= LIMIT,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--folder", type=Path, default=None, help="the scratch folder (default: a new one)")
    parser.add_argument("--again", action="store_true", help="rerun the cases the results file already holds")
    args = parser.parse_args()
    names = chosen(parser, args.cases, CASES)
    done = read_results(RESULTS).get("results", {})
    folder = args.folder or Path(tempfile.mkdtemp(prefix="silence-"))
    (folder / "study.py").write_text(STUDY_SCRIPT)
    for name in names:
        if name in done and not args.again:
            print(f"{name}: kept from {RESULTS.name} (--again reruns it)")
            continue
        shown = "noiseaware " + " ".join(CASES[name][3:]) if CASES[name][:3] == CLI else " ".join(CASES[name][1:])
        print(f"{name}: {shown}", flush=True)
        row = silences(CASES[name], folder, args.timeout) | provenance(f"python benchmarks/silence.py --cases {name}")
        print(
            f"  {row['seconds']:.0f} s, status {row['status']}, longest silence {row['longest_silence']:.1f} s "
            f"(ended by: {row['ended_by'][-60:]!r})",
            flush=True,
        )
        merge_results(RESULTS, {name: row})


if __name__ == "__main__":
    main()
