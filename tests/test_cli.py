"""The command line: account in both directions, record (built-in and user models, .csv/.npz data),
demo, and one clear `error:` line with exit status 2 for every user error."""

import json
import math
import re
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from cli_helpers import OPTIMUM, run, saved, sgd_trace, single_error
from messages import mentions

import noiseaware as na
from noiseaware.cli import DataError, load_data
from noiseaware.cli.record import KNOWN_SEED_WARNING

FIXTURES = Path(__file__).parent / "fixtures"
QUICK = ("--steps", "200")
USER_SETTINGS = ("--steps", "200", "--sampling-rate", "0.1", "--clip", "2", "--grad-scale", "1", "100")


def number_after(label: str, text: str) -> float:
    match = re.search(re.escape(label) + r"\s+([0-9.e+-]+)", text)
    assert match, text
    return float(match.group(1))


def interval_after(label: str, text: str) -> list[tuple[float, float]]:
    """The [low, high] intervals on the first table row starting with `label` that holds any."""
    row = next(line for line in text.splitlines() if line.startswith(label) and "[" in line)
    return [(float(a), float(b)) for a, b in re.findall(r"\[([-0-9.e+]+), ([-0-9.e+]+)\]", row)]


def logistic_data(n=120, seed=0):
    """A small logistic-regression data set: X (n, 3) float, y (n,) int."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (n, 3))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ np.array([1.0, -2.0, 0.5])))).astype(np.int64)
    return X, y


def write_csv(path: Path, header, rows) -> Path:
    path.write_text("\n".join([",".join(header), *(",".join(map(str, row)) for row in rows)]) + "\n")
    return path


def exponential_csv(path: Path, n=500) -> Path:
    """Data for M1 (gamma-exponential): a column x of n exponential draws."""
    return write_csv(path, ["x"], [[v] for v in np.random.default_rng(1).exponential(0.25, n)])


def record_m1(capsys, out: Path, *argv) -> tuple[na.Trace, str, str]:
    """(trace, stdout, stderr) of a short M1 recording with σ = 5 and further options `argv`."""
    status, stdout, err = run(
        capsys, "record", "--model", "M1", "--noise-multiplier", "5", "--steps", "20", "--out", out, *argv
    )
    assert status == 0, err
    return na.Trace.load(out), stdout, err


def same_trace(a: na.Trace, b: na.Trace) -> bool:
    return np.array_equal(a.params, b.params) and np.array_equal(a.grads, b.grads)


# ---------------------------------------------------------------- account and --version


def test_version(capsys):
    status, out, _ = run(capsys, "--version")
    assert status == 0 and out.strip() == f"noiseaware {na.__version__}"


def test_account_sigma_for_epsilon_is_the_tight_value(capsys):
    status, out, _ = run(capsys, "account", "--epsilon", "1")
    assert status == 0
    assert number_after("σ for ε = 1", out) == pytest.approx(37.33, rel=0.005)
    assert number_after("steps T", out) == 10_000 and number_after("sampling rate q", out) == 0.1


def test_account_epsilon_for_sigma_and_several_at_once(capsys):
    status, out, _ = run(capsys, "account", "--noise-multiplier", "37.81", "360", "--steps", "1000")
    assert status == 0
    for sigma in (37.81, 360):
        assert number_after(f"ε for σ = {sigma:g}", out) == pytest.approx(
            na.epsilon_spent(sigma, 1e-5, 0.1, 1000), rel=1e-4
        )


def test_account_takes_the_sampling_scheme_and_needs_n_for_fixed_size_batches(capsys):
    fixed = ("--sampling", "fixed", "--sampling-rate", "0.05", "--steps", "3000")
    status, out, _ = run(capsys, "account", "--noise-multiplier", "10.292", "--dataset-size", "2000", *fixed)
    assert status == 0 and "rdp-fixed" in out
    want = na.epsilon_spent(10.292, 1e-5, 0.05, 3000, sampling="fixed", dataset_size=2000)
    assert number_after("ε for σ = 10.292", out) == pytest.approx(want, rel=1e-4)
    assert want > 4 * na.epsilon_spent(10.292, 1e-5, 0.05, 3000)
    status, _, err = run(capsys, "account", "--epsilon", "1", *fixed)
    assert status == 2
    mentions(err, "--dataset-size")


# ---------------------------------------------------------------- record: built-in models


@pytest.mark.parametrize("suffix", [".nc", ".npz"])
def test_record_builtin_model_saves_a_trace_with_its_preset(capsys, tmp_path, suffix):
    out = tmp_path / f"m1{suffix}"
    status, stdout, _ = run(
        capsys, "record", "--model", "M1", "--epsilon", "1", "--out", out, "--n-examples", "500", *QUICK
    )
    assert status == 0
    trace = na.Trace.load(out)
    assert (trace.steps, trace.n_examples, trace.clip, trace.sampling_rate) == (200, 500, 2.0, 0.1)
    assert trace.grad_scale.tolist() == [1.0, 100.0] and trace.params[0].tolist() == [0.0, -4.0]
    assert (trace.epsilon, trace.delta, trace.mc_draws) == (1.0, 1e-5, 10)
    assert trace.noise_multiplier == pytest.approx(na.noise_multiplier(1.0, 1e-5, 0.1, 200))
    assert [site.transform for site in trace.sites] == ["softplus"]
    assert "noiseaware trace" in stdout and str(out) in stdout
    mentions(next(line for line in stdout.splitlines() if line.startswith("true θ")), "simulation")
    summary, checks = stdout.index("noiseaware trace"), stdout.index("trace checks: ")  # long enough to check
    assert summary < checks and str(na.diagnose(trace)) in stdout


def test_record_options_override_the_preset(capsys, tmp_path):
    out = tmp_path / "m2.npz"
    status, _, _ = run(
        capsys,
        "record",
        "--model",
        "beta-bernoulli",
        "--noise-multiplier",
        "5",
        "--out",
        out,
        "--n-examples",
        "400",
        "--clip",
        "3",
        "--mc-draws",
        "4",
        "--init",
        "0.5",
        "-3",
        "--learning-rate",
        "0.001",
        "0.01",
        "--delta",
        "1e-6",
        *QUICK,
    )
    assert status == 0
    trace = na.Trace.load(out)
    assert (trace.clip, trace.mc_draws, trace.noise_multiplier, trace.delta) == (3.0, 4, 5.0, 1e-6)
    assert trace.epsilon == pytest.approx(na.epsilon_spent(5.0, 1e-6, 0.1, 200))
    assert trace.params[0].tolist() == [0.5, -3.0]
    np.testing.assert_allclose(trace.learning_rate, [0.001, 0.01], rtol=1e-6)


def test_record_releases_a_clipped_count_on_request(capsys, tmp_path):
    """--clip-count-share R: the trace keeps the counts with their noise sd, the gradient keeps σ (given), ε is the
    pair's, and the report below the trace shows the clipping check (a clip far below M1's gradient norms)."""
    trace, stdout, _ = record_m1(capsys, tmp_path / "m1.nc", "--clip-count-share", "0.2", "--clip", "0.01", *QUICK)
    assert trace.noise_multiplier == 5.0 and trace.clipped_counts.shape == (trace.steps,)
    assert trace.count_noise_multiplier == pytest.approx(5.0 * math.sqrt(0.8 / 0.2), rel=1e-12)
    combined = float(na.privacy.combined_noise_multiplier(5.0, trace.count_noise_multiplier))
    assert trace.epsilon == pytest.approx(na.epsilon_spent(combined, trace.delta, trace.sampling_rate, trace.steps))
    mentions(stdout, "clipping", "clipped", "burn-in")  # the finding, with its measured fraction


def test_record_float64(capsys, tmp_path):
    out = tmp_path / "m1.nc"
    before = jax.config.jax_enable_x64
    status, _, _ = run(
        capsys,
        "record",
        "--model",
        "M1",
        "--noise-multiplier",
        "5",
        "--out",
        out,
        "--n-examples",
        "300",
        "--float64",
        *QUICK,
    )
    assert status == 0
    assert na.Trace.load(out).params.dtype == np.float64
    assert jax.config.jax_enable_x64 == before  # restored for the rest of the process


# ---------------------------------------------------------------- record: a user's model and data files


@pytest.fixture
def user_model_dir(monkeypatch):
    """Run from tests/fixtures, as a user runs from the directory holding their model module."""
    monkeypatch.chdir(FIXTURES)


def record_user_model(capsys, data_path: Path, out: Path) -> na.Trace:
    """A recording with a fixed seed, so that two data files can be compared: the test use it warns about."""
    status, stdout, err = run(
        capsys,
        "record",
        "--model",
        "user_models:logistic",
        "--data",
        data_path,
        "--noise-multiplier",
        "5",
        "--seed",
        "7",
        "--out",
        out,
        *USER_SETTINGS,
    )
    assert status == 0, err
    assert "true θ" not in stdout
    assert err.count(KNOWN_SEED_WARNING) == 1
    return na.Trace.load(out)


def test_record_user_model_from_csv_and_npz_gives_the_same_trace(capsys, tmp_path, user_model_dir):
    X, y = logistic_data()
    header = ["X[0]", "X[1]", "X[2]", "y"]
    rows = [[*map(repr, x.tolist()), int(label)] for x, label in zip(X, y)]
    from_csv = record_user_model(capsys, write_csv(tmp_path / "data.csv", header, rows), tmp_path / "csv.nc")
    np.savez(tmp_path / "data.npz", X=X, y=y)
    from_npz = record_user_model(capsys, tmp_path / "data.npz", tmp_path / "npz.nc")
    assert (from_csv.n_examples, from_csv.dim, from_csv.site_map.names) == (len(y), 3, ("w",))
    assert from_csv.grad_scale.tolist() == [1.0] * 3 + [100.0] * 3
    np.testing.assert_array_equal(from_csv.params, from_npz.params)
    np.testing.assert_array_equal(from_csv.grads, from_npz.grads)


def test_builtin_model_records_on_user_data(capsys, tmp_path):
    data = exponential_csv(tmp_path / "x.csv")
    status, stdout, _ = run(
        capsys,
        "record",
        "--model",
        "gamma-exponential",
        "--data",
        data,
        "--noise-multiplier",
        "5",
        "--out",
        tmp_path / "m1.nc",
        *QUICK,
    )
    assert status == 0 and "true θ" not in stdout
    assert na.Trace.load(tmp_path / "m1.nc").n_examples == 500


# ---------------------------------------------------------------- record: seeds


SECRET_SEED = 2**40 + 12_345


def test_real_data_get_a_secret_random_seed_that_is_never_shown(capsys, tmp_path, monkeypatch):
    data = exponential_csv(tmp_path / "x.csv")
    requested_bits = []
    monkeypatch.setattr(
        "noiseaware.cli.record.secrets.randbits", lambda bits: requested_bits.append(bits) or SECRET_SEED
    )
    secret, out, err = record_m1(capsys, tmp_path / "secret.nc", "--data", data)
    assert requested_bits == [63]
    assert str(SECRET_SEED) not in out + err and "warning" not in err
    known, _, err = record_m1(capsys, tmp_path / "known.nc", "--data", data, "--seed", SECRET_SEED)
    assert same_trace(secret, known)
    assert err.count(KNOWN_SEED_WARNING) == 1


def test_two_runs_on_real_data_without_a_seed_differ(capsys, tmp_path):
    data = exponential_csv(tmp_path / "x.csv")
    first, _, _ = record_m1(capsys, tmp_path / "first.nc", "--data", data)
    second, _, _ = record_m1(capsys, tmp_path / "second.nc", "--data", data)
    assert not np.array_equal(first.grads, second.grads)


def test_simulated_data_default_to_seed_0_and_a_seed_keeps_all_its_bits(capsys, tmp_path):
    default, _, err = record_m1(capsys, tmp_path / "default.nc", "--n-examples", "300")
    zero, _, _ = record_m1(capsys, tmp_path / "zero.nc", "--n-examples", "300", "--seed", "0")
    low, _, _ = record_m1(capsys, tmp_path / "low.nc", "--n-examples", "300", "--seed", "5")
    high, _, _ = record_m1(capsys, tmp_path / "high.nc", "--n-examples", "300", "--seed", 2**32 + 5)
    assert same_trace(default, zero) and "warning" not in err
    assert not same_trace(low, high)  # jax.random.key drops the high 32 bits without 64-bit JAX


@pytest.mark.parametrize("command", ["record", "demo"])
@pytest.mark.parametrize("seed", ["1e30", str(2**63), "-1", "seven"])
def test_a_bad_seed_is_a_usage_error(capsys, tmp_path, command, seed):
    argv = ("--model", "M1", "--epsilon", "1") if command == "record" else ()
    line = single_error(capsys, command, *argv, "--seed", seed, "--out", tmp_path / "t.nc")
    mentions(line, "--seed", repr(seed), "[0", "2^63)")


def test_record_help_explains_the_seed_of_real_data(capsys):
    status, out, _ = run(capsys, "record", "--help")
    assert status == 0
    assert "with --data a secret random seed, never printed or saved" in " ".join(out.split())  # the help's text


def test_read_csv_stacks_indexed_columns_in_index_order_and_keeps_integers(tmp_path):
    path = write_csv(tmp_path / "d.csv", ["Z.1", "y", "Z.0", "w"], [[1.5, 1, 2, 0.5], [2.5, 0, 3, -1]])
    data = load_data(path)
    assert list(data) == ["y", "w", "Z"]
    np.testing.assert_array_equal(data["Z"], [[2.0, 1.5], [3.0, 2.5]])
    assert data["y"].dtype == np.int64 and data["y"].tolist() == [1, 0]
    assert data["w"].dtype == np.float64


@pytest.mark.parametrize(
    "text, message",
    [
        ("x,y\n1,2\n3\n", "line 3: 1 field(s)"),
        ("x,y\n1,2\n3,abc\n", "line 3, column 'y': 'abc' is not a number"),
        ("x,y\n1,2\n,4\n", "'' is not a number"),
        ("X[0],X[2],y\n1,2,3\n", "indices [0, 2]"),
        ("x,x\n1,2\n", "more than once"),
        ("x\n", "no data rows"),
    ],
)
def test_malformed_csv_is_one_clear_error(capsys, tmp_path, user_model_dir, text, message):
    (tmp_path / "bad.csv").write_text(text)
    line = single_error(
        capsys,
        "record",
        "--model",
        "user_models:logistic",
        "--data",
        tmp_path / "bad.csv",
        "--epsilon",
        "1",
        "--out",
        tmp_path / "t.nc",
        *USER_SETTINGS,
    )
    assert message in line
    with pytest.raises(DataError):
        load_data(tmp_path / "bad.csv")


def test_an_unreadable_npz_says_what_is_wrong_with_it(tmp_path):
    """issue 26: an empty, truncated, damaged or array-less .npz is one DataError naming the file, never numpy's
    EOFError or its offer to unpickle."""
    np.savez(tmp_path / "good.npz", x=np.arange(1000.0))
    good = (tmp_path / "good.npz").read_bytes()
    damaged = bytearray(good)
    damaged[200] ^= 0xFF  # inside x.npy's compressed-or-stored bytes: the member's CRC no longer matches
    files = {
        "empty.npz": (b"", ("empty", "(0", "bytes)")),
        "truncated.npz": (good[: len(good) // 2], (".npz",)),
        "text.npz": (b"hello", (".npz", "zip", ".npy")),
        "damaged.npz": (bytes(damaged), ("damaged",)),
    }
    np.savez(tmp_path / "none.npz")
    for name, (content, _) in files.items():
        (tmp_path / name).write_bytes(content)
    for name, tokens in [*((n, p) for n, (_, p) in files.items()), ("none.npz", ("no", "arrays"))]:
        with pytest.raises(DataError) as raised:
            load_data(tmp_path / name)
        mentions(raised, *tokens)
        assert name in str(raised.value) and "np.savez" in str(raised.value) and "pickle" not in str(raised.value)


# ---------------------------------------------------------------- record: user errors


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--model", "M9", "--epsilon", "1"), "unknown model 'M9'"),
        (("--model", "M1", "--epsilon", "1", "--noise-multiplier", "3"), "not allowed with argument --epsilon"),
        (("--model", "M1"), "one of the arguments --epsilon --noise-multiplier --non-private is required"),
        (("--model", "M1", "--non-private"), "--non-private needs --learning-rate"),
        (("--model", "M1", "--epsilon", "-1"), "argument --epsilon: invalid value '-1': give a finite number > 0"),
        (("--model", "M1", "--epsilon", "1", "--grad-scale", "1", "2", "3", "4"), "one value"),
        (
            ("--model", "M1", "--epsilon", "1", "--n-examples", "0"),
            "argument --n-examples: invalid value '0': give a positive integer",
        ),
        (
            ("--model", "M1", "--epsilon", "1", "--n-examples", "10"),
            "the gamma-exponential preset was set for N = 5000 examples and these data have N = 10 (500× fewer)",
        ),
        (
            (
                "--model",
                "user_models:logistic",
                "--epsilon",
                "1",
                "--data",
                "missing.csv",
                "--steps",
                "9",
                "--sampling-rate",
                "0.1",
                "--clip",
                "1",
            ),
            "no such file",
        ),
        (
            ("--model", "user_models:logistic", "--epsilon", "1", "--data", "x.npz"),
            "pass --steps, --sampling-rate, --clip",
        ),
        (("--model", "user_models:logistic", "--epsilon", "1"), "needs data"),
        (("--model", "no_such_module:f", "--epsilon", "1"), "cannot import no_such_module"),
        (("--model", "user_models:nothing", "--epsilon", "1"), "has no 'nothing'"),
    ],
)
def test_record_user_errors(capsys, tmp_path, user_model_dir, argv, message):
    assert message in single_error(capsys, "record", *argv, "--out", tmp_path / "t.nc")


def test_record_checks_the_output_path_before_running(capsys, tmp_path):
    assert "ends in .nc" in single_error(
        capsys, "record", "--model", "M1", "--epsilon", "1", "--out", tmp_path / "t.txt"
    )
    assert "does not exist" in single_error(
        capsys, "record", "--model", "M1", "--epsilon", "1", "--out", tmp_path / "missing" / "t.nc"
    )


def test_missing_command_is_a_usage_error(capsys):
    mentions(single_error(capsys), "required:", "command")


# ---------------------------------------------------------------- demo


def test_demo_records_fits_and_plots(capsys, tmp_path):
    status, out, err = run(capsys, "demo", "--out", tmp_path / "demo", "--steps", "1000")
    assert status == 0, err
    assert "Traceback" not in err
    trace = na.Trace.load(tmp_path / "demo" / "m1-trace.nc")
    assert trace.steps == 1000 and trace.n_examples == 5000 and trace.epsilon == 1.0
    post = na.load_posterior(tmp_path / "demo" / "m1-posterior.nc")
    assert post.method == "exact" and post.theta_names == ("rate",)
    assert (tmp_path / "demo" / "m1-trace.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mentions(preset_line(err), "tuned", "ε", "1")
    for row in (
        "true λ",
        "exact posterior Gamma(8 + N, 2 + Σx)",
        "DPVI last iterate (naive)",
        "noise-aware posterior (exact)",
    ):
        assert row in out
    for name in ("m1-trace.nc", "m1-posterior.nc", "m1-trace.png"):
        assert re.search(rf"^{re.escape(name)}\s+\S", out, re.MULTILINE)


@pytest.mark.slow
def test_the_demo_is_not_more_certain_than_the_data(capsys, tmp_path):
    """issue 40: on its own seed, the demo's noise-aware posterior of λ is at least as wide as the non-private
    posterior, prints each interval once, and names the preset `noiseaware record` would use."""
    status, out, err = run(capsys, "demo", "--out", tmp_path / "demo")
    assert status == 0, err
    mentions(preset_line(err), "tuned", "ε", "1")
    exact_mean, exact_sd = map(float, re.search(r"non-private\s+(\S+)\s+(\S+)\s+\[", out).groups())
    noise_aware_sd = float(re.search(r"noise-aware posterior \(exact\), ε = 1\s+\S+\s+(\S+)\s+\[", out).group(1))
    assert noise_aware_sd >= exact_sd
    assert out.count("noise-aware posterior (exact)") == 1 and not re.search(r"naive\s+90%", out)
    truth = float(re.search(r"true λ \(simulated\)\s+(\S+)", out).group(1))
    assert abs(truth - exact_mean) < 4 * exact_sd  # λ on its own scale, under the preset's transform (exp)


def test_demo_rejects_an_unknown_method(capsys, tmp_path):
    mentions(single_error(capsys, "demo", "--method", "mcmc", "--out", tmp_path / "demo"), "--method", "'mcmc'")
    assert not (tmp_path / "demo").exists()


# ---------------------------------------------------------------- fit


def test_fit_writes_a_loadable_posterior_and_prints_both_columns(capsys, tmp_path):
    trace_path = saved(sgd_trace(), tmp_path / "sgd.npz")
    status, out, err = run(
        capsys, "fit", trace_path, "--method", "exact", "--out", tmp_path / "post.nc", "--plot", tmp_path / "fit.png"
    )
    assert status == 0, err
    assert "warning" not in err
    post = na.load_posterior(tmp_path / "post.nc")
    assert (post.method, post.prior, post.optimum_draws.shape) == ("exact", "default", (4000, 2))
    assert post.info["burn_in"] == 0.2 and post.info["steps"] == 4000
    assert abs(post.theta_mean[0] - OPTIMUM[0]) < 0.02
    assert re.search(r"noise-aware posterior:.*\bexact\b", out)
    assert re.search(r"noise-aware 90%\s+naive 90%", out)
    (aware_low, aware_high), (naive_low, naive_high) = interval_after("x ", out)
    assert aware_low < OPTIMUM[0] < aware_high and naive_low < naive_high
    assert re.search(r"^options:.*\bhessian_nodes\b", out, re.M) and "diagnostics:" not in out
    assert str(tmp_path / "post.nc") in out
    assert (tmp_path / "fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fit_options_reach_the_posterior_and_the_table(capsys, tmp_path):
    trace_path = saved(sgd_trace(), tmp_path / "sgd.nc")
    status, out, err = run(
        capsys, "fit", trace_path, "--out", tmp_path / "post.nc", "--burn-in", "0.5", "--level", "0.5", "--seed", "3"
    )
    assert status == 0, err
    post = na.load_posterior(tmp_path / "post.nc")
    assert post.method == "exact" and post.info["burn_in"] == 0.5
    mentions(next(line for line in out.splitlines() if "fitting" in line), "2000…3999", "0.5", "exact")
    assert re.search(r"noise-aware 50%\s+naive 50%", out) and "90%" not in out


def test_fit_warnings_are_single_readable_lines(capsys, tmp_path):
    trace_path = saved(sgd_trace(contraction=(0.0005, 0.02)), tmp_path / "weak.nc")
    status, _, err = run(capsys, "fit", trace_path, "--out", tmp_path / "post.nc")
    assert status == 0, err
    assert "Traceback" not in err and "UserWarning" not in err
    lines = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and "weak identification" in lines[0], err  # the note's kind
    mentions(lines[0], "(mu:x)")
    assert len(err.splitlines()) == 1


def test_fit_without_the_last_iterate_prints_the_noise_aware_column_alone(capsys, tmp_path):
    trace_path = saved(sgd_trace(learning_rate=False), tmp_path / "no-lr.nc")
    status, out, err = run(capsys, "fit", trace_path, "--out", tmp_path / "post.nc")
    assert status == 0, err
    assert err.startswith("note: ")
    mentions(err, "naive", "final_params")
    assert "noise-aware 90%" in out and "naive" not in out


def test_fit_of_a_trace_without_a_site_map(capsys, tmp_path):
    trace_path = saved(sgd_trace(sites=False), tmp_path / "no-sites.nc")
    status, out, err = run(capsys, "fit", trace_path, "--out", tmp_path / "post.nc")
    assert status == 0, err
    assert na.load_posterior(tmp_path / "post.nc").sites is None and "theta[0]" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (("missing.nc",), "no trace file at"),
        (("{tmp}/garbage.nc",), "could not be read as a .nc trace"),
        (("{tmp}/sgd.nc", "--method", "gibbs"), "argument --method: invalid choice: 'gibbs'"),
        (("{tmp}/short.nc",), "at least 50 stationary steps"),
        (("{tmp}/sgd.nc", "--warmup", "10"), "--warmup apply to --method nuts only"),
        (("{tmp}/sgd.nc", "--burn-in", "1"), "argument --burn-in: invalid value '1': give a fraction in [0, 1)"),
        (("{tmp}/sgd.nc", "--level", "90"), "argument --level: invalid value '90'"),
        (("{tmp}/sgd.nc", "--draws", "0"), "argument --draws: invalid value '0': give a positive integer"),
        (("{tmp}/sgd.nc", "--plot", "{tmp}/fit.gif"), "--plot {tmp}/fit.gif: a plot file ends in .png, .pdf"),
    ],
)
def test_fit_user_errors(capsys, tmp_path, argv, message):
    sgd_trace(steps=60).save(tmp_path / "sgd.nc")
    sgd_trace(steps=40).save(tmp_path / "short.nc")
    (tmp_path / "garbage.nc").write_bytes(b"not a trace")
    argv = [a.format(tmp=tmp_path) for a in argv]
    line = single_error(capsys, "fit", *argv, "--out", tmp_path / "post.nc")
    assert message.format(tmp=tmp_path) in line
    assert not (tmp_path / "post.nc").exists()


def test_fit_checks_the_output_path_before_loading(capsys, tmp_path):
    mentions(single_error(capsys, "fit", "missing.nc", "--out", "post.txt"), "--out", "post.txt:", ".nc")
    mentions(single_error(capsys, "fit", "missing.nc", "--out", tmp_path / "no" / "post.nc"), str(tmp_path / "no"))


# ---------------------------------------------------------------- plots


def test_plots_write_their_files_and_check_the_truth_and_the_key(tmp_path):
    from noiseaware import plots

    rng = np.random.default_rng(0)
    d = 3
    params = np.cumsum(0.01 * rng.standard_normal((300, 2 * d)), axis=0)
    trace = na.Trace.from_arrays(
        params,
        rng.standard_normal((300, 2 * d)),
        noise_multiplier=1.0,
        clip=1.0,
        sampling_rate=0.1,
        n_examples=100,
        learning_rate=1e-3,
    )
    spread = na.MixturePosterior(
        optimum_chains=params[None, -50:],
        hessian_chains=None,
        extra_noise_chains=None,
        method="test",
        param_names=trace.param_names,
    )
    posteriors = {"spread": spread, "naive": na.naive_posterior(trace)}
    plots.plot_trace(trace, tmp_path / "trace.png", posteriors=posteriors, truth=np.zeros(d), key=0)
    plots.plot_trace(trace, tmp_path / "bare.png", burn_in=0.0)
    plots.plot_posteriors(posteriors, tmp_path / "densities.png", truth=np.zeros(d), key=0)
    assert (tmp_path / "densities.png").exists()
    for name in ("trace.png", "bare.png", "densities.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError) as info:
        plots.plot_posteriors(posteriors, tmp_path / "bad.png", truth=[0.0], key=0)
    mentions(info, "d", str(d))
    with pytest.raises(ValueError) as info:
        plots.plot_trace(trace, tmp_path / "missing" / "trace.png")
    mentions(info, "missing")
    with pytest.raises(TypeError) as info:  # densities are draws: no silent default key
        plots.plot_trace(trace, tmp_path / "nokey.png", posteriors=posteriors)
    mentions(info, "key=")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bare.png", "densities.png", "trace.png"]


def test_fit_warnings_show_once_even_when_it_fails_and_deprecations_go_to_python(capsys, tmp_path, monkeypatch):
    def failing_fit(trace, method, **options):
        for _ in range(3):
            warnings.warn("the grid is\n  too small", stacklevel=2)
        warnings.warn("old keyword", DeprecationWarning, stacklevel=2)
        raise na.FitFailure("no finite optimum", "the fit failed")

    monkeypatch.setattr("noiseaware.cli.common.fit", failing_fit)
    trace_path = saved(sgd_trace(steps=100), tmp_path / "sgd.nc")
    with warnings.catch_warnings(record=True) as passed_on:
        warnings.simplefilter("always")
        status, _, err = run(capsys, "fit", trace_path, "--out", tmp_path / "post.nc")
    assert status == 2
    assert err.splitlines() == ["warning: the grid is too small", "error: the fit failed"]
    assert [(w.category, str(w.message)) for w in passed_on] == [(DeprecationWarning, "old keyword")]


# ---------------------------------------------------------------- coverage


def test_coverage_prints_a_table_and_writes_json_csv_png_per_epsilon(capsys, tmp_path):
    status, out, err = run(
        capsys,
        "coverage",
        "--model",
        "M1",
        "--epsilon",
        "0.3",
        "1",
        "--methods",
        "exact,naive",
        "--simulations",
        "6",
        "--references",
        "2",
        "--samples",
        "200",
        "--steps",
        "300",
        "--out",
        tmp_path / "cov",
    )
    assert status == 0, err
    assert "RMSE (research ref.)" in out and "RMSE (trace ref.)" in out and "exact" in out and "naive" in out
    assert "study" in err and "task" in err  # the progress bar across tasks
    for tag in ("eps-0.3", "eps-1"):
        stem = tmp_path / "cov" / f"coverage-gamma-exponential-{tag}"
        payload = json.loads(stem.with_name(stem.name + ".json").read_text())
        assert payload["settings"]["simulations"] == 6 and payload["settings"]["steps"] == 300
        assert set(payload["summary"]) == {"exact", "naive"}
        assert stem.with_name(stem.name + ".csv").read_text().startswith("method,reference_rule,dimension,level")
        assert stem.with_name(stem.name + ".png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--model", "M1", "--epsilon", "1", "--methods", "exact,magic"), "unknown methods"),
        (("--model", "M9", "--epsilon", "1"), "unknown model"),
        (("--model", "user_models:logistic", "--epsilon", "1"), "is not a BenchmarkModel"),
    ],
)
def test_coverage_user_errors(capsys, tmp_path, user_model_dir, argv, message):
    assert message in single_error(capsys, "coverage", *argv, "--out", tmp_path / "cov")


def test_record_refuses_a_preset_on_tiny_data_before_spending_privacy(capsys, tmp_path):
    """A new user's `record --model M1 --data x10.npz` (N = 10 against the preset's 5000) is refused with the reason
    and the way forward, and nothing is written."""
    path = tmp_path / "x10.npz"
    np.savez(path, x=np.random.default_rng(0).exponential(0.25, 10).astype(np.float32))
    message = single_error(
        capsys, "record", "--model", "M1", "--epsilon", "1", "--data", path, "--out", tmp_path / "t.nc"
    )
    mentions(message, "5000", "10", "tune", "--model", "gamma-exponential", "--n-examples")
    assert not (tmp_path / "t.nc").exists()


# ---------------------------------------------------------------- tuned presets (issue 27: honest defaults)


def preset_line(err: str) -> str:
    """The `preset: …` line a command prints to stderr: which preset it records with, and why."""
    (line,) = [line for line in err.splitlines() if line.startswith("preset: ")]
    return line


def test_record_uses_the_tuned_preset_where_one_is_shipped_and_says_which(capsys, tmp_path):
    """A built-in at an ε with a shipped tuned preset records with it (checked: no 'never checked' hint); at an ε
    without one, or at another N, it falls back to the research preset and says why; --preset chooses."""
    tuned = na.tuning.tuned_preset("M1", 1.0)
    status, _, err = run(capsys, "record", "--model", "M1", "--epsilon", "1", "--out", tmp_path / "a.nc")
    assert status == 0 and "never checked" not in err
    mentions(preset_line(err), "tuned", "ε", "1", "200")
    trace = na.Trace.load(tmp_path / "a.nc")
    assert trace.clip == pytest.approx(tuned["clip"]) and [s.transform for s in trace.sites] == ["exp"]
    shipped = ", ".join(f"{e:g}" for e in na.tuning.tuned_epsilons("M1"))
    status, _, err = run(capsys, "record", "--model", "M1", "--epsilon", "0.5", "--out", tmp_path / "b.nc", *QUICK)
    assert status == 0
    mentions(preset_line(err), "research", "0.5", *shipped.split(", "))
    assert na.Trace.load(tmp_path / "b.nc").clip == 2.0
    status, _, err = run(capsys, "record", "--model", "M1", "--epsilon", "1", "--preset", "research", "--out",
                         tmp_path / "c.nc", *QUICK)  # fmt: skip
    assert status == 0
    mentions(preset_line(err), "research", "paper's")
    assert na.Trace.load(tmp_path / "c.nc").clip == 2.0
    message = single_error(
        capsys, "record", "--model", "M1", "--epsilon", "0.5", "--preset", "tuned", "--out", tmp_path / "d.nc"
    )
    mentions(message, "--preset", "tuned", "gamma-exponential", "0.5", *shipped.split(", "))
    message = single_error(capsys, "record", "--model", "M1", "--epsilon", "1", "--preset", "tuned",
                           "--n-examples", "500", "--out", tmp_path / "d.nc")  # fmt: skip
    mentions(message, "--preset", "tuned", "gamma-exponential", "5000", "500")
    assert not (tmp_path / "d.nc").exists()


def test_coverage_plan_takes_each_levels_tuned_preset():
    """`noiseaware coverage` at several ε runs each level with that level's tuned preset: one plan, the settings
    differing by level (so a study made with other settings is never reused)."""
    from noiseaware.studies import coverage_plan

    levels = [("epsilon", 0.1), ("epsilon", 1.0)]
    by_level = {level: na.tuning.tuned_model("M2", level[1]) for level in levels}
    plan = coverage_plan(by_level, levels=levels, key=0, methods=("exact",), simulations=4)
    clips = [spec.settings["clip"] for spec in plan.specs]
    assert clips == [na.tuning.tuned_preset("M2", eps)["clip"] for _, eps in levels] and clips[0] != clips[1]
    with pytest.raises(ValueError) as info:
        coverage_plan(by_level, levels=[*levels, ("epsilon", 0.3)], key=0, methods=("exact",), simulations=4)
    mentions(info, "epsilon", "0.3")


def test_a_baseline_on_the_research_scale_is_never_scored_against_a_tuned_presets_theta(capsys, tmp_path):
    """bs2018 draws θ = softplus⁻¹(λ) while M1's tuned preset has θ = log λ: scoring one against the other
    would be silently wrong, so na.coverage refuses it before any work, and `coverage` takes the research
    preset for such a run (or, told --preset tuned, refuses it)."""
    from noiseaware.evaluation.coverage import coverage_spec

    with pytest.raises(ValueError) as info:
        coverage_spec(na.tuning.tuned_model("M1", 1.0), key=0, epsilon=1.0, methods=("exact", "bs2018"))
    mentions(info, "'bs2018'", "θ", "(rate", "softplus)")
    coverage_spec(na.models.get("M1"), key=0, epsilon=1.0, methods=("exact", "bs2018"))
    message = single_error(capsys, "coverage", "--model", "M1", "--epsilon", "1", "--methods", "exact,bs2018",
                           "--preset", "tuned", "--out", tmp_path / "c")  # fmt: skip
    mentions(message, "--preset", "tuned", "gamma-exponential", "bs2018", "θ", "research")
