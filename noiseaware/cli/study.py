"""`noiseaware study KIND`, and what it, `coverage` and `calibrate` share as studies: --out DIR holds the study,
run where asked.

    noiseaware study privacy-utility --model M1 --epsilons 0.3 1 3 --out pu/ --workers 2

`study` runs any registered kind that has a design (`StudyKind.design`, a frozen dataclass): its flags are the
design's fields (--field-name, typed by the field's annotation, with its default and the help in its metadata),
so a new kind of study needs no code here.

    --workers N            N local worker processes (a Dask LocalCluster, or spawned processes with
                           --engine processes), each pinned to its share of the cores
    --scheduler ADDRESS    the workers of a running Dask scheduler (tcp://host:port or a scheduler file)
    --chunk N              simulations (or runs) per task
    --no-resume            refuse a directory that already holds this study instead of resuming it

Every run is a study in DIR (docs/studies.md): finished tasks are kept there as they finish, so running
the same command again resumes it; a directory holding another study, or one another process is running,
is refused before any work. The output files of a study are its own: a resumed study rewrites them (they
are rebuilt from the tasks). Each finished part is printed and saved through its kind's contract (`StudyKind`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from pathlib import Path

from ..studies import KINDS, Plan, StudyDirectory, StudyKind, get_kind, open_executor, run_study
from .options import count, positive_int
from .outputs import Outputs


def add_study_options(parser, chunk: int | None = None, unit: str = "") -> None:
    """--workers, --scheduler, --engine, --chunk (where the command has a chunk size), --resume/--no-resume and
    --verify."""
    group = add_workers(
        parser, "the study lives in --out DIR: finished tasks are kept there, and the same command resumes it"
    )
    if chunk is not None:
        group.add_argument(
            "--chunk", type=positive_int, default=chunk, metavar="N", help=f"{unit} per task (default: %(default)d)"
        )
    group.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="resume a directory that holds this study (default); --no-resume refuses it",
    )
    group.add_argument(
        "--verify",
        type=count,
        default=0,
        metavar="K",
        help="before trusting the finished tasks found in --out (a folder from someone else), recompute K of them, "
        "drawn at random, and stop if one differs (default: %(default)d)",
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


def run_cli_study(args, plan: Plan, *, recompute: bool = False) -> int:
    """Run `plan` in --out, checked first (another study or a running one refused, each output file checked), on
    the executor the options name, with a progress bar; then print and save every part through its kind. With
    `recompute` (--force over results whose inputs changed unseen by the plan) the finished results are discarded
    first, so that nothing is reused."""
    directory = StudyDirectory(args.out)
    resumed = directory.holds(plan, resume=args.resume)
    kind = get_kind(plan.kind)
    outputs = Outputs(force=args.force or resumed)
    reported = [spec_record for spec_record, _ in kind.collect([(r, None) for r in plan.spec_records])]
    names = [name for spec_record in reported for name in kind.files(spec_record)]
    out = outputs.directory(args.out, "--out", names)
    directory.check_unlocked()
    if args.workers and args.workers > 1 and len(plan.tasks) < args.workers:
        print(
            f"note: this study has {len(plan.tasks)} task(s), so at most {len(plan.tasks)} of the {args.workers} "
            "workers can help: a smaller --chunk gives more tasks",
            file=sys.stderr,
        )
    with outputs.writing(), directory.lock():
        if recompute and directory.discard_results():
            print(f"note: the results in {args.out} were of other inputs: all tasks run again", file=sys.stderr)
        with executor_of(args) as (executor, slots):
            entries = run_study(
                plan, out, executor=executor, slots=slots, resume=args.resume, progress=True, verify=args.verify
            )
        for spec_record, result in entries:
            text, warnings = kind.render(spec_record, result)
            print(f"\n{text}")
            for line in warnings:
                print(line, file=sys.stderr)
            kind.save(spec_record, result, Path(out), outputs.force)
            print(f"wrote {', '.join(str(Path(out) / name) for name in kind.files(spec_record))}")
    return 0


def add_parser(subparsers) -> None:
    """`noiseaware study KIND …` for every registered kind with a design."""
    designed = [kind for kind in KINDS.values() if kind.design is not None]
    parser = subparsers.add_parser(
        "study",
        help="run a kind of study from its design: " + ", ".join(kind.name for kind in designed),
        description="Run a kind of study in --out DIR as tasks, resumably (docs/studies.md); "
        "`noiseaware study KIND --help` lists the kind's settings.",
    )
    chosen = parser.add_subparsers(title="kinds of study", dest="kind", required=True)
    for kind in designed:
        sub = chosen.add_parser(kind.name, help=kind.description, description=kind.description)
        settings = sub.add_argument_group("the study's settings (its design)")
        hints = typing.get_type_hints(kind.design)
        for field in dataclasses.fields(kind.design):
            _add_field(settings, field, hints[field.name])
        sub.add_argument("--out", required=True, metavar="DIR", help="the study's folder (created when missing)")
        sub.add_argument("--force", action="store_true", help="replace the study's spec_record files where they exist")
        add_study_options(sub)
        sub.set_defaults(run=run, study_kind=kind)


def run(args) -> int:
    kind: StudyKind = args.study_kind
    values = {field.name: getattr(args, field.name) for field in dataclasses.fields(kind.design)}
    design = kind.design(**{name: tuple(v) if isinstance(v, list) else v for name, v in values.items()})
    return run_cli_study(args, kind.plan(design))


def _add_field(group, field: dataclasses.Field, annotation) -> None:
    """--field-name for one field of a design: its type from the annotation (int, float, str, bool, a tuple of one
    of those: one or more values; X | None: optional), its default, and its help from field.metadata["help"]."""
    flag = "--" + field.name.replace("_", "-")
    required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    default = (
        None if required else (field.default if field.default is not dataclasses.MISSING else field.default_factory())
    )
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    if options:  # X | None
        annotation = next(option for option in options if option is not type(None))
    text = field.metadata.get("help", "")
    shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
    text += "" if required or default is None else f" (default: {shown})"
    if annotation is bool:
        group.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=text)
    elif typing.get_origin(annotation) is tuple:
        element = typing.get_args(annotation)[0]
        group.add_argument(flag, type=element, nargs="+", default=default, required=required, help=text)
    else:
        group.add_argument(
            flag, type=annotation, default=default, required=required, help=text, metavar=field.name.upper()
        )
