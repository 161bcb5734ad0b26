"""`noiseaware report DIR`: a study's state and summary, rebuilt from its directory alone (no work is run).

Prints the tasks done / not yet run / failed (from the verified result files and events.jsonl), then, for
every privacy level whose tasks have all finished, the table its command prints, and rewrites that level's
summary files in DIR (the study's own, rebuilt from its tasks). A level still missing tasks is named with its
count; run the study's command again to finish it.
"""

from __future__ import annotations

from collections import Counter

from ..studies import StudyDirectory
from ..studies.levels import level_of, level_text
from .outputs import Outputs


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="a study's progress and tables, rebuilt from its directory",
        description="Read the study in DIR (written by coverage, calibrate or tune with --out DIR): print how "
        "many of its tasks have finished, failed or not yet run, and the tables of every privacy level whose "
        "tasks have all finished, rewriting that level's summary files in DIR. Runs no task; the study's own "
        "command resumes it.",
    )
    parser.add_argument("directory", metavar="DIR", help="a study directory")
    parser.set_defaults(run=run)


def run(args) -> int:
    directory = StudyDirectory(args.directory)
    plan = directory.plan()
    results = {}
    for task in plan.tasks:
        loaded = directory.load(task)
        if loaded is not None:
            results[task.id] = loaded[0]
    failed = _failed(directory, set(results))
    description = directory.description()
    what = ", ".join(f"{k} {v}" for k, v in description["description"].items())
    print(f"{plan.kind} study in {directory.path}: {what}")
    print(
        f"tasks: {len(results)} done, {len(failed)} failed, {len(plan.tasks) - len(results) - len(failed)} not yet "
        f"run, of {len(plan.tasks)}"
    )
    for task_id, text in failed.items():
        label = next(t.label for t in plan.tasks if t.id == task_id)
        print(f"  failed: {label}: {text}")
    render = RENDERERS.get(plan.kind)
    if render is None:  # e.g. plans combined in Python (Plan.combined): merge them there
        print(f"no tables for a study of kind {plan.kind!r}: merge it in Python (StudyDirectory(DIR).plan().merge)")
        return 0
    return render(plan, results, directory)


def _failed(directory: StudyDirectory, done: set[str]) -> dict[str, str]:
    """Tasks whose last event is a final failure and that have no result: {id: error text}."""
    last = {event["task"]: event for event in directory.events()}
    return {i: e.get("detail", "") for i, e in last.items() if e["event"] == "failed" and i not in done}


def _coverage(plan, results, directory: StudyDirectory) -> int:
    from .coverage import level_stem, show_level, write_level

    merged = plan.merge(plan, results)
    parts = Counter()
    finished = Counter()
    for task in plan.tasks:
        spec, _ = task.arguments
        level = level_of(spec)
        parts[level] += 1
        finished[level] += task.id in results
    outputs = Outputs(force=True)
    for level, total in parts.items():
        if level not in merged:
            print(f"\n{plan.description['model']}, {level_text(*level)}: {finished[level]} of {total} tasks done")
            continue
        result = merged[level]
        show_level(result, plan.description["key"])
        write_level(result, directory.path, level_stem(result.settings["model"], *level), outputs)
    return 0


def _calibration(plan, results, directory: StudyDirectory) -> int:
    from .calibrate import show_level, write_level
    from .options import level_tag

    merged = plan.merge(plan, results)
    outputs = Outputs(force=True)
    dataset = plan.description["dataset"]
    for level in map(tuple, plan.description["levels"]):
        if level not in merged:
            print(f"\n{dataset}, {level_text(*level)}: not all of its tasks (or the reference's) are done")
            continue
        show_level(merged[level], plan.description["key"])
        write_level(merged[level], directory.path, f"calibration-{dataset}-{level_tag(*level)}", outputs)
    return 0


RENDERERS = {"coverage": _coverage, "calibration": _calibration}
"""How each kind of study is shown: render(plan, finished results, directory) → exit status."""
