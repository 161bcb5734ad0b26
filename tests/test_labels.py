"""Coordinate labels (issue 14, defect 9): a site's elements named by labels such as Adult's feature names
(`theta[age]`, not `theta[0]`), carried by the site map, the trace and its .nc/.npz files, the adult-logistic
model, its fits and `na.calibration`; a label count that does not fit its site is one clear error."""

import dataclasses
import json

import numpy as np
import pytest

import noiseaware as na
from noiseaware.datasets import Dataset
from noiseaware.evaluation import calibration_experiment
from noiseaware.models.adult import ADULT_FEATURE_NAMES
from noiseaware.models.builtin import logistic_regression
from noiseaware.recording.dpvi import record_dpvi
from noiseaware.trace import TraceError
from noiseaware.trace.sites import SiteMap, SiteSpec

FEATURES = ("age", "hours-per-week", "bias")
SITES = (SiteSpec("p", (3,), "alr"), SiteSpec("theta", (3,), "identity"), SiteSpec("scale", (), "softplus"))
LABELS = {"p": ("low", "mid", "high"), "theta": FEATURES}


def labelled_trace(**labels):
    """A small trace over p (simplex of 3: 2 coordinates), theta (3) and scale (1): d = 6, P = 12."""
    rng = np.random.default_rng(0)
    return na.Trace.from_arrays(
        rng.normal(size=(5, 12)),
        rng.normal(size=(5, 12)),
        noise_multiplier=1.0,
        clip=1.0,
        sampling_rate=0.1,
        n_examples=100,
        learning_rate=1e-3,
        sites=SITES,
        labels=labels or LABELS,
    )


def test_theta_names_and_element_names_carry_the_labels():
    site_map = SiteMap(SITES).with_labels(LABELS)
    assert site_map.theta_names() == ("p[low]", "p[mid]", "theta[age]", "theta[hours-per-week]", "theta[bias]", "scale")
    assert site_map.element_names("p") == ("p[low]", "p[mid]", "p[high]")  # K elements, K − 1 coordinates
    assert site_map.element_names("theta") == ("theta[age]", "theta[hours-per-week]", "theta[bias]")
    assert site_map.element_names("scale") == ("scale",)
    assert site_map.param_names()[:3] == ("mu:p[low]", "mu:p[mid]", "mu:theta[age]")
    assert site_map.param_names()[6:8] == ("rho:p[low]", "rho:p[mid]")
    # labels of a matrix site are row-major; without labels the names stay indices
    matrix = SiteSpec("w", (2, 2), "identity", ("a0", "a1", "b0", "b1"))
    assert matrix.element_names() == ("w[a0]", "w[a1]", "w[b0]", "w[b1]")
    assert SiteMap(SITES).theta_names()[:3] == ("p[0]", "p[1]", "theta[0]")
    assert SiteMap(SITES).element_names("p") == ("p[0]", "p[1]", "p[2]")


@pytest.mark.parametrize("suffix", [".nc", ".npz"])
def test_labelled_trace_round_trips_through_its_file(tmp_path, suffix):
    trace = labelled_trace()
    assert trace.param_names[:3] == ("mu:p[low]", "mu:p[mid]", "mu:theta[age]")
    path = tmp_path / f"trace{suffix}"
    trace.save(path)
    loaded = na.Trace.load(path)
    assert loaded.sites == trace.sites
    assert loaded.sites[0].labels == ("low", "mid", "high") and loaded.sites[2].labels is None
    assert loaded.site_map.theta_names() == trace.site_map.theta_names()
    assert loaded.site_map.element_names("p") == ("p[low]", "p[mid]", "p[high]")
    assert loaded.param_names == trace.param_names
    assert "theta[hours-per-week]" in loaded.describe()


def test_a_trace_without_labels_writes_no_label_field_and_old_files_load(tmp_path):
    trace = dataclasses.replace(labelled_trace(), sites=SITES, param_names=None)
    trace.save(tmp_path / "plain.npz")
    with np.load(tmp_path / "plain.npz") as archive:
        assert "site_labels" not in archive.files
    assert all(site.labels is None for site in na.Trace.load(tmp_path / "plain.npz").sites)


def npz_fields(tmp_path):
    labelled_trace().save(tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz") as archive:
        return {name: archive[name] for name in archive.files}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda labels: [labels[0], json.dumps(["a", "b"]), labels[2]], r"site 'theta' has 3 elements .* 2 labels"),
        (lambda labels: [labels[0], json.dumps(["a", "a", "b"]), labels[2]], r"repeat \['a'\]"),
        (lambda labels: [labels[0], labels[1], json.dumps(["x"])], r"site 'scale' is a scalar"),
        (lambda labels: [labels[0], "age", labels[2]], r"entry 'age' of site 'theta' must be a JSON list"),
        (lambda labels: labels[:2], r"have lengths \[3, 3, 3, 2\]"),
    ],
    ids=["count", "repeated", "scalar", "not-a-list", "one-missing"],
)
def test_a_file_whose_labels_do_not_fit_its_sites_is_a_trace_error(tmp_path, change, message):
    fields = npz_fields(tmp_path)
    fields["site_labels"] = np.array(change(fields["site_labels"].tolist()))
    np.savez(tmp_path / "bad.npz", **fields)
    with pytest.raises(TraceError, match=message):
        na.Trace.load(tmp_path / "bad.npz")


def test_site_labels_without_sites_is_a_trace_error(tmp_path):
    fields = npz_fields(tmp_path)
    for name in ("site_names", "site_shapes", "site_transforms"):
        del fields[name]
    np.savez(tmp_path / "bad.npz", **fields)
    with pytest.raises(TraceError, match="site_labels labels the sites, but site_names, .* are absent"):
        na.Trace.load(tmp_path / "bad.npz")


def test_wrong_labels_are_one_clear_error_on_construction():
    with pytest.raises(ValueError, match=r"site 'theta' has 3 elements \(shape \(3,\)\) but 2 labels; give one label"):
        SiteSpec("theta", (3,), "identity", ("age", "bias"))
    with pytest.raises(ValueError, match="labels of site 'theta' are 'age'; give a sequence of strings"):
        SiteSpec("theta", (3,), "identity", "age")
    with pytest.raises(ValueError, match="labels of site 'theta' hold ''"):
        SiteSpec("theta", (3,), "identity", ("age", "", "bias"))
    with pytest.raises(ValueError, match=r"labels name \['beta'\], which are not sites"):
        SiteMap(SITES).with_labels({"beta": FEATURES})
    with pytest.raises(ValueError, match=r"labels must map site names to their labels, e.g. labels=\{'theta'"):
        SiteMap(SITES).with_labels(FEATURES)
    with pytest.raises(TraceError, match=r"site 'theta' has 3 elements .* but 2 labels"):
        labelled_trace(theta=("age", "bias"))
    with pytest.raises(TraceError, match="labels name the elements of the sites: pass sites="):
        na.Trace.from_arrays(np.zeros((2, 2)), np.zeros((2, 2)), noise_multiplier=1.0, clip=1.0, sampling_rate=0.1,
                             n_examples=10, labels={"theta": ("a",)})  # fmt: skip


def test_record_dpvi_rejects_wrong_labels_before_any_step():
    data = {"X": np.ones((50, 3)), "y": np.zeros(50, np.int32)}
    with pytest.raises(ValueError, match=r"site 'theta' has 3 elements .* but 2 labels"):
        record_dpvi(logistic_regression, data, key=1, noise_multiplier=1.0, labels={"theta": ("a", "b")}, steps=10**9,
                    sampling_rate=0.1, clip=1.0)  # fmt: skip


@pytest.fixture(scope="module")
def adult_trace():
    """70 DPVI steps (56 after the burn-in, enough for a fit) of the adult-logistic model on 300 simulated
    examples, with its preset and its labels."""
    bm = dataclasses.replace(na.models.get("adult-logistic"), n_examples=300)
    _, data = bm.simulate(0)
    return record_dpvi(bm.model, data, key=1, noise_multiplier=1.0, **{**bm.dpvi_settings, "steps": 70})


def test_adult_logistic_names_its_coefficients_by_feature(adult_trace, tmp_path):
    bm = na.models.get("adult-logistic")
    names = tuple(f"theta[{feature}]" for feature in ADULT_FEATURE_NAMES)
    assert bm.site_map.theta_names() == names and names[0] == "theta[age]" and names[-1] == "theta[bias]"
    assert adult_trace.site_map.theta_names() == names
    assert adult_trace.param_names[:2] == ("mu:theta[age]", "mu:theta[fnlwgt]")
    adult_trace.save(tmp_path / "adult.nc")
    assert na.Trace.load(tmp_path / "adult.nc").site_map.theta_names() == names


@pytest.mark.filterwarnings("ignore:weak identification:UserWarning")  # 70 steps are few
def test_a_fit_of_the_adult_trace_names_theta_by_feature(adult_trace):
    post = na.fit(adult_trace, "exact", key=2, draws=20)
    assert post.theta_names == tuple(f"theta[{feature}]" for feature in ADULT_FEATURE_NAMES)
    assert post.site_map.element_names("theta")[4] == "theta[hours-per-week]"


def test_the_model_names_are_the_columns_of_the_adult_loader():
    assert na.datasets.adult().feature_names == ADULT_FEATURE_NAMES


def test_calibration_labels_its_traces_with_the_data_feature_names(monkeypatch):
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=(200, 2)), np.ones(200)])
    y = (rng.random(200) < 0.5).astype(np.int32)
    data = Dataset("toy", X, y, X[:50], y[:50], FEATURES, "zscore")
    recorded, original = [], calibration_experiment.record_traces

    def record_traces(*args, **kwargs):
        recorded.extend(original(*args, **kwargs))
        return recorded

    monkeypatch.setattr(calibration_experiment, "record_traces", record_traces)
    na.calibration(data, methods=("naive",), noise_multiplier=1.0, runs=1, samples=10, key=0, steps=5)
    assert [trace.site_map.theta_names() for trace in recorded] == [
        ("theta[age]", "theta[hours-per-week]", "theta[bias]")
    ]
