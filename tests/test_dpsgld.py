"""DP-SGLD: its privacy in closed form, the noise of each step, its stationary law on a Gaussian target, the method."""

import math

import jax
import numpy as np
import pytest
from scipy import stats
from toy_models import normal_mean

import noiseaware as na
from noiseaware.baselines.dpsgld import (
    SGLDPlan,
    SGLDSettings,
    choose_settings,
    effective_noise_multiplier,
    langevin_variance,
    model_spec,
    sgld_chains,
)
from noiseaware.privacy import epsilon_spent, noise_multiplier

N = 100


def _toy(n=N, **settings):
    return na.models.from_numpyro(normal_mean, n_examples=n, name="normal-mean", **settings)


def _gaussian_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of a μ-GDP mechanism (Dong, Roth & Su 2019): Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)."""
    return stats.norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2)


@pytest.mark.parametrize("multiplier", [0.25, 1.0, 16.0])
def test_the_step_noise_is_private_against_the_accountant_and_in_closed_form(multiplier):
    """Full batch (q = 1): T steps of DP-SGLD are T Gaussian mechanisms of noise multiplier σ_eff = 2q√v/(ηC),
    i.e. one √T/σ_eff-GDP mechanism, whose δ at the target ε is at most δ. With the accountant's σ, σ_eff ≥ σ
    for every step size; Langevin noise alone suffices exactly up to η_DP = (2q/σC)², beyond it noise is added."""
    epsilon, delta, steps, clip, rate = 1.0, 1e-5, 50, 2.0, 1.0
    sigma = noise_multiplier(epsilon, delta, rate, steps)
    eta = (2 * rate / (sigma * clip)) ** 2 * multiplier
    variance = langevin_variance(eta, clip, rate, sigma)
    effective = effective_noise_multiplier(eta, clip, rate, variance)
    assert effective >= sigma * (1 - 1e-12)
    assert (variance == eta) == (multiplier <= 1.0)
    if multiplier >= 1.0:
        assert effective == pytest.approx(sigma, rel=1e-12)
    assert _gaussian_delta(math.sqrt(steps) / effective, epsilon) <= delta * (1 + 1e-3)
    assert epsilon_spent(effective, delta, rate, steps) <= epsilon * (1 + 1e-9)
    # and the bound is tight at η_DP: a 10 % smaller noise multiplier is no longer (ε, δ)-DP
    if multiplier == 1.0:
        assert _gaussian_delta(math.sqrt(steps) / (0.9 * effective), epsilon) > delta


def _normal_data(key, m, n=N):
    truth = jax.random.normal(key, (m,))
    x = truth[:, None] + jax.random.normal(jax.random.fold_in(key, 1), (m, n))
    return np.asarray(truth), {"x": np.asarray(x)}


def test_each_step_adds_exactly_the_planned_noise():
    """The residual θ_{t+1} − θ_t − (η/2)(−θ_t + Σ(x_i − θ_t)) of a full-batch, unclipped chain on N(μ, 1) data is
    N(0, v): its variance matches the plan's v (2 000 steps, to 4 se), with extra privacy noise (v > η)."""
    bm = _toy()
    _, data = _normal_data(jax.random.key(0), 1)
    eta, clip, sigma = 1e-3, 1e6, 5.0
    variance = 4 * eta  # as if privacy needed four times Langevin's noise
    plan = SGLDPlan(2000, 1.0, eta, clip, variance, 0.0, sigma)
    draws = sgld_chains(model_spec(bm, data), data, jax.random.key(1)[None], init=np.zeros(1), plan=plan)[0, :, 0]
    theta = np.concatenate([[0.0], draws[:-1]]).astype(np.float64)
    x = np.asarray(data["x"][0], np.float64)
    drift = -theta + (x.sum() - N * theta)
    residual = draws - theta - 0.5 * eta * drift
    se = variance * math.sqrt(2 / len(residual))
    assert abs(residual.var() - variance) < 4 * se
    assert abs(residual.mean()) < 4 * math.sqrt(variance / len(residual))


def test_stationary_law_on_a_gaussian_target_is_the_discretised_langevin_law():
    """Without clipping or privacy noise (v = η, q = 1), SGLD on μ ~ N(0, 1), x_i ~ N(μ, 1) is the AR(1) chain
    θ' = θ + (η/2)Λ(m − θ) + N(0, η), Λ = N + 1, m = Σx/Λ, whose stationary law is N(m, 1/(Λ(1 − ηΛ/4))): the
    post-burn-in draws of 20 chains match its mean (4 se) and variance (5 %, ≈ 3.5 se)."""
    bm = _toy()
    _, data = _normal_data(jax.random.key(2), 1)
    data = {"x": np.repeat(data["x"], 20, axis=0)}
    precision = N + 1.0
    eta = 0.2 / precision
    plan = SGLDPlan(8000, 1.0, eta, 1e6, eta, 0.25, 0.0)
    keys = jax.random.split(jax.random.key(3), 20)
    draws = sgld_chains(model_spec(bm, data), data, keys, init=np.zeros(1), plan=plan)
    kept = draws[:, 2000:, 0].astype(np.float64)
    mean = data["x"][0].sum() / precision
    variance = 1.0 / (precision * (1 - eta * precision / 4))
    # AR(1) with coefficient a = 1 − ηΛ/2: effective draws per chain ≈ S (1 − a)/(1 + a)
    a = 1 - eta * precision / 2
    effective = kept.size * (1 - a) / (1 + a)
    assert abs(kept.mean() - mean) < 4 * math.sqrt(variance / effective)
    assert kept.var() == pytest.approx(variance, rel=0.05)
    assert kept.var() / (1 / precision) > 1.02  # the discretisation's inflation is there, as predicted


def test_the_method_chooses_its_settings_on_prior_simulations_once_and_covers():
    """dp-sgld in na.coverage: the choice is made on prior simulations (cached: a second call is the same plan),
    never spends more than the run's ε, and its intervals on the normal-mean model are calibrated (TARP RMSE ≤ 0.1
    over 40 simulations)."""
    bm = _toy(200, steps=400, sampling_rate=0.2, clip=2.0)
    settings = SGLDSettings(tuning_simulations=8)
    plan = choose_settings(bm, 1.0, 1e-4, settings)
    assert choose_settings(bm, 1.0, 1e-4, settings) is plan
    assert plan.chosen == ("step_size", "clip", "burn_in")
    assert plan.noise_multiplier >= plan.sigma * (1 - 1e-12)
    result = na.coverage(
        bm,
        epsilon=1.0,
        delta=1e-4,
        methods=["dp-sgld"],
        method_options={"dp-sgld": {"tuning_simulations": 8}},
        simulations=40,
        references=5,
        samples=1000,
        key=0,
    )
    summary = result.headline()["dp-sgld"]
    assert summary["failures"] == 0
    assert summary["rmse"]["research"]["mean"] < 0.1


def test_options_are_checked_before_any_work():
    with pytest.raises(ValueError, match="burn_in"):
        na.methods.DEFAULT_REGISTRY["dp-sgld"].make_options(burn_in=1.5)
    assert na.methods.DEFAULT_REGISTRY["dp-sgld"].transforms is None
