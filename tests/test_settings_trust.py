"""A settings file from someone else (issue 40): its fingerprint finds edits, not forgery, so `load(…,
verify=True)` re-verifies the recorded check against the settings on fresh simulations' facts (no privacy, no
DP-SGD). A forged file (clip 0.01, "coverage RMSE 0.000", its fingerprint recomputed) loads without verify and is
refused with it, each recorded and recomputed value named; the shipped preset verifies."""

import dataclasses

import pytest
from messages import mentions

import noiseaware as na
from noiseaware.tuning.presets import preset_path
from noiseaware.tuning.tuned import SettingsFileError, TunedSettings

BM = na.models.get("beta-bernoulli", preset=False)


@pytest.fixture(scope="module")
def honest():
    return TunedSettings.load(preset_path("beta-bernoulli", 1.0), BM)


@pytest.mark.slow  # the facts of 8 simulations twice (Adam and Newton steps, compiled once): ~25 s
def test_a_forged_settings_file_loads_by_its_fingerprint_and_is_refused_when_verified(honest, tmp_path):
    check = dataclasses.replace(honest.check, coverage_rmse=(0.0, 0.0), findings=(), clipped=0.0, shift=0.0)
    forged = dataclasses.replace(honest, settings=dict(honest.settings) | {"clip": 0.01}, check=check)
    path = tmp_path / "forged.json"
    forged.save(path)  # a forger recomputes the fingerprint: an unkeyed hash cannot tell
    assert TunedSettings.load(path, BM)["clip"] == 0.01
    with pytest.raises(SettingsFileError) as refused:
        TunedSettings.load(path, BM, verify=True)
    message = str(refused.value)
    mentions(message, str(path), "recorded", "0.00", "recomputed", "100.00", "φ*:")
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
