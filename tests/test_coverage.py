"""The coverage driver end to end on a small M1 study: shapes, failures counted, reproducible, files."""

import json

import numpy as np
import pytest

import noiseaware as na
from noiseaware.evaluation.simulate import coverage

SMALL = {"simulations": 12, "repeats": 2, "draws": 400, "steps": 1000, "chunk": 12}


@pytest.fixture(scope="module")
def result():
    return coverage(na.models.get("gamma-exponential"), methods=("exact", "naive"), epsilon=1.0, key=3, **SMALL)


def test_small_study_scores_every_method_under_both_rules(result):
    assert set(result.ecp) == {"research", "trace"}
    for rule in result.ecp:
        assert set(result.ecp[rule]) == {"exact", "naive"}
        assert result.ecp[rule]["exact"].shape == (2, 21)
        assert np.all((result.ecp[rule]["exact"] >= 0) & (result.ecp[rule]["exact"] <= 1))
    assert result.failures == {"exact": 0, "naive": 0}
    assert set(result.rmse) == {"exact", "naive"} and all(0 <= m <= 1 for m, _ in result.rmse.values())
    assert result.settings["noise_multiplier"] == pytest.approx(na.noise_multiplier(1.0, 1e-5, 0.1, 1000))
    assert "exact" in result.table()


def test_same_key_same_numbers(result):
    again = coverage(na.models.get("gamma-exponential"), methods=("exact", "naive"), epsilon=1.0, key=3, **SMALL)
    for rule in result.ecp:
        for method in result.ecp[rule]:
            np.testing.assert_array_equal(again.ecp[rule][method], result.ecp[rule][method])


def test_results_file(result, tmp_path):
    result.to_json(tmp_path / "c.json")
    payload = json.loads((tmp_path / "c.json").read_text())
    assert payload["settings"]["simulations"] == 12 and len(payload["levels"]) == 21
    assert set(payload["rmse"]["research"]) == {"exact", "naive"}


def test_bad_requests_raise():
    bm = na.models.get("gamma-exponential")
    with pytest.raises(ValueError, match="unknown methods"):
        coverage(bm, methods=("exact", "magic"), epsilon=1.0)
    with pytest.raises(ValueError, match="exactly one of epsilon and noise_multiplier"):
        coverage(bm, methods=("exact",))
