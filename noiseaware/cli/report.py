"""`noiseaware report DIR`: a study's state and tables, rebuilt from its directory alone (no task is run).

Reads only data (plan.json, the tasks' .npz result files and events.jsonl; nothing is unpickled, so a folder from
anyone can be reported) and writes nothing: no event is appended, no lock taken, a result file that does not
verify is named ("corrupt"), not moved; the study's own command sets it aside and recomputes it. A symbolic link
that leads out of the folder is refused (`StudyDirectory.check_files`). Prints the tasks done / corrupt / failed /
not yet run (from the verified result files and events.jsonl, whose unreadable lines are named and skipped),
then, for every part of the study whose tasks have all finished, the table its command prints (each kind of
study through its `StudyKind`). With --write, rewrites those output files in DIR (the study's own, rebuilt from
its tasks), unless another process is running the study.
"""

from __future__ import annotations

import sys

from ..studies import KINDS, StudyDirectory, merge_record
from ..studies.files import CorruptResult
from .outputs import Outputs


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="a study's progress and tables, rebuilt from its directory",
        description="Read the study in DIR (written by coverage or calibrate with --out DIR): print how many of its "
        "tasks have finished, failed or not yet run, and the tables of every privacy level whose tasks have all "
        "finished. Runs no task and reads only data (plan.json and the tasks' .npz files), so a study folder from "
        "anyone is safe to report; the study's own command resumes it. --write also rewrites the output files "
        "(.json, .csv, .png) of the finished levels in DIR.",
    )
    parser.add_argument("directory", metavar="DIR", help="a study directory")
    parser.add_argument(
        "--write",
        action="store_true",
        help="rewrite the finished levels' output files in DIR (the study's own files, rebuilt from its tasks)",
    )
    parser.set_defaults(run=run)


def run(args) -> int:
    directory = StudyDirectory(args.directory)
    record = directory.record()
    kind = KINDS.get(record["kind"])
    if args.write:
        directory.check_unlocked()
    results, corrupt = {}, {}
    for task in record["tasks"]:
        try:
            loaded = directory.read(task["id"])
        except CorruptResult as error:
            corrupt[task["id"]] = str(error)
            continue
        if loaded is not None:
            results[task["id"]] = loaded[0]
    events, skipped = directory.read_events()
    failed = _failed(events, set(results) | set(corrupt))
    what = ", ".join(f"{k} {v}" for k, v in record["description"].items())
    total = len(record["tasks"])
    print(f"{record['kind']} study in {directory.path}: {what}")
    waiting = total - len(results) - len(failed) - len(corrupt)
    bad = f"{len(corrupt)} corrupt, " if corrupt else ""
    print(f"tasks: {len(results)} done, {bad}{len(failed)} failed, {waiting} not yet run, of {total}")
    labels = {task["id"]: task["label"] for task in record["tasks"]}
    for task_id, text in corrupt.items():
        print(f"  corrupt: {labels.get(task_id, task_id)}: {text}")
    if corrupt:
        print(
            f"  {len(corrupt)} corrupt result file(s), left as they are: rerun the study to recompute them (it moves "
            "each aside to <id>.npz.corrupt)"
        )
    for task_id, text in failed.items():
        print(f"  failed: {labels.get(task_id, task_id)}: {text}")
    if skipped:
        lines = ", ".join(map(str, skipped[:10])) + (", …" if len(skipped) > 10 else "")
        print(
            f"note: {len(skipped)} line(s) of {directory.path / 'events.jsonl'} are not UTF-8 JSON events and were "
            f"skipped (line {lines}); the task counts come from the result files",
            file=sys.stderr,
        )
    if kind is None:
        print(f"no tables for a study of kind {record['kind']!r}: no such kind is registered in this noiseaware")
        return 0
    outputs = Outputs(force=True)
    for spec_record, result in merge_record(record, results):
        if result is None:
            label = kind.label(spec_record)
            print(f"\n{label}: not all of its tasks are done; run the study's command again to finish it")
            continue
        text, warnings = kind.render(spec_record, result)
        print(f"\n{text}")
        for line in warnings:
            print(line, file=sys.stderr)
        if args.write:
            paths = [directory.path / name for name in kind.files(spec_record)]
            with outputs.writing(paths):
                kind.save(spec_record, result, directory.path, True)
            print(f"wrote {', '.join(path.name for path in paths)}")
    return 0


def _failed(events: list[dict], done: set[str]) -> dict[str, str]:
    """Tasks whose last event is a final failure and that have no result file: {id: error text}."""
    last = {event["task"]: event for event in events}
    return {i: e.get("detail", "") for i, e in last.items() if e["event"] == "failed" and i not in done}
