"""The catalogue of bad inputs (issue 14): every bad or hostile input a new user tried, on the command line
and in Python, gives ONE clear error — naming the problem — before any work, and leaves nothing behind
(the scratch directory holds exactly what it held before, byte for byte).

Each case is (name, where, action, pattern): `action(folder)` runs the bad input in a prepared scratch
folder; `pattern` is a regular expression the one error message must match.
"""

import hashlib
import json
import os
import pickle
import re
import warnings
from pathlib import Path
from unittest import mock

import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.cli import main

M1 = na.models.get("M1")
SMALL = {"steps": 40, "sampling_rate": 0.1, "clip": 2.0, "grad_scale": (1.0, 100.0), "learning_rate": (1e-3, 1e-2)}


@pytest.fixture(scope="module")
def m1_trace() -> na.Trace:
    _, data = M1.simulate(0)
    return na.record_dpvi(M1.model, data, noise_multiplier=5.0, key=1, **(M1.dpvi_settings | {"steps": 60}))


@pytest.fixture
def scratch(tmp_path, m1_trace, monkeypatch):
    """A folder with a trace t.nc, an existing posterior old.nc, M1 data d.npz and data files of bad shape
    or support; the current directory while the case runs."""
    m1_trace.save(tmp_path / "t.nc")
    (tmp_path / "old.nc").write_bytes(b"an existing file that must survive")
    np.savez(tmp_path / "d.npz", x=np.abs(np.asarray(M1.simulate(0)[1]["x"])))
    (tmp_path / "negative.csv").write_text("x\n" + "\n".join(["-1.0"] + ["0.5"] * 99) + "\n")
    rng = np.random.default_rng(0)
    rows = [
        f"{a:.4f},{b:.4f},{int(c)}"
        for a, b, c in zip(rng.normal(size=200), rng.normal(size=200), rng.random(200) < 0.5)
    ]
    (tmp_path / "short.csv").write_text("X[0],X[1],y\n" + "\n".join(rows) + "\n")
    for folder, name in (("crafted", "plan.json"), ("old-study", "plan.pkl")):  # pickles that must never run
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_bytes(pickle.dumps(Marker(tmp_path / "marker")))
    (tmp_path / "running").mkdir()  # a study folder another live process holds
    (tmp_path / "running" / "lock").write_text(json.dumps({"pid": os.getppid(), "host": os.uname().nodename}))
    issue26_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


class Marker:
    """A pickle payload that, if ever unpickled, leaves a marker file (what a crafted study folder would do)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` with the hash of its bytes, and every directory."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.rglob("*"))
    }


def cli(*argv):
    return lambda folder: main([str(a) for a in argv])


def trace_with(dtype):
    def action(folder):
        trace = na.Trace.load(folder / "t.nc")
        na.Trace.from_arrays(
            trace.params.astype(dtype),
            trace.grads.astype(dtype),
            noise_multiplier=trace.noise_multiplier,
            clip=trace.clip,
            sampling_rate=trace.sampling_rate,
            n_examples=trace.n_examples,
        )

    return action


def fit_loaded(**options):
    return lambda folder: na.fit(na.Trace.load(folder / "t.nc"), "exact", **options)


def record_m1(data, **more):
    return lambda folder: na.record_dpvi(M1.model, data, noise_multiplier=5.0, key=0, **(SMALL | more))


def sample_naive(n):
    return lambda folder: na.fit(na.Trace.load(folder / "t.nc"), "naive", key=0).sample(key=0, n=n)


def fit_frozen(folder):
    """A trace whose second coordinate never moves: a statistical failure of the fit, typed."""
    trace = na.Trace.load(folder / "t.nc")
    params = np.array(trace.params)
    params[:, 1] = 0.3
    frozen = na.Trace.from_arrays(
        params,
        trace.grads,
        noise_multiplier=trace.noise_multiplier,
        clip=trace.clip,
        sampling_rate=trace.sampling_rate,
        n_examples=trace.n_examples,
    )
    na.fit(frozen, "exact", key=0, burn_in=0.1, checks="off")


def fit_untyped_plug_in(folder):
    """A plug-in that returns a plain ValueError for its failed fit: a bug, named, not a counted failure."""
    method = na.per_trace("plain", lambda t, k, o: ValueError("no fit"))
    na.fit(na.Trace.load(folder / "t.nc"), method, key=0, checks="off")


def save_over(folder):
    na.Trace.load(folder / "t.nc").save(folder / "old.nc")


CLI_CASES = [
    ("fit output is its input", cli("fit", "t.nc", "--out", "t.nc", "--force"), r"t\.nc.*input|input.*t\.nc"),
    (
        "record output is its data",
        cli("record", "--model", "M1", "--epsilon", "1", "--data", "d.npz", "--out", "d.npz"),
        r"input",
    ),
    ("existing output", cli("fit", "t.nc", "--out", "old.nc"), r"old\.nc exists.*--force"),
    ("negative ε among levels", cli("coverage", "--model", "M1", "--epsilon", "1", "-1", "--out", "cov"), r"-1"),
    ("plot in a missing folder", cli("fit", "t.nc", "--out", "ok.nc", "--plot", "nowhere/x.png"), r"nowhere"),
    ("plot of unknown type", cli("fit", "t.nc", "--out", "ok.nc", "--plot", "x.jpg"), r"\.png|\.pdf|\.svg"),
    ("--coordinates without --plot", cli("fit", "t.nc", "--coordinates", "rate"), r"--plot"),
    ("demo at ε = 0", cli("demo", "--epsilon", "0", "--out", "demo"), r"epsilon|ε"),
    ("δ = 0.5", cli("record", "--model", "M1", "--epsilon", "1", "--delta", "0.5", "--out", "m.nc"), r"δ|delta"),
    (
        "data outside the support",
        cli("record", "--model", "M1", "--epsilon", "1", "--data", "negative.csv", "--out", "m.nc"),
        r"support",
    ),
    (
        "CSV short of X[2]",
        cli("record", "--model", "logistic-3d", "--epsilon", "1", "--data", "short.csv", "--out", "m.nc"),
        r"X\[2\]",
    ),
    # issue 26: study folders
    ("report of a crafted plan.json", cli("report", "crafted"), r"not a study plan"),
    ("a study folder of an older noiseaware", cli("report", "old-study"), r"older noiseaware .*never read"),
    (
        "a study folder another process runs",
        cli("coverage", "--model", "M1", "--epsilon", "1", "--simulations", "2", "--out", "running"),
        r"in use by process .*wait for it to finish",
    ),
    # issue 26, configuration as data: an old flag spelling names its replacement
    (
        "coverage --repeats",
        cli("coverage", "--model", "M1", "--epsilon", "1", "--repeats", "5", "--out", "c"),
        r"--references",
    ),
    ("calibrate --draws", cli("calibrate", "--epsilon", "1", "--draws", "500", "--out", "c"), r"--samples"),
]
API_CASES = [
    ("int64 trace", trace_with(np.int64), r"int64"),
    ("float16 trace", trace_with(np.float16), r"float16"),
    ("key is a string", fit_loaded(key="abc"), r"key"),
    ("key is None", fit_loaded(key=None), r"key"),
    ("no φ* draws", fit_loaded(key=0, draws=0), r"draws"),
    ("negative sample size", sample_naive(-5), r"\bn\b"),
    ("x of shape (100, 50) for M1", record_m1({"x": np.ones((100, 50))}), r"x.*shape|shape.*x"),
    ("data outside the support (API)", record_m1({"x": -np.ones(100)}), r"support"),
    ("save over an existing file", save_over, r"exists.*overwrite=True"),
    # issue 26: failures
    ("a trace coordinate that never moves", fit_frozen, r"parameters \[1\] never move"),
    ("a plug-in that returns an untyped exception", fit_untyped_plug_in, r"return a noiseaware FitFailure"),
    # issue 26, configuration as data: settings are data, checked before any work
    ("an optax object as optimizer", record_m1(M1.simulate(0)[1], optimizer=optax.adam(1e-3)), r"na\.Optimizer"),
    ("a misspelt setting", record_m1(M1.simulate(0)[1], stepz=10), r"unknown DPVI settings \['stepz'\]"),
    ("an optimizer option optax lacks", lambda folder: na.Optimizer("adam", 1e-3, options={"beta1": 0.9}), r"b1"),
]

# issue 26: integrity and outputs

TUNED = Path(__file__).parents[1] / "benchmarks" / "results" / "tuned" / "gamma-exponential-eps1.json"
"""Genuine settings of M1 with numpyro's transforms, as `noiseaware tune` wrote them."""


def unsigned_settings() -> dict:
    """The genuine settings file with its fingerprint deleted and the clip edited."""
    payload = json.loads(TUNED.read_text())
    del payload["fingerprint"]
    payload["settings"]["clip"] = 0.01
    return payload


def forged_settings() -> dict:
    """The genuine settings file, fingerprint kept, with a perfect check forged into it."""
    payload = json.loads(TUNED.read_text())
    payload["check"]["coverage_rmse"] = [0.0 for _ in payload["check"]["coverage_rmse"]]
    return payload


def issue26_files(folder: Path) -> None:
    """unsigned.json and forged.json (settings files), empty.npz (0 bytes)."""
    (folder / "unsigned.json").write_text(json.dumps(unsigned_settings()))
    (folder / "forged.json").write_text(json.dumps(forged_settings()))
    (folder / "empty.npz").write_bytes(b"")


def subsampling_model():
    """A model whose data plate subsamples (numpyro's subsample_size), against the model contract."""

    def model(n_examples, y=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", n_examples, subsample_size=100):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    return lambda folder: na.models.from_numpyro(model, n_examples=1000)


def without_fitting(action):
    """`action` with the CLI's fit replaced by a failure: the bad input must be refused before the fit."""

    def refuse(*args, **kwargs):
        raise AssertionError("the fit ran before the bad argument was refused")

    def checked(folder):
        with mock.patch("noiseaware.cli.fit.fit_reporting_warnings", refuse):
            return action(folder)

    return checked


RECORD_M1 = ("record", "--model", "M1", "--epsilon", "1", "--out", "m.nc")
CLI_CASES += [
    ("settings file without fingerprint", cli(*RECORD_M1, "--settings", "unsigned.json"), r"no fingerprint.*tune"),
    ("settings file with a forged check", cli(*RECORD_M1, "--settings", "forged.json"), r"edited after tuning"),
    ("empty .npz data", cli(*RECORD_M1, "--data", "empty.npz"), r"empty\.npz is empty.*np\.savez"),
    (
        "fit --coordinates nope",
        without_fitting(cli("fit", "t.nc", "--plot", "x.png", "--coordinates", "nope")),
        r"nope.*names nothing",
    ),
]
API_CASES += [
    ("settings without fingerprint (API)", lambda folder: na.TunedSettings.from_dict(unsigned_settings()), r"no fin"),
    ("forged check (API)", lambda folder: na.TunedSettings.from_dict(forged_settings()), r"edited after tuning"),
    ("from_numpyro with subsample_size", subsampling_model(), r"subsample_size=100"),
]


@pytest.mark.parametrize(("name", "action", "pattern"), CLI_CASES, ids=[case[0] for case in CLI_CASES])
def test_command_line_gives_one_clear_error_and_leaves_nothing(scratch, capsys, name, action, pattern):
    before = snapshot(scratch)
    status = action(scratch)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert status == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert re.search(pattern, errors[0]), errors[0]
    assert snapshot(scratch) == before


@pytest.mark.parametrize(("name", "action", "pattern"), API_CASES, ids=[case[0] for case in API_CASES])
def test_python_gives_one_clear_error_and_leaves_nothing(scratch, name, action, pattern):
    before = snapshot(scratch)
    with pytest.raises((ValueError, TypeError, OSError)) as raised:
        action(scratch)
    message = str(raised.value)
    assert not type(raised.value).__module__.startswith("jax"), message  # ours, not a raw JAX error
    assert re.search(pattern, message), message
    assert "Traceback" not in message and len(message) < 600
    assert snapshot(scratch) == before


def test_x_and_y_of_different_lengths_name_both(scratch):
    logistic = na.models.get("logistic-3d")
    data = {"X": np.zeros((1000, 3)), "y": np.zeros(900, np.int32)}
    with pytest.raises(ValueError) as info:
        na.record_dpvi(logistic.model, data, noise_multiplier=5.0, key=0, **(SMALL | {"grad_scale": 1.0}))
    mentions(info, "X", "1000", "y", "900")


def test_non_private_reference_trace_is_fitted(scratch):
    """σ = 0 (the reference run docs/recording.md describes) fits without error or warning about σ."""
    _, data = M1.simulate(0)
    settings = M1.dpvi_settings | {"steps": 400, "learning_rate": (1e-3, 1e-2)}
    settings.pop("lr_multiplier", None)
    reference = na.record_dpvi(M1.model, data, non_private=True, key=1, **settings)
    assert reference.noise_multiplier == 0
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        post = na.fit(reference, "exact", key=0, draws=200)
    low, high = post.interval(0.9)
    assert np.all(np.isfinite(low)) and np.all(high > low)
    assert os.listdir(scratch)  # the scratch folder itself was left as it was


def test_demo_runs_again_into_its_own_folder_and_never_over_other_files(tmp_path, monkeypatch, capsys):
    """issue 26: `make demo` twice works (the demo replaces the files of its own marked folder), while a folder
    the demo did not write keeps needing --force."""
    monkeypatch.chdir(tmp_path)
    demo = ("demo", "--steps", "300", "--out")
    assert main([*demo, "demo"]) == 0
    first = snapshot(tmp_path / "demo")
    assert main([*demo, "demo", "--seed", "7"]) == 0, capsys.readouterr().err
    second = snapshot(tmp_path / "demo")
    assert second.keys() == first.keys() and second["m1-trace.nc"] != first["m1-trace.nc"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "m1-trace.nc").write_text("my own file")
    capsys.readouterr()
    assert main([*demo, "mine"]) == 2
    mentions(capsys.readouterr().err, "m1-trace.nc", "exists", "--force")
    assert (tmp_path / "mine" / "m1-trace.nc").read_text() == "my own file"
    (tmp_path / "demo" / "m1-trace.png").write_bytes(b"my own plot, saved under the demo's name")  # in its folder
    assert main([*demo, "demo"]) == 2  # the demo's record says it did not write this file: --force needed
    mentions(capsys.readouterr().err, "m1-trace.png", "exists", "--force")
    assert (tmp_path / "demo" / "m1-trace.png").read_bytes().startswith(b"my own plot")
