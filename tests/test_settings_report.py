"""The report of what a run used: the model's priors, the DPVI settings, the transforms and the gradient model's
prior, each marked by who chose it (yours, a preset, the default), as `noiseaware record` prints and keeps it."""

import json

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from cli_helpers import run
from messages import mentions

import noiseaware as na
from noiseaware.evaluation.settings_report import DEFAULT, YOURS, describe, settings_report


def sources(report) -> dict[tuple[str, str], tuple[str, str]]:
    return {(s.kind, s.name): (s.value, s.source) for s in report.settings}


def test_a_research_preset_run_with_one_setting_of_yours():
    bm = na.models.get("M1")
    report = sources(
        settings_report(bm, dict(bm.dpvi_settings) | {"steps": 2000}, preset="research preset", gradient_prior="paper")
    )
    assert report[("model prior", "rate")] == ("Gamma(concentration=8, rate=2)", "built-in model")
    assert ("model prior", "x") not in report  # observed, not a prior
    assert report[("DPVI", "steps")] == ("2000", YOURS)
    assert report[("DPVI", "clip")] == ("2", "research preset")
    assert report[("DPVI", "grad_scale")] == ("(1, 100)", "research preset")
    assert report[("DPVI", "mc_draws")] == ("10", DEFAULT)  # the preset's value is record_dpvi's own default
    assert report[("DPVI", "family")] == ("mean-field", DEFAULT)
    assert report[("transform", "rate")] == ("softplus", "research preset")  # numpyro's would be exp
    assert report[("gradient-model prior", "prior")] == ("paper", YOURS)


def test_a_tuned_preset_keeps_numpyros_transforms_which_are_the_default():
    bm = na.tuning.tuned_model("M1", 1.0)
    report = settings_report(bm, dict(bm.dpvi_settings), preset="tuned preset at ε = 1", gradient_prior="default")
    found = sources(report)
    assert found[("transform", "rate")] == ("exp", DEFAULT)
    assert found[("DPVI", "clip")][1] == "tuned preset at ε = 1"
    assert found[("gradient-model prior", "prior")] == ("default", DEFAULT)
    (line,) = [line for line in report.brief().splitlines() if "steps=" in line]
    mentions(line, "[tuned", "ε", "1]", "steps=10000")  # the setting with its source


def poisson(x=None, n_examples=None):
    rate = numpyro.sample("rate", dist.HalfNormal(3.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Poisson(rate), obs=x)


def test_a_model_of_yours_on_your_data():
    data = {"x": np.array([1.0, 2.0, 0.0, 4.0])}
    used = {"steps": 100, "sampling_rate": 0.5, "clip": 1.0, "transforms": {"rate": "softplus"}}
    site_map = na.models.from_numpyro(poisson, n_examples=4, transforms={"rate": "softplus"}).site_map
    report = settings_report(poisson, used, preset=YOURS, site_map=site_map, data=data)
    found = sources(report)
    assert report.model == "poisson"
    assert found[("model prior", "rate")] == ("HalfNormal(scale=3)", YOURS)
    assert found[("DPVI", "steps")] == ("100", YOURS) and found[("DPVI", "init")] == ("(0, -4)", DEFAULT)
    assert found[("transform", "rate")] == ("softplus", YOURS)
    with pytest.raises(ValueError) as info:
        settings_report(poisson, used, preset=YOURS)
    mentions(info, "site_map", "data")


def test_a_distribution_is_named_with_its_parameters_and_shape():
    assert describe(dist.Normal(0.0, 2.0).expand([3]).to_event(1)) == "Normal(loc=0, scale=2) × (3,)"
    assert describe(dist.Dirichlet(np.full(3, 5.0))) == "Dirichlet(concentration=5 (each of 3))"
    assert describe(dist.Bernoulli(probs=0.25)) == "BernoulliProbs(probs=0.25)"


def test_record_prints_the_report_and_keeps_it_beside_the_trace(tmp_path, capsys):
    out = tmp_path / "m1.nc"
    args = ("record", "--model", "M1", "--epsilon", "1", "--preset", "research", "--steps", "100", "--out", out)
    status, printed, err = run(capsys, *args)
    assert status == 0
    heading = err.splitlines().index(next(line for line in err.splitlines() if line.startswith("settings of M1")))
    mentions(err.splitlines()[heading], "M1", "DPVI", "research")
    assert err.splitlines()[heading + 1].startswith("  [yours] steps=100")  # the setting given on the command line
    assert "m1.used.json" in printed
    saved = json.loads((tmp_path / "m1.used.json").read_text())
    assert saved["preset"] == "research preset"
    assert {
        "kind": "model prior",
        "name": "rate",
        "value": "Gamma(concentration=8, rate=2)",
        "source": "built-in model",
    } in saved["settings"]
    before = (tmp_path / "m1.used.json").read_text()
    status, _, err = run(capsys, *args)
    assert status == 2 and "m1.nc" in err and (tmp_path / "m1.used.json").read_text() == before


def test_coverage_refuses_to_replace_another_runs_report_before_any_work(tmp_path, capsys):
    out = tmp_path / "cov"
    out.mkdir()
    earlier = out / "coverage-gamma-exponential-sigma-5.used.json"
    earlier.write_text('{"model": "M1", "preset": "research preset", "settings": []}')
    argv = ("coverage", "--model", "M1", "--noise-multiplier", "5", "--steps", "100", "--out", out)
    status, _, err = run(capsys, *argv)
    assert status == 2
    mentions(err, str(earlier), "exists", "--force")
    assert sorted(p.name for p in out.iterdir()) == [earlier.name]  # no study was started


def test_force_over_another_runs_report_recomputes_the_results_instead_of_relabelling_them(tmp_path, capsys):
    """A rerun whose settings report differs (a model that reads a file when called changes what it does, not its
    plan) needs --force, and --force then discards the study's finished results and runs every task again: no old
    table is printed under the new settings."""
    out = tmp_path / "cov"
    argv = ("coverage", "--model", "M1", "--noise-multiplier", "5", "--steps", "100", "--simulations", "2")
    argv += ("--references", "2", "--samples", "50", "--methods", "naive", "--out", out)
    status, _, err = run(capsys, *argv)
    assert status == 0, err
    (report,) = out.glob("*.used.json")
    report.write_text(json.dumps(json.loads(report.read_text()) | {"preset": "another run's"}))
    status, _, err = run(capsys, *argv)
    assert status == 2
    mentions(err, "--force", "recompute")
    status, _, err = run(capsys, *argv, "--force")
    assert status == 0, err
    mentions(err, "again")
    events = [json.loads(line)["event"] for line in (out / "events.jsonl").read_text().splitlines()]
    assert "discarded" in events and events[events.index("discarded") + 1 :].count("done") >= 1
