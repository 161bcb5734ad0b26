"""Silent wrong answers at recording time (issue 14, defects 3–5), each caught before any DP-SGD work: δ ≥ 1/N
warns and δ ≥ 0.5 is refused unless allow_weak_privacy; data outside a likelihood's support; data whose shapes
do not match the model's (a CSV short of X[2], x of shape (N, k) for a one-value-per-example site, per-example
arrays of different lengths). Through the API (record_dpvi, record_dpvi_batch, the studies) and the command line."""

import importlib
import warnings
from pathlib import Path

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.cli import DataError, load_data, main
from noiseaware.models.builtin import dirichlet_categorical, gamma_exponential, logistic_regression
from noiseaware.recording import ModelError
from noiseaware.recording.dpvi import build_recorder

dpvi = importlib.import_module("noiseaware.recording.dpvi")
coverage = importlib.import_module("noiseaware.evaluation.coverage")  # the modules, not the functions of that name
calibration_experiment = importlib.import_module("noiseaware.evaluation.calibration_experiment")
simulations = importlib.import_module("noiseaware.evaluation.simulations")

TINY = {"steps": 5, "sampling_rate": 1.0, "clip": 2.0}  # q = 1: the accountant answers at once
M1 = na.models.get("M1")


def exponential_data(n=100, seed=0):
    return {"x": np.random.default_rng(seed).exponential(0.5, n)}


def logistic_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (n, 3))
    return X, (rng.random(n) < 0.5).astype(np.int64)


@pytest.fixture
def no_dp_sgd(monkeypatch):
    """Fail the test if a DP-SGD program starts: every check must come first."""

    def refuse(*args, **kwargs):
        raise AssertionError("the DP-SGD program ran before the check")

    monkeypatch.setattr(dpvi, "_run", refuse)
    for strategy in dpvi.BATCH_STRATEGIES:
        monkeypatch.setitem(dpvi.BATCH_STRATEGIES, strategy, refuse)


def run_cli(capsys, *argv) -> tuple[int, str]:
    status = main([str(a) for a in argv])
    return status, capsys.readouterr().err


def cli_error(capsys, *argv) -> str:
    """The one `error:` line of a command that must fail with status 2 and leave no output file."""
    status, err = run_cli(capsys, *argv)
    assert status == 2, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def record_cli(model: str, data: Path, out: Path, *extra) -> tuple:
    return (
        "record",
        "--model",
        model,
        "--data",
        data,
        "--noise-multiplier",
        "5",
        "--steps",
        "20",
        "--out",
        out,
        *extra,
    )


# ---------------------------------------------------------------- 3. δ


def test_delta_at_least_one_over_n_warns_what_it_means(no_dp_sgd):
    with pytest.raises(AssertionError) as info:  # the warning comes before any work
        with pytest.warns(UserWarning) as caught:
            na.record_dpvi(gamma_exponential, exponential_data(100), key=0, noise_multiplier=5.0, delta=0.01, **TINY)
    mentions(info, "DP-SGD")
    mentions(caught, "delta=0.01", "1/N", "0.01", "100", "delta=0.001")  # what it is, and a δ that is safe


def test_delta_below_one_over_n_passes_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        recorder = build_recorder(gamma_exponential, exponential_data(100), noise_multiplier=5.0, delta=0.009, **TINY)
    assert recorder.settings.delta == 0.009


@pytest.mark.parametrize("delta", [0.5, 0.9])
def test_delta_of_one_half_or_more_is_refused_before_any_work(no_dp_sgd, delta):
    with pytest.raises(ValueError) as info:
        na.record_dpvi(gamma_exponential, exponential_data(5000), key=0, noise_multiplier=5.0, delta=delta, **TINY)
    mentions(info, "allow_weak_privacy=True")
    with pytest.raises(ValueError) as info:
        na.record_dpvi_batch(
            gamma_exponential,
            {"x": np.stack([exponential_data(5000)["x"]] * 2)},
            keys=[1, 2],
            noise_multiplier=5.0,
            delta=delta,
            **TINY,
        )
    mentions(info, "delta=1e-05", "5000")


def test_allow_weak_privacy_records_with_the_warning():
    with pytest.warns(UserWarning) as record:
        trace = na.record_dpvi(
            gamma_exponential,
            exponential_data(100),
            key=0,
            noise_multiplier=0.5,
            delta=0.6,
            allow_weak_privacy=True,
            **TINY,
        )
    mentions(record, "delta=0.6", "1/N", "0.01", "delta=0.001")
    assert trace.delta == 0.6 and trace.epsilon > 0


def test_a_delta_that_covers_the_whole_privacy_loss_is_refused_before_any_work(no_dp_sgd):
    with pytest.raises(ValueError) as info:
        with pytest.warns(UserWarning):
            na.record_dpvi(
                gamma_exponential,
                exponential_data(100),
                key=0,
                noise_multiplier=5.0,
                delta=0.6,
                allow_weak_privacy=True,
                **TINY,
            )
    mentions(info, "ε", "0", "δ=0.6")


def test_a_non_private_run_has_no_delta_to_check():
    trace = na.record_dpvi(
        gamma_exponential, exponential_data(100), key=0, non_private=True, learning_rate=1e-3, delta=0.9, **TINY
    )
    assert trace.delta is None


def test_the_batch_recorder_passes_allow_weak_privacy_to_the_check(no_dp_sgd):
    settings = dict(M1.dpvi_settings) | TINY
    with pytest.raises(ValueError) as info:
        simulations.simulate_traces(M1, noise_multiplier=0.5, delta=0.6, simulations=2, key=0, **settings)
    mentions(info, "allow_weak_privacy=True")
    with pytest.warns(UserWarning) as record, pytest.raises(AssertionError) as info:
        simulations.simulate_traces(
            M1, noise_multiplier=0.5, delta=0.6, simulations=2, key=0, allow_weak_privacy=True, **settings
        )
    mentions(record, "delta=0.6", "1/N")
    mentions(info, "DP-SGD")  # the recorder was reached


@pytest.fixture
def no_study_work(monkeypatch):
    """The studies' first pieces of work (σ calibration, simulation, DPVI) raise; their arguments are kept."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append(kwargs or dict(args[-1]))  # simulate_part takes the settings as its last argument
        raise AssertionError("work started")

    for module, names in ((coverage, ("calibrate", "simulate_part")), (calibration_experiment, ("calibrate",))):
        for name in names:
            monkeypatch.setattr(module, name, refuse)
    monkeypatch.setattr(calibration_experiment, "record_traces", refuse)
    return calls


def tiny_dataset():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=(40, 2)), np.ones(40)])
    y = (rng.random(40) < 0.5).astype(np.int32)
    return na.datasets.Dataset("tiny", X, y, X, y, ("a", "b", "bias"), "none")


def test_the_studies_refuse_weak_delta_before_any_work(no_study_work):
    with pytest.raises(ValueError) as info:
        na.coverage(M1, methods=("naive",), epsilon=1.0, delta=0.5, simulations=2, key=0)
    mentions(info, "allow_weak_privacy=True")
    with pytest.raises(ValueError) as info:
        na.calibration(tiny_dataset(), methods=("naive",), noise_multiplier=5.0, delta=0.5, runs=2, key=0)
    mentions(info, "allow_weak_privacy=True")
    assert no_study_work == []


def test_the_studies_pass_allow_weak_privacy_through_to_the_recorder(no_study_work):
    with pytest.raises(AssertionError) as info:
        na.coverage(
            M1, methods=("naive",), noise_multiplier=5.0, delta=0.5, simulations=2, key=0, allow_weak_privacy=True
        )
    mentions(info, "work", "started")  # the fixture's error: the study reached its first piece of work
    with pytest.raises(AssertionError) as info:
        na.calibration(
            tiny_dataset(), methods=("naive",), noise_multiplier=5.0, delta=0.5, runs=2, key=0, allow_weak_privacy=True
        )
    mentions(info, "work", "started")
    assert [call["allow_weak_privacy"] for call in no_study_work] == [True, True]


# ---------------------------------------------------------------- 4. support


def test_data_outside_the_support_is_refused_with_site_count_example_and_support(no_dp_sgd):
    data = exponential_data(5000)
    data["x"][[7, 70, 700]] = -1.0
    with pytest.raises(ModelError) as error:
        na.record_dpvi(gamma_exponential, data, key=0, noise_multiplier=5.0, **TINY)
    assert str(error.value).startswith("x: ")
    mentions(error, "3", "5000", "Exponential", "(positive)", "-1.0")


def test_a_value_on_an_open_bound_is_data_not_an_error():
    """An Exponential draw that underflows to exactly 0.0 (float32 simulation) has a finite density: recorded.
    Simulated studies draw such values (coverage of M1 at seed 0 did)."""
    data = exponential_data(5000)
    data["x"][[3, 30]] = 0.0
    trace = na.record_dpvi(gamma_exponential, data, key=0, noise_multiplier=5.0, **TINY)
    assert trace.n_examples == 5000


@pytest.mark.parametrize(
    "model, data, tokens",
    [
        (
            logistic_regression,
            {"X": logistic_data()[0], "y": np.where(np.arange(60) == 5, 2, logistic_data()[1])},
            ("y:", "1", "60", "BernoulliLogits", "(boolean)", "2"),
        ),
        (
            dirichlet_categorical,
            {"x": np.array([0, 1, 2, 3, 1])},
            ("x:", "1", "5", "CategoricalProbs", "0", "2", "3"),
        ),
    ],
)
def test_support_is_checked_for_discrete_likelihoods(no_dp_sgd, model, data, tokens):
    with pytest.raises(ModelError) as info:
        na.record_dpvi(model, data, key=0, noise_multiplier=5.0, **TINY)
    assert str(info.value).startswith(tokens[0])  # the site first
    mentions(info, *tokens)


def test_every_data_set_of_a_batch_is_checked_before_the_program_runs(no_dp_sgd):
    x = np.stack([exponential_data(200, seed)["x"] for seed in range(4)])
    x[2, 5] = -3.0
    with pytest.raises(ModelError) as info:
        na.record_dpvi_batch(gamma_exponential, {"x": x}, keys=[1, 2, 3, 4], noise_multiplier=5.0, **TINY)
    mentions(info, "x", "2", "4", "1", "200", "-3.0")


def test_stacked_data_sets_must_agree_on_their_number(no_dp_sgd):
    X, y = logistic_data()
    with pytest.raises(ModelError) as info:
        na.record_dpvi_batch(
            logistic_regression,
            {"X": np.stack([X] * 3), "y": np.stack([y] * 2)},
            keys=[1, 2],
            noise_multiplier=5.0,
            **TINY,
        )
    mentions(info, "M", "1", "'X'", "3", "'y'", "2")


def uniform_scale(x=None, n_examples=None):
    """x_i ~ Uniform(0, t): a support that depends on the latent t."""
    t = numpyro.sample("t", dist.Gamma(2.0, 1.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Uniform(0.0, t), obs=x)


def test_a_support_that_depends_on_the_latents_is_left_to_the_model():
    recorder = build_recorder(uniform_scale, {"x": np.linspace(0.1, 50.0, 100)}, noise_multiplier=5.0, **TINY)
    assert recorder.spec.n_examples == 100


# ---------------------------------------------------------------- 5. shapes


def test_an_observed_array_must_have_its_site_shape(no_dp_sgd):
    with pytest.raises(ModelError) as error:
        na.record_dpvi(gamma_exponential, {"x": np.ones((100, 50))}, key=0, noise_multiplier=5.0, **TINY)
    mentions(error, "x", "(100,", "50)", "'x'", "(Exponential)", "(100,)")


@pytest.mark.parametrize("rows, labels", [(1000, 900), (900, 1000)])
def test_per_example_arrays_of_different_lengths_are_named(no_dp_sgd, rows, labels):
    X, y = np.ones((rows, 3)), np.ones(labels, np.int64)
    with pytest.raises(ModelError) as error:
        na.record_dpvi(logistic_regression, {"X": X, "y": y}, key=0, noise_multiplier=5.0, **TINY)
    mentions(error, "X", str(rows), "y", str(labels), "N")


def write_logistic_csv(path: Path, columns=(0, 1, 2)) -> Path:
    X, y = logistic_data()
    header = [*(f"X[{j}]" for j in columns), "y"]
    rows = [[*(float(row[j]) for j in range(len(columns))), int(label)] for row, label in zip(X, y)]
    path.write_text("\n".join(",".join(map(str, r)) for r in [header, *rows]) + "\n")
    return path


def test_a_csv_short_of_a_column_the_model_expects_names_it(tmp_path):
    path = write_logistic_csv(tmp_path / "d.csv", columns=(0, 1))
    with pytest.raises(DataError) as error:
        load_data(path, model=na.models.get("logistic-3d"))
    assert str(error.value).startswith(f"{path}: ")
    mentions(error, "X", "2", "logistic-3d", "3", "theta", "(3,)", "(2,)", "X[2]")
    assert load_data(write_logistic_csv(tmp_path / "ok.csv"), model=na.models.get("logistic-3d"))["X"].shape == (60, 3)


def test_a_gap_in_the_column_numbers_names_the_missing_column(capsys, tmp_path):
    path = write_logistic_csv(tmp_path / "d.csv", columns=(0, 1, 3))
    line = cli_error(capsys, *record_cli("logistic-3d", path, tmp_path / "t.nc"))
    mentions(line, "X", "[0,", "1,", "3]", "X[2]")
    assert not (tmp_path / "t.nc").exists()


def test_cli_record_refuses_a_matrix_for_a_one_value_per_example_site(capsys, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("x[0],x[1]\n1.0,2.0\n3.0,4.0\n5.0,6.0\n")
    line = cli_error(capsys, *record_cli("M1", path, tmp_path / "t.nc"))
    mentions(line, "x", "(2,)", "gamma-exponential", "()")
    assert not (tmp_path / "t.nc").exists()


def test_cli_record_names_arrays_of_different_lengths(capsys, tmp_path):
    X, y = logistic_data()
    np.savez(tmp_path / "d.npz", X=X, y=y[:40])
    line = cli_error(capsys, *record_cli("logistic-3d", tmp_path / "d.npz", tmp_path / "t.nc"))
    assert line.startswith("error: ")
    mentions(line, "X", "60", "y", "40", "N")


def test_cli_record_refuses_data_outside_the_support(capsys, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("x\n1.5\n-1.0\n2.0\n")
    line = cli_error(capsys, *record_cli("M1", path, tmp_path / "t.nc"))
    mentions(line, "x:", "1", "3", "Exponential", "(positive)", "-1.0")
