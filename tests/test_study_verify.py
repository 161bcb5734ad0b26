"""Re-verifying a study folder from someone else (issue 40): a task checksum finds accidents, not forgery, so
`verify=K` recomputes K finished tasks drawn at random and compares them with the stored results. A forged result
(the number changed, its checksum recomputed, as anyone can) is caught; an honest folder passes, timings aside."""

import numpy as np
import pytest
from messages import mentions

from noiseaware.cli import main
from noiseaware.studies import Plan, StudyDirectory, make_task, run_study
from noiseaware.studies.files import read_result, write_result
from noiseaware.studies.verify import ResultMismatch, result_differences


def timed_sum(values):
    """A result with a timing beside its number, as the studies' parts carry (`dpvi_seconds`)."""
    return {"total": float(np.sum(values)), "values": np.asarray(values) * 2.0, "fit_seconds": np.random.rand()}


def tiny_study(folder, count=4):
    tasks = tuple(make_task(timed_sum, (np.arange(100.0) + i,), {"timed_sum": i}, f"sum {i}") for i in range(count))
    plan = Plan("loose", {"what": "a test"}, tasks)
    return plan, run_study(plan, folder)


def forge(directory, task, **changes):
    """Rewrite a task's result with `changes` and a checksum recomputed: what an integrity check cannot see."""
    path = directory.result_path(task)
    result, seconds = read_result(path, task.id)
    path.unlink()
    write_result(path, task.id, {**result, **changes}, seconds)


def test_an_honest_folder_passes_and_its_checks_are_logged(tmp_path):
    plan, results = tiny_study(tmp_path)
    again = run_study(plan, tmp_path, verify=4)  # every finished task recomputed; the timings differ, ignored
    assert again.keys() == results.keys()
    assert (tmp_path / "events.jsonl").read_text().count('"verified"') == 4


def test_a_forged_result_with_its_checksum_recomputed_is_caught(tmp_path):
    plan, _ = tiny_study(tmp_path)
    directory = StudyDirectory(tmp_path)
    forge(directory, plan.tasks[2], total=0.0)
    assert run_study(plan, tmp_path)  # the checksum alone cannot see it
    with pytest.raises(ResultMismatch) as info:
        run_study(plan, tmp_path, verify=4)
    mentions(info, "1", "4", "sum", "2:", "result.total:", "0", "5150")
    forge(directory, plan.tasks[1], values=np.zeros(100))
    with pytest.raises(ResultMismatch) as info:
        run_study(plan, tmp_path, verify=4)
    mentions(info, "sum", "1", "result.values", "200")


def test_differences_name_where_and_leave_timings_out():
    a = {"x": np.ones(100), "n": 3, "dpvi_seconds": 1.0, "parts": [1.0, {"seconds": 2.0}]}
    assert result_differences(a, {**a, "dpvi_seconds": 9.0, "parts": [1.0, {"seconds": 5.0}]}) == []
    assert result_differences(a, {**a, "x": np.ones(100) * (1 + 1e-9)}) == []  # another CPU's last bits
    for changed, where, stored, recomputed in [
        ({"n": 4}, "result.n:", "3", "4"),
        ({"x": np.ones(99)}, "result.x:", "(100,)", "(99,)"),
        ({"x": {"y": 1}}, "result.x:", "array", "other"),
    ]:
        (line,) = result_differences(a, {**a, **changed})
        assert line.startswith(where + " ")
        mentions(line, "stored", stored, "recomputed", recomputed)
        assert line.index("stored") < line.index(stored) < line.index("recomputed") < line.rindex(recomputed)


def test_the_study_commands_take_verify_and_refuse_a_negative_count(capsys):
    assert main(["coverage", "--model", "M1", "--epsilon", "1", "--verify", "-1", "--out", "never"]) == 2
    assert "--verify" in capsys.readouterr().err


def test_a_real_coverage_study_recomputes_to_its_stored_results(tmp_path):
    """Every number of a coverage task but its timings is a function of the task's identity: recomputed, the
    stored parts agree (so verify raises no false alarm on an honest folder of a real kind)."""
    import noiseaware as na
    from noiseaware.studies import coverage_study

    design = dict(levels=[("noise_multiplier", 20.0)], key=0, methods=("exact", "naive"), simulations=4,
                  references=2, samples=200, steps=200, chunk=2)  # fmt: skip
    bm = na.models.get("M2", preset="research")
    first = coverage_study(bm, out=tmp_path, **design)
    again = coverage_study(bm, out=tmp_path, verify=2, **design)
    assert (tmp_path / "events.jsonl").read_text().count('"verified"') == 2
    (level,) = first
    assert again[level].rmse == first[level].rmse
