"""Bad input gets one clear error before any work, and a batch's warnings come back complete and actionable.

Trace arrays of a dtype other than float32/float64 (issue 14, defect 6); keys that are not keys, and route or
baseline options out of range (defect 8); warnings of a batch of fits and of a study, one complete line per
distinct warning with its count and what to do, and no raw numpy RuntimeWarnings (defect 12).
"""

import dataclasses
import importlib
import math
import re
import warnings

import h5netcdf
import jax
import numpy as np
import pytest
from messages import mentions
from ou import ou_trace

import noiseaware as na
from noiseaware.cli.common import fit_reporting_warnings
from noiseaware.evaluation.experiment import run_methods, warning_lines
from noiseaware.evaluation.result import CoverageResult
from noiseaware.methods import DPVImOptions, ExactOptions, LaplaceOptions, NutsOptions
from noiseaware.methods.base import Batch, split_keys
from noiseaware.methods.fit import fit_each, fit_notes
from noiseaware.methods.reference import NonPrivateOptions
from noiseaware.methods.registry import DEFAULT_REGISTRY
from noiseaware.trace import Trace, TraceError
from noiseaware.util.notes import FitWarning, Note, gather

SETTINGS = dict(noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=10)


def arrays(dtype, steps=5):
    rng = np.random.default_rng(0)
    return rng.normal(size=(steps, 4)).astype(dtype), rng.normal(size=(steps, 4)).astype(dtype)


# ---------------------------------------------------------------- 6: trace dtypes


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float16, np.uint8])
def test_from_arrays_refuses_arrays_that_are_not_float32_or_float64(dtype):
    params, grads = arrays(np.float64)
    with pytest.raises(TraceError) as info:
        Trace.from_arrays(params.astype(dtype), grads, **SETTINGS)
    mentions(info, "params", str(np.dtype(dtype)), "float32", "float64")


@pytest.mark.parametrize("field", ["grads", "final_params", "grad_scale", "learning_rate"])
def test_the_constructor_names_the_field_its_dtype_and_the_fix(field):
    params, grads = arrays(np.float64)
    values = dict(params=params, grads=grads, final_params=params[-1], grad_scale=np.ones(4), learning_rate=np.ones(4))
    values[field] = (values[field] * 4).astype(np.int64)
    with pytest.raises(TraceError) as info:
        Trace(**values, **SETTINGS)
    mentions(info, field, "int64", "float32", "float64", ".astype(np.float64)")


def test_float32_and_float64_arrays_and_python_numbers_are_kept():
    for dtype in (np.float32, np.float64):
        assert Trace.from_arrays(*arrays(dtype), **SETTINGS).params.dtype == dtype
    from_lists = Trace.from_arrays([[0, 1], [2, 3]], [[1, 0], [0, 1]], grad_scale=[1, 100], **SETTINGS)
    assert from_lists.params.dtype == from_lists.grad_scale.dtype == np.float64


def write_nc(path, params, grads):
    with h5netcdf.File(path, "w") as file:
        file.dimensions = {"step": params.shape[0], "param": params.shape[1]}
        file.create_variable("params", ("step", "param"), data=params)
        file.create_variable("grads", ("step", "param"), data=grads)
        file.attrs.update(SETTINGS)


@pytest.mark.parametrize("dtype", [np.int64, np.float16])
@pytest.mark.parametrize("suffix", [".npz", ".nc"])
def test_loading_refuses_trace_files_with_other_dtypes(tmp_path, suffix, dtype):
    path = tmp_path / f"trace{suffix}"
    params, grads = arrays(np.float64)
    grads = (grads * 100).astype(dtype)
    if suffix == ".npz":
        np.savez(path, params=params, grads=grads, **SETTINGS)
    else:
        write_nc(path, params, grads)
    with pytest.raises(TraceError) as info:
        Trace.load(path)
    mentions(info, str(path), "grads", str(np.dtype(dtype)), "astype")


# ---------------------------------------------------------------- 8: keys and options


@pytest.fixture(scope="module")
def trace():
    return ou_trace(steps=400)


KEY_ERRORS = {
    "a string": ("abc", TypeError, ("'abc'",)),
    "None": (None, TypeError, ("None",)),
    "a float": (1.5, TypeError, ("1.5",)),
    "a bool": (True, TypeError, ("True",)),
    "a float array": (np.zeros(2), TypeError, ("float64", "(2,)")),
    "a negative seed": (-5, ValueError, ("2**63", "-5")),
    "a seed too large": (2**63, ValueError, ("2**63", "9223372036854775808")),
}


@pytest.mark.parametrize(("key", "error", "tokens"), list(KEY_ERRORS.values()), ids=list(KEY_ERRORS))
def test_a_key_that_is_not_a_key_is_one_clear_error(trace, key, error, tokens):
    with pytest.raises(error) as info:
        na.fit(trace, "exact", key=key)
    mentions(info, "key", *tokens)


def test_integer_seeds_of_every_kind_and_keys_are_accepted():
    from noiseaware.util.keys import as_key

    expected = jax.random.key_data(as_key(7))
    for key in (7, np.int64(7), np.array(7), jax.numpy.asarray(7, jax.numpy.int32)):
        np.testing.assert_array_equal(jax.random.key_data(as_key(key)), expected)
    assert as_key(jax.random.key(1)).shape == ()


def test_a_negative_sample_size_is_one_clear_error(trace):
    posterior = na.naive_posterior(trace)
    with pytest.raises(ValueError) as info:
        posterior.sample(key=0, n=-5)
    mentions(info, "n", "n=-5")


OPTION_ERRORS = {
    "draws 0": ("exact", dict(draws=0), ("draws", "draws=0")),
    "draws 2.5": ("laplace", dict(draws=2.5), ("draws", "draws=2.5")),
    "burn_in 1": ("exact", dict(burn_in=1.0), ("burn_in", "[0,", "1)", "burn_in=1.0")),
    "hessian_nodes 2": ("exact", dict(hessian_nodes=2), ("hessian_nodes", "3", "hessian_nodes=2")),
    "passes 0": ("exact", dict(passes=0), ("passes", "passes=0")),
    "prior unknown": ("exact", dict(prior="flat"), ("prior", "'flat'")),
    "style unknown": ("laplace", dict(style="research"), ("Laplace", "'research'", "full")),
    "max_steps 0": ("laplace", dict(max_steps=0), ("max_steps", "max_steps=0")),
    "warmup -1": ("nuts", dict(warmup=-1), ("warmup", "warmup=-1")),
    "chains 0": ("nuts", dict(chains=0), ("chains", "chains=0")),
    "nuts draws 3": ("nuts", dict(draws=3), ("draws", "4", "draws=3")),
    "backend unknown": ("nuts", dict(backend="stan"), ("backend", "'stan'", "numpyro", "blackjax")),
    "target_accept 1": ("nuts", dict(target_accept=1.0), ("target_accept", "(0,", "1)")),
    "dense_mass 1": ("nuts", dict(dense_mass=1), ("dense_mass", "True", "False", "dense_mass=1")),
    "chunk 0": ("nuts", dict(chunk=0), ("chunk", "chunk=0")),
    "progress string": ("nuts", dict(progress="yes"), ("progress", "True", "False", "callable")),
    "dpvim windows 1": ("dpvim", dict(windows=1), ("windows", "2", "windows=1")),
    "dpvim centre": ("dpvim", dict(centre="mean"), ("centre", "'mean'", "last", "average")),
    "dpvim threshold": ("dpvim", dict(threshold=0.0), ("threshold", "threshold=0.0")),
}


@pytest.mark.parametrize(("method", "options", "tokens"), list(OPTION_ERRORS.values()), ids=list(OPTION_ERRORS))
def test_a_bad_option_is_one_clear_error_before_any_work(trace, method, options, tokens):
    def no_work(*args, **kwargs):
        raise AssertionError("the method ran before its options were checked")

    registry = DEFAULT_REGISTRY.including(dataclasses.replace(DEFAULT_REGISTRY[method], fit_batch=no_work))
    with pytest.raises(ValueError) as info:
        na.fit(trace, method, key=0, registry=registry, **options)
    mentions(info, *tokens)


def test_the_fraction_and_flag_checks():
    from noiseaware.util.checks import flag, fraction

    assert fraction("burn_in", 0) == 0.0 and fraction("burn_in", np.float32(0.5)) == 0.5
    for value in (1, -0.1, math.nan, "0.2", True):
        with pytest.raises(ValueError) as info:
            fraction("burn_in", value)
        mentions(info, "burn_in", "[0,", "1)", "burn_in=")
    assert flag("dense_mass", np.bool_(True)) is True
    for value in (0, 1, "yes", None):
        with pytest.raises(ValueError) as info:
            flag("dense_mass", value)
        mentions(info, "dense_mass", "True", "False", "dense_mass=")


def test_options_objects_check_themselves():
    """The options dataclasses validate in __post_init__, so a bad object cannot be built or replaced into."""
    for make, name in (
        (lambda: ExactOptions(draws=-1), "draws=-1"),
        (lambda: LaplaceOptions(style="none"), "'none'"),
        (lambda: NutsOptions(warmup=0), "warmup=0"),
        (lambda: DPVImOptions(draws=0), "draws=0"),
        (lambda: NonPrivateOptions(warmup=0), "warmup=0"),
        (lambda: NonPrivateOptions(progress="no"), "progress"),
    ):
        with pytest.raises(ValueError) as info:
            make()
        mentions(info, name)
    with pytest.raises(ValueError) as info:
        dataclasses.replace(NutsOptions(), chains=-2)
    mentions(info, "chains")


# ---------------------------------------------------------------- 12: warnings, gathered


def silent_trace(seed):
    """Gradients that ignore φ (pure noise) in the μ block: those coordinates are weakly identified."""
    rng = np.random.default_rng(seed)
    params = np.cumsum(rng.normal(0, 0.01, (800, 4)), axis=0)
    return Trace.from_arrays(params, rng.normal(0, 10.0, (800, 4)), **(SETTINGS | dict(noise_multiplier=5.0)))


def weak_warning(line: str) -> re.Match | None:
    return re.fullmatch(r"weak identification in (\d+) of (\d+) traces \((.*)\): (.*)", line)


def test_fit_batch_gathers_a_warning_of_many_traces_into_one_complete_line():
    """Every trace is weak in some coordinates, not all the same ones: one line with the number of traces and
    every coordinate named with its own count (8 parameters: none left out), and advice on what to do."""
    traces = [silent_trace(seed) for seed in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        na.fit_batch(traces, "exact", key=0, draws=50)
    lines = [str(w.message) for w in caught if "weak identification" in str(w.message)]
    assert len(lines) == 1, lines
    match = weak_warning(lines[0])
    assert match and match[1] == "3" and match[2] == "3", lines[0]
    named = dict(re.fullmatch(r"(\S+) in (\d+)", part).groups() for part in match[3].split(", "))
    assert {"mu:theta[0]", "mu:theta[1]"} <= set(named) and all(1 <= int(n) <= 3 for n in named.values())
    assert "…" not in lines[0]
    mentions(match[4], "longer", "trace", "privacy", "budget")  # the advice: both ways out
    assert all(w.category is FitWarning for w in caught if "weak identification" in str(w.message))


def test_a_fit_keeps_its_notes_as_data_and_the_fit_loop_warns_nothing(tmp_path):
    """Diagnostics as data: the one fit loop raises no warning; each posterior carries its notes (and its trace
    checks' report), which a saved posterior keeps; `fit` is what issues them."""
    traces = tuple(silent_trace(seed) for seed in range(2))
    exact = DEFAULT_REGISTRY["exact"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outcomes, reports = fit_each(
            exact, Batch(traces), split_keys(0, 2), exact.make_options(draws=50), checks="warn"
        )
    for post, report in zip(outcomes, reports):
        weak = [note for note in post.notes if note.kind == "weak identification"]
        assert len(weak) == 1 and {"mu:theta[0]", "mu:theta[1]"} & set(weak[0].parameters)
        assert post.checks is report is not None
        assert fit_notes(post, report)[-len(post.notes) :] == post.notes
    outcomes[0].save(tmp_path / "p.nc", key=0)
    assert na.load_posterior(tmp_path / "p.nc").notes == outcomes[0].notes
    with pytest.warns(FitWarning) as record:
        na.fit(traces[0], "exact", key=split_keys(0, 2)[0], draws=50, checks="off")
    mentions(record, "mu:theta[0]")


def test_a_study_keeps_one_line_per_distinct_warning_with_its_count():
    """run_methods, the experiment driver of coverage and calibration: the method's warnings over M problems."""
    traces = tuple(silent_trace(seed) for seed in range(3)) + (ou_trace(steps=800, hessian=(400, 400, 20, 20)),)
    runs = run_methods(
        Batch(traces),
        [DEFAULT_REGISTRY["laplace"]],
        {"laplace": LaplaceOptions(draws=50)},
        key=(jax.random.key(0), jax.random.key(1)),
        score=lambda method, outcomes, key: (None, 0),
    )
    lines = runs["laplace"].diagnostics["warnings"]
    assert len(lines) == 1 and weak_warning(lines[0]) and weak_warning(lines[0]).group(1, 2) == ("3", "4"), lines


def test_notes_combine_their_numbers_and_foreign_warnings_are_counted():
    notes = [Note("divergent transitions", "raise target_accept", value=divergences) for divergences in (3, 4)]
    notes += [Note("R-hat above 1.01", "run more draws", value=rhat, combine="max") for rhat in (1.02, 1.07)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn(FitWarning(notes[0]), stacklevel=1)  # a note issued and caught at the command line's edge
        for _ in range(2):
            warnings.warn("a library's\n   advice", stacklevel=1)
    lines = [text for _, text in gather(notes[1:] + caught, 20)]
    assert len(lines) == 3, lines
    mentions(lines[0], "divergent", "2", "20", "7", "target_accept")  # in 2 of 20 traces, 3 + 4 = 7 in all
    mentions(lines[1], "R-hat", "1.01", "2", "20", "1.07")  # the largest of 1.02 and 1.07
    assert lines[1].count("1.02") == 0
    mentions(lines[2], "library's", "advice", "2", "20")  # the foreign warning's two lines made one
    assert str(notes[0]) == str(caught[0].message)
    mentions(str(notes[0]), "divergent", "(3):", "target_accept")


def test_the_cli_prints_each_warning_once_and_numerical_ones_as_lines(capsys, monkeypatch, trace):
    """A study's lines, prefixed by the method; a fit's RuntimeWarning as one `warning:` line saying where, not
    numpy's raw two-line report."""

    def noisy_fit(trace, method, **options):
        np.log(np.zeros(1))
        warnings.warn(FitWarning(Note("grid edge", "raise passes", ("mu:theta[0]",))), stacklevel=1)
        return "posterior"

    monkeypatch.setattr("noiseaware.cli.common.fit", noisy_fit)
    with warnings.catch_warnings(record=True) as passed_on:
        warnings.simplefilter("always")
        assert fit_reporting_warnings(trace, "exact", key=0) == "posterior"
    assert passed_on == []
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[1].startswith("warning: ") and err[0].startswith("warning: ")
    mentions(err[1], "grid", "edge", "(mu:theta[0]):", "passes")
    mentions(err[0], "numerical", "divide", "log")
    assert re.search(r"test_input_errors\.py:\d+:", err[0])  # where: this file and the line
    line = "weak identification in 11 of 20 traces (mu:rate in 9, rho:rate in 4): record a longer trace"
    other = "divergent transitions in 1 of 20 traces (2 in all): raise target_accept"
    lines = warning_lines(
        {"exact": {"warnings": [line]}, "naive": {"warnings": []}, "nuts": {"warnings": [line, other]}}
    )
    assert lines == [f"warning: exact, nuts: {line}", f"warning: nuts: {other}"]


def test_a_method_that_failed_everywhere_writes_its_results_without_numpy_warnings(tmp_path):
    """All its ECP curves are NaN: the files say NaN, and numpy's empty-slice RuntimeWarnings stay inside."""
    levels = np.linspace(0.05, 0.95, 19)
    curves = {"research": {"exact": np.full((2, 19), np.nan), "naive": np.tile(levels, (2, 1))}}
    result = CoverageResult(
        levels=levels,
        curves=curves | {"trace": curves["research"]},
        marginal_curves={r: {m: c[..., None] for m, c in cs.items()} for r, cs in curves.items()}
        | {"trace": {m: c[..., None] for m, c in curves["research"].items()}},
        failures={"exact": 20, "naive": 0},
        seconds={},
        diagnostics={"exact": {"warnings": []}, "naive": {"warnings": []}},
        theta_names=("rate",),
        settings={},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result.to_json(tmp_path / "r.json")
        result.to_csv(tmp_path / "r.csv")
    assert "NaN" in (tmp_path / "r.json").read_text() and math.isnan(result.rmse["exact"][0])


def test_a_warning_re_issued_from_its_text_is_shown_once_and_whole():
    """`fit` re-issues a batch's warnings by their text; beside the original they make one line, with no
    dangling ': ' where an advice-less FitWarning has no advice."""
    original = FitWarning(Note("weak identification", "record a longer trace", ("mu:rate",)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn(original, stacklevel=1)
        warnings.warn(str(original), FitWarning, stacklevel=1)
    lines = [line for _, line in gather(caught, 1)]
    assert lines == [str(original)]


def test_a_warning_about_many_parameters_counts_them_and_names_a_few():
    """Issue 26: one line never lists ~100 coordinates; it names the most frequent first and counts the rest."""
    names = [(f"mu:b[{j}]" for j in range(100)) if m else ("mu:b[7]",) for m in range(3)]
    ((_, line),) = gather([Note("weak identification", "record a longer trace", tuple(n)) for n in names], 3)
    mentions(line, "3", "mu:b[7]", "mu:b[3]", "…", "95", "100")
    assert (
        line.index("mu:b[7]") < line.index("mu:b[0]") < line.index("mu:b[3]") < line.index("…")
    )  # most frequent first
    assert "mu:b[4]" not in line and "mu:b[99]" not in line


# ---------------------------------------------------------------- issue 40: files that are not traces


@pytest.mark.parametrize("suffix", [".npz", ".nc"])
def test_an_empty_file_a_folder_and_a_truncated_file_are_one_error_naming_them(tmp_path, suffix):
    empty = tmp_path / f"empty{suffix}"
    empty.touch()
    with pytest.raises(TraceError) as info:
        Trace.load(empty)
    mentions(info, str(empty), "0")
    folder = tmp_path / f"folder{suffix}"
    folder.mkdir()
    with pytest.raises(TraceError) as info:
        Trace.load(folder)
    mentions(info, str(folder))
    whole = tmp_path / f"whole{suffix}"
    ou_trace(steps=100).save(whole)
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(whole.read_bytes()[:500])
    with pytest.raises(TraceError) as info:
        Trace.load(cut)
    mentions(info, str(cut), suffix)
    text = tmp_path / f"text{suffix}"
    text.write_text("not a trace\n")
    with pytest.raises(TraceError) as info:
        Trace.load(text)
    mentions(info, str(text))


def test_a_posterior_file_is_named_as_one(tmp_path):
    trace = ou_trace(steps=400)
    na.fit(trace, "naive", key=0, checks="off").save(tmp_path / "post.nc", key=0)
    with pytest.raises(TraceError) as info:
        Trace.load(tmp_path / "post.nc")
    mentions(info, "noiseaware.load_posterior")


# ---------------------------------------------------------------- issue 40: DP-PVI's clients before any work


@pytest.mark.parametrize(
    ("clients", "tokens"),
    [
        (6000, ("clients=6000", "5000")),
        (7, ("clients=7", "5000", "1,", "2,", "4,", "5,", "8")),
        (5000, ("clients=5000", "1", "0.1", "500")),
    ],
)
def test_dp_pvi_checks_its_clients_against_the_data_before_any_work(monkeypatch, clients, tokens):
    """clients > N, clients not dividing N and shards whose expected batch q·N/M is under one example are refused
    by `coverage` before anything is simulated or recorded."""
    coverage_module = importlib.import_module("noiseaware.evaluation.coverage")  # the package's name is the function

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the options were checked")

    monkeypatch.setattr(coverage_module, "simulate_part", no_work)
    bm = na.models.get("M1")
    for method in ("dp-pvi", "na-dp-pvi"):
        with pytest.raises(ValueError) as info:
            na.coverage(
                bm, key=0, epsilon=1.0, methods=[method], simulations=2, method_options={method: {"clients": clients}}
            )
        mentions(info, *tokens)


def test_dp_pvi_refuses_a_non_positive_or_infinite_epsilon_option():
    from noiseaware.methods.federated import PVIOptions

    for value in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError) as info:
            PVIOptions(epsilon=value)
        mentions(info, "epsilon")
    assert PVIOptions(clients=4, epsilon=0.5).epsilon == 0.5


def test_a_report_on_many_parameters_counts_them_and_names_a_few():
    """Issue 42: at 10⁵ coordinates a finding names five and counts the rest, and the printed report lists at most
    FLAGGED_LINES coordinates, saying where the others are."""
    from noiseaware.checks.diagnosis import FLAGGED_LINES, Finding, TraceDiagnosis

    d = 200
    names = tuple(f"mu:theta[{j}]" for j in range(d)) + tuple(f"rho:theta[{j}]" for j in range(d))
    finding = Finding("drift", names[:120], "p = 0.001", "record a longer trace")
    assert str(finding).startswith("drift (mu:theta[0], ")
    mentions(str(finding), "mu:theta[4]", "…", "115")
    assert "mu:theta[5]" not in str(finding)
    flags = {"drift": np.arange(2 * d) < 120}
    report = TraceDiagnosis(names, 0.05, 0.1, (finding,), flags, {}, np.zeros((1, 2 * d)))
    lines = str(report).splitlines()
    assert len(lines) == 3 + FLAGGED_LINES + 1
    assert lines[-1].startswith("    … ")
    mentions(lines[-1], str(120 - FLAGGED_LINES), "report.theta_verdicts())")
