"""Traces whose iterates ran away (issue 40): the runaway rule of the trace checks, no fit of such a trace, no
posterior handed out that is not finite on the model's scale, and `noiseaware fit`'s exit status."""

import warnings

import numpy as np
import pytest
from cli_helpers import run, saved, sgd_trace, single_error
from ou import ou_traces

import noiseaware as na
from noiseaware.checks import CHECKS
from noiseaware.checks.diagnosis import RUNAWAY
from noiseaware.checks.statistics import checks_of_moments
from noiseaware.trace.sites import SiteSpec
from noiseaware.util.errors import DIVERGED, NON_FINITE

SETTINGS = dict(noise_multiplier=5.0, clip=2.0, sampling_rate=0.1, n_examples=5000)


def runaway_trace(steps=2000, learning_rate=1e9, seed=0) -> na.Trace:
    """SGD whose learning rate is so large that the first step throws φ far away, where every per-example gradient
    is clipped and G is its DP noise around a bounded push: a random walk of steps λ·σC (as M1 at λ = 10⁹)."""
    rng = np.random.default_rng(seed)
    params, grads = np.empty((steps, 2)), np.empty((steps, 2))
    phi = np.array([1.3, -4.0])
    for t in range(steps):
        params[t] = phi
        grads[t] = 0.1 * np.sign(phi) + 10.0 * rng.standard_normal(2)
        phi = phi - learning_rate * grads[t]
    sites = [SiteSpec("rate", (), "exp")]
    return na.Trace.from_arrays(params, grads, learning_rate=np.full(2, learning_rate), sites=sites, **SETTINGS)


def test_the_growth_is_the_largest_distance_from_the_start_in_units_of_the_start():
    trace = runaway_trace(steps=300)
    params = np.asarray(trace.params, np.float64)
    expected = [max(abs(row[j] - params[0, j]) for row in params) / (1 + abs(params[0, j])) for j in range(2)]
    statistics = checks_of_moments(trace.moments(0.2), trace.rows(), noise_sd=trace.noise_sd, learning_rate=None)
    np.testing.assert_allclose(statistics.growth, expected, rtol=1e-12)


def test_a_runaway_trace_fires_the_rule_and_says_what_to_do():
    report = na.diagnose(runaway_trace())
    assert report.fired == ("runaway",)
    assert report.verdict == (
        f"trace checks: 1 of {len(CHECKS) - 1} fired on 2 of 2 parameters (iterates ran away); not checked: clipping "
        "at the optimum"
    )
    (finding,) = report.findings
    assert finding.parameters == ("mu:rate", "rho:rate")
    assert "from the start" in finding.statistic
    assert "learning rate well below this trace's λ = 1e+09" in finding.advice
    assert report.theta_verdicts() == ("runaway",)


def test_the_rule_stays_quiet_on_traces_of_the_gradient_model_and_on_a_slow_start():
    """Traces drawn from the gradient model (their φ moves from 0 to φ* = (0.5, −1, −3, −2) and about it), and a
    trace started 60 units from its optimum: the rule needs a distance over 100·(1 + |φ_0|)."""
    assert not any(na.diagnose(t).flags["runaway"].any() for t in ou_traces(40))
    far = sgd_trace(contraction=(0.2, 0.2))
    shifted = na.Trace.from_arrays(
        np.asarray(far.params) + 60.0, far.grads, learning_rate=far.learning_rate, **SETTINGS
    )
    statistics = na.diagnose(shifted).statistics["growth"]
    assert np.all(statistics < RUNAWAY) and not na.diagnose(shifted).flags["runaway"].any()


@pytest.mark.slow
def test_fit_refuses_a_runaway_trace_with_a_typed_failure_and_fits_the_others():
    healthy, bad = sgd_trace(), runaway_trace()
    healthy = na.Trace.from_arrays(
        healthy.params,
        healthy.grads,
        learning_rate=healthy.learning_rate,
        sites=[SiteSpec("rate", (), "exp")],
        **SETTINGS,
    )
    with pytest.raises(na.FitFailure) as caught:
        na.fit(bad, "exact", key=0)
    assert caught.value.reason == DIVERGED
    assert caught.value.message.startswith("not fitted: the trace's iterates ran away (mu:rate, rho:rate")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        both = na.fit_batch([healthy, bad], "exact", key=3, on_error="skip")
    assert both[1] is None
    assert not [w for w in seen if issubclass(w.category, RuntimeWarning)]
    first = na.fit_batch([healthy, healthy], "exact", key=3)[0]  # the same key as the healthy trace's above
    # the healthy trace is fitted alone (a batch of one) there and beside its twin here: two compiled programs,
    # whose vectorised arithmetic may round differently (1e-15 after another module compiled at another XLA
    # optimisation level), with the same key and so the same draws
    np.testing.assert_allclose(both[0].optimum_chains, first.optimum_chains, rtol=1e-12, atol=1e-12)


def test_a_posterior_that_overflows_on_the_models_scale_is_a_failure_not_nan_intervals():
    """With the checks off the runaway trace is fitted; exp of its μ* ≈ 10¹¹ is inf, so the fit fails (NON_FINITE)
    rather than returning a posterior whose intervals are NaN."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(na.FitFailure) as caught:
            na.fit(runaway_trace(), "exact", key=0, checks="off")
    assert caught.value.reason == NON_FINITE
    assert "record again with a smaller learning rate" in caught.value.message


def test_cli_fit_of_a_runaway_trace_is_one_error_and_a_nonzero_status(tmp_path, capsys):
    path = saved(runaway_trace(), tmp_path / "t.npz")
    status, out, err = run(capsys, "fit", path)
    assert status == 2
    assert "1 of 10 fired" in out and "nan" not in out
    assert "RuntimeWarning" not in err and "warning" not in err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        next(line for line in err.splitlines() if line.startswith("error: not fitted: the trace's iterates ran away"))
    ]
    line = single_error(capsys, "fit", path, "--checks", "off")
    assert line.startswith("error: the noise-aware posterior is not finite on the model's scale")


def test_a_posterior_whose_values_round_to_the_edge_of_the_support_is_a_failure():
    """A stationary trace about μ* ≈ −1000 of a log-scale site: no check fires (it started there), but exp(−1000)
    rounds to 0, a rate of 0 ± 0, outside the site's support; the fit fails (NON_FINITE) rather than report it."""
    base = sgd_trace()
    far = np.asarray(base.params) - np.array([1000.0, 0.0])  # μ moved, ρ (q's scale) kept
    shifted = na.Trace.from_arrays(
        far,
        base.grads,
        learning_rate=base.learning_rate,
        sites=[SiteSpec("rate", (), "exp")],
        **SETTINGS,
    )
    assert not na.diagnose(shifted).flags["runaway"].any()
    with pytest.raises(na.FitFailure) as caught:
        na.fit(shifted, "exact", key=0, checks="off")
    assert caught.value.reason == NON_FINITE
    assert "round to the edge of their support" in caught.value.message
    identity = na.Trace.from_arrays(far, base.grads, learning_rate=base.learning_rate, **SETTINGS)
    assert np.all(np.isfinite(na.fit(identity, "exact", key=0, checks="off").optimum_chains))


@pytest.mark.parametrize("progress", [True, False])
def test_a_recording_whose_iterates_overflow_stops_with_an_error_and_releases_nothing(progress):
    """M1 at λ = 10³⁷: the first steps overflow float32; with a progress bar the run stops at the chunk where it
    happened, without it at the end; either way one TraceError and no trace."""
    bm = na.models.get("M1")
    _, data = bm.simulate(0)
    settings = dict(bm.dpvi_settings, steps=200, learning_rate=1e37)
    settings.pop("lr_multiplier")
    with pytest.raises(na.TraceError, match=r"^DPVI diverged: its iterates or gradients are not finite by step"):
        na.record_dpvi(bm.model, data, key=1, noise_multiplier=5.0, progress=progress, **settings)
