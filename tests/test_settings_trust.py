"""A settings file from someone else (issue 40): its fingerprint finds edits, not forgery, so `load(…,
verify=True)` re-verifies the recorded check against the settings on fresh simulations' facts (no privacy, no
DP-SGD). A forged file (clip 0.01, "coverage RMSE 0.000", its fingerprint recomputed) loads without verify and is
refused with it (loading with the model verifies by default), each recorded and recomputed value named; the shipped
preset verifies. Settings loaded unverified carry no check mark, so recording with them reminds the user to check
them; settings tuned for another N are refused on data far from it, in Python as on the command line."""

import dataclasses

import numpy as np
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.recording.settings import SettingsHint
from noiseaware.tuning.presets import preset_path, tuned_preset
from noiseaware.tuning.tuned import SettingsFileError, TunedSettings

BM = na.models.get("beta-bernoulli", preset=False)


@pytest.fixture(scope="module")
def honest():
    return TunedSettings.load(preset_path("beta-bernoulli", 1.0), BM, verify=False)


def test_settings_without_a_verified_check_remind_and_settings_far_from_their_n_are_refused(honest):
    """The research draws a preset's settings far from its N (M2's preset at N = 10): refused before any work, in
    Python as on the command line; settings loaded without their model carry no check mark, and recording with
    them gives the reminder to check them."""
    small = {"x": np.ones(10)}
    with pytest.raises(ValueError) as refused:
        na.record_dpvi(BM.model, small, key=0, epsilon=1.0, **honest)
    mentions(str(refused.value), str(honest.n_examples), "fewer", "na.tune")
    assert "N = 10 (" in str(refused.value)
    assert "preflight" in tuned_preset("beta-bernoulli", 1.0)  # the shipped preset: checked
    unverified = TunedSettings.load(preset_path("beta-bernoulli", 1.0))
    assert "preflight" not in unverified and unverified["preset_n_examples"] == honest.n_examples
    data = {"x": np.asarray(BM.simulate(0)[1]["x"])}
    with pytest.warns(SettingsHint, match="never checked"):
        na.record_dpvi(BM.model, data, key=0, epsilon=1.0, **(dict(unverified) | {"steps": 20}))


@pytest.mark.slow  # the facts of 8 simulations twice (Adam and Newton steps, compiled once): ~25 s
def test_a_forged_settings_file_loads_by_its_fingerprint_and_is_refused_when_verified(honest, tmp_path):
    check = dataclasses.replace(honest.check, coverage_rmse=(0.0, 0.0), findings=(), clipped=0.0, shift=0.0)
    forged = dataclasses.replace(honest, settings=dict(honest.settings) | {"clip": 0.01}, check=check)
    path = tmp_path / "forged.json"
    forged.save(path)  # a forger recomputes the fingerprint: an unkeyed hash cannot tell
    unverified = TunedSettings.load(path, BM, verify=False)
    assert unverified["clip"] == 0.01 and "preflight" not in unverified  # loads, but carries no check mark
    for refuse in ({}, {"verify": True}):  # loading with the model re-verifies by default
        with pytest.raises(SettingsFileError) as refused:
            TunedSettings.load(path, BM, **refuse)
        mentions(str(refused.value), str(path), "recorded", "0.00", "recomputed", "100.00", "φ*:")
    found = honest.verify(BM)
    assert found.ok, found.mismatches
    assert [row[0] for row in found.rows][3:5] == ["noise multiplier σ", "clipped at the optimum"]


def test_verify_needs_the_model_and_a_recorded_check(honest):
    with pytest.raises(ValueError) as info:
        TunedSettings.load(preset_path("beta-bernoulli", 1.0), verify=True)
    mentions(info, "model=")
    unchecked = dataclasses.replace(honest, check=None)
    with pytest.raises(SettingsFileError) as info:
        unchecked.verify(BM)
    mentions(info, "verify")


@pytest.mark.slow  # verification (~10 s) and a short DPVI run, twice
def test_record_with_a_settings_file_re_verifies_it_before_spending_privacy(honest, tmp_path, capsys):
    """`noiseaware record --settings FILE` on a built-in re-verifies the file first: the shipped preset passes
    and records; a forged one is refused before any DP-SGD step, nothing written."""
    from noiseaware.cli import main

    record = ["record", "--model", "M2", "--epsilon", "1", "--seed", "1"]
    assert main([*record, "--settings", str(preset_path("beta-bernoulli", 1.0)), "--out", str(tmp_path / "a.nc")]) == 0
    mentions(capsys.readouterr().err, "re-verified", "simulations")
    check = dataclasses.replace(honest.check, clipped=0.0, shift=0.0)
    forged = dataclasses.replace(honest, settings=dict(honest.settings) | {"clip": 0.01}, check=check)
    forged.save(tmp_path / "forged.json")
    assert main([*record, "--settings", str(tmp_path / "forged.json"), "--out", str(tmp_path / "b.nc")]) == 2
    mentions(capsys.readouterr().err, "recorded", "check")
    assert not (tmp_path / "b.nc").exists()
