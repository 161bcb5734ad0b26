"""The privacy–utility study kind: its curve is na.tuning.privacy_utility's, report for report; the command line
builds its flags from the design and refuses bad settings before any work; report reads the folder back."""

import json

import numpy as np
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.cli import main
from noiseaware.studies import KINDS, run_study
from noiseaware.studies.kinds.privacy_utility import PRIVACY_UTILITY, PrivacyUtilityDesign

pytestmark = pytest.mark.slow  # a study's tasks and the curve in process: compiled DP-SGD and fits, ~30 s

SMALL = dict(epsilons=(0.3, 1.0), simulations=2, references=2, seed=3)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The small study run in this process, and its folder."""
    out = tmp_path_factory.mktemp("pu")
    ((summary, curve),) = run_study(PRIVACY_UTILITY.plan(PrivacyUtilityDesign("M1", **SMALL)), out)
    return curve, out


def test_the_study_gives_privacy_utilitys_curve_report_for_report(study):
    curve, _ = study
    direct = na.tuning.privacy_utility(
        na.models.get("M1"), epsilons=SMALL["epsilons"], simulations=2, references=2, key=SMALL["seed"]
    )
    assert curve.epsilons == direct.epsilons and len(curve.reports) == 2
    for mine, theirs in zip(curve.reports, direct.reports):
        assert mine.to_dict() == theirs.to_dict()
    assert np.all(np.diff(curve.sd_ratio) < 0)  # more privacy budget, a narrower posterior


def test_the_command_line_reads_the_design_and_report_reads_the_folder(study, tmp_path, capsys):
    _, out = study
    assert KINDS["privacy-utility"].design is PrivacyUtilityDesign
    arguments = ["--model", "M1", "--epsilons", "0.3", "1", "--simulations", "2", "--references", "2", "--seed", "3"]
    assert main(["study", "privacy-utility", *arguments, "--out", str(out)]) == 0  # resumed: nothing to run
    printed = capsys.readouterr().out
    mentions(printed, "privacy–utility", "gamma-exponential")
    assert "sd / VI sd" in printed  # a column
    saved = json.loads((out / "privacy-utility-gamma-exponential.json").read_text())
    assert saved["epsilons"] == [0.3, 1.0] and len(saved["reports"]) == 2
    assert main(["report", str(out)]) == 0 and "coverage RMSE" in capsys.readouterr().out
    for bad, reason in [(["--model", "M9"], "'M9'"), (["--model", "M1", "--epsilons", "0"], "epsilon")]:
        assert main(["study", "privacy-utility", *bad, "--out", str(tmp_path / "new")]) == 2
        mentions(capsys.readouterr().err, reason)
        assert not (tmp_path / "new").exists()
