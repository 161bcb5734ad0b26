"""Coverage and calibration results as ArviZ DataTrees (.nc beside the JSON and CSV): the layout, a round trip
through the file that gives the same result back, an ArviZ summary of the file, and the writers' refusals."""

import json

import arviz as az
import numpy as np
import pytest
import xarray as xr
from toy_results import calibration_result, coverage_result

from noiseaware.evaluation.calibration_result import CalibrationResult
from noiseaware.evaluation.result import CoverageResult


def two_method_coverage() -> CoverageResult:
    """Two methods with different curves, failures and simulation counts, two θ coordinates, nested settings."""
    levels = np.linspace(0.0, 1.0, 5)
    rng = np.random.default_rng(0)
    curves = {rule: {m: rng.uniform(size=(3, 5)) for m in ("exact", "naive")} for rule in ("research", "trace")}
    marginal = {rule: {m: rng.uniform(size=(3, 5, 2)) for m in ("exact", "naive")} for rule in curves}
    return CoverageResult(
        levels=levels,
        curves=curves,
        marginal_curves=marginal,
        failures={"exact": 1, "naive": 0},
        seconds={"dpvi": 2.5, "exact": 1.25, "naive": 0.5},
        diagnostics={"exact": {"warnings": {"weak identification": 2}}},
        theta_names=("w[0]", "noise"),
        settings={"model": "toy", "epsilon": 1.0, "key": 0, "repair": True, "method_options": {"exact": {"n": 3}}},
        width_ratio={"exact": rng.uniform(size=(3, 2)), "naive": np.array([[0.5, np.nan], [0.7, 0.8], [1, 1.0]])},
    )


def test_a_coverage_result_comes_back_from_its_file_unchanged(tmp_path):
    result = two_method_coverage()
    result.to_netcdf(tmp_path / "coverage.nc")
    back = CoverageResult.from_datatree(xr.open_datatree(tmp_path / "coverage.nc", engine="h5netcdf"))
    np.testing.assert_array_equal(back.levels, result.levels)
    for rule in result.curves:
        for method in result.methods:
            np.testing.assert_array_equal(back.curves[rule][method], result.curves[rule][method])
            np.testing.assert_array_equal(back.marginal_curves[rule][method], result.marginal_curves[rule][method])
    for method in result.methods:
        np.testing.assert_array_equal(back.width_ratio[method], result.width_ratio[method])
    assert (back.failures, back.seconds, back.theta_names) == (result.failures, result.seconds, result.theta_names)
    assert back.settings == result.settings and back.diagnostics == result.diagnostics
    assert back.table() == result.table()


def test_the_coverage_tree_is_laid_out_by_method_rule_level_and_coordinate():
    result = two_method_coverage()
    tree = result.to_datatree()
    assert set(tree.children) == {"exact", "naive"}
    exact = tree["exact"].dataset
    assert exact["ecp"].dims == ("chain", "draw", "rule", "credibility")
    assert exact["marginal_ecp"].dims == ("chain", "draw", "rule", "credibility", "theta")
    assert list(exact["theta"].values) == ["w[0]", "noise"] and exact.attrs["failures"] == 1
    np.testing.assert_array_equal(exact["ecp"].sel(rule="trace").values[0], result.curves["trace"]["exact"])
    assert tree.attrs["model"] == "toy" and tree.attrs["epsilon"] == 1.0 and tree.attrs["key"] == 0
    assert tree.attrs["repair"] == 1 and json.loads(tree.attrs["method_options"]) == {"exact": {"n": 3}}


def test_arviz_summarises_the_coverage_file_as_the_json_does(tmp_path):
    """az.summary's mean over the reference draws (draw) is the JSON's ecp_mean at each credibility level."""
    result = coverage_result()
    result.to_netcdf(tmp_path / "coverage.nc")
    tree = xr.open_datatree(tmp_path / "coverage.nc", engine="h5netcdf")
    table = az.summary(tree, group="exact", var_names=["ecp"], kind="stats")
    research = [row for row in table.index if "research" in row]
    assert len(research) == len(result.levels)
    np.testing.assert_allclose(table.loc[research, "mean"].to_numpy(dtype=float), result.levels, atol=1e-2)


def test_a_calibration_result_comes_back_from_its_file_unchanged(tmp_path):
    result = calibration_result()
    result.to_netcdf(tmp_path / "calibration.nc")
    tree = xr.open_datatree(tmp_path / "calibration.nc", engine="h5netcdf")
    back = CalibrationResult.from_datatree(tree)
    for method in result.methods:
        for name, values in result.metrics[method].items():
            np.testing.assert_array_equal(back.metrics[method][name], values)
        for name, values in result.curves[method].items():
            np.testing.assert_array_equal(back.curves[method][name], values)
        np.testing.assert_array_equal(back.histograms[method], result.histograms[method])
    assert back.paired_methods == result.paired_methods and back.settings == result.settings
    assert back.table() == result.table() and back.headline() == result.headline()
    summary = az.summary(tree, group="exact", var_names=["brier"], kind="stats")
    np.testing.assert_allclose(float(summary.loc["brier", "mean"]), 0.03)


def test_a_result_file_is_never_replaced_unless_told(tmp_path):
    path = tmp_path / "coverage.nc"
    coverage_result().to_netcdf(path)
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        coverage_result(model="other").to_netcdf(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["coverage.nc"]
    coverage_result(model="other").to_netcdf(path, overwrite=True)
    assert xr.open_datatree(path, engine="h5netcdf").attrs["model"] == "other"
    with pytest.raises(ValueError, match="use a .nc path"):
        coverage_result().to_netcdf(tmp_path / "coverage.json")


def test_a_tree_of_another_kind_is_refused():
    with pytest.raises(ValueError, match="not a noiseaware.coverage-result/1"):
        CoverageResult.from_datatree(calibration_result().to_datatree())
