"""The trace checks (`na.diagnose`): known answers per check, false-alarm rates against their stated levels on
traces drawn exactly from the gradient model, and `fit`'s diagnostics option."""

import dataclasses
import json
import math
import warnings

import numpy as np
import pytest
from messages import mentions
from ou import CLIP, HESSIAN, OPTIMUM, SCALE, SIGMA, N, Q, coupled_traces, ou_trace, ou_traces

import noiseaware as na
from noiseaware import plots
from noiseaware.checks import CHECKS, TraceCheckError, diagnose_if_long_enough
from noiseaware.checks.diagnosis import TESTS
from noiseaware.checks.statistics import checks_of_moments
from noiseaware.cli import main
from noiseaware.cli.common import trace_report
from noiseaware.trace import Trace

P_VALUES = ("p_noise", "p_windows", "p_curvature", "p_autocorrelation", "p_drift")


def simulated(gradient, steps=6000, lr=1e-3, start=0.0, seed=0, sigma=SIGMA, **kwargs):
    """A one-coordinate-pair trace (d = 1) of plain SGD with G_t = gradient(t, φ_t) + DP noise; `gradient` maps
    (t, φ (2,)) to the mean gradient (2,). kwargs go to Trace.from_arrays (e.g. a different noise_multiplier)."""
    rng = np.random.default_rng(seed)
    scale = np.array([1.0, 1.0])
    noise = sigma * CLIP / scale
    phi = np.full(2, start, dtype=np.float64)
    params, grads = np.empty((steps, 2)), np.empty((steps, 2))
    for t in range(steps):
        grads[t] = gradient(t, phi) + noise * rng.standard_normal(2)
        params[t] = phi
        phi = phi - lr * scale * grads[t]
    settings = dict(noise_multiplier=sigma, clip=CLIP, sampling_rate=Q, n_examples=N, grad_scale=scale) | kwargs
    return Trace.from_arrays(params, grads, learning_rate=lr * scale, **settings)


def linear(t, phi, optimum=(0.5, -1.0), hessian=(40.0, 60.0)):
    return Q * np.asarray(hessian) * (phi - np.asarray(optimum))


def fired(trace, **kwargs) -> set[str]:
    return set(na.diagnose(trace, **kwargs).fired)


# ------------------------------------------------------------------ known answers, one per check


def test_a_stationary_trace_drawn_from_the_model_passes():
    report = na.diagnose(ou_trace(seed=1))
    assert report.ok, str(report)
    assert report.theta_verdicts() == ("ok",) * 2
    assert report.verdict.startswith(f"trace checks: all {len(CHECKS) - 1} passed")  # no clipped counts: unchecked
    assert report.unchecked == ("clipping",) and report.clipping is None
    assert report.proposed_burn_in is None


def moving(t, phi):
    """An optimum of μ that jumps by 2 (8 standard errors of φ̂* over the kept trace) at step 4000 of 6000."""
    return linear(t, phi, optimum=(0.5 if t < 4000 else 2.5, -1.0))


def test_an_optimum_that_moves_fails_the_windows_check():
    report = na.diagnose(simulated(moving))
    assert "windows" in report.fired
    assert report.flags["windows"].tolist() == [True, False]
    assert report.theta_verdicts()[0] != "ok"


def test_a_trace_still_on_its_way_from_the_start_fails_transient_and_proposes_a_burn_in():
    # slow coordinate 0 (κ = λqA = 4e-4, stationary sd 0.35), started 56 stationary sds away: at 20 % of T
    # 1.6 relaxation times have passed, leaving an offset of 3.9 (11 sds)
    def slow(t, phi):
        return linear(t, phi, hessian=(4.0, 60.0))

    trace = simulated(slow, steps=20_000, start=20.0)
    report = na.diagnose(trace)
    assert {"transient", "drift"} <= set(report.fired) and report.flags["transient"][0]
    assert report.proposed_burn_in is not None and report.proposed_burn_in > 0.2
    finding = next(f for f in report.findings if f.check == "transient")
    assert f"burn_in={report.proposed_burn_in:g}" in finding.advice
    later = na.diagnose(trace, burn_in=report.proposed_burn_in)
    assert not {"windows", "drift", "transient"} & set(later.fired)


def test_metadata_sigma_doubled_fails_the_noise_check_with_its_hint():
    trace = ou_trace(seed=2)
    report = na.diagnose(dataclasses.replace(trace, noise_multiplier=2 * trace.noise_multiplier))
    assert report.fired == ("noise",)
    assert report.flags["noise"].all()
    assert "2× too large" in report.findings[0].advice
    assert report.statistics["noise_ratio"] == pytest.approx(0.25, rel=0.1)


def test_grads_recorded_as_a_mean_but_described_as_a_sum_are_named():
    trace = ou_trace(seed=3)
    mean = dataclasses.replace(trace, grads=trace.grads / (Q * N))
    finding = na.diagnose(mean).findings[0]  # SGD's steps no longer match the grads: other checks fire too
    assert finding.check == "noise" and "normaliser='expected-batch'" in finding.advice


def test_metadata_sigma_halved_fails_the_excess_noise_check():
    trace = ou_trace(seed=4)
    assert fired(dataclasses.replace(trace, noise_multiplier=trace.noise_multiplier / 2)) == {"excess_noise"}


def test_a_curved_gradient_fails_the_curvature_check():
    # stationary sd of φ 0.35 (κ = 0.04); above φ* the gradient gains a quadratic term 10 (φ − φ*)²: its
    # coefficient's standard error is about 0.8
    def bent(t, phi):
        above = np.maximum(phi - np.array([0.5, -1.0]), 0.0)
        return linear(t, phi) + 10.0 * above**2

    report = na.diagnose(simulated(bent, lr=1e-2))
    assert "curvature" in report.fired and report.flags["curvature"][0]


def test_correlated_noise_fails_the_autocorrelation_check():
    rng = np.random.default_rng(5)
    carry = np.zeros(2)

    def correlated(t, phi):
        nonlocal carry
        carry = 0.5 * carry + SIGMA * CLIP * rng.standard_normal(2)
        return linear(t, phi) + carry

    assert "autocorrelation" in fired(simulated(correlated, sigma=SIGMA / 100, noise_multiplier=SIGMA))


def test_a_gradient_pushing_away_fails_the_divergence_check():
    # λqA = 2e-3 away from φ*: the distance grows by e⁸ over the trace, still finite
    def away(t, phi):
        return -linear(t, phi, hessian=(200.0, 200.0))

    report = na.diagnose(simulated(away, steps=4000, lr=1e-4))
    assert "divergence" in report.fired and report.flags["divergence"].all()


def test_steps_that_overshoot_by_more_than_the_distance_fail_the_divergence_check():
    # κ = λqA = 2.005 on μ: every step overshoots φ* by a little more than the distance (× 1.005, e¹⁵ in all)
    def overshooting(t, phi):
        return linear(t, phi, hessian=(200.5, 40.0))

    report = na.diagnose(simulated(overshooting, lr=0.1))
    assert report.flags["divergence"][0]


def test_a_coordinate_that_never_moves_is_constant():
    trace = ou_trace(seed=6)
    params = np.array(trace.params)
    params[:, 1] = 0.25
    report = na.diagnose(dataclasses.replace(trace, params=params))
    assert report.flags["constant"].tolist() == [False, True, False, False]
    assert np.isnan(report.statistics["p_drift"][1])


def test_bad_arguments_and_short_traces_are_refused():
    trace = ou_trace(steps=200)
    with pytest.raises(ValueError, match="burn_in"):
        na.diagnose(trace, burn_in=1.0)
    with pytest.raises(ValueError, match="level"):
        na.diagnose(trace, level=0.0)
    with pytest.raises(ValueError, match="at least 50"):
        na.diagnose(ou_trace(steps=60))


# ------------------------------------------------------------------ false alarms at the stated levels


@pytest.fixture(scope="module")
def null_traces():
    """400 traces drawn exactly from the gradient model (four coordinates, T = 4000)."""
    return ou_traces(400, seed=11)


def test_each_test_is_uniform_under_the_model(null_traces):
    """Per coordinate and test, P(p < 0.1) lies within 3.5 binomial sds of 0.1 (n = 400: ±0.052), except that the
    drift and window tests may be conservative on the slowest coordinate (13 relaxation times kept)."""
    for name in P_VALUES:
        p = np.array([getattr(_checks(t), name) for t in null_traces])
        rate = (p < 0.1).mean(axis=0)
        bound = 3.5 * math.sqrt(0.1 * 0.9 / len(null_traces))
        assert np.all(rate < 0.1 + bound), (name, rate)
        assert np.all(rate[1:] > 0.1 - bound), (name, rate)


def test_each_check_fires_at_most_at_its_stated_rate(null_traces):
    """At level α each test fires on a trace with probability ≤ α/7 and the rules not at all; any finding ≤ α."""
    level = 0.5
    reports = [na.diagnose(t, level=level) for t in null_traces]
    bound = 3.5 * math.sqrt(level / TESTS * (1 - level / TESTS) / len(reports))
    for name in CHECKS:
        rate = np.mean([name in r.fired for r in reports])
        assert rate < level / TESTS + bound, (name, rate)
    for rule in ("constant", "transient"):
        assert not any(rule in r.fired for r in reports)
    default = np.mean([not na.diagnose(t).ok for t in null_traces])
    assert default < 0.05 + 3.5 * math.sqrt(0.05 * 0.95 / len(null_traces))


@pytest.fixture(scope="module")
def coupled_null():
    """200 traces of a strongly coupled Gaussian target (Λ_12 = 0.9·Λ_11, `ou.coupled_traces`) by SGD with known step
    sizes, drawn exactly from the coupled gradient model."""
    traces, _ = coupled_traces(200, seed=5)
    rates = np.repeat([5e-4, 0.1], 2)
    return [dataclasses.replace(t, learning_rate=rates, optimizer="sgd") for t in traces]


def test_coupled_mean_rows_are_read_net_of_each_other(coupled_null):
    """Read one at a time, the other coordinate's wander looks like windows that disagree, autocorrelated residuals
    and drift; net of the coupling, with the μ block's VAR(1) for the drift, each test's P(p < 0.1) on the μ rows
    stays within 3.5 binomial sds of 0.1, and the checks at their default level flag the μ rows of at most 5 % of the
    traces. (The ρ rows follow Stein's exact curve, which the curvature test sees, as it should.)"""
    bound = 3.5 * math.sqrt(0.1 * 0.9 / len(coupled_null))
    one_at_a_time = [_checks(t) for t in coupled_null]
    for name in ("p_windows", "p_autocorrelation", "p_drift"):
        assert np.all((np.array([getattr(s, name)[:2] for s in one_at_a_time]) < 0.1).mean(axis=0) > 0.1 + bound)
    coupled = [
        checks_of_moments(t.moments(0.2, cross=True), t.rows(), noise_sd=t.noise_sd, learning_rate=t.learning_rate)
        for t in coupled_null
    ]
    for name in P_VALUES:
        rate = (np.array([getattr(s, name)[:2] for s in coupled]) < 0.1).mean(axis=0)
        assert np.all(rate < 0.1 + bound), (name, rate)
    reports = [na.diagnose(t) for t in coupled_null]
    flagged_mu = np.mean([any(r.flags[c][:2].any() for c in r.fired) for r in reports])
    assert flagged_mu < 0.05 + 3.5 * math.sqrt(0.05 * 0.95 / len(coupled_null)), flagged_mu


def _checks(trace):
    return checks_of_moments(
        trace.moments(0.2), trace.rows(), noise_sd=trace.noise_sd, learning_rate=trace.learning_rate
    )


# ------------------------------------------------------------------ fit, posteriors, summaries and the CLI


@pytest.fixture(scope="module")
def doubled():
    trace = ou_trace(seed=7)
    return dataclasses.replace(trace, noise_multiplier=2 * trace.noise_multiplier)


def test_fit_warns_by_default_raises_when_asked_and_can_skip(doubled):
    with pytest.warns(UserWarning, match=r"trace check: gradient noise below the DP noise \(mu:theta\[0\]"):
        post = na.fit(doubled, "naive", key=0)
    assert post.checks.fired == ("noise",)
    with pytest.raises(TraceCheckError, match="gradient noise below the DP noise"):
        na.fit(doubled, "exact", key=0, checks="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert na.fit(doubled, "naive", key=0, checks="off").checks is None
    with pytest.raises(ValueError, match="checks must be one of"):
        na.fit(doubled, "naive", key=0, checks="loud")
    with pytest.raises(ValueError, match="fit's diagnostics= is now checks="):
        na.fit(doubled, "naive", key=0, diagnostics="off")


def test_a_good_trace_fits_without_a_check_warning_and_batches_gather_findings(doubled):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = na.fit(ou_trace(seed=1), "naive", key=0)
    assert not [w for w in caught if "trace check" in str(w.message)]
    assert post.checks.ok
    with pytest.warns(UserWarning, match=r"trace check: gradient noise below the DP noise in 2 of 3 traces"):
        posts = na.fit_batch([doubled, ou_trace(seed=1), doubled], "naive", key=0)
    assert [p.checks.ok for p in posts] == [False, True, False]
    with pytest.raises(TraceCheckError, match="trace 0: "):
        na.fit_batch([doubled, ou_trace(seed=1)], "naive", key=0, checks="raise")


def test_the_report_travels_with_the_posterior(doubled, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = na.fit(doubled, "exact", key=0, draws=200)
    summary = post.summary(key=1, draws=500)
    assert list(summary["checks"]) == ["noise", "noise"]
    tree = post.to_arviz(key=1)
    assert json.loads(tree.attrs["theta_verdicts"]) == ["noise", "noise"]
    post.save(tmp_path / "p.nc", key=1)
    loaded = na.load_posterior(tmp_path / "p.nc")
    assert loaded.checks.findings == post.checks.findings
    np.testing.assert_array_equal(loaded.checks.flags["noise"], post.checks.flags["noise"])
    assert loaded.checks.to_dict() == post.checks.to_dict()


def test_element_verdicts_of_a_simplex_site_take_all_its_coordinates():
    from noiseaware.trace.sites import SiteSpec

    report = na.diagnose(ou_trace(seed=1))
    flags = dict(report.flags) | {"drift": np.array([True, False, False, False])}
    flagged = dataclasses.replace(report, flags=flags)
    sites = (SiteSpec("p", (3,), "alr"),)
    assert flagged.theta_verdicts() == ("drift", "ok")
    assert flagged.element_verdicts(sites) == ("drift",) * 3


def test_the_report_shows_verdict_findings_and_each_flagged_coordinate(doubled):
    report = na.diagnose(doubled)
    lines = str(report).splitlines()
    assert lines[0] == (
        "trace checks: 1 of 10 fired on 4 of 4 parameters (gradient noise below the DP noise); not checked: clipping "
        "at the optimum"
    )
    assert lines[1].startswith("  gradient noise below the DP noise (mu:theta[0], mu:theta[1], rho:theta[0]")
    assert lines[2:] == ["  per θ coordinate (the others ok):", "    theta[0]: noise", "    theta[1]: noise"]
    drift_on_mu0 = dataclasses.replace(report, flags=dict(report.flags) | {"drift": np.array([1, 0, 0, 0], bool)})
    assert str(drift_on_mu0).splitlines()[-2:] == ["    theta[0]: noise, drift", "    theta[1]: noise"]
    calm = dataclasses.replace(report, findings=(), flags={name: np.zeros(4, bool) for name in CHECKS})
    assert str(calm) == "trace checks: all 10 passed (α = 0.05); not checked: clipping at the optimum"


def test_the_summary_leaves_the_checks_to_the_report_and_record_prints_both(doubled):
    """`trace.describe()` is the settings and numbers; `noiseaware record` and `demo` print the report below it."""
    assert "checks" not in doubled.describe()
    assert trace_report(doubled, diagnose_if_long_enough(doubled)) == f"{doubled.describe()}\n\n{na.diagnose(doubled)}"
    short = ou_trace(steps=60)  # 48 steps after the burn-in: too few for the checks
    assert trace_report(short, diagnose_if_long_enough(short)) == short.describe()


def test_cli_fit_prints_the_verdict_and_raises_on_request(doubled, tmp_path, capsys):
    doubled.save(tmp_path / "t.npz")
    assert main(["fit", str(tmp_path / "t.npz"), "--method", "laplace"]) == 0
    out = capsys.readouterr().out
    assert "trace checks: 1 of 10 fired on 4 of 4 parameters (gradient noise below the DP noise)" in out
    assert main(["fit", str(tmp_path / "t.npz"), "--checks", "raise"]) == 2
    err = capsys.readouterr().err  # the report within the one error line, and the CLI's flags to go on
    assert err.startswith("error: trace checks: 1 of 10 fired") and err.count("error:") == 1
    mentions(err, "--checks", "warn", "off")
    assert main(["fit", str(tmp_path / "t.npz"), "--method", "laplace", "--checks", "off"]) == 0
    assert "trace checks" not in capsys.readouterr().out


def test_the_trace_plot_marks_the_findings(tmp_path):
    figure = plots.plot_trace(simulated(moving), tmp_path / "t.png")
    texts = [t.get_text() for axis in figure.axes for t in axis.texts]
    assert any(text.startswith("checks fired — μ: windows") for text in texts)
    assert "trace checks: " in figure.get_suptitle() and "windows disagree on φ*" in figure.get_suptitle()


def test_sgd_rates_hold_for_traces_of_other_optimizers():
    """Without known step sizes the drift test reads κ off φ's own autocorrelation: still calibrated enough."""
    reports = [na.diagnose(dataclasses.replace(t, optimizer="adam", learning_rate=None)) for t in ou_traces(60, seed=3)]
    assert np.mean([not r.ok for r in reports]) <= 0.1
    assert all(not np.any(r.flags["transient"]) for r in reports)


def test_the_optimum_and_relaxation_match_the_model():
    trace = ou_traces(1, steps=20_000, seed=9)[0]
    s = na.diagnose(trace).statistics
    np.testing.assert_allclose(s["optimum"], OPTIMUM, atol=0.05)
    kappa = 1e-3 * SCALE * Q * np.asarray(HESSIAN)
    np.testing.assert_allclose(s["relaxation"], kappa, rtol=0.25)


def test_a_study_table_cell_counts_the_flagged_traces():
    from noiseaware.evaluation.experiment import checks_cell

    counts = {"traces": 20, "any": 3, "noise": 0, "drift": 2, "curvature": 1}
    assert checks_cell({"trace_checks": counts}) == "3/20 (drift 2, curvature 1)"
    assert checks_cell({"trace_checks": {"traces": 5, "any": 0}}) == "0/5"
    assert checks_cell({"warnings": []}) == ""


def test_raise_mode_fits_a_trace_too_short_to_check_with_a_warning():
    with pytest.warns(UserWarning, match="trace checks skipped: fewer than 50 steps"):
        post = na.fit(ou_trace(steps=60), "naive", key=0, checks="raise")
    assert post.checks is None
