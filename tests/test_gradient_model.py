"""The gradient model's sufficient statistics against direct sums over the trace, and on OU traces."""

import dataclasses

import numpy as np
import pytest
from ou import CLIP, HESSIAN, SCALE, SIGMA, N, Q, ou_trace  # noqa: F401  (ou_trace is re-exported for other tests)
from scipy import stats as scipy_stats

from noiseaware.inference.draws import Draws, draw_log_densities
from noiseaware.inference.gradient_model import gradient_model, log_likelihood, slope_estimates
from noiseaware.inference.statistics import model_moments
from noiseaware.trace import Trace
from noiseaware.util.diagnostics import NoDiagnostics
from noiseaware.util.errors import FROZEN, FitFailure


def test_log_likelihood_from_sums_equals_the_direct_sum():
    trace = ou_trace(steps=500)
    model = gradient_model(trace, burn_in=0.2)
    rng = np.random.default_rng(1)
    for _ in range(3):
        optimum = rng.normal(size=4)
        hessian = rng.uniform(1.0, 50.0, size=4)
        extra = rng.uniform(0.0, 2.0, size=4)
        params, grads = trace.params[100:], trace.grads[100:]
        direct = scipy_stats.norm.logpdf(
            grads, Q * hessian * (params - optimum), np.sqrt(trace.noise_sd**2 + extra)
        ).sum(axis=0)
        np.testing.assert_allclose(np.asarray(log_likelihood(model, optimum, hessian, extra)), direct, rtol=2e-5)


def test_each_draws_log_prior_and_likelihood_are_the_priors_and_the_direct_sum():
    """`draw_log_densities` (what a posterior keeps for its prior sensitivity): per row, the priors' log densities of
    (φ*, ã, u) and the trace's log-likelihood summed over the kept steps directly; a row the model reads in ψ is
    evaluated at ψ* = softplus(ρ*)² with the slope per unit ψ, a_ψ = a_ρ / (2 sigmoid(ρ*)²)."""
    trace = ou_trace(steps=500)
    model = gradient_model(trace, burn_in=0.2)
    rng = np.random.default_rng(2)
    optimum, hessian, extra = (
        rng.normal(size=(1, 3, 4)),
        rng.uniform(1.0, 50.0, (1, 3, 4)),
        rng.uniform(0, 2, (1, 3, 4)),
    )
    log_prior, log_like = draw_log_densities(model, Draws(optimum, hessian, extra, NoDiagnostics()))
    params, grads = trace.params[100:], trace.grads[100:]
    for k in range(3):
        direct = scipy_stats.norm.logpdf(
            grads, Q * hessian[0, k] * (params - optimum[0, k]), np.sqrt(trace.noise_sd**2 + extra[0, k] ** 2)
        ).sum(axis=0)
        np.testing.assert_allclose(log_like[0, k], direct, rtol=2e-5)
        assert model.hessian_link == "exp"  # the default prior's: ã = log a
        raw = np.log(hessian[0, k])
        expected = (
            scipy_stats.norm.logpdf(optimum[0, k], model.optimum_loc, model.optimum_sd)
            + scipy_stats.norm.logpdf(raw, model.hessian_loc, model.hessian_sd)
            + scipy_stats.halfnorm.logpdf(extra[0, k], scale=model.extra_sd)
        )
        np.testing.assert_allclose(log_prior[0, k], expected, rtol=1e-9)
    psi = dataclasses.replace(model, scale_rows=np.array([False, False, True, True]))
    rho = optimum.copy()
    log_prior_psi, _ = draw_log_densities(psi, Draws(rho, hessian, extra, NoDiagnostics()))
    sd = np.logaddexp(0.0, rho[0, 0, 2:])
    slope = hessian[0, 0, 2:] / (2.0 / (1.0 + np.exp(-rho[0, 0, 2:])) ** 2)
    expected = scipy_stats.norm.logpdf(sd**2, model.optimum_loc[2:], model.optimum_sd[2:]) + scipy_stats.norm.logpdf(
        np.log(slope), model.hessian_loc[2:], model.hessian_sd[2:]
    )
    expected += scipy_stats.halfnorm.logpdf(extra[0, 0, 2:], scale=model.extra_sd[2:])
    np.testing.assert_allclose(log_prior_psi[0, 0, 2:], expected, rtol=1e-9)


def test_statistics_use_only_the_post_burn_in_steps_centred_at_their_mean():
    trace = ou_trace(steps=100)
    model = gradient_model(trace, burn_in=0.25)
    stats = model.stats
    assert stats.count == 75 and stats.start == 25
    np.testing.assert_allclose(stats.centre, trace.params[25:].mean(axis=0))
    np.testing.assert_allclose(stats.sum_phi, 0.0, atol=1e-9)
    np.testing.assert_allclose(model.noise_var, (SIGMA * CLIP / SCALE) ** 2)


def test_slope_is_ols_through_the_centre_and_recovers_the_hessian():
    trace = ou_trace(steps=20000)
    model = gradient_model(trace)
    slope, se = slope_estimates(model.stats, model.noise_var, model.sampling_rate, model.scale_rows)
    phi = trace.params[4000:] - trace.params[4000:].mean(axis=0)
    for j in range(4):
        ols = np.linalg.lstsq(phi[:, j : j + 1], trace.grads[4000:, j], rcond=None)[0][0]
        assert slope[j] == pytest.approx(abs(ols) / Q, rel=1e-9)
    # the OU trace was drawn with A = HESSIAN = (40, 400, 20, 5): â is within 5 standard errors of it
    assert np.all(np.abs(slope - np.asarray(HESSIAN)) < 5 * se)


def test_bad_inputs_raise():
    trace = ou_trace(steps=10)
    with pytest.raises(ValueError, match="burn_in must be a fraction"):
        model_moments(trace, burn_in=1.0)
    with pytest.raises(ValueError, match="leaving 1 after a burn-in"):
        model_moments(
            Trace.from_arrays(
                trace.params[:5], trace.grads[:5], noise_multiplier=SIGMA, clip=CLIP, sampling_rate=Q, n_examples=N
            ),
            burn_in=0.8,
        )
    frozen = trace.params.copy()
    frozen[:, 1] = 0.3
    still = Trace.from_arrays(frozen, trace.grads, noise_multiplier=SIGMA, clip=CLIP, sampling_rate=Q, n_examples=N)
    with pytest.raises(FitFailure, match=r"parameters \[1\] never move") as failed:
        gradient_model(still)
    assert failed.value.reason == FROZEN
