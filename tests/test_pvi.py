"""DP-PVI over clients: the PVI arithmetic in closed form, one client equals DPVI, noise-aware DP-PVI calibrated."""

import jax
import numpy as np
import pytest
from toy_models import normal_mean

import noiseaware as na
from noiseaware.baselines.pvi import combine, prior_gaussian, split_clients
from noiseaware.methods.base import Batch, fit_problems
from noiseaware.methods.federated import DP_PVI, NA_DP_PVI, client_traces
from noiseaware.methods.registry import DEFAULT_REGISTRY
from noiseaware.recording.dpvi import record_dpvi_batch

pytestmark = pytest.mark.full_optimisation  # long DP-SGD runs: unoptimised XLA runs them slower

SETTINGS = {
    "steps": 600,
    "sampling_rate": 0.2,
    "clip": 2.0,
    "grad_scale": (1.0, 20.0),
    "lr_multiplier": 1.0,
    "init": (0.0, -2.0),
}


def _toy(n=200):
    return na.models.from_numpyro(normal_mean, n_examples=n, name="normal-mean", **SETTINGS)


def test_exact_local_posteriors_combine_to_the_exact_global_posterior():
    """μ ~ N(0, 1), x_i ~ N(μ, 1): client m's posterior is N(Σx_m/(1 + N_m), 1/(1 + N_m)); p Π (q_m / p) is the whole
    data's N(Σx/(1 + N), 1/(1 + N)) for any split."""
    x = np.random.default_rng(0).normal(0.3, 1.0, 120)
    shards = split_clients({"x": x[None]}, 4)["x"]
    means = shards.sum(axis=1) / (1 + shards.shape[1])
    variances = 1.0 / (1 + np.full(4, shards.shape[1]))
    mean, variance, ok = combine(np.zeros(1), np.ones(1), means[:, None], variances[:, None])
    assert ok
    assert mean == pytest.approx([x.sum() / 121], rel=1e-12)
    assert variance == pytest.approx([1 / 121], rel=1e-12)


def test_a_combination_without_positive_precision_is_flagged_and_bad_splits_are_refused():
    """Clients wider than the prior (precision below Λ₀ each) can sum to Λ ≤ 0: no distribution, ok is False."""
    mean, variance, ok = combine(np.zeros(2), np.ones(2), np.zeros((3, 2)), np.array([[2.0, 0.5]] * 3))
    assert not ok and np.all(np.isnan(mean)) and np.all(np.isnan(variance))
    with pytest.raises(ValueError, match="do not split into 3 equal shards"):
        split_clients({"x": np.zeros((2, 100))}, 3)


def test_prior_gaussian_matches_a_gaussian_prior():
    mean, variance = prior_gaussian(_toy())
    assert mean == pytest.approx([0.0], abs=0.01)
    assert variance == pytest.approx([1.0], rel=0.02)


def test_one_client_is_dpvi_on_the_whole_data():
    """With M = 1 the client's trace is record_dpvi_batch's on the same data and key, dp-pvi's posterior is the
    naive last iterate and na-dp-pvi's components are the exact route's draws of φ* (to rounding)."""
    bm = _toy()
    _, data = jax.vmap(bm.simulate)(jax.random.split(jax.random.key(0), 2))
    keys = jax.random.split(jax.random.key(1), 2)
    traces = client_traces(bm, data, keys, clients=1, epsilon=1.0, delta=1e-4)
    direct = record_dpvi_batch(bm.model, data, keys=keys, settings=bm.dpvi_settings, epsilon=1.0, delta=1e-4)
    for trace, reference in zip(traces, direct):
        np.testing.assert_array_equal(trace.params, reference.params)
        np.testing.assert_array_equal(trace.grads, reference.grads)
    batch = Batch((), model=bm, data=data, epsilon=1.0, delta=1e-4, size=2)
    fit_keys = jax.random.split(jax.random.key(2), 2)
    plain = fit_problems(DP_PVI, batch, fit_keys, DP_PVI.make_options(clients=1))
    aware = fit_problems(NA_DP_PVI, batch, fit_keys, NA_DP_PVI.make_options(clients=1))
    exact = DEFAULT_REGISTRY["exact"]
    run_keys = jax.random.wrap_key_data(np.stack([jax.random.key_data(jax.random.split(k)[0]) for k in fit_keys]))
    runs = record_dpvi_batch(bm.model, data, keys=run_keys, settings=bm.dpvi_settings, epsilon=1.0, delta=1e-4)
    for p, trace in enumerate(runs):
        np.testing.assert_allclose(plain[p].optimum_draws[0], trace.final_iterate(), rtol=1e-6, atol=1e-6)
        fit_key = jax.random.split(fit_keys[p])[1][None]
        reference = fit_problems(exact, Batch((trace,)), fit_key, exact.make_options())[0]
        family = trace.family
        got, want = aware[p].optimum_draws, reference.optimum_draws
        np.testing.assert_allclose(family.mean(got), family.mean(want), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(family.marginal_sd(got) ** 2, family.marginal_sd(want) ** 2, rtol=1e-5)


def test_noise_aware_dp_pvi_is_calibrated_and_plain_dp_pvi_is_not():
    """Four clients of 200 examples, ε = 1, 60 simulations: na-dp-pvi's TARP RMSE ≤ 0.1 (calibrated within Monte Carlo
    error; measured 0.066), and plain DP-PVI, which ignores the noise of four DP runs, is worse (0.097)."""
    result = na.coverage(
        _toy(800),
        epsilon=1.0,
        delta=1e-4,
        methods=["dp-pvi", "na-dp-pvi"],
        method_options={"dp-pvi": {"clients": 4}, "na-dp-pvi": {"clients": 4}},
        simulations=60,
        references=5,
        samples=2000,
        key=0,
    )
    summary = result.headline()
    aware, plain = summary["na-dp-pvi"]["rmse"]["research"]["mean"], summary["dp-pvi"]["rmse"]["research"]["mean"]
    assert summary["na-dp-pvi"]["failures"] == 0
    assert aware < 0.1
    assert plain > aware
