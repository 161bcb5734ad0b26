"""Studies as tasks (na.studies): exact merging wherever tasks run, resuming, verification of result files,
plan mismatches, executors (a real 2-worker Dask LocalCluster, spawned processes) and thread pinning."""

import dataclasses
import os
import pickle
from concurrent.futures import Executor
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest
from cli_helpers import task_counts
from messages import mentions

import noiseaware as na
from noiseaware.cli import main
from noiseaware.evaluation.coverage import coverage_spec
from noiseaware.studies import (
    CorruptResultWarning,
    InProcessExecutor,
    PlanMismatch,
    StudyDirectory,
    StudyError,
    TaskError,
    coverage_plan,
    coverage_study,
    dask_scheduler,
    local_cluster,
    make_task,
    merge_record,
    pin_threads,
    process_pool,
    run_plan,
    run_study,
)
from noiseaware.studies.files import CorruptResult, read_result, write_result
from noiseaware.util.errors import NO_OPTIMUM
from noiseaware.util.fingerprint import Unfingerprintable, canonical, fingerprint
from noiseaware.util.notes import Note

M2 = na.models.get("beta-bernoulli", preset="research")
SMALL = dict(methods=("exact", "naive"), simulations=6, references=3, samples=400, steps=300, chunk=2)
LEVELS = [("noise_multiplier", 20.0)]


def same(a: na.evaluation.CoverageResult, b: na.evaluation.CoverageResult) -> bool:
    """Bit for bit: every joint and marginal ECP curve, the failures and the diagnostics."""
    arrays = all(
        np.array_equal(getattr(a, part)[rule][m], getattr(b, part)[rule][m], equal_nan=True)
        for part in ("curves", "marginal_curves")
        for rule in a.curves
        for m in a.methods
    )
    return arrays and a.methods == b.methods and a.failures == b.failures and a.diagnostics == b.diagnostics


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    """The small study run in this process, its directory, and the same numbers from na.coverage."""
    out = tmp_path_factory.mktemp("study") / "in-process"
    result = coverage_study(M2, levels=LEVELS, key=7, out=out, **SMALL)[LEVELS[0]]
    return result, out


def test_a_study_gives_na_coverage_s_numbers_bit_for_bit(in_process):
    result, _ = in_process
    direct = na.coverage(M2, noise_multiplier=20.0, key=7, **SMALL)
    assert same(result, direct)
    assert result.settings["chunk"] == 2 and result.settings["simulations"] == 6


@pytest.mark.slow  # a Dask LocalCluster of two spawned workers: ~15 s
def test_a_2_worker_local_cluster_gives_the_in_process_numbers_bit_for_bit(in_process, tmp_path):
    result, _ = in_process
    with local_cluster(2) as (executor, slots):
        cores = executor._client.run(lambda: sorted(os.sched_getaffinity(0)))
        remote = coverage_study(M2, levels=LEVELS, key=7, out=tmp_path, executor=executor, slots=slots, **SMALL)
    assert slots == 2 and same(result, remote[LEVELS[0]])
    available = sorted(os.sched_getaffinity(0))
    share = max(1, len(available) // 2)
    assert all(len(c) == share for c in cores.values())  # each worker pinned to its share: no oversubscription
    if len(available) >= 2:
        first, second = cores.values()
        assert not set(first) & set(second)


def test_a_dask_scheduler_whose_workers_run_several_threads_is_refused_before_any_task():
    """numpyro's handler stack is one per process and not thread-safe: a study on a scheduler whose workers run two
    threads each is refused, naming the flag that starts them right."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster,
        pytest.raises(ValueError) as refused,
    ):
        with dask_scheduler(cluster.scheduler_address):
            pytest.fail("a crowded worker was accepted")
    mentions(refused, "threads", "--nthreads", "numpyro")


def affinity() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def test_spawned_processes_run_tasks_each_pinned_to_its_share_of_the_cores(tmp_path):
    from noiseaware.studies import Plan

    tasks = tuple(make_task(affinity, (), {"affinity": i}, f"affinity {i}") for i in range(3))
    tasks += (make_task(os.getpid, (), {"pid": 0}, "pid"),)
    plan = Plan("test", {"what": "where tasks run"}, tasks)
    with process_pool(2) as (executor, slots):
        results = run_study(plan, tmp_path, executor=executor, slots=slots)
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert all(len(results[t.id]) == share for t in tasks[:3]) and results[tasks[3].id] != os.getpid()


class StopAfter(Executor):
    """Runs `n` tasks in this process, then dies as an interrupted study does (KeyboardInterrupt)."""

    def __init__(self, n: int):
        self.n = n
        self.inner = InProcessExecutor()

    def submit(self, fn, /, *args, **kwargs):
        if self.n == 0:
            raise KeyboardInterrupt
        self.n -= 1
        return self.inner.submit(fn, *args, **kwargs)


def test_an_interrupted_study_resumes_with_only_the_rest_and_the_same_numbers(in_process, tmp_path):
    result, _ = in_process
    plan = coverage_plan(M2, levels=LEVELS, key=7, **SMALL)
    with pytest.raises(KeyboardInterrupt):
        run_plan(plan, StudyDirectory(tmp_path), executor=StopAfter(2))
    assert len(list((tmp_path / "tasks").glob("*.npz"))) == 2
    run = run_plan(plan, StudyDirectory(tmp_path))
    assert len(run.reused) == 2 and len(run.computed) == len(plan.tasks) - 2 == 1
    assert same(result, merge_record(plan.record(), run.results)[0][1])
    again = run_plan(plan, StudyDirectory(tmp_path))  # a finished study runs nothing
    assert again.computed == () and len(again.reused) == len(plan.tasks)


def test_a_corrupted_task_file_is_detected_kept_aside_and_recomputed(in_process):
    result, out = in_process
    plan = coverage_plan(M2, levels=LEVELS, key=7, **SMALL)
    path = StudyDirectory(out).result_path(plan.tasks[1])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the stored result
    path.write_bytes(bytes(data))
    with pytest.warns(CorruptResultWarning) as caught:
        run = run_plan(plan, StudyDirectory(out))
    mentions(caught, "CRC", ".npz.corrupt")
    assert run.computed == (plan.tasks[1].id,) and len(run.reused) == 2
    assert path.with_name(path.name + ".corrupt").read_bytes() == bytes(data)  # kept, never deleted
    assert same(result, merge_record(plan.record(), run.results)[0][1])
    events = (out / "events.jsonl").read_text()
    assert '"event": "corrupt"' in events


def test_another_plan_in_the_same_directory_is_refused_before_any_work(in_process):
    _, out = in_process
    before = sorted(p.name for p in (out / "tasks").iterdir())
    other = coverage_plan(M2, levels=LEVELS, key=7, **(SMALL | {"simulations": 8}))
    with pytest.raises(PlanMismatch) as info:
        run_plan(other, StudyDirectory(out), executor=StopAfter(0))
    mentions(info, str(out), "simulations")
    assert sorted(p.name for p in (out / "tasks").iterdir()) == before
    same_plan = coverage_plan(M2, levels=LEVELS, key=7, **SMALL)
    with pytest.raises(FileExistsError) as info:
        run_plan(same_plan, StudyDirectory(out), resume=False)
    mentions(info, str(out))


def test_another_chunk_size_agrees_to_rounding_and_prints_the_same_rmse(in_process, tmp_path):
    result, _ = in_process
    other = coverage_study(M2, levels=LEVELS, key=7, out=tmp_path, **(SMALL | {"chunk": 3}))[LEVELS[0]]
    for rule in result.curves:
        for m in result.methods:
            np.testing.assert_allclose(other.curves[rule][m], result.curves[rule][m], atol=1e-6)
    shown = [{r: f"{v[0]:.3f} ± {v[1]:.3f}" for r, v in x.rmse.items()} for x in (result, other)]
    assert shown[0] == shown[1]


def failing(x):
    raise ValueError(f"task {x} cannot run")


def flaky(marker):
    """Loses its worker the first time it runs (it leaves `marker`), succeeds the second."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise BrokenProcessPool("a worker died")
    return 42


def lost(_):
    raise BrokenProcessPool("a worker died")


def test_a_lost_worker_is_retried_once_and_a_task_that_raises_stops_the_study_with_its_traceback(tmp_path):
    from noiseaware.studies import Plan

    tasks = (
        make_task(flaky, (str(tmp_path / "marker"),), {"flaky": 1}, "flaky"),
        make_task(failing, (3,), {"failing": 3}, "failing"),
        make_task(abs, (-5,), {"abs": -5}, "abs"),
    )
    plan = Plan("test", {"what": "a test"}, tasks)
    with pytest.raises(TaskError) as raised:
        run_study(plan, tmp_path / "study")
    mentions(raised, "failing")
    assert isinstance(raised.value.__cause__, ValueError)  # the task's own error and traceback
    events = (tmp_path / "study" / "events.jsonl").read_text()
    assert events.count('"event": "retry"') == 1 and events.count('"event": "failed"') == 1
    assert "abs" not in events  # nothing new is submitted after a bug
    assert StudyDirectory(tmp_path / "study").load(tasks[0])[0] == 42  # the finished task is kept
    gone = Plan("test", {"what": "a lost worker"}, (make_task(lost, (1,), {"lost": 1}, "lost"),))
    with pytest.raises(StudyError) as info:
        run_study(gone, tmp_path / "gone")
    mentions(info, "1", "BrokenProcessPool")


def test_result_files_verify_their_task_and_checksum(tmp_path):
    path = tmp_path / "r.npz"
    small = np.array([[1.5, np.nan], [np.inf, 1e-300]], np.float32)  # written inside the JSON tree
    value = {"x": np.arange(100), "s": small, "y": (1.5, float("nan")), 2: [None, "text"],
             "w": Note("k", "do x", ("a",), 2.0)}  # fmt: skip
    write_result(path, "abc", value, 1.5)
    back, seconds = read_result(path, "abc")
    assert np.array_equal(back["x"], np.arange(100)) and back["y"][0] == 1.5 and np.isnan(back["y"][1])
    assert back["s"].dtype == np.float32 and np.array_equal(back["s"], small, equal_nan=True)
    assert back[2] == [None, "text"] and back["w"].parameters == ("a",) and seconds == 1.5
    with pytest.raises(CorruptResult) as info:
        read_result(path, "xyz")
    mentions(info, "abc", "xyz")
    with np.load(path) as stored:
        members = {name: stored[name] for name in stored.files}
    np.savez(path, **(members | {"a0": np.arange(1, 101)}))  # an array changed, its record kept
    with pytest.raises(CorruptResult) as info:
        read_result(path, "abc")
    mentions(info, str(path))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(CorruptResult) as info:
        read_result(path, "abc")
    mentions(info, str(path))
    path.write_bytes(pickle.dumps({"x": 1}))
    with pytest.raises(CorruptResult) as info:
        read_result(path, "abc")
    mentions(info, str(path))


def test_fingerprints_are_stable_and_tell_apart_what_matters():
    spec = coverage_spec(M2, noise_multiplier=20.0, key=7, **SMALL)
    again = coverage_spec(M2, noise_multiplier=20.0, key=7, **SMALL)
    assert fingerprint(spec) == fingerprint(again)
    assert fingerprint(spec) != fingerprint(dataclasses.replace(spec, samples=401))
    assert fingerprint(coverage_spec(M2, noise_multiplier=20, key=7, **SMALL)) == fingerprint(spec)  # 20 is 20.0
    assert fingerprint(0.1 + 0.2) != fingerprint(0.3)  # every bit of a float counts
    assert canonical(np.float32(1.5)) == {"dtype": "float32", "shape": [], "values": 1.5}
    with pytest.raises(Unfingerprintable) as info:
        canonical({"setting": object()})  # named by its type alone, two different objects would look the same
    mentions(info, "builtins:object")
    large = canonical(np.zeros(20_000))
    assert set(large) == {"dtype", "shape", "sha256"}


def test_pin_threads_gives_each_worker_its_own_share_of_the_cores():
    before = os.sched_getaffinity(0)
    try:
        cores = sorted(before)
        chosen = []
        for index in range(2):
            chosen.append(pin_threads(index, 2))
            assert os.sched_getaffinity(0) == set(chosen[-1])
            os.sched_setaffinity(0, before)
        share = max(1, len(cores) // 2)
        assert all(len(c) == share and set(c) <= before for c in chosen)
        if len(cores) >= 2:
            assert not set(chosen[0]) & set(chosen[1])
    finally:
        os.sched_setaffinity(0, before)


def test_a_calibration_study_gives_na_calibration_s_numbers(tmp_path):
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.normal(size=(300, 2)), np.ones(300)])
    y = (rng.uniform(size=300) < 1 / (1 + np.exp(-x @ np.array([1.0, -1.0, 0.2])))).astype(np.int32)
    data = na.datasets.Dataset("toy", x[:200], y[:200], x[200:], y[200:], ("a", "b", "bias"), "none")
    small = dict(methods=("exact", "naive"), runs=3, samples=50, steps=200, chunk=2, bins=4)
    levels = [("noise_multiplier", 5.0)]
    study = na.studies.calibration_study(data, levels=levels, key=3, out=tmp_path, **small)[levels[0]]
    direct = na.calibration(data, noise_multiplier=5.0, key=3, **small)
    for method in ("exact", "naive"):
        for name, values in direct.metrics[method].items():
            assert np.array_equal(study.metrics[method][name], values, equal_nan=True), (method, name)
    assert study.failures == direct.failures and study.settings["runs"] == 3


# ---------------------------------------------------------------- the command line

CLI_STUDY = ("coverage", "--model", "M2", "--noise-multiplier", "20", "--methods", "exact,naive", "--simulations",
             "4", "--references", "2", "--samples", "200", "--steps", "200", "--chunk", "2")  # fmt: skip


def test_the_cli_runs_a_study_resumes_it_reports_it_and_refuses_another_plan(capsys, tmp_path):
    from test_cli import run, single_error

    out = tmp_path / "cov"
    status, printed, err = run(capsys, *CLI_STUDY, "--out", out)
    assert status == 0, err
    table = printed[printed.index("method") :]
    assert (out / "plan.json").exists() and len(list((out / "tasks").glob("*.npz"))) == 2
    assert "running" in err and "failed" in err  # the progress across tasks
    status, again, err = run(capsys, *CLI_STUDY, "--out", out)  # the same study: resumed, nothing recomputed
    assert status == 0, err
    events = (out / "events.jsonl").read_text().splitlines()
    assert sum('"started"' in e for e in events) == 2
    assert again[again.index("method") :].split("fit s")[0] == table.split("fit s")[0]
    status, report, err = run(capsys, "report", out)
    assert status == 0, err
    assert task_counts(report) == {"done": 2, "failed": 0, "not yet run": 0, "of": 2}
    assert "exact" in report and "naive" in report
    next(out.glob("tasks/*.npz")).unlink()
    status, report, err = run(capsys, "report", out)
    assert status == 0 and task_counts(report) == {"done": 1, "failed": 0, "not yet run": 1, "of": 2}
    line = single_error(capsys, *CLI_STUDY[:-2], "--chunk", "4", "--out", out)
    mentions(line, str(out), "chunk:", "2", "→", "4")
    line = single_error(capsys, *CLI_STUDY, "--out", out, "--no-resume")
    mentions(line, str(out), "resume")
    assert "holds no study" in single_error(capsys, "report", tmp_path)


def no_optimum(trace, key, options):
    """A plug-in whose every fit fails for a statistical reason."""
    raise na.FitFailure(NO_OPTIMUM, "made up for the test")


def has_a_bug(trace, key, options):
    """A plug-in with a bug."""
    return [][1]


def test_a_statistical_failure_is_counted_by_reason_and_a_bug_stops_the_study_with_its_traceback(tmp_path, capsys):
    small = SMALL | {"simulations": 4, "methods": ("naive", na.methods.per_trace("never", no_optimum))}
    result = coverage_study(M2, levels=LEVELS, key=7, out=tmp_path / "counted", **small)[LEVELS[0]]
    assert result.failures == {"naive": 0, "never": 4}
    assert result.diagnostics["never"]["failure_reasons"] == {NO_OPTIMUM: 4}
    assert main(["report", str(tmp_path / "counted")]) == 0  # from the folder's data alone
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: never: ")]
    mentions(warning, "fits", "4")
    assert NO_OPTIMUM in warning  # the reason, counted
    buggy = SMALL | {"simulations": 4, "methods": ("naive", na.methods.per_trace("buggy", has_a_bug))}
    with pytest.raises(TaskError) as raised:
        coverage_study(M2, levels=LEVELS, key=7, out=tmp_path / "bug", **buggy)
    mentions(raised, "bug")
    assert isinstance(raised.value.__cause__, IndexError)
    events = (tmp_path / "bug" / "events.jsonl").read_text()
    assert events.count('"event": "started"') == 1 and "IndexError" in events  # nothing more was submitted
