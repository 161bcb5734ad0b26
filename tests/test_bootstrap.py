"""The parametric bootstrap: the replayed settings reproduce a run, and its intervals cover θ on a conjugate
normal model at about the nominal rate."""

import warnings

import jax
import numpy as np
import pytest
from messages import mentions
from toy_models import normal_mean

import noiseaware as na
from noiseaware.baselines.bootstrap import replay_settings

pytestmark = pytest.mark.full_optimisation  # long DP-SGD runs: unoptimised XLA runs them slower

N = 1000


@pytest.fixture(scope="module")
def model():
    return na.models.from_numpyro(
        normal_mean, n_examples=N, steps=1000, sampling_rate=0.1, mc_draws=4, clip=20.0, grad_scale=(1.0, 10.0)
    )


def test_replayed_settings_reproduce_the_run(model):
    """record_dpvi with `replay_settings(trace)` on the same data and key gives the same trace: every setting the
    bootstrap re-runs with is the released run's own."""
    _, data = model.simulate(0)
    trace = na.record_dpvi(model.model, data, epsilon=1.0, key=3, **model.dpvi_settings)
    again = na.record_dpvi(model.model, data, key=3, **replay_settings(trace))
    np.testing.assert_allclose(again.params, trace.params, rtol=1e-5, atol=1e-6)
    assert again.noise_multiplier == trace.noise_multiplier


@pytest.mark.slow
def test_bootstrap_intervals_cover_the_truth_at_about_the_nominal_rate(model):
    """60 simulations of the normal-mean model at ε = 1, B = 40 replicates each: the basic bootstrap's 90 % intervals
    of μ cover the true μ within 3.5 binomial se of 0.9; without a model the method says what it needs."""
    theta, data = jax.vmap(model.simulate)(jax.random.split(jax.random.key(7), 60))
    traces = na.record_dpvi_batch(
        model.model, data, keys=jax.random.split(jax.random.key(8), 60), epsilon=1.0, **model.dpvi_settings
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        posts = na.fit_batch(traces, "bootstrap", key=0, checks="off", model=model, replicates=40)
    low, high = np.stack([p.interval(0.9)[0] for p in posts]), np.stack([p.interval(0.9)[1] for p in posts])
    covered = np.mean((np.asarray(theta) > low) & (np.asarray(theta) < high))
    assert abs(covered - 0.9) < 3.5 * np.sqrt(0.09 / 60), covered
    assert posts[0].draws.shape == (40, 1) and posts[0].diagnostics["replicates"] == 40
    with pytest.raises(ValueError) as info:
        na.fit(traces[0], "bootstrap", key=0, checks="off")
    mentions(info, "model=")
    with pytest.raises(ValueError, match="replicates"):
        na.fit(traces[0], "bootstrap", key=0, checks="off", model=model, replicates=5)
