"""`noiseaware calibrate` at a tiny scale (a 2 000-row UCI-format copy of Adult): the table, the JSON and the
reliability diagram per level, the non-private reference run once, and one clear error line for bad input."""

import json
import shutil

import pytest
from messages import mentions

from noiseaware.cli import main
from noiseaware.datasets import ADULT_FILES, adult_directory

TINY = ("--runs", "2", "--steps", "80", "--samples", "20", "--warmup", "20")
ROWS = 2000


@pytest.fixture(scope="module")
def small_adult(tmp_path_factory):
    """A folder with the first ROWS rows of adult.data, as adult.data and (labels ending in ".") adult.test."""
    folder = tmp_path_factory.mktemp("adult")
    rows = (adult_directory() / "adult.data").read_text().splitlines()[:ROWS]
    (folder / "adult.data").write_text("\n".join(rows) + "\n")
    (folder / "adult.test").write_text("|1x3 Cross validator\n" + "".join(f"{row}.\n" for row in rows))
    return folder, sum("?" not in row for row in rows)


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_calibrate_prints_a_table_and_writes_json_and_png_per_level(capsys, tmp_path, small_adult):
    folder, complete = small_adult
    status, out, err = run(
        capsys,
        "calibrate",
        "--dataset",
        "adult",
        "--data-dir",
        folder,
        "--no-verify",
        "--noise-multiplier",
        "40",
        "20",
        "--methods",
        "exact,naive,dpvim,nonprivate",
        *TINY,
        "--out",
        tmp_path / "cal",
    )
    assert status == 0, err
    assert f"adult ({complete} train, {complete} test, d = 57, zscore)" in out
    assert "σ = 40, T = 80, R = 2, K = 20" in out and "σ = 20, T = 80" in out
    for method in ("exact", "naive", "dpvim", "nonprivate"):
        assert out.count(f"\n{method} ") == 2
    assert "calib. RMSE ×10⁻³" in out and "− naive ×10⁻³" in out
    assert "study" in err and "task" in err  # the progress bar across tasks
    seconds = []
    for tag in ("sigma-40", "sigma-20"):
        stem = tmp_path / "cal" / f"calibration-adult-{tag}"
        payload = json.loads(stem.with_name(stem.name + ".json").read_text())
        assert payload["settings"]["runs"] == 2 and payload["settings"]["steps"] == 80
        summary = payload["summary"]
        assert set(summary) == {"exact", "naive", "dpvim", "nonprivate"}
        assert summary["naive"]["runs"] == 2 and summary["nonprivate"]["runs"] == 1
        assert "calibration_rmse_minus_naive_mean" in summary["exact"]
        assert "calibration_rmse_minus_naive_mean" not in summary["nonprivate"]
        assert 0 < summary["naive"]["calibration_rmse_mean"] < 0.5 and 0.5 < summary["nonprivate"]["accuracy_mean"] < 1
        assert stem.with_name(stem.name + ".png").read_bytes()[:4] == b"\x89PNG"
        seconds.append(payload["seconds"]["nonprivate"])
    assert seconds[0] == seconds[1]  # the non-private reference ran once, for both levels


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--epsilon", "1", "--methods", "exact,magic"), "unknown methods ['magic']"),
        (("--epsilon", "1", "--dataset", "mnist"), "invalid choice: 'mnist'"),
        (("--methods", "naive"), "one of the arguments --epsilon --noise-multiplier is required"),
    ],
)
def test_calibrate_usage_errors(capsys, tmp_path, argv, message):
    status, _, err = run(capsys, "calibrate", *argv, "--out", tmp_path / "cal")
    assert status == 2 and err.count("error:") == 1 and message in err, err


def test_calibrate_reports_a_malformed_data_file(capsys, tmp_path):
    for name in ADULT_FILES:
        shutil.copy(adult_directory() / name, tmp_path / name)
    (tmp_path / "adult.test").write_text("|1x3 Cross validator\n25, Private, 226802\n")
    status, _, err = run(capsys, "calibrate", "--epsilon", "1", "--data-dir", tmp_path, "--out", tmp_path / "cal")
    assert status == 2 and "Traceback" not in err
    assert err.startswith("error: ")
    mentions(err, "adult.test", "SHA-256", "verify=False")
