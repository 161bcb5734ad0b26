"""na.tune, na.preflight and TunedSettings on a conjugate normal-mean model small enough to tune in seconds."""

import dataclasses
import json
import re
import textwrap
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from scipy import stats
from toy_models import normal_mean

import noiseaware as na
from noiseaware.cli import main
from noiseaware.plots import plot_privacy_utility
from noiseaware.recording.settings import SettingsHint
from noiseaware.tuning import PreflightWarning, SearchSpace, SettingsFileError, TunedSettings
from noiseaware.tuning.facts import SimulationFacts, simulate, simulation_facts
from noiseaware.tuning.predict import predict
from noiseaware.tuning.preflight_report import PreflightReport, rmse_limit
from noiseaware.tuning.score import WINSOR_VARIANCE, bias_p_values, pooled_p_values
from noiseaware.tuning.search import streams
from noiseaware.tuning.tuned import model_layout
from noiseaware.util.hints import speaking_cli

pytestmark = pytest.mark.full_optimisation  # the tuner runs long DP-SGD scans, which unoptimised XLA runs slower

N = 1000
TINY = {"steps": 1000, "sampling_rate": 0.1, "mc_draws": 4}
MODULE = """
import numpyro
import numpyro.distributions as dist
import noiseaware as na


def normal_mean(x=None, n_examples=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(mu, 1.0), obs=x)


tiny = na.models.from_numpyro(normal_mean, n_examples=1000, steps=1000, sampling_rate=0.1, mc_draws=4)
"""


@pytest.fixture(scope="module")
def tiny():
    return na.models.from_numpyro(normal_mean, n_examples=N, **TINY)


@pytest.fixture(scope="module")
def journal_path(tmp_path_factory):
    return tmp_path_factory.mktemp("tune") / "trials.journal"


@pytest.fixture(scope="module")
def quick(tiny, journal_path):
    """A few trials and a small check: enough to test the plumbing (settings, files, keys). Run through the
    parallel path (an executor and a journal file), which test_same_key_gives_the_same_settings compares with
    the one-process search."""
    from noiseaware.studies import InProcessExecutor

    return na.tune(
        tiny, epsilon=1.0, key=3, trials=3, simulations=4, check_simulations=6, predictions=32,
        executor=InProcessExecutor(),
        storage=journal_path,
    )  # fmt: skip


# ---------------------------------------------------------------- simulation facts


def test_facts_find_the_exact_vi_optimum_and_curvature_of_a_conjugate_model(tiny):
    truth, data = simulate(tiny, 3, 0)
    facts = simulation_facts(tiny, truth, data, key=1, init=(0.0, -3.0), mc_draws=4)
    total = data["x"].sum(axis=1)
    sd = 1 / np.sqrt(N + 1)
    np.testing.assert_allclose(facts.optimum[:, 0], total / (N + 1), atol=0.05 * sd)
    np.testing.assert_allclose(np.logaddexp(0, facts.optimum[:, 1]), sd, rtol=0.03)
    np.testing.assert_allclose(facts.hessian[:, 0], N + 1, rtol=0.02)
    rho = np.log(np.expm1(sd))
    np.testing.assert_allclose(facts.hessian[:, 1], 2 * (N + 1) / (1 + np.exp(-rho)) ** 2, rtol=0.25)
    assert facts.gradients.shape == (3, N, 2)


def test_clipped_fraction_and_shift_match_a_slow_loop():
    rng = np.random.default_rng(0)
    gradients = rng.standard_t(3, size=(2, 50, 3)) * [1.0, 0.1, 2.0]
    facts = SimulationFacts(
        truth=np.zeros((2, 1)),
        data={},
        optimum=np.zeros((2, 3)),
        gradients=gradients,
        hessian=rng.uniform(1, 3, size=(2, 3)),
        n_examples=500,
    )
    clip, scale = 1.5, np.array([1.0, 4.0, 0.5])
    for m in range(2):
        clipped, excess = 0, np.zeros(3)
        for g in gradients[m]:
            norm = np.sqrt(np.sum((scale * g) ** 2))
            clipped += norm > clip
            excess += (min(1.0, clip / norm) * scale * g) / scale - g
        assert facts.clipped_fraction(clip, scale)[m] == pytest.approx(clipped / 50)
        np.testing.assert_allclose(facts.clipping_shift(clip, scale)[m], -excess * 10 / facts.hessian[m])


def test_pooled_p_values_follow_the_chi_square_sum_and_skip_failed_fits():
    z = np.array([[0.5, 2.0], [np.nan, 1.0], [-1.0, 0.0], [1.5, -2.5]])
    mean, p = pooled_p_values(z)
    ok = z[[0, 2, 3]]
    np.testing.assert_allclose(mean, np.mean(ok**2, axis=0))
    np.testing.assert_allclose(p, stats.chi2.sf(np.sum(ok**2, axis=0), df=3))


def test_bias_test_sees_a_shared_shift_not_a_few_overconfident_traces():
    z = np.asarray(jax.random.normal(jax.random.key(0), (200, 1)), np.float64)
    outliers = z.copy()
    outliers[:4] = 12.0  # four traces whose ρ* posterior is far too narrow
    assert bias_p_values(outliers)[0] > 0.01
    assert pooled_p_values(outliers)[1][0] < 1e-10  # the χ² test would reject on them alone
    assert bias_p_values(z + 0.4)[0] < 1e-3
    cut = np.clip(np.asarray(jax.random.normal(jax.random.key(1), (10**6,)), np.float64), -3, 3)
    assert cut.var() == pytest.approx(WINSOR_VARIANCE, abs=3e-3)


def test_rmse_limit_is_the_chance_rmse_of_small_studies():
    assert rmse_limit(1000) == 0.05
    assert rmse_limit(6) == pytest.approx(1.5 / 6)


# ---------------------------------------------------------------- the search


@pytest.mark.slow
def test_tuner_raises_a_clip_far_below_the_gradient_scale_until_clipping_stops(tiny):
    space = SearchSpace(clip=(0.02, 4.0), relaxation_mu=(0.01, 0.1), relaxation_rho=(0.001, 0.01))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreflightWarning)
        tuned = na.tune(
            tiny, epsilon=2.0, key=0, trials=12, simulations=12, check_simulations=40, start={"clip": 0.05},
            space=space, predictions=128,
        )  # fmt: skip
    rows = {row["trial"]: row for row in tuned.trials}  # candidates judged on their predictions alone have no row
    first, chosen = rows[0], rows[tuned.provenance["chosen_trial"]]
    assert first["clip"] == 0.05 and first["clipped"] > 0.5  # the start clips most examples at the optimum
    assert chosen["feasible"] and chosen["clip"] > 10 * first["clip"] and chosen["clipped"] <= 0.01
    report = tuned.check  # fresh simulations: clipping has stopped and the intervals are calibrated
    assert report.clipped < 0.02 and report.shift < 0.25
    assert min(report.theta_p) > 0.01 / len(report.theta_p)
    assert report.coverage_rmse[0] <= rmse_limit(report.simulations)
    assert report.ok


def test_same_key_gives_the_same_settings(tiny, quick, journal_path):
    """The one-process search and the one with an executor and a journal agree on the same key, and the journal
    holds every simulated candidate with its finished parts."""
    import optuna

    from noiseaware.tuning.parallel import journal

    again = na.tune(tiny, epsilon=1.0, key=3, trials=3, simulations=4, check_simulations=6, predictions=32)
    assert dict(again.settings) == dict(quick.settings)
    assert again.trials == quick.trials
    (name,) = optuna.get_all_study_names(journal(journal_path))
    stored = optuna.load_study(study_name=name, storage=journal(journal_path)).trials
    assert len(stored) == quick.provenance["trials"] == len(quick.trials)
    assert sum(len([k for k in t.user_attrs if k.startswith("part ")]) for t in stored) >= len(stored)


def test_search_and_check_use_disjoint_simulations(tiny, quick):
    search, check = streams(3)
    assert not np.array_equal(jax.random.key_data(search), jax.random.key_data(check))
    provenance = quick.provenance
    assert provenance["search_simulation_key"] != provenance["check_simulation_key"]
    truth = [
        simulate(tiny, 50, jax.random.wrap_key_data(np.asarray(provenance[name], np.uint32)))[0]
        for name in ("search_simulation_key", "check_simulation_key")
    ]
    assert not np.intersect1d(truth[0].ravel(), truth[1].ravel()).size


def test_tuned_settings_record_a_trace_and_wrap_a_model_without_the_hint(tiny, quick):
    theta, data = tiny.simulate(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SettingsHint)
        trace = na.record_dpvi(tiny.model, data, epsilon=1.0, key=1, **quick)
    np.testing.assert_allclose(trace.clip, quick["clip"])
    np.testing.assert_allclose(trace.grad_scale, quick["grad_scale"], rtol=1e-6)
    wrapped = na.models.from_numpyro(normal_mean, n_examples=N, **quick)
    assert wrapped.dpvi_settings["preflight"] == quick.fingerprint
    quick.check_model(wrapped)


def test_unchecked_settings_get_a_one_line_hint(tiny):
    theta, data = tiny.simulate(5)
    with pytest.warns(SettingsHint, match="never checked on simulations: run na.preflight"):
        na.record_dpvi(tiny.model, data, epsilon=1.0, key=1, clip=1.0, steps=100, sampling_rate=0.2)


# ---------------------------------------------------------------- predictions before any trace


@pytest.fixture(scope="module")
def tiny_facts(tiny):
    truth, data = simulate(tiny, 8, 0)
    return simulation_facts(tiny, truth, data, key=1, init=(0.0, -3.0), mc_draws=TINY["mc_draws"])


def test_predicted_stationary_sd_of_the_mean_matches_recorded_traces(tiny, tiny_facts):
    """For a normal mean the μ gradient is linear in μ, so its iterates are the AR(1) of tuning/predict.py,
    φ_{t+1} − φ* = (1 − κ)(φ_t − φ*) − λη_t. The sample variance of T' steps of an AR(1) with coefficient
    r = 1 − κ has relative sd sqrt(2(1 + r²)/((1 − r²)T')) (Bartlett), so the mean over M simulations of measured
    over predicted variance is 1 within 4 of those sds over √M. At ε = 20 the subsampling noise u² is about half the
    gradient noise, so a prediction that left it out would fail."""
    from noiseaware.privacy import noise_multiplier
    from noiseaware.recording.dpvi import record_dpvi_batch
    from noiseaware.tuning.space import Candidate, settings_for

    kappa, steps, q = 0.3, TINY["steps"], TINY["sampling_rate"]
    sigma = noise_multiplier(20.0, 1e-5, q, steps)
    candidate = Candidate(2.5, 1.0, kappa, 0.01, steps, q)  # c = 2.5: nothing clipped
    settings = settings_for(candidate, tiny_facts, tiny.site_map, sigma, {"mc_draws": TINY["mc_draws"]})
    prediction = predict(tiny_facts, settings, sigma)
    assert prediction.clipped == 0 and prediction.memory.max() < 0.01
    np.testing.assert_allclose(prediction.relaxation[:, 0], kappa, rtol=0.05)  # λ from the median curvature
    dp = sigma * settings["clip"] / settings["grad_scale"][0]
    assert 0.25 < 1 - dp**2 / prediction.noise_sd[:, 0].mean() ** 2 < 0.75  # the share of u² in the noise
    traces = record_dpvi_batch(
        tiny.model, tiny_facts.data, keys=jax.random.split(jax.random.key(5), 8), noise_multiplier=sigma, **settings
    )
    kept = steps - int(0.2 * steps)
    measured = np.array([np.asarray(t.params)[-kept:, 0].var() for t in traces])
    ratio = measured / prediction.stationary_sd[:, 0] ** 2
    r = 1 - prediction.relaxation[:, 0].mean()
    tolerance = 4 * np.sqrt(2 * (1 + r**2) / ((1 - r**2) * kept)) / np.sqrt(len(traces))
    assert abs(ratio.mean() - 1) < tolerance, (ratio, tolerance)


def test_pair_model_predicts_the_zeta_of_the_rho_row(tiny, tiny_facts):
    """The ρ row's gradient is curved in ρ (sigmoid(ρ)·(h·softplus(ρ) − 1/softplus(ρ))), so the iterates' stationary
    mean sits off ρ* and a gradient model linear in ρ (here without the model's prior) reads that offset as ρ*: the
    pair model predicts the mean ζ of the ρ row. A slow ρ relaxation is predicted and measured within a few tenths;
    a fast one with a small ρ weight wanders far and is predicted (and measured) far off."""
    from noiseaware.privacy import noise_multiplier
    from noiseaware.tuning.score import record_batches, score_traces
    from noiseaware.tuning.space import Candidate, settings_for

    steps, q = TINY["steps"], TINY["sampling_rate"]
    sigma = noise_multiplier(1.0, 1e-5, q, steps)
    keys = jax.random.split(jax.random.key(2), len(tiny_facts))
    measured, predicted = [], []
    for candidate in (Candidate(2.5, 1.0, 0.05, 0.003, steps, q), Candidate(2.5, 0.05, 0.05, 0.3, steps, q)):
        settings = settings_for(candidate, tiny_facts, tiny.site_map, sigma, {"mc_draws": TINY["mc_draws"]})
        traces = record_batches(tiny, tiny_facts.data, keys, noise_multiplier=sigma, delta=1e-5, **settings)
        score = score_traces(tiny_facts, traces, settings, fit_key=jax.random.key(3), model=None)
        predicted.append(predict(tiny_facts, settings, sigma).bias)
        measured.append(abs(np.nanmean(np.clip(score.zeta[:, 1], -3, 3))))
    error = 4 * np.sqrt(WINSOR_VARIANCE / len(tiny_facts))  # four sds of a mean ζ cut at ±3
    assert predicted[0] < 0.5 and measured[0] < predicted[0] + error, (predicted, measured)
    assert predicted[1] > 2.0 and measured[1] > 1.0, (predicted, measured)


# ---------------------------------------------------------------- the settings file


def test_settings_file_round_trips(tmp_path, tiny, quick):
    path = tmp_path / "s.json"
    quick.save(path)
    back = TunedSettings.load(path, tiny)
    assert dict(back) == dict(quick) and back.check == quick.check and back.trials == quick.trials
    assert back.provenance["key"] == quick.provenance["key"]
    with pytest.raises(FileExistsError):
        quick.save(path)


def test_settings_file_is_refused_for_another_model_or_n_or_after_an_edit(tmp_path, quick):
    path = tmp_path / "s.json"
    quick.save(path)
    with pytest.raises(SettingsFileError, match="tuned for model 'normal_mean'.*not for 'gamma-exponential'"):
        TunedSettings.load(path, na.models.get("m1", preset=False))
    with pytest.raises(SettingsFileError, match="tuned for N = 1000"):
        TunedSettings.load(path, na.models.from_numpyro(normal_mean, n_examples=300))
    payload = json.loads(path.read_text())
    payload["settings"]["clip"] *= 2
    path.write_text(json.dumps(payload))
    with pytest.raises(SettingsFileError, match="edited after tuning"):
        TunedSettings.load(path)
    path.write_text("{}")
    with pytest.raises(SettingsFileError, match="not a noiseaware settings file"):
        TunedSettings.load(path)


# ---------------------------------------------------------------- the preflight check


def test_preflight_warns_when_clipping_is_active_at_the_optimum(tiny):
    with pytest.warns(PreflightWarning, match="clipping is active at the optimum.*let na.tune choose them"):
        report = na.preflight(tiny, {"clip": 0.1, "grad_scale": 1.0}, epsilon=1.0, simulations=12, key=0)
    assert report.clipped > 0.5 and not report.ok


def test_preflight_of_the_tuners_own_settings_advises_a_larger_search_not_the_tuner(tiny):
    """issue 27: preflight on a file the tuner wrote advised to "let na.tune choose them"."""
    settings = {"clip": 0.1, "grad_scale": 1.0}
    tuned = na.TunedSettings(tiny.name, model_layout(tiny), N, 1.0, 1e-5, tiny.dpvi_settings | settings)
    with pytest.warns(PreflightWarning, match="clipping is active") as caught:
        na.preflight(tiny, tuned, epsilon=1.0, simulations=4, references=2, samples=200, key=0)
    advice = [str(w.message) for w in caught if "clipping is active" in str(w.message)]
    assert advice and all("tune again with more trials" in a and "choose them" not in a for a in advice)


def test_tuner_checks_the_next_best_trial_when_its_first_choice_fails_its_own_check(tiny, monkeypatch):
    """issue 27: the tuner's choice must pass its own check. A check that fails the first-ranked trial (a
    finding added to its real report) sends the tuner to the second, whose passing check it returns; when every
    candidate fails, it returns the first of the fewest findings and says so."""
    import noiseaware.tuning.search as search

    real, calls = search.check_settings, []

    def failing(fail):
        def check(bm, settings, facts, **kwargs):
            report = real(bm, settings, facts, **kwargs)
            calls.append(dict(settings))
            found = ("clipping is active at the optimum: planted",) * fail(len(calls))
            return dataclasses.replace(report, findings=found)

        return check

    small = {"trials": 2, "simulations": 4, "check_simulations": 4, "candidates": 2, "predictions": 32}
    monkeypatch.setattr(search, "check_settings", failing(lambda n: n == 1))
    tuned = na.tune(tiny, epsilon=1.0, key=3, **small)
    first, second = tuned.provenance["checked_trials"]
    assert tuned.provenance["chosen_trial"] == second != first and tuned.check.findings == ()
    assert dict(tuned.settings) == calls[1] != calls[0]
    calls.clear()
    monkeypatch.setattr(search, "check_settings", failing(lambda n: n))  # 1 finding, then 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PreflightWarning)
        worst = na.tune(tiny, epsilon=1.0, key=3, **small)
    assert any("none of the 2 best candidates passed its check" in str(w.message) for w in caught)
    assert worst.provenance["chosen_trial"] == first and len(worst.check.findings) == 1


def test_preflight_reports_the_fits_warnings_counted_and_prints_readably(tiny):
    """A short trace at a small ε: the gradients barely respond to ρ, so every simulation's fit warns of weak
    identification; the report counts it, and prints a verdict that names its finding."""
    with pytest.warns(PreflightWarning, match="clipping is active"):
        report = na.preflight(
            tiny, {"steps": 200, "clip": 1.0, "grad_scale": 1.0}, epsilon=0.05, simulations=4, references=2,
            samples=200, key=0,
        )  # fmt: skip
    (count, line), *others = report.warnings
    assert count == 4 and line.startswith("weak identification in 4 of 4 simulations (rho:mu in 4") and not others
    assert report.warning_counts == ("weak identification: 4 of 4 simulations",)
    assert report.verdict == "1 finding: clipping is active at the optimum"
    text = str(report)
    assert text.splitlines()[0].endswith(": 1 finding: clipping is active at the optimum")
    assert "fit warnings                   weak identification: 4 of 4 simulations" in text
    assert f"warning: {line}" in text and f"finding: {report.findings[0]}" in text
    assert repr(report) == (
        "PreflightReport(normal_mean, ε = 0.05, 4 simulations, coverage RMSE "
        f"{report.coverage_rmse[0]:.3f}, sd / VI sd {report.mean_sd_ratio:.2f}: 1 finding: clipping is active at "
        "the optimum)"
    )
    assert PreflightReport.from_dict(report.to_dict()) == report
    old = {k: v for k, v in report.to_dict().items() if k != "warnings"}  # a settings file from before
    assert PreflightReport.from_dict(old).warnings == ()


def test_hints_speak_python_in_python_and_commands_on_the_command_line():
    bare = na.models.from_numpyro(normal_mean, n_examples=N)
    with pytest.raises(ValueError, match=r"find them with na\.tune$"):
        na.preflight(bare, epsilon=1.0, key=0)
    with speaking_cli(), pytest.raises(ValueError, match=r"find them with `noiseaware tune`$"):
        na.preflight(bare, epsilon=1.0, key=0)


def test_preflight_refuses_a_model_without_settings_or_an_unknown_setting_before_any_work(tiny):
    bare = na.models.from_numpyro(normal_mean, n_examples=N)
    with pytest.raises(ValueError, match="has no preset and the settings lack"):
        na.preflight(bare, epsilon=1.0, key=0)
    with pytest.raises(ValueError, match=r"unknown settings \['clp'\]"):
        na.preflight(tiny, {"clip": 1.0, "clp": 2.0}, epsilon=1.0, key=0)


# ---------------------------------------------------------------- command line


@pytest.mark.slow
def test_cli_tune_preflight_and_record_with_settings(tmp_path, monkeypatch, capsys):
    (tmp_path / "tiny_model.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    tune = ["tune", "--model", "tiny_model:tiny", "--epsilon", "1", "--trials", "2", "--simulations", "4"]
    tune += ["--predictions", "16"]
    small = ["--check-simulations", "4", "--curve-epsilons", "0.5", "1", "--curve-simulations", "4"]
    assert main([*tune, *small, "--out", "s.json"]) == 0
    out = capsys.readouterr().out
    assert "best of 2 simulated candidates of 16 judged" in out and "privacy–utility of normal_mean" in out
    for name in ("s.json", "s-coverage.png", "s-privacy-utility.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert main([*tune, *small, "--out", "s.json"]) == 2  # an existing file without --force
    check = ["preflight", "--model", "tiny_model:tiny", "--epsilon", "1", "--simulations", "4"]
    assert main([*check, "--settings", "s.json", "--plot", "c.png"]) == 0
    assert "preflight of normal_mean at ε = 1" in capsys.readouterr().out
    data = tiny_data(tmp_path)
    record = ["record", "--model", "tiny_model:normal_mean", "--data", data, "--epsilon", "1", "--seed", "1"]
    assert main([*record, "--settings", "s.json", "--out", "t.nc"]) == 0
    assert "hint:" not in capsys.readouterr().err
    assert main([*record, "--settings", "s.json", "--clip", "3", "--out", "u.nc"]) == 2
    assert "--settings fixes the DP-SGD settings: drop --clip" in capsys.readouterr().err
    assert main(["record", "--model", "M1", "--epsilon", "1", "--settings", "s.json", "--out", "v.nc"]) == 2
    assert "tuned for model 'normal_mean'" in capsys.readouterr().err
    assert not (tmp_path / "u.nc").exists() and not (tmp_path / "v.nc").exists()


def tiny_data(folder) -> str:
    _, data = na.models.from_numpyro(normal_mean, n_examples=N).simulate(0)
    path = folder / "x.npz"
    np.savez(path, x=np.asarray(data["x"]))
    return str(path)


def test_privacy_utility_curve_narrows_with_epsilon_and_plots(tmp_path, tiny, quick):
    curve = na.tuning.privacy_utility(tiny, quick, epsilons=(0.5, 8.0), simulations=6, references=2, key=1)
    assert curve.epsilons == (0.5, 8.0) and len(curve.reports) == 2
    assert curve.sd_ratio[0] > 1.5 * curve.sd_ratio[1]  # more privacy, more noise, wider posteriors
    assert [r.noise_multiplier for r in curve.reports] == sorted(
        (r.noise_multiplier for r in curve.reports), reverse=True
    )
    assert "privacy–utility of normal_mean" in curve.table()
    plot_privacy_utility(curve, tmp_path / "pu.png")
    assert (tmp_path / "pu.png").stat().st_size > 0


def test_privacy_utility_at_the_tuned_epsilon_is_the_settings_own_check(tiny, quick):
    """issue 40: the curve at the ε the settings were tuned for shows their own check (its simulations and
    verdict), so `noiseaware tune` cannot print "no findings" and a finding at the same ε; elsewhere it checks on
    its own simulations, and the table says how many each row used."""
    curve = na.tuning.privacy_utility(tiny, quick, epsilons=(0.5, 1.0), simulations=4, references=2, key=1)
    assert curve.reports[1] is quick.check and curve.reports[0].simulations == 4
    assert quick.check.simulations == 6
    rows = curve.table().splitlines()
    assert re.search(r"^1\s+6\s", next(r for r in rows if r.startswith("1 "))) and "simulations:" in curve.table()


def test_cli_refuses_bad_tuning_input_before_any_work(tmp_path, monkeypatch, capsys, quick):
    (tmp_path / "tiny_model.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["tune", "--model", "tiny_model:normal_mean", "--epsilon", "1", "--out", "s.json"]) == 2
    assert "needs --n-examples N" in capsys.readouterr().err
    assert main(["tune", "--model", "M1", "--covariates", "tiny_model:tiny", "--epsilon", "1", "--out", "s.json"]) == 2
    assert "--covariates is for a user model" in capsys.readouterr().err
    quick.save(tmp_path / "q.json")
    check = ["preflight", "--model", "M1", "--epsilon", "1", "--settings", "q.json"]
    assert main(check) == 2
    assert "tuned for model 'normal_mean'" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


def test_tune_refuses_bad_arguments_before_any_simulation(tiny):
    with pytest.raises(ValueError, match="start names \\['clipp'\\]"):
        na.tune(tiny, epsilon=1.0, key=0, start={"clipp": 1.0})
    with pytest.raises(ValueError, match="simulations"):
        na.tune(tiny, epsilon=1.0, key=0, simulations=2)
    with pytest.raises(ValueError, match="SearchSpace.clip must be a range"):
        SearchSpace(clip=(3.0, 1.0))
    with pytest.raises(TypeError, match="space must be a na.tuning.SearchSpace"):
        na.tune(tiny, epsilon=1.0, key=0, space={"clip": (1, 2)})


def test_a_search_resumes_from_its_journal_without_simulating_again(tiny, quick, journal_path, monkeypatch):
    """The same call with the same journal finds every finished part there: no DPVI runs, the same settings."""
    import noiseaware.tuning.search as search
    from noiseaware.studies import InProcessExecutor

    def no_simulation(payload):
        raise AssertionError("a finished part was simulated again")

    monkeypatch.setattr(search, "score_part", no_simulation)
    again = na.tune(
        tiny, epsilon=1.0, key=3, trials=3, simulations=4, check_simulations=6, predictions=32,
        executor=InProcessExecutor(),
        storage=journal_path,
    )  # fmt: skip
    assert dict(again.settings) == dict(quick.settings) and again.trials == quick.trials


def test_tasks_run_on_a_dask_cluster_and_a_failed_one_runs_again():
    from noiseaware.studies import InProcessExecutor, local_cluster
    from noiseaware.tuning.parallel import run_tasks

    results = {}
    with local_cluster(2) as (executor, slots):
        run_tasks(abs, [-1, -2, 3], executor, slots, results.__setitem__)
    assert results == {0: 1, 1: 2, 2: 3}
    failures = []

    def flaky(x):
        if not failures:
            failures.append(x)
            raise RuntimeError("once")
        return 2 * x

    results.clear()
    run_tasks(flaky, [5], InProcessExecutor(), 1, results.__setitem__)
    assert results == {0: 10} and failures == [5]


def test_a_report_names_its_findings_where_it_counts_them():
    """issue 26: "1 finding(s)" said nothing; the verdict line names each finding by its first clause."""
    path = "benchmarks/results/tuned/gamma-exponential-eps1.json"
    report = na.TunedSettings.load(Path(__file__).parents[1] / path).check
    assert report.verdict == "no findings"
    found = dataclasses.replace(
        report,
        findings=("clipping is active at the optimum: 3 % of examples clipped …", "2 of 200 fits failed"),
    )
    assert found.verdict == "2 findings: clipping is active at the optimum; 2 of 200 fits failed"
    one = dataclasses.replace(report, findings=("coverage is off: TARP coverage RMSE 0.2 …",))
    assert one.verdict == "1 finding: coverage is off"
