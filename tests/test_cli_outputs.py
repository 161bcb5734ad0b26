"""Safe outputs on the command line (issue 14, defects 1 and 2): every command that writes refuses an
existing file unless --force and an output that is one of its inputs even with --force; every argument
and every output location is checked before any work; a failing command leaves nothing behind. Also
`fit` without --out (nothing written), --plot in PDF and SVG, and --allow-weak-privacy.

The studies (`coverage`, `calibrate`: `run_study`) and the demo's recording are replaced by stand-ins where a
test is about what happens around them: the stand-in fails the test if a check let the work start."""

import importlib
import os
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from cli_helpers import run, saved, sgd_trace, single_error
from messages import mentions
from toy_results import coverage_result

import noiseaware as na
from noiseaware.evaluation.calibration_result import METRICS, CalibrationResult
from noiseaware.studies import COVERAGE, Plan

DATASETS = importlib.import_module("noiseaware.datasets")
COVERAGE_FILES = [
    f"coverage-gamma-exponential-{tag}{suffix}"
    for tag in ("sigma-5", "sigma-10")
    for suffix in (".json", ".csv", ".nc", ".used.json", ".png", "-width.png")
]
CALIBRATION_FILES = [
    f"calibration-adult-{tag}{suffix}" for tag in ("sigma-5", "sigma-10") for suffix in (".json", ".nc", ".png")
]
COVERAGE_ARGS = ("coverage", "--model", "M1", "--noise-multiplier", "5", "10", "--steps", "100")
CALIBRATE_ARGS = ("calibrate", "--noise-multiplier", "5", "10", "--methods", "exact", "--steps", "100")


def listing(folder: Path) -> list[str]:
    """Every path under `folder`, relative, sorted: what a command left behind."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def no_work(*args, **kwargs):
    pytest.fail("the work started although a check should have stopped the command")


@pytest.fixture
def studies(monkeypatch):
    """Stand-ins for running a study (and for planning calibration and loading Adult) that return small results
    at once; the privacy levels (σ) they were run at are listed in the returned list."""
    calls = []

    def calibration_plan(data, *, levels, key, methods, **options):
        summaries = tuple(
            {"dataset": "adult", "level": list(level), "key": "0", "methods": list(methods)} for level in levels
        )
        return Plan("calibration", {"levels": list(levels)}, (), spec_records=summaries)

    def run_study(plan, out, **options):
        entries = []
        for summary in plan.spec_records:
            level = summary["level"]
            calls.append(level[1])
            if plan.kind == "calibration":
                result = calibration(summary["methods"], level[1])
            else:
                result = coverage_result(
                    model=summary["model"], noise_multiplier=level[1], references=2, samples=10, steps=100
                )
            entries.append((summary, result))
        return entries

    def calibration(methods, noise_multiplier):
        curves = {"mean_predicted": [[0.2, 0.6]] * 2, "fraction_positive": [[0.3, 0.5]] * 2, "counts": [[5, 5]] * 2}
        return CalibrationResult(
            metrics={m: {k: np.array([0.02, 0.03]) for k in METRICS} for m in methods},
            curves={m: {k: np.array(v) for k, v in curves.items()} for m in methods},
            histograms={m: np.ones((2, 20), int) for m in methods},
            paired_methods=tuple(methods),
            failures={m: 0 for m in methods},
            seconds={"dpvi": 0.1},
            diagnostics={},
            settings={
                "dataset": "adult",
                "scaling": "zscore",
                "runs": 2,
                "bins": 2,
                "binning": "equal-count",
                "epsilon": 1.0,
                "noise_multiplier": noise_multiplier,
                "steps": 100,
                "samples": 10,
                "n_train": 10,
                "n_test": 10,
                "dim": 57,
            },
        )

    monkeypatch.setattr("noiseaware.cli.study.run_study", run_study)
    monkeypatch.setattr("noiseaware.studies.calibration_plan", calibration_plan)
    monkeypatch.setattr(DATASETS, "adult", lambda *args, **kwargs: SimpleNamespace(name="adult", scaling="zscore"))
    return calls


# ---------------------------------------------------------------- record


def test_record_keeps_an_existing_trace_unless_forced(capsys, tmp_path):
    out = tmp_path / "t.nc"
    out.write_bytes(b"a trace recorded earlier")
    record = ("record", "--model", "M1", "--noise-multiplier", "7", "--steps", "20", "--out", out)
    line = single_error(capsys, *record)
    assert line.startswith("error: --out: ")
    mentions(line, str(out), "exists", "--force")
    assert out.read_bytes() == b"a trace recorded earlier" and listing(tmp_path) == ["t.nc"]
    status, _, err = run(capsys, *record, "--force")
    assert status == 0, err
    assert na.Trace.load(out).noise_multiplier == 7.0 and listing(tmp_path) == ["t.nc", "t.used.json"]


@pytest.mark.parametrize("force", [(), ("--force",)])
def test_record_never_writes_over_its_data(capsys, tmp_path, monkeypatch, force):
    data = tmp_path / "d.npz"
    np.savez(data, x=np.random.default_rng(0).exponential(0.25, 200))
    before = data.read_bytes()
    monkeypatch.setattr("noiseaware.cli.record.record_dpvi", no_work)
    monkeypatch.chdir(tmp_path)
    line = single_error(capsys, "record", "--model", "M1", "--epsilon", "1", "--data", data, "--out", "d.npz", *force)
    mentions(line, "--out:", "d.npz", "input", "never")
    assert data.read_bytes() == before and listing(tmp_path) == ["d.npz"]


# ---------------------------------------------------------------- fit


@pytest.mark.parametrize("force", [(), ("--force",)])
def test_fit_never_writes_over_its_trace(capsys, tmp_path, monkeypatch, force):
    trace = saved(sgd_trace(steps=100), tmp_path / "t.nc")
    before = trace.read_bytes()
    monkeypatch.setattr("noiseaware.cli.fit.fit_reporting_warnings", no_work)
    line = single_error(capsys, "fit", trace, "--out", trace, *force)
    mentions(line, "--out:", str(trace), "input")
    assert trace.read_bytes() == before and listing(tmp_path) == ["t.nc"]


def test_fit_keeps_an_existing_posterior_unless_forced(capsys, tmp_path):
    trace = saved(sgd_trace(steps=400), tmp_path / "t.nc")
    (tmp_path / "p.nc").write_bytes(b"an earlier posterior")
    line = single_error(capsys, "fit", trace, "--out", tmp_path / "p.nc")
    assert line.startswith("error: --out: ")
    mentions(line, str(tmp_path / "p.nc"), "exists", "--force")
    assert (tmp_path / "p.nc").read_bytes() == b"an earlier posterior"
    status, _, err = run(capsys, "fit", trace, "--out", tmp_path / "p.nc", "--force")
    assert status == 0, err
    assert na.load_posterior(tmp_path / "p.nc").method == "exact" and listing(tmp_path) == ["p.nc", "t.nc"]


def test_fit_without_out_prints_the_result_and_writes_nothing(capsys, tmp_path):
    trace = saved(sgd_trace(steps=400), tmp_path / "t.nc")
    status, out, err = run(capsys, "fit", trace)
    assert status == 0, err
    assert re.search(r"noise-aware posterior:.*\bexact\b", out) and re.search(r"noise-aware 90%\s+naive 90%", out)
    mentions(out, "--out", "FILE.nc")
    assert listing(tmp_path) == ["t.nc"]


@pytest.mark.parametrize(("suffix", "magic"), [(".pdf", b"%PDF"), (".svg", b"<?xml")])
def test_fit_plots_pdf_and_svg(capsys, tmp_path, suffix, magic):
    trace = saved(sgd_trace(steps=400), tmp_path / "t.nc")
    status, out, err = run(capsys, "fit", trace, "--plot", tmp_path / f"fit{suffix}")
    assert status == 0, err
    assert (tmp_path / f"fit{suffix}").read_bytes().startswith(magic)
    assert listing(tmp_path) == sorted(["t.nc", f"fit{suffix}"]) and f"plot saved to {tmp_path / f'fit{suffix}'}" in out


@pytest.mark.parametrize(
    ("plot", "tokens"),
    [
        ("{tmp}/missing/fit.png", ("--plot:", "{tmp}/missing/fit.png:", "{tmp}/missing")),
        ("{tmp}/fit.gif", ("--plot", "{tmp}/fit.gif:", ".png", ".pdf")),
        ("{tmp}/old.png", ("--plot:", "{tmp}/old.png", "exists", "--force")),
    ],
)
def test_fit_checks_the_plot_before_fitting(capsys, tmp_path, monkeypatch, plot, tokens):
    trace = saved(sgd_trace(steps=100), tmp_path / "t.nc")
    (tmp_path / "old.png").write_bytes(b"an earlier plot")
    monkeypatch.setattr("noiseaware.cli.fit.fit_reporting_warnings", no_work)
    line = single_error(capsys, "fit", trace, "--out", tmp_path / "ok.nc", "--plot", plot.format(tmp=tmp_path))
    mentions(line, *(token.format(tmp=tmp_path) for token in tokens))
    assert listing(tmp_path) == ["old.png", "t.nc"]


def test_fit_names_a_read_only_plot_target_before_fitting(capsys, tmp_path, monkeypatch, read_only):
    trace = saved(sgd_trace(steps=100), tmp_path / "t.nc")
    monkeypatch.setattr("noiseaware.cli.fit.fit_reporting_warnings", no_work)
    line = single_error(capsys, "fit", trace, "--out", tmp_path / "ok.nc", "--plot", read_only / "x.png")
    assert line.startswith("error: --plot: ")
    mentions(line, f"{read_only / 'x.png'}:", "Permission")
    assert listing(tmp_path) == ["ro", "t.nc"]


def test_a_failing_plot_takes_the_posterior_with_it(capsys, tmp_path, monkeypatch):
    def failing_plot(*args, **kwargs):
        raise OSError("the plot failed")

    trace = saved(sgd_trace(steps=400), tmp_path / "t.nc")
    monkeypatch.setattr("noiseaware.plots.plot_trace", failing_plot)
    line = single_error(capsys, "fit", trace, "--out", tmp_path / "p.nc", "--plot", tmp_path / "fit.png")
    assert line == "error: the plot failed"
    assert listing(tmp_path) == ["t.nc"]


# ---------------------------------------------------------------- coverage and calibrate


@pytest.mark.parametrize("command", [COVERAGE_ARGS[:3], CALIBRATE_ARGS[:1]])
def test_a_bad_privacy_level_is_rejected_when_parsed(capsys, tmp_path, studies, command):
    line = single_error(capsys, *command, "--epsilon", "1", "-1", "--out", tmp_path / "out")
    mentions(line, "--epsilon:", "'-1'", "finite", "0")
    assert studies == [] and listing(tmp_path) == []


@pytest.mark.parametrize(("command", "files"), [(COVERAGE_ARGS, COVERAGE_FILES), (CALIBRATE_ARGS, CALIBRATION_FILES)])
def test_every_level_s_files_are_checked_before_the_first_level_runs(capsys, tmp_path, studies, command, files):
    (tmp_path / "out").mkdir()
    last = tmp_path / "out" / files[-1]
    last.write_bytes(b"an earlier result")
    line = single_error(capsys, *command, "--out", tmp_path / "out")
    assert line.startswith("error: --out: ")
    mentions(line, str(last), "exists", "--force")
    assert studies == [] and listing(tmp_path) == ["out", f"out/{files[-1]}"]


@pytest.mark.parametrize(("command", "files"), [(COVERAGE_ARGS, COVERAGE_FILES), (CALIBRATE_ARGS, CALIBRATION_FILES)])
def test_a_study_writes_a_new_directory_and_replaces_its_files_only_when_forced(
    capsys, tmp_path, studies, command, files
):
    command = tuple(arg for arg in command if arg != "10")  # one level: σ = 5
    files = [name for name in files if "sigma-5" in name]
    out = tmp_path / "new" / "out"
    status, _, err = run(capsys, *command, "--out", out)
    assert status == 0, err
    assert studies == [5.0] and sorted(os.listdir(out)) == sorted(files)
    first = (out / files[0]).read_bytes()
    mentions(single_error(capsys, *command, "--out", out), "exists", "--force")
    assert studies == [5.0]
    status, _, err = run(capsys, *command, "--out", out, "--force")
    assert status == 0, err
    assert studies == [5.0, 5.0] and sorted(os.listdir(out)) == sorted(files)
    assert (out / files[0]).read_bytes() == first  # the same results again


@pytest.mark.parametrize("command", [COVERAGE_ARGS[:3], CALIBRATE_ARGS[:1]])
def test_a_level_given_twice_is_refused(capsys, tmp_path, studies, command):
    line = single_error(capsys, *command, "--epsilon", "1", "1.0", "--out", tmp_path / "out")
    mentions(line, "written", "twice")
    assert studies == [] and listing(tmp_path) == []


def test_a_level_whose_files_fail_leaves_nothing_behind(capsys, tmp_path, studies, monkeypatch):
    def failing_plot(*args, **kwargs):
        raise OSError("cannot write the plot")

    monkeypatch.setitem(COVERAGE.outputs, ".png", failing_plot)
    line = single_error(capsys, *COVERAGE_ARGS, "--out", tmp_path / "new" / "out")
    assert line == "error: cannot write the plot"
    assert studies == [5.0, 10.0] and listing(tmp_path) == []  # the study ran; the failed level's files are gone


@pytest.mark.parametrize("command", [COVERAGE_ARGS, CALIBRATE_ARGS])
def test_an_output_directory_that_cannot_be_made_fails_before_any_work(capsys, tmp_path, studies, command):
    (tmp_path / "file").write_text("")
    line = single_error(capsys, *command, "--out", tmp_path / "file" / "out")
    mentions(line, "--out:", str(tmp_path / "file" / "out"))
    assert studies == [] and listing(tmp_path) == ["file"]


@pytest.mark.parametrize("command", [COVERAGE_ARGS, CALIBRATE_ARGS])
def test_a_read_only_output_directory_fails_before_any_work(capsys, read_only, studies, command):
    line = single_error(capsys, *command, "--out", read_only / "out")
    assert line.startswith("error: --out: ")
    mentions(line, f"{read_only / 'out'}:", "Permission")
    assert studies == [] and listing(read_only) == []


# ---------------------------------------------------------------- demo


def test_demo_with_a_bad_epsilon_leaves_no_directory(capsys, tmp_path):
    mentions(single_error(capsys, "demo", "--epsilon", "0", "--out", tmp_path / "d"), "--epsilon:", "'0'")
    assert listing(tmp_path) == []


def test_demo_checks_its_files_before_any_work(capsys, tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "m1-trace.png").write_bytes(b"an earlier plot")
    monkeypatch.setattr("noiseaware.cli.demo.record_dpvi", no_work)
    line = single_error(capsys, "demo", "--out", tmp_path / "d")
    assert line.startswith("error: --out: ")
    mentions(line, str(tmp_path / "d" / "m1-trace.png"), "exists", "--force")
    assert listing(tmp_path) == ["d", "d/m1-trace.png"]


def test_a_failing_demo_leaves_nothing_behind(capsys, tmp_path, monkeypatch):
    def failing_fit(*args, **kwargs):
        raise na.FitFailure("no finite optimum", "the fit failed")

    monkeypatch.setattr("noiseaware.cli.demo.record_dpvi", lambda *args, **kwargs: sgd_trace(steps=100))
    monkeypatch.setattr("noiseaware.cli.demo.fit_reporting_warnings", failing_fit)
    assert single_error(capsys, "demo", "--out", tmp_path / "a" / "d") == "error: the fit failed"
    assert listing(tmp_path) == []


# ---------------------------------------------------------------- δ and --allow-weak-privacy


def test_a_weak_delta_needs_allow_weak_privacy(capsys):
    account = ("account", "--noise-multiplier", "5", "--delta", "0.6", "--steps", "10")
    mentions(single_error(capsys, *account), "--allow-weak-privacy")
    status, out, err = run(capsys, *account, "--allow-weak-privacy")
    assert status == 0, err
    assert "ε for σ = 5" in out


@pytest.mark.parametrize("command", [COVERAGE_ARGS, CALIBRATE_ARGS])
def test_a_study_with_a_weak_delta_fails_before_any_work(capsys, tmp_path, studies, command):
    mentions(single_error(capsys, *command, "--delta", "0.6", "--out", tmp_path / "o"), "--allow-weak-privacy")
    assert studies == [] and listing(tmp_path) == []


def test_record_passes_allow_weak_privacy_on(capsys, tmp_path, monkeypatch):
    seen = {}

    def record_dpvi(*args, **kwargs):
        seen.update(kwargs)
        raise OSError("stop here")

    monkeypatch.setattr("noiseaware.cli.record.record_dpvi", record_dpvi)
    argv = ("record", "--model", "M1", "--epsilon", "1", "--delta", "0.6", "--out", tmp_path / "t.nc")
    assert single_error(capsys, *argv, "--allow-weak-privacy") == "error: stop here"
    assert seen["delta"] == 0.6 and seen["allow_weak_privacy"] is True
    assert listing(tmp_path) == []


# ---------------------------------------------------------------- --help


@pytest.mark.parametrize("command", ["record", "fit", "coverage", "calibrate", "demo"])
def test_every_command_that_writes_offers_force(capsys, command):
    status, out, _ = run(capsys, command, "--help")
    assert status == 0 and "--force" in out and "never" in out


def test_help_tells_fit_without_out_and_the_fixed_seed_of_calibrate(capsys):
    _, out, _ = run(capsys, "fit", "--help")
    assert "without --out the result is only printed" in " ".join(out.split())
    _, out, _ = run(capsys, "calibrate", "--help")
    text = " ".join(out.split())
    assert "fixed default seed" in text and "public benchmark data" in text and "secret" in text


def test_a_study_with_fewer_tasks_than_workers_says_the_extra_workers_cannot_help(
    capsys, tmp_path, studies, monkeypatch
):
    from contextlib import nullcontext

    monkeypatch.setattr("noiseaware.cli.study.open_executor", lambda *args: nullcontext((None, 3)))
    status, _, err = run(capsys, *COVERAGE_ARGS, "--simulations", "4", "--chunk", "4", "--workers", "3",
                         "--out", tmp_path / "out")  # fmt: skip
    assert status == 0, err
    mentions(err, "2", "task(s)", "3", "workers", "--chunk")
