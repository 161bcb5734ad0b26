"""Study folders from someone else (issue 40): `noiseaware report` writes nothing and names what is wrong, no
symbolic link leads a report or a resumed study out of the folder, every kind of damage to a task file is one
CorruptResult, an unreadable lock or events line is named, and an edited plan.json is refused. Each test makes a
real folder with a tiny study of loose tasks (no model is fitted: fast)."""

import json
import os

import numpy as np
import pytest
from cli_helpers import task_counts
from messages import mentions

from noiseaware.cli import main
from noiseaware.studies import (
    CorruptResultWarning,
    Plan,
    StudyDirectory,
    StudyLocked,
    UnsafeLink,
    make_task,
    run_study,
)
from noiseaware.studies.directory import StudyFolderError
from noiseaware.studies.files import CorruptResult, read_result
from noiseaware.studies.plan import content_checksum


def tiny_study(folder):
    """Three loose tasks, each abs of a long array (so that a task file holds a real array header), run in
    `folder`: (plan, {task id: result})."""
    tasks = tuple(make_task(np.abs, (-np.arange(20_000.0) - i,), {"abs": i}, f"abs {i}") for i in range(3))
    plan = Plan("loose", {"what": "a test"}, tasks)
    return plan, run_study(plan, folder)


def snapshot(folder):
    """Every path under `folder` with its bytes (or "dir"), and its modification time."""
    return {
        str(p.relative_to(folder)): ("dir" if p.is_dir() else p.read_bytes(), p.lstat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def damage_header(path):
    """Overwrite a few bytes inside the array header of the task file at `path` (numpy's header parser raises
    tokenize.TokenError on it)."""
    data = bytearray(path.read_bytes())
    at = data.find(b"'shape': (20000")
    data[at : at + 13] = b"'shape': [(((("[:13]
    path.write_bytes(bytes(data))


def test_report_writes_nothing_and_names_corrupt_tasks_which_the_study_then_sets_aside(tmp_path, capsys):
    plan, results = tiny_study(tmp_path)
    directory = StudyDirectory(tmp_path)
    damage_header(directory.result_path(plan.tasks[0]))
    directory.result_path(plan.tasks[1]).unlink()
    directory.result_path(plan.tasks[1]).mkdir()  # a task file replaced by a directory
    with open(tmp_path / "events.jsonl", "ab") as handle:
        handle.write(b'{"task": "\xff\xfe", "event": "done"}\n')  # a line that is not UTF-8
    before = snapshot(tmp_path)
    assert main(["report", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert task_counts(out) == {"done": 1, "corrupt": 2, "failed": 0, "not yet run": 0, "of": 3}
    assert "corrupt: abs 0:" in out and "TokenError" in out and "corrupt: abs 1:" in out and "IsADirectoryError" in out
    mentions(out, "rerun")
    lines = len((tmp_path / "events.jsonl").read_bytes().splitlines())
    assert err.startswith("note: ")
    mentions(err, "1", "line(s)", str(tmp_path / "events.jsonl"), "UTF-8", "JSON", str(lines))
    assert snapshot(tmp_path) == before  # nothing renamed, appended or locked
    with pytest.warns(CorruptResultWarning) as caught:
        again = run_study(plan, tmp_path)
    assert {task_id: np.array_equal(again[task_id], results[task_id]) for task_id in results} == dict.fromkeys(
        results, True
    )
    assert len(caught) == 2 and all("moved aside to" in str(w.message) for w in caught)
    assert sorted(p.name for p in (tmp_path / "tasks").glob("*.corrupt")) == sorted(
        f"{task.id}.npz.corrupt" for task in plan.tasks[:2]
    )


def test_a_damaged_array_header_is_a_corrupt_result_not_a_traceback(tmp_path):
    plan, _ = tiny_study(tmp_path)
    path = StudyDirectory(tmp_path).result_path(plan.tasks[2])
    damage_header(path)
    with pytest.raises(CorruptResult) as info:
        read_result(path, plan.tasks[2].id)
    mentions(info, "TokenError")
    data = bytearray(path.read_bytes())
    data[data.find(b"'shape") + 6] = 0  # a NUL byte in the header
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptResult) as raised:
        read_result(path, plan.tasks[2].id)
    mentions(raised, str(path))
    path.write_bytes(path.read_bytes()[:2000])  # truncated
    with pytest.raises(CorruptResult) as info:
        read_result(path, plan.tasks[2].id)
    mentions(info, str(path))


@pytest.mark.parametrize("link", ["events.jsonl", "task file", "tasks"])
def test_a_symbolic_link_out_of_the_folder_is_refused_by_report_and_by_a_resumed_study(tmp_path, capsys, link):
    folder, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    plan, _ = tiny_study(folder)
    elsewhere.mkdir()
    directory = StudyDirectory(folder)
    if link == "events.jsonl":
        victim = elsewhere / "victim.txt"
        victim.write_text("someone's file\n")
        (folder / "events.jsonl").unlink()
        (folder / "events.jsonl").symlink_to(victim)
        named = folder / "events.jsonl"
    elif link == "task file":
        victim = elsewhere / "result.npz"
        directory.result_path(plan.tasks[0]).rename(victim)
        directory.result_path(plan.tasks[0]).symlink_to(victim)
        named = directory.result_path(plan.tasks[0])
    else:
        (folder / "tasks").rename(elsewhere / "tasks")
        (folder / "tasks").symlink_to(elsewhere / "tasks")
        victim, named = elsewhere / "tasks", folder / "tasks"
    before = snapshot(elsewhere)
    assert main(["report", str(folder)]) == 2
    mentions(capsys.readouterr().err, str(named), str(victim), str(folder))
    with pytest.raises(UnsafeLink) as info:
        run_study(plan, folder)
    mentions(info, str(folder))
    assert snapshot(elsewhere) == before and not (folder / "lock").exists()


@pytest.mark.parametrize("link", ["events.jsonl", "task file"])
def test_a_hard_link_in_the_folder_is_refused_as_a_symbolic_one_is(tmp_path, capsys, link):
    """A hard link is another name for a file elsewhere: a resumed study would append to (or a report read) that
    file. Refused by report and by a resumed study, before anything is written; the file elsewhere is unchanged."""
    folder, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    plan, _ = tiny_study(folder)
    elsewhere.mkdir()
    named = folder / "events.jsonl" if link == "events.jsonl" else StudyDirectory(folder).result_path(plan.tasks[0])
    victim = elsewhere / "victim"
    os.link(named, victim)
    before = snapshot(elsewhere)
    assert main(["report", str(folder)]) == 2
    mentions(capsys.readouterr().err, str(named), "hard", "copy")
    with pytest.raises(UnsafeLink) as info:
        run_study(plan, folder)
    mentions(info, "hard", str(named))
    assert snapshot(elsewhere) == before and not (folder / "lock").exists()


def test_a_lock_file_that_cannot_be_read_is_named_with_how_to_clear_it(tmp_path, capsys):
    plan, _ = tiny_study(tmp_path)
    (tmp_path / "lock").write_bytes(b"\x00garbage")
    with pytest.raises(StudyLocked) as raised:
        run_study(plan, tmp_path)
    mentions(raised, "lock", str(tmp_path), str(tmp_path / "lock"))
    assert main(["report", str(tmp_path), "--write"]) == 2
    err = capsys.readouterr().err
    mentions(err, "lock")
    assert "process ?" not in err
    (tmp_path / "lock").write_text(json.dumps(["a", "list"]))
    with pytest.raises(StudyLocked) as info:
        run_study(plan, tmp_path)
    mentions(info, "process", "host")
    (tmp_path / "lock").unlink()
    assert len(run_study(plan, tmp_path)) == 3  # cleared as the message says: the study resumes


@pytest.mark.parametrize("edit", ["description", "task removed", "task id", "spec identity", "checksum deleted"])
def test_an_edited_plan_is_refused_before_it_is_used(tmp_path, capsys, edit):
    import noiseaware as na
    from noiseaware.studies import coverage_plan

    if edit == "spec identity":  # a kind's plan: its tasks are named by their spec's identity
        plan = coverage_plan(
            na.models.get("beta-bernoulli"),
            levels=[("noise_multiplier", 20.0)],
            key=0,
            methods=("naive",),
            simulations=4,
            references=2,
            samples=100,
            steps=200,
            chunk=2,
        )
        StudyDirectory(tmp_path).prepare(plan)
    else:
        tiny_study(tmp_path)
    record = json.loads((tmp_path / "plan.json").read_text())
    if edit in ("description", "checksum deleted"):
        record["description"]["what"] = "another study"  # display text: found by the checksum alone
    elif edit == "task removed":
        record["tasks"].pop()
    elif edit == "task id":
        record["tasks"][0]["id"] = "0" * 16
    else:
        record["specs"][0]["identity"]["fields"]["simulations"] = 400
    if edit == "checksum deleted":  # the edit hidden by dropping the checksum (once read as an older plan's)
        del record["checksum"]
    elif edit != "description":  # as a careful editor would: the checksum recomputed, the ids then disagree
        record["checksum"] = content_checksum(record)
    (tmp_path / "plan.json").write_text(json.dumps(record))
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    mentions(err, str(tmp_path / "plan.json"), "changed", "rerun")


@pytest.mark.parametrize("replaced", ["tasks", "events.jsonl"])
def test_a_folder_whose_files_are_not_of_their_kind_is_refused_before_any_work(tmp_path, capsys, replaced):
    plan, _ = tiny_study(tmp_path)
    if replaced == "tasks":
        for path in (tmp_path / "tasks").iterdir():
            path.unlink()
        (tmp_path / "tasks").rmdir()
        (tmp_path / "tasks").write_text("not a folder")
        wanted = "a directory"
    else:
        (tmp_path / "events.jsonl").unlink()
        (tmp_path / "events.jsonl").mkdir()
        wanted = "a file"
    before = snapshot(tmp_path)
    assert main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path / replaced} is not {wanted}" in capsys.readouterr().err
    with pytest.raises(StudyFolderError) as info:
        run_study(plan, tmp_path)
    mentions(info, str(tmp_path))
    assert snapshot(tmp_path) == before
