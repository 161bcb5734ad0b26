"""Trace: validation, from_arrays, final_iterate, summary and the .nc/.npz file format."""

import dataclasses
import math
import os
import re
import tempfile
from pathlib import Path

import h5netcdf
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from noiseaware.privacy import epsilon_spent
from noiseaware.trace import Trace, TraceError
from noiseaware.trace.sites import SiteSpec

DOCS = Path(__file__).resolve().parents[1] / "docs" / "trace-format.md"
SUFFIXES = (".npz", ".nc")
PRIVACY = ((0.7, 0.01, 1e-9), (2.0, 0.3, 1e-5), (9.0, 0.9, 0.3))
"""(σ, q, δ) of the random round trips."""
SITES = (SiteSpec("scale", (), "softplus"), SiteSpec("p", (2,), "alr"))

CONVENTION_SCALARS = (
    "convention_normaliser", "convention_clipping", "convention_neighbouring", "convention_sampling",
    "convention_noise",
)  # fmt: skip
"""The convention fields a trace with the default convention stores (producer and microbatch size are absent)."""
NPZ_FIELDS = {
    "schema", "schema_version", "params", "grads", "noise_multiplier", "clip", "sampling_rate", "n_examples",
    "final_params", "grad_scale", "learning_rate", "epsilon", "delta", "accountant", "mc_draws", "optimizer",
    "variational_family", "param_layout", "param_names", "site_names", "site_shapes", "site_transforms",
    *CONVENTION_SCALARS,
}  # fmt: skip
NC_VARIABLES = {
    "params", "grads", "final_params", "grad_scale", "learning_rate", "param",
    "site_names", "site_shapes", "site_transforms",
}  # fmt: skip
NC_ATTRS = {
    "schema", "schema_version", "noise_multiplier", "clip", "sampling_rate", "n_examples", "epsilon", "delta",
    "accountant", "mc_draws", "optimizer", "variational_family", "param_layout", *CONVENTION_SCALARS,
}  # fmt: skip
OPTIONAL_NONE = ("learning_rate", "final_params", "epsilon", "delta", "accountant", "mc_draws", "optimizer", "sites")


def full_trace(dtype=np.float64, steps=6, seed=0) -> Trace:
    """A trace with every optional field set; d = 2 (P = 4) to match SITES."""
    rng = np.random.default_rng(seed)
    return Trace(
        params=rng.normal(size=(steps, 4)).astype(dtype),
        grads=rng.normal(size=(steps, 4)).astype(dtype),
        noise_multiplier=1.1,
        clip=2.0,
        sampling_rate=0.01,
        n_examples=1000,
        grad_scale=np.array([1.0, 1.0, 100.0, 100.0], dtype),
        learning_rate=np.array([1e-3, 1e-3, 1e-1, 1e-1], dtype),
        final_params=rng.normal(size=4).astype(dtype),
        epsilon=1.0,
        delta=1e-5,
        accountant="pld",
        mc_draws=10,
        optimizer="sgd",
        param_names=("mu:scale", "mu:p[0]", "rho:scale", "rho:p[0]"),
        sites=SITES,
    )


def minimal_trace(steps=5, n_params=4, **overrides) -> Trace:
    rng = np.random.default_rng(1)
    arguments = dict(
        params=rng.normal(size=(steps, n_params)),
        grads=rng.normal(size=(steps, n_params)),
        noise_multiplier=1.0,
        clip=1.0,
        sampling_rate=0.1,
        n_examples=100,
    )
    return Trace(**{**arguments, **overrides})


def assert_same_trace(actual: Trace, expected: Trace) -> None:
    for field in dataclasses.fields(Trace):
        a, e = getattr(actual, field.name), getattr(expected, field.name)
        if isinstance(e, np.ndarray):
            assert a.dtype == e.dtype, field.name
            np.testing.assert_array_equal(a, e, err_msg=field.name)
        else:
            assert a == e, field.name


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_round_trip_keeps_every_field_and_dtype(tmp_path, suffix, dtype):
    trace = full_trace(dtype)
    trace.save(tmp_path / f"trace{suffix}")
    loaded = Trace.load(tmp_path / f"trace{suffix}")
    assert_same_trace(loaded, trace)
    assert loaded.params.dtype == dtype and loaded.grads.dtype == dtype
    assert loaded.sites == SITES


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_round_trip_keeps_absent_optionals_none(tmp_path, suffix):
    trace = minimal_trace()
    trace.save(tmp_path / f"trace{suffix}")
    loaded = Trace.load(tmp_path / f"trace{suffix}")
    assert_same_trace(loaded, trace)
    for name in OPTIONAL_NONE:
        assert getattr(loaded, name) is None, name
    np.testing.assert_array_equal(loaded.grad_scale, np.ones(4))
    assert loaded.param_names == ("mu:theta[0]", "mu:theta[1]", "rho:theta[0]", "rho:theta[1]")


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_non_private_trace_keeps_epsilon_inf(tmp_path, suffix):
    trace = minimal_trace(noise_multiplier=0.0, epsilon=math.inf)
    trace.save(tmp_path / f"trace{suffix}")
    loaded = Trace.load(tmp_path / f"trace{suffix}")
    assert loaded.epsilon == math.inf and loaded.noise_multiplier == 0.0
    np.testing.assert_array_equal(loaded.noise_sd, np.zeros(4))


@settings(max_examples=20, deadline=None)
@given(
    steps=st.integers(1, 6),
    dim=st.integers(1, 3),
    dtype=st.sampled_from([np.float32, np.float64]),
    with_optionals=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_traces_round_trip_through_both_formats(steps, dim, dtype, with_optionals, seed):
    rng = np.random.default_rng(seed)
    n_params = 2 * dim

    def vector(low, high):
        return (10.0 ** rng.uniform(low, high, n_params)).astype(dtype)

    # the privacy settings from a few (each new one costs the accountant up to a second when the file is read back)
    sigma, rate, delta = PRIVACY[int(rng.integers(len(PRIVACY)))]
    optionals = dict(
        learning_rate=vector(-5, 0),
        final_params=rng.normal(size=n_params).astype(dtype),
        # at least what σ, q and T spend: a file stating less is relabelled on reading (tests/test_privacy_spent.py)
        epsilon=max(epsilon_spent(sigma, delta, rate, steps), 0.01) * float(rng.uniform(1, 3)),
        delta=delta,
        mc_draws=int(rng.integers(1, 20)),
        optimizer="adam",
        sites=(SiteSpec("theta", (dim,), "identity"),),
    )
    trace = Trace(
        params=(rng.normal(size=(steps, n_params)) * 10.0 ** rng.uniform(-3, 3)).astype(dtype),
        grads=(rng.normal(size=(steps, n_params)) * 10.0 ** rng.uniform(-3, 3)).astype(dtype),
        noise_multiplier=sigma,
        clip=float(10.0 ** rng.uniform(-2, 2)),
        sampling_rate=rate,
        n_examples=int(rng.integers(1, 10**6)),
        grad_scale=vector(-2, 3),
        **(optionals if with_optionals else {}),
    )
    with tempfile.TemporaryDirectory() as directory:
        for suffix in SUFFIXES:
            trace.save(Path(directory) / f"trace{suffix}")
            assert_same_trace(Trace.load(Path(directory) / f"trace{suffix}"), trace)


# ---------------------------------------------------------------- the files hold exactly the schema


def test_saved_npz_holds_exactly_the_schema_fields(tmp_path):
    full_trace().save(tmp_path / "trace.npz")
    assert os.listdir(tmp_path) == ["trace.npz"]
    with np.load(tmp_path / "trace.npz", allow_pickle=False) as archive:
        assert set(archive.files) == NPZ_FIELDS
        assert archive["schema"].dtype.kind == "U" and archive["param_names"].dtype.kind == "U"
        assert archive["schema_version"].shape == () and int(archive["schema_version"]) == 3
        assert list(archive["site_shapes"]) == ["[]", "[2]"]


def test_saved_nc_holds_exactly_the_schema_fields(tmp_path):
    full_trace().save(tmp_path / "trace.nc")
    assert os.listdir(tmp_path) == ["trace.nc"]
    with h5netcdf.File(tmp_path / "trace.nc", "r") as file:
        assert {name: dim.size for name, dim in file.dimensions.items()} == {"step": 6, "param": 4, "site": 2}
        assert set(file.variables) == NC_VARIABLES
        assert set(file.attrs) == NC_ATTRS
        assert all(not variable.attrs for variable in file.variables.values())
        assert file.variables["params"].dimensions == ("step", "param")


def test_minimal_nc_omits_absent_optionals(tmp_path):
    minimal_trace().save(tmp_path / "trace.nc")
    with h5netcdf.File(tmp_path / "trace.nc", "r") as file:
        assert set(file.variables) == {"params", "grads", "grad_scale", "param"}
        assert set(file.attrs) == {
            "schema", "schema_version", "noise_multiplier", "clip", "sampling_rate", "n_examples",
            "variational_family", "param_layout", *CONVENTION_SCALARS,
        }  # fmt: skip
        assert set(file.dimensions) == {"step", "param"}


def test_xarray_reads_a_saved_nc_with_the_param_coordinate(tmp_path):
    trace = full_trace()
    trace.save(tmp_path / "trace.nc")
    with xr.open_dataset(tmp_path / "trace.nc", engine="h5netcdf") as dataset:
        assert list(dataset["param"].values) == list(trace.param_names)
        np.testing.assert_array_equal(dataset["grads"].values, trace.grads)
        assert dataset.attrs["noise_multiplier"] == 1.1


def test_nc_written_with_xarray_loads(tmp_path):
    rng = np.random.default_rng(2)
    dataset = xr.Dataset(
        {"params": (("step", "param"), rng.normal(size=(5, 2))), "grads": (("step", "param"), rng.normal(size=(5, 2)))},
        coords={"param": ["mu:w", "rho:w"]},
        attrs={"noise_multiplier": 0.8, "clip": 3.0, "sampling_rate": 0.02, "n_examples": 500, "epsilon": 2.0},
    )
    dataset.to_netcdf(tmp_path / "xr.nc", engine="h5netcdf")
    trace = Trace.load(tmp_path / "xr.nc")
    np.testing.assert_array_equal(trace.params, dataset["params"].values)
    assert trace.param_names == ("mu:w", "rho:w") and trace.epsilon == 2.0 and trace.n_examples == 500


# ---------------------------------------------------------------- the hand-written example of the docs


def test_the_docs_example_writes_an_npz_by_hand_that_loads(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    example, full_rank = [block for block in blocks if "np.savez(" in block]
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(full_rank, str(DOCS), "exec"), namespace)
    assert namespace["full_rank"].family.kind == "full-rank" and namespace["full_rank"].dim == 2
    assert namespace["full_rank"].param_names[-1] == "L:theta[1],theta[0]"
    namespace = {}
    exec(compile(example, str(DOCS), "exec"), namespace)
    trace = namespace["trace"]
    assert isinstance(trace, Trace) and trace.steps == 500 and trace.n_params == 2
    np.testing.assert_array_equal(trace.final_iterate(), namespace["phi"])
    assert trace.param_names == ("mu:theta", "rho:theta") and trace.optimizer == "sgd"
    assert "noiseaware trace" in capsys.readouterr().out


# ---------------------------------------------------------------- from_arrays


def test_from_arrays_mean_reduction_multiplies_by_q_times_n():
    rng = np.random.default_rng(3)
    params, mean_grads = rng.normal(size=(4, 2)), rng.normal(size=(4, 2))
    trace = Trace.from_arrays(
        params, mean_grads, noise_multiplier=1.0, clip=1.0, sampling_rate=0.02, n_examples=500, reduction="mean"
    )
    np.testing.assert_allclose(trace.grads, mean_grads * 10.0)
    np.testing.assert_array_equal(trace.params, params)


def test_from_arrays_sum_reduction_keeps_grads():
    rng = np.random.default_rng(4)
    grads = rng.normal(size=(4, 2))
    trace = Trace.from_arrays(grads, grads, noise_multiplier=1.0, clip=1.0, sampling_rate=0.02, n_examples=500)
    np.testing.assert_array_equal(trace.grads, grads)


def test_from_arrays_rejects_an_unknown_reduction():
    with pytest.raises(TraceError, match="reduction='avg' is not supported"):
        Trace.from_arrays(np.zeros((2, 2)), np.zeros((2, 2)), noise_multiplier=1.0, clip=1.0, sampling_rate=0.1,
                          n_examples=10, reduction="avg")  # fmt: skip


def test_from_arrays_broadcasts_scalar_grad_scale_and_learning_rate():
    trace = Trace.from_arrays(
        np.zeros((3, 4)), np.zeros((3, 4)), noise_multiplier=2.0, clip=3.0, sampling_rate=0.1, n_examples=10,
        grad_scale=4.0, learning_rate=0.5,
    )  # fmt: skip
    np.testing.assert_array_equal(trace.grad_scale, np.full(4, 4.0))
    np.testing.assert_array_equal(trace.learning_rate, np.full(4, 0.5))
    np.testing.assert_array_equal(trace.noise_sd, np.full(4, 2.0 * 3.0 / 4.0))
    assert trace.optimizer == "sgd"


def test_from_arrays_keeps_an_explicit_optimizer():
    trace = Trace.from_arrays(np.zeros((3, 2)), np.zeros((3, 2)), noise_multiplier=1.0, clip=1.0, sampling_rate=0.1,
                              n_examples=10, learning_rate=0.5, optimizer="adam")  # fmt: skip
    assert trace.optimizer == "adam"


@pytest.mark.parametrize(
    ("given", "dtype"),
    [
        ([[0.0, 1.0], [2.0, 3.0]], np.float64),
        (np.ones((2, 2), np.float32), np.float32),
        ([[0, 1], [2, 3]], np.float64),
    ],
)
def test_from_arrays_accepts_lists_and_keeps_float32(given, dtype):
    trace = Trace.from_arrays(given, given, noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=10)
    assert trace.params.dtype == dtype and trace.grads.dtype == dtype
    np.testing.assert_array_equal(trace.params, np.asarray(given, dtype))


# ---------------------------------------------------------------- properties, immutability, summary


def test_properties_and_site_map():
    trace = full_trace()
    assert (trace.steps, trace.n_params, trace.dim) == (6, 4, 2)
    np.testing.assert_allclose(trace.noise_sd, 1.1 * 2.0 / np.array([1.0, 1.0, 100.0, 100.0]))
    assert trace.site_map.names == ("scale", "p") and trace.site_map.dim == 2
    assert minimal_trace().site_map is None


def test_param_names_default_from_the_site_map():
    trace = minimal_trace(sites=SITES)
    assert trace.param_names == ("mu:scale", "mu:p[0]", "rho:scale", "rho:p[0]")


def test_arrays_are_read_only_copies():
    params = np.zeros((3, 2))
    trace = minimal_trace(params=params, grads=np.zeros((3, 2)), n_params=2)
    params[0, 0] = 5.0
    assert trace.params[0, 0] == 0.0
    for name in ("params", "grads", "grad_scale"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(trace, name)[0] = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.clip = 2.0


def test_summary_shows_settings_and_one_row_per_coordinate():
    trace = full_trace(steps=10)
    lines = trace.describe().splitlines()
    text = "\n".join(lines)
    for expected in ("ε = 1", "δ = 1e-05", "pld", "σ = 1.1", "C = 2", "q = 0.01", "N = 1000", "T = 10", "S = 10"):
        assert expected in text, expected
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.startswith(("scale", "p[0]"))}
    assert float(rows["scale"][0]) == pytest.approx(trace.final_params[0], rel=1e-3)
    assert float(rows["p[0]"][1]) == pytest.approx(np.log1p(np.exp(trace.final_params[3])), rel=1e-3)
    assert float(rows["scale"][2]) == pytest.approx(trace.params[2:, 0].mean(), rel=1e-3)
    assert float(rows["scale"][3]) == pytest.approx(trace.grads[2:, 0].std(), rel=1e-3)
    assert float(rows["scale"][4]) == pytest.approx(2.2) and float(rows["p[0]"][6]) == pytest.approx(0.022)


# ---------------------------------------------------------------- final_iterate


def test_final_iterate_returns_the_recorded_final_params():
    trace = full_trace()
    np.testing.assert_array_equal(trace.final_iterate(), trace.final_params)


def test_final_iterate_is_derived_for_sgd():
    trace = dataclasses.replace(full_trace(), final_params=None)
    expected = trace.params[-1] - trace.learning_rate * trace.grads[-1]
    np.testing.assert_allclose(trace.final_iterate(), expected)


def test_final_iterate_without_learning_rate_says_what_is_missing():
    with pytest.raises(TraceError, match="final_params is absent.*learning_rate"):
        minimal_trace().final_iterate()


def test_final_iterate_of_another_optimizer_is_not_derived():
    trace = minimal_trace(learning_rate=1e-3, optimizer="adam")
    with pytest.raises(TraceError, match="optimizer is 'adam', not 'sgd'"):
        trace.final_iterate()


# ---------------------------------------------------------------- bad inputs, one problem each


def with_value(shape, index, value):
    array = np.zeros(shape)
    array[index] = value
    return array


BAD_INPUTS = {
    "shape mismatch": (dict(grads=np.zeros((5, 2))), r"params has shape \(5, 4\) but grads has shape \(5, 2\)"),
    "1-D params": (dict(params=np.zeros(4), grads=np.zeros(4)), r"params has shape \(4,\); .* shape \(T, P\)"),
    "no steps": (dict(params=np.zeros((0, 4)), grads=np.zeros((0, 4))), r"at least one step"),
    "odd P": (dict(params=np.zeros((5, 3)), grads=np.zeros((5, 3))), r"P = 3 parameters fit no θ dimension d"),
    "non-numeric params": (dict(params=np.full((5, 4), "x")), r"params has dtype <U1; pass real numbers"),
    "NaN in grads": (dict(grads=with_value((5, 4), (2, 1), np.nan)), r"grads holds nan at step 2, parameter 1.*re-"),
    "inf in params": (dict(params=with_value((5, 4), (0, 3), np.inf)), r"params holds inf at step 0, parameter 3"),
    "clip zero": (dict(clip=0.0), r"clip is 0.0; the clipping norm C must be > 0"),
    "clip negative": (dict(clip=-1.0), r"clip is -1.0; the clipping norm C must be > 0"),
    "noise negative": (dict(noise_multiplier=-0.5), r"noise_multiplier is -0.5; the noise multiplier σ must be ≥ 0"),
    "noise zero without epsilon inf": (dict(noise_multiplier=0.0), r"noise_multiplier is 0.*epsilon=math.inf"),
    "epsilon inf with noise": (dict(epsilon=math.inf), r"epsilon is inf but noise_multiplier is 1.0"),
    "epsilon not positive": (dict(epsilon=0.0), r"epsilon is 0.0; ε must be > 0"),
    "noise not finite": (dict(noise_multiplier=math.nan), r"noise_multiplier is nan; it must be a finite number"),
    "q zero": (dict(sampling_rate=0.0), r"sampling_rate is 0.0; .* must be in \(0, 1\]"),
    "q above one": (dict(sampling_rate=1.5), r"sampling_rate is 1.5; .* must be in \(0, 1\]"),
    "n_examples zero": (dict(n_examples=0), r"n_examples is 0; the number of examples N must be a positive integer"),
    "n_examples non-integer": (dict(n_examples=10.5), r"n_examples is 10.5; .* must be a positive integer"),
    "grad_scale zero": (dict(grad_scale=0.0), r"grad_scale is 0.0 at parameter 0; .* must be > 0"),
    "grad_scale negative entry": (dict(grad_scale=[1.0, 1.0, -2.0, 1.0]), r"grad_scale is -2.0 at parameter 2"),
    "grad_scale wrong length": (dict(grad_scale=np.ones(3)), r"grad_scale has shape \(3,\); it must have shape \(4,\)"),
    "learning_rate zero": (dict(learning_rate=[1e-3, 0.0, 1e-3, 1e-3]), r"learning_rate is 0.0 at parameter 1"),
    "learning_rate negative": (dict(learning_rate=-1e-3), r"learning_rate is -0.001 at parameter 0; .* > 0"),
    "final_params NaN": (dict(final_params=with_value(4, 2, np.nan)), r"final_params holds nan at parameter 2"),
    "delta zero": (dict(delta=0.0), r"delta is 0.0; δ must be in \(0, 1\)"),
    "delta one": (dict(delta=1.0), r"delta is 1.0; δ must be in \(0, 1\)"),
    "mc_draws zero": (dict(mc_draws=0), r"mc_draws is 0; S must be a positive integer"),
    "param_names wrong length": (dict(param_names=("a", "b")), r"param_names has 2 labels; it needs P = 4"),
    "param_names repeated": (dict(param_names=("a", "b", "a", "c")), r"param_names repeats \['a'\]"),
    "sites inconsistent with d": (dict(sites=(SiteSpec("w", (3,), "identity"),)), r"sites cover 3 .* d = 2 \(the μ"),
    "site with unknown transform": (dict(sites=(SiteSpec("w", (2,), "tanh"),)), r"site 'w' in sites is invalid"),
    "simplex map on a scalar site": (
        dict(sites=(SiteSpec("p", (), "alr"),)),
        r"site 'p': transform 'alr' needs a vector shape, got \(\)",
    ),
    "site with negative sizes": (
        dict(sites=(SiteSpec("w", (-1, -2), "identity"),)),
        r"site 'w' in sites is invalid \(its shape \(-1, -2\) has a negative size\)",
    ),
    "site without coordinates": (
        dict(sites=(SiteSpec("p", (1,), "alr"), SiteSpec("w", (2,), "identity"))),
        r"site 'p' in sites has no unconstrained coordinates",
    ),
    "unknown variational family": (dict(variational_family="full-rank"), r"variational_family is 'full-rank'"),
    "empty accountant": (dict(accountant=""), r"accountant is ''; it must be a non-empty string"),
}


@pytest.mark.parametrize(("overrides", "match"), list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
def test_bad_input_is_rejected_with_a_clear_message(overrides, match):
    with pytest.raises(TraceError, match=match):
        minimal_trace(**overrides)


# ---------------------------------------------------------------- bad files, one problem each


def write_npz(path, **changes):
    """A valid hand-written trace file with `changes` applied (a value of None drops the field)."""
    fields = dict(params=np.zeros((3, 2)), grads=np.zeros((3, 2)), noise_multiplier=1.0, clip=1.0,
                  sampling_rate=0.1, n_examples=10)  # fmt: skip
    fields.update(changes)
    np.savez(path, **{name: value for name, value in fields.items() if value is not None})
    return path


def test_unknown_schema_version_is_rejected(tmp_path):
    path = write_npz(tmp_path / "t.npz", schema="noiseaware.trace", schema_version=6)
    with pytest.raises(TraceError, match=r"schema_version 6 is not supported; .* reads schema_versions 1, 2, 3, 4, 5"):
        Trace.load(path)


def test_unknown_schema_name_is_rejected(tmp_path):
    path = write_npz(tmp_path / "t.npz", schema="other.trace")
    with pytest.raises(TraceError, match=r"schema is 'other.trace', not 'noiseaware.trace'"):
        Trace.load(path)


def test_an_extra_field_in_an_npz_is_rejected(tmp_path):
    path = write_npz(tmp_path / "t.npz", per_example_norms=np.ones(10))
    with pytest.raises(TraceError, match=r"t.npz: unknown field\(s\) \['per_example_norms'\].*remove the field"):
        Trace.load(path)


def test_an_extra_attribute_in_an_nc_is_rejected(tmp_path):
    minimal_trace().save(tmp_path / "t.nc")
    with h5netcdf.File(tmp_path / "t.nc", "a") as file:
        file.attrs["seed"] = 1234
    with pytest.raises(TraceError, match=r"unknown field\(s\) \['seed'\].*RNG keys"):
        Trace.load(tmp_path / "t.nc")


def test_a_transposed_nc_variable_is_rejected(tmp_path):
    with h5netcdf.File(tmp_path / "t.nc", "w") as file:
        file.dimensions = {"step": 4, "param": 2}
        file.create_variable("params", ("param", "step"), data=np.zeros((2, 4)))
    with pytest.raises(TraceError, match=r"variable 'params' has dims \('param', 'step'\); .* \('step', 'param'\)"):
        Trace.load(tmp_path / "t.nc")


def test_a_missing_required_field_is_named(tmp_path):
    path = write_npz(tmp_path / "t.npz", clip=None)
    with pytest.raises(TraceError, match=r"required field\(s\) \['clip'\] are missing"):
        Trace.load(path)


def test_file_values_are_validated_like_constructor_arguments(tmp_path):
    path = write_npz(tmp_path / "t.npz", sampling_rate=0.0)
    with pytest.raises(TraceError, match=r"t.npz: sampling_rate is 0.0"):
        Trace.load(path)


def test_a_steps_field_must_match_the_rows(tmp_path):
    assert Trace.load(write_npz(tmp_path / "good.npz", steps=3)).steps == 3
    with pytest.raises(TraceError, match=r"steps is 4 but params has 3 rows"):
        Trace.load(write_npz(tmp_path / "bad.npz", steps=4))


def test_incomplete_site_fields_are_rejected(tmp_path):
    path = write_npz(tmp_path / "t.npz", site_names=["theta"])
    with pytest.raises(TraceError, match=r"site_names, site_shapes, site_transforms come together"):
        Trace.load(path)


@pytest.mark.parametrize(
    ("shape", "transform", "match"),
    [
        ("[true]", "identity", r"site_shapes entry '\[true\]' of site 'p' must be a JSON list of sizes"),
        ("[-1]", "identity", r"site_shapes entry '\[-1\]' of site 'p' must be a JSON list of sizes"),
        ("[]", "alr", r"t.npz: site 'p': transform 'alr' needs a vector shape, got \(\)"),
    ],
)
def test_a_bad_site_shape_in_a_file_is_named(tmp_path, shape, transform, match):
    path = write_npz(tmp_path / "t.npz", site_names=["p"], site_shapes=[shape], site_transforms=[transform])
    with pytest.raises(TraceError, match=match):
        Trace.load(path)


def test_an_object_array_is_never_unpickled(tmp_path):
    path = write_npz(tmp_path / "t.npz", param_names=np.array(["mu:a", "rho:a"], dtype=object))
    with pytest.raises(TraceError, match=r"field 'param_names' is a Python object array.*never unpickled"):
        Trace.load(path)


def test_a_corrupted_file_is_reported(tmp_path):
    (tmp_path / "t.npz").write_bytes(b"not a zip archive")
    with pytest.raises(TraceError, match=r"could not be read as a .npz trace"):
        Trace.load(tmp_path / "t.npz")


def test_a_netcdf3_file_is_reported_as_not_netcdf4(tmp_path):
    pytest.importorskip("scipy")
    arrays = {"params": (("step", "param"), np.zeros((3, 2))), "grads": (("step", "param"), np.ones((3, 2)))}
    dataset = xr.Dataset(arrays)
    dataset.to_netcdf(tmp_path / "t.nc", engine="scipy")
    with pytest.raises(TraceError, match=r"could not be read as a .nc trace .* not netCDF4"):
        Trace.load(tmp_path / "t.nc")


def test_a_missing_file_is_reported(tmp_path):
    with pytest.raises(TraceError, match=r"no trace file at .*absent.nc"):
        Trace.load(tmp_path / "absent.nc")


@pytest.mark.parametrize("action", ["save", "load"])
def test_an_unsupported_suffix_is_rejected(tmp_path, action):
    path = tmp_path / "trace.h5"
    with pytest.raises(TraceError, match=r"suffix '.h5'; a trace file ends in .nc \(netCDF4\) or .npz"):
        minimal_trace().save(path) if action == "save" else Trace.load(path)


# ---------------------------------------------------------------- atomic writes


def failing_npz_writer(monkeypatch, seen):
    def savez(handle, **fields):
        handle.write(b"partial")
        seen.append(sorted(os.listdir(Path(handle.name).parent)))
        raise RuntimeError("disk full")

    monkeypatch.setattr(np, "savez", savez)


def failing_nc_writer(monkeypatch, seen):
    def create_variable(self, *args, **kwargs):
        seen.append(sorted(os.listdir(Path(self.filename).parent)))
        raise RuntimeError("disk full")

    monkeypatch.setattr(h5netcdf.File, "create_variable", create_variable)


@pytest.mark.parametrize(("suffix", "break_writer"), [(".npz", failing_npz_writer), (".nc", failing_nc_writer)])
def test_a_failed_write_leaves_the_existing_file_untouched(tmp_path, monkeypatch, suffix, break_writer):
    target = tmp_path / f"trace{suffix}"
    minimal_trace().save(target)
    before = target.read_bytes()
    seen = []
    break_writer(monkeypatch, seen)
    with pytest.raises(RuntimeError, match="disk full"):
        full_trace().save(target, overwrite=True)
    assert len(seen) == 1 and len(seen[0]) == 2, "the writer must fail after creating a temporary file"
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == [target.name]


def test_saving_into_a_missing_directory_is_reported(tmp_path):
    with pytest.raises(TraceError, match=r"directory .*missing does not exist"):
        minimal_trace().save(tmp_path / "missing" / "trace.npz")
