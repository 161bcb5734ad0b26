"""What `coverage` and `calibrate` share as studies: --out DIR holds the study, run where asked.

    --workers N            N local worker processes (a Dask LocalCluster, or spawned processes with
                           --engine processes), each pinned to its share of the cores
    --scheduler ADDRESS    the workers of a running Dask scheduler (tcp://host:port or a scheduler file)
    --chunk N              simulations (or runs) per task
    --no-resume            refuse a directory that already holds this study instead of resuming it

Every run is a study in DIR (docs/studies.md): finished tasks are kept there as they finish, so running
the same command again resumes it; a directory holding another study, or one another process is running,
is refused before any work. The summary files of a study are its own: a resumed study rewrites them (they
are rebuilt from the tasks). Each finished part is printed and saved through its kind's contract (`StudyKind`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..studies import Plan, StudyDirectory, get_kind, open_executor, run_study
from .options import positive_int
from .outputs import Outputs


def add_study_options(parser, chunk: int, unit: str) -> None:
    """--workers, --scheduler, --engine, --chunk and --resume/--no-resume."""
    group = add_workers(
        parser, "the study lives in --out DIR: finished tasks are kept there, and the same command resumes it"
    )
    group.add_argument(
        "--chunk", type=positive_int, default=chunk, metavar="N", help=f"{unit} per task (default: %(default)d)"
    )
    group.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="resume a directory that holds this study (default); --no-resume refuses it",
    )


def add_workers(parser, description: str):
    """--workers, --scheduler and --engine, in a group of their own (returned)."""
    group = parser.add_argument_group("where the study runs", description)
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--workers", type=positive_int, metavar="N", help="local worker processes (default: this process only)"
    )
    where.add_argument(
        "--scheduler", metavar="ADDRESS", help="a running Dask scheduler: tcp://host:port or a scheduler file"
    )
    group.add_argument(
        "--engine",
        choices=("dask", "processes"),
        default="dask",
        help="what runs --workers: a Dask LocalCluster or spawned processes (default: %(default)s)",
    )
    return group


def executor_of(args):
    """The executor context of --workers / --scheduler / --engine: yields (executor, slots)."""
    return open_executor(args.workers, args.scheduler, args.engine)


def run_cli_study(args, plan: Plan) -> int:
    """Run `plan` in --out, checked first (another study or a running one refused, each summary file checked), on
    the executor the options name, with a progress bar; then print and save every part through its kind."""
    directory = StudyDirectory(args.out)
    resumed = directory.holds(plan, resume=args.resume)
    kind = get_kind(plan.kind)
    outputs = Outputs(force=args.force or resumed)
    reported = [summary for summary, _ in kind.collect([(summary, None) for summary in plan.summaries])]
    names = [name for summary in reported for name in kind.files(summary)]
    out = outputs.directory(args.out, "--out", names)
    directory.check_unlocked()
    if args.workers and args.workers > 1 and len(plan.tasks) < args.workers:
        print(
            f"note: this study has {len(plan.tasks)} task(s), so at most {len(plan.tasks)} of the {args.workers} "
            "workers can help: a smaller --chunk gives more tasks",
            file=sys.stderr,
        )
    with outputs.writing(), directory.lock():
        with executor_of(args) as (executor, slots):
            entries = run_study(plan, out, executor=executor, slots=slots, resume=args.resume, progress=True)
        for summary, result in entries:
            text, warnings = kind.render(summary, result)
            print(f"\n{text}")
            for line in warnings:
                print(line, file=sys.stderr)
            kind.save(summary, result, Path(out), outputs.force)
            print(f"wrote {', '.join(str(Path(out) / name) for name in kind.files(summary))}")
    return 0
