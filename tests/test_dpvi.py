"""DPVI trace recorder (method.md §1): one step against a slow reference, ELBO gradients against closed
forms and hand-written densities, the noise and subsampling distributions, vmapped runs, settings,
convergence, every bad input, the privacy invariant and float64."""

import dataclasses
import math
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from scipy import special, stats

import noiseaware
import noiseaware.recording.settings
from noiseaware.models import from_numpyro
from noiseaware.models.builtin import gamma_exponential, logistic_regression
from noiseaware.recording import DPVISettings, Optimizer
from noiseaware.recording.contract import ModelError, inspect_model
from noiseaware.recording.dpvi import (
    build_recorder,
    record_dpvi,
    record_dpvi_batch,
    resolve_settings,
    step_keys,
)
from noiseaware.recording.subsampling import _saturating_cumsum, poisson_chunk
from noiseaware.trace import Trace
from noiseaware.util.keys import as_key

TAU = 3.0  # prior sd of the normal-mean model


def normal_model(x=None, n_examples=None):
    """x_i ~ N(θ, 1), θ ~ N(0, τ²)."""
    theta = numpyro.sample("theta", dist.Normal(0.0, TAU))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(theta, 1.0), obs=x)


def normal_data(n, seed=0, loc=0.5, scale=1.5):
    return {"x": np.asarray(np.random.default_rng(seed).normal(loc, scale, size=n), np.float32)}


def softplus(v):
    return np.logaddexp(0.0, v)


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


_poisson_chunk = jax.jit(poisson_chunk, static_argnums=(3, 4))


def sampled_indices(key, q, batch_size, n):
    """The Poisson sample of one step, chunk by chunk as the recorder's while loop draws it."""
    out, last, c = [], -1, 0
    while last < n - 1:
        indices, mask = _poisson_chunk(jax.random.fold_in(key, c), jnp.int32(last), jnp.float32(q), batch_size, n)
        indices, mask = np.asarray(indices), np.asarray(mask)
        out.extend(int(i) for i in indices[mask])
        last, c = int(indices[-1]), c + 1
    return out


# ---------------------------------------------------------------- 1. one step vs a slow reference


def reference_normal_dpvi(x, *, key, steps, q, batch_size, S, C, s, sigma, lr, init, count_sigma=0.0):
    """Plain-python DPVI on the normal-mean model with the recorder's randomness (d = 1, P = 2); per step the sample's
    size and the released count of clipped examples (noise sd count_sigma, from the noise key folded with 1)."""
    n, d = len(x), 1
    x = np.asarray(x, np.float64)
    s, lr = np.asarray(s, np.float64), np.asarray(lr, np.float64)
    phi = np.asarray(init, np.float64)
    key = as_key(key)
    params, grads, counts, clipped = [], [], [], []
    for _ in range(steps):
        key, k_sample, k_mc, k_noise = step_keys(key)
        sample = sampled_indices(k_sample, q, batch_size, n)
        eps = np.asarray(jax.random.normal(k_mc, (S, d), jnp.float32), np.float64)
        xi = sigma * C * np.asarray(jax.random.normal(k_noise, (2 * d,), jnp.float32), np.float64)
        mu, rho = phi[:d], phi[d:]
        sd, dsd = softplus(rho), sigmoid(rho)
        total, clipped_here = np.zeros(2 * d), 0
        for i in sample:
            g_mu, g_rho = np.zeros(d), np.zeros(d)
            for e in eps:
                theta = mu + sd * e
                df = (theta - x[i]) + theta / (n * TAU**2)  # ∂/∂θ [−log p(x_i|θ) − log p(θ)/N]
                g_mu += df / S
                g_rho += df * e / S
            g_rho = g_rho * dsd - dsd / sd / n  # chain rule through sd = softplus(ρ), entropy term
            h = s * np.concatenate([g_mu, g_rho])
            norm = math.sqrt(float(np.sum(h**2)))
            if norm > C:
                h = h * (C / norm)
                clipped_here += 1
            total += h
        G = (total + xi) / s
        params.append(phi.copy())
        grads.append(G)
        counts.append(len(sample))
        count_noise = np.asarray(jax.random.normal(jax.random.fold_in(k_noise, 1), (), jnp.float32), np.float64)
        clipped.append(clipped_here + count_sigma * count_noise)
        phi = phi - lr * G
    return np.array(params), np.array(grads), phi, counts, clipped


def test_recorder_steps_equal_slow_reference_loop():
    n, q, batch_size, S, C, sigma = 40, 0.3, 4, 3, 1.5, 2.0
    s, lr, init = (1.0, 10.0), (0.01, 0.002), (0.3, -1.0)
    data = normal_data(n, seed=1)
    trace = record_dpvi(
        normal_model,
        data,
        key=7,
        steps=3,
        sampling_rate=q,
        clip=C,
        noise_multiplier=sigma,
        grad_scale=s,
        learning_rate=lr,
        init=init,
        mc_draws=S,
        batch_size=batch_size,
    )
    params, grads, final, counts, clipped = reference_normal_dpvi(
        data["x"], key=7, steps=3, q=q, batch_size=batch_size, S=S, C=C, s=s, sigma=sigma, lr=lr, init=init
    )
    assert max(counts) > batch_size, counts  # the multi-chunk path ran
    assert sum(clipped) > 0  # clipping mattered
    assert trace.params.shape == (3, 2) and trace.grads.shape == (3, 2)
    np.testing.assert_allclose(trace.params, params, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(trace.grads, grads, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(trace.final_params, final, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(trace.params[0], np.float32(init))
    np.testing.assert_allclose(trace.learning_rate, lr, rtol=1e-7)
    np.testing.assert_allclose(trace.grad_scale, s, rtol=1e-7)
    assert trace.clipped_counts is None and trace.count_noise_multiplier is None


def test_the_released_clipped_counts_equal_the_slow_reference_loop_and_leave_the_run_as_it_was():
    """With clip_count_share r and a given σ, the run is the one without a count, bit for bit (the count's noise has a
    stream of its own), and each step's c̃_t is the reference's number of clipped examples plus σ_b·z_t, σ_b =
    σ·√((1 − r)/r); ε is the pair's (`combined_noise_multiplier`)."""
    n, q, batch_size, S, C, sigma, share = 40, 0.3, 4, 3, 1.5, 2.0, 0.2
    settings = dict(steps=4, sampling_rate=q, clip=C, grad_scale=(1.0, 10.0), learning_rate=(0.01, 0.002))
    settings |= dict(init=(0.3, -1.0), mc_draws=S, batch_size=batch_size)
    data = normal_data(n, seed=1)
    plain = record_dpvi(normal_model, data, key=7, noise_multiplier=sigma, **settings)
    counted = record_dpvi(normal_model, data, key=7, noise_multiplier=sigma, clip_count_share=share, **settings)
    np.testing.assert_array_equal(counted.params, plain.params)
    np.testing.assert_array_equal(counted.grads, plain.grads)
    count_sigma = sigma * math.sqrt((1 - share) / share)
    assert counted.count_noise_multiplier == pytest.approx(count_sigma, rel=1e-12)
    reference = reference_normal_dpvi(
        data["x"], key=7, q=q, C=C, S=S, sigma=sigma, count_sigma=count_sigma, s=settings["grad_scale"],
        lr=settings["learning_rate"], init=settings["init"], steps=4, batch_size=batch_size,
    )  # fmt: skip
    exact = reference_normal_dpvi(
        data["x"], key=7, q=q, C=C, S=S, sigma=sigma, s=settings["grad_scale"], lr=settings["learning_rate"],
        init=settings["init"], steps=4, batch_size=batch_size,
    )[-1]  # fmt: skip
    assert 0 < sum(exact) < sum(reference[3])  # clipping bound on some examples, not on all
    np.testing.assert_allclose(counted.clipped_counts, reference[-1], rtol=1e-5, atol=1e-4)
    combined = float(noiseaware.privacy.combined_noise_multiplier(sigma, count_sigma))
    assert combined == pytest.approx(sigma * math.sqrt(1 - share), rel=1e-12)
    assert counted.epsilon == noiseaware.privacy.epsilon_spent(combined, 1e-5, q, 4) > plain.epsilon


# ---------------------------------------------------------------- 2. conjugate normal: closed-form ELBO gradient

ANTITHETIC = jnp.array([[1.0], [-1.0]], jnp.float32)


def _gradient_sum(model, data, params, eps, **kwargs):
    recorder = build_recorder(
        model, data, steps=10, sampling_rate=1.0, clip=1.0, noise_multiplier=1.0, learning_rate=0.1, **kwargs
    )
    examples, constants = recorder.spec.split_data(recorder.prepare(data))
    g = jax.jit(recorder.program.per_example_gradients)(jnp.asarray(params, jnp.float32), eps, examples, constants)
    return np.asarray(g, np.float64), recorder


def test_per_example_gradients_sum_to_closed_form_elbo_gradient():
    n, mu, rho = 25, 0.7, 0.2
    data = normal_data(n, seed=2, loc=2.0, scale=1.0)
    x = data["x"].astype(np.float64)
    g, _ = _gradient_sum(normal_model, data, [mu, rho], ANTITHETIC)
    assert g.shape == (n, 2)
    sd, dsd = softplus(rho), sigmoid(rho)
    d_mu = np.sum(mu - x) + mu / TAU**2
    d_rho = (n * sd + sd / TAU**2 - 1 / sd) * dsd
    np.testing.assert_allclose(g.sum(0), [d_mu, d_rho], rtol=1e-5)
    # per example too: (μ − x_i) + μ/(Nτ²) and (sd + sd/(Nτ²) − 1/(N sd))·sigmoid(ρ)
    np.testing.assert_allclose(g[:, 0], (mu - x) + mu / (n * TAU**2), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g[:, 1], np.full(n, (sd + sd / (n * TAU**2) - 1 / (n * sd)) * dsd), rtol=1e-5)


TAUS = np.array([3.0, 2.0])


def vector_normal_model(x=None, n_examples=None):
    theta = numpyro.sample("theta", dist.Normal(0.0, jnp.asarray(TAUS, jnp.float32)).to_event(1))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(theta, 1.0).to_event(1), obs=x)


def two_site_model(x=None, y=None, n_examples=None):
    a = numpyro.sample("a", dist.Normal(0.0, TAUS[0]))
    b = numpyro.sample("b", dist.Normal(0.0, TAUS[1]))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(a, 1.0), obs=x)
        numpyro.sample("y", dist.Normal(b, 1.0), obs=y)


EPS_2D = jnp.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]], jnp.float32)


def _closed_form_2d(x, mu, rho):
    n = x.shape[0]
    sd, dsd = softplus(rho), sigmoid(rho)
    d_mu = np.sum(mu - x, axis=0) + mu / TAUS**2
    d_rho = (n * sd + sd / TAUS**2 - 1 / sd) * dsd
    return np.concatenate([d_mu, d_rho])


def test_closed_form_gradient_with_a_vector_site_block_layout():
    n = 25
    x = np.asarray(np.random.default_rng(3).normal([1.5, -2.0], 1.0, size=(n, 2)), np.float32)
    mu, rho = np.array([0.4, -0.9]), np.array([0.3, -1.1])
    g, recorder = _gradient_sum(vector_normal_model, {"x": x}, np.concatenate([mu, rho]), EPS_2D)
    assert recorder.spec.site_map.param_names() == ("mu:theta[0]", "mu:theta[1]", "rho:theta[0]", "rho:theta[1]")
    np.testing.assert_allclose(g.sum(0), _closed_form_2d(x.astype(np.float64), mu, rho), rtol=1e-5)


def test_closed_form_gradient_with_two_sites_and_site_order():
    n = 25
    rng = np.random.default_rng(4)
    x, y = (np.asarray(rng.normal(m, 1.0, size=n), np.float32) for m in (1.5, -2.0))
    mu, rho = np.array([0.4, -0.9]), np.array([0.3, -1.1])
    data = {"x": x, "y": y}
    xy = np.stack([x, y], axis=1).astype(np.float64)
    g, recorder = _gradient_sum(two_site_model, data, np.concatenate([mu, rho]), EPS_2D)
    assert recorder.spec.site_map.names == ("a", "b")
    np.testing.assert_allclose(g.sum(0), _closed_form_2d(xy, mu, rho), rtol=1e-5)
    # reversed site order: φ = (μ_b, μ_a, ρ_b, ρ_a)
    g_rev, recorder = _gradient_sum(
        two_site_model, data, np.concatenate([mu[::-1], rho[::-1]]), EPS_2D, sites=("b", "a")
    )
    assert recorder.spec.site_map.param_names() == ("mu:b", "mu:a", "rho:b", "rho:a")
    np.testing.assert_allclose(g_rev.sum(0)[[1, 0, 3, 2]], _closed_form_2d(xy, mu, rho), rtol=1e-5)


# ---------------------------------------------------------------- 3. constrained models vs hand-written densities


def _hand_written_per_example_grads(log_lik, log_prior, n, phi, eps, examples):
    """∇_φ of ℓ_i(φ) = mean_s[−log p(x_i|θ_s) − log p̃(θ_s)/N] − Σ_j log softplus(ρ_j)/N
    with θ_s = μ + softplus(ρ)ε_s, for each example (leading axis of `examples`); traceable."""
    d = eps.shape[1]

    def loss(phi, example):
        mu, rho = phi[:d], phi[d:]
        sd = jax.nn.softplus(rho)
        thetas = mu + sd * eps
        f = jax.vmap(lambda th: -log_lik(th, example) - log_prior(th) / n)(thetas)
        return jnp.mean(f) - jnp.sum(jnp.log(sd)) / n

    return jax.vmap(jax.grad(loss), (None, 0))(phi, examples)


def test_m1_log_prior_and_per_example_gradients_match_hand_written_density():
    n = 30
    bm = noiseaware.models.get("M1")
    _, sim = bm.simulate(5)
    data = {"x": np.asarray(sim["x"][:n])}
    recorder = build_recorder(
        bm.model,
        data,
        steps=10,
        sampling_rate=1.0,
        clip=1.0,
        noise_multiplier=1.0,
        learning_rate=0.1,
        transforms="research",
    )
    spec = recorder.spec
    assert spec.site_map.sites[0].transform == "softplus"
    examples, constants = spec.split_data(recorder.prepare(data))

    def log_lik(th, ex):
        lam = jax.nn.softplus(th[0])
        return jnp.log(lam) - lam * ex

    def log_prior(th):
        lam = jax.nn.softplus(th[0])
        return 8 * jnp.log(2.0) - special.gammaln(8.0) + 7 * jnp.log(lam) - 2 * lam + jax.nn.log_sigmoid(th[0])

    @jax.jit
    def compute(thetas, phi, eps):
        prior = jax.vmap(spec.log_prior, (0, None, None))(thetas, examples, constants)
        loglik = jax.vmap(spec.example_log_likelihood, (0, None, None))(thetas, {"x": examples["x"][3]}, constants)
        g = recorder.program.per_example_gradients(phi, eps, examples, constants)
        return prior, loglik, g, _hand_written_per_example_grads(log_lik, log_prior, n, phi, eps, examples["x"])

    thetas = np.array([-1.3, 0.2, 1.4, 2.5])
    eps = jnp.array([[0.3], [-1.2], [0.8], [1.7]], jnp.float32)
    phi = jnp.array([1.1, -0.7], jnp.float32)
    prior, loglik, g, expected_g = compute(jnp.asarray(thetas[:, None], jnp.float32), phi, eps)
    lam = softplus(thetas)
    # log p̃(θ) = log Gamma(softplus(θ); shape 8, rate 2) + log softplus'(θ)
    np.testing.assert_allclose(prior, stats.gamma.logpdf(lam, 8.0, scale=1 / 2.0) + np.log(sigmoid(thetas)), rtol=1e-5)
    np.testing.assert_allclose(loglik, np.log(lam) - lam * float(data["x"][3]), rtol=1e-5)
    assert g.shape == expected_g.shape == (n, 2)
    np.testing.assert_allclose(g, expected_g, rtol=1e-4, atol=1e-6)


def test_logistic_regression_per_example_gradients_match_hand_written_density():
    n = 30
    bm = noiseaware.models.get("logistic-3d")
    _, sim = bm.simulate(6)
    data = {"X": np.asarray(sim["X"][:n]), "y": np.asarray(sim["y"][:n])}
    recorder = build_recorder(
        bm.model, data, steps=10, sampling_rate=1.0, clip=1.0, noise_multiplier=1.0, learning_rate=0.1
    )
    spec = recorder.spec
    assert spec.per_example == ("X", "y")
    examples, constants = spec.split_data(recorder.prepare(data))

    def log_lik(th, ex):
        logit = ex["X"] @ th
        return ex["y"] * jax.nn.log_sigmoid(logit) + (1 - ex["y"]) * jax.nn.log_sigmoid(-logit)

    def log_prior(th):
        return -0.5 * jnp.sum(th**2) - 1.5 * jnp.log(2 * jnp.pi)

    @jax.jit
    def compute(theta, phi, eps):
        grad_loglik = jax.vmap(jax.grad(spec.example_log_likelihood), (None, 0, None))(theta, examples, constants)
        prior = spec.log_prior(theta, examples, constants)
        g = recorder.program.per_example_gradients(phi, eps, examples, constants)
        float_examples = {"X": examples["X"], "y": examples["y"].astype(jnp.float32)}
        return grad_loglik, prior, g, _hand_written_per_example_grads(log_lik, log_prior, n, phi, eps, float_examples)

    theta = np.array([0.5, -1.0, 2.0])
    eps = jnp.asarray(np.random.default_rng(7).normal(size=(4, 3)), jnp.float32)
    phi = jnp.array([0.5, -1.0, 2.0, -0.3, -1.5, 0.4], jnp.float32)
    grad_loglik, prior, g, expected_g = compute(jnp.asarray(theta, jnp.float32), phi, eps)
    # ∂ log p(y_i | x_i, θ)/∂θ = (y_i − sigmoid(x_i·θ)) x_i
    X, y = data["X"].astype(np.float64), data["y"].astype(np.float64)
    np.testing.assert_allclose(grad_loglik, (y - sigmoid(X @ theta))[:, None] * X, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(prior), stats.norm.logpdf(theta).sum(), rtol=1e-6)
    assert g.shape == expected_g.shape == (n, 6)
    np.testing.assert_allclose(g, expected_g, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- 4. the recorded noise has sd σC/s


def test_recorded_gradient_noise_has_sd_sigma_c_over_s():
    n, steps, sigma, C = 50, 4000, 2.0, 1.0
    s = np.array([1.0, 10.0])
    data = normal_data(n, seed=8)
    common = dict(steps=steps, sampling_rate=1.0, clip=C, grad_scale=tuple(s), init=(0.5, -30.0), mc_draws=1)
    clean = record_dpvi(normal_model, data, key=1, non_private=True, learning_rate=1e-12, **common)
    # sd = softplus(−30) ≈ 1e-13: the clean gradient is the same at every step
    np.testing.assert_array_equal(clean.grads, np.broadcast_to(clean.grads[0], clean.grads.shape))
    g_clean = clean.grads[0].astype(np.float64)
    assert abs(g_clean[0]) > 1.0 and abs(g_clean[1]) > 0.1  # not trivially zero
    trace = record_dpvi(normal_model, data, key=2, noise_multiplier=sigma, learning_rate=1e-12, **common)
    np.testing.assert_array_equal(trace.params, np.broadcast_to(trace.params[0], trace.params.shape))
    G = trace.grads.astype(np.float64)
    noise_sd = sigma * C / s
    np.testing.assert_allclose(trace.noise_sd, noise_sd)
    # relative SE of a sample sd ≈ 1/sqrt(2T) ≈ 1.1 %: ±6 % is ≈ 5 SE
    np.testing.assert_allclose(G.std(0, ddof=1), noise_sd, rtol=0.06)
    # mean within 5 SE of the clean gradient sum
    se = noise_sd / math.sqrt(steps)
    assert np.all(np.abs(G.mean(0) - g_clean) < 5 * se), (G.mean(0), g_clean, se)
    # independent over steps and coordinates
    z = (G - G.mean(0)) / G.std(0)
    bound = 5 / math.sqrt(steps)
    for j in range(2):
        assert abs(np.corrcoef(z[:-1, j], z[1:, j])[0, 1]) < bound
    assert abs(np.corrcoef(z[:, 0], z[:, 1])[0, 1]) < bound


# ---------------------------------------------------------------- 5. Poisson subsampling


def _binomial_moment_checks(counts, n, q):
    m = counts.size
    mean, var = n * q, n * q * (1 - q)
    mu4 = n * q * (1 - q) * (1 + 3 * (n - 2) * q * (1 - q))  # 4th central moment of Binomial(n, q)
    assert abs(counts.mean() - mean) < 5 * math.sqrt(var / m), counts.mean()
    assert abs(counts.var(ddof=1) - var) < 5 * math.sqrt((mu4 - var**2) / m), counts.var(ddof=1)


@pytest.mark.parametrize("bound", [5_001, 2**29])  # a plain cumsum, and the saturating scan (size · bound ≥ 2³¹)
def test_poisson_offsets_are_the_capped_cumulative_sum_of_the_gaps(bound):
    gaps = np.random.default_rng(0).integers(1, bound + 1, size=77).astype(np.int32)
    gaps[:40] = np.random.default_rng(1).integers(1, 9, size=40)  # the first sums stay below the cap
    offsets = jax.jit(_saturating_cumsum, static_argnums=1)(jnp.asarray(gaps), bound)
    expected = np.minimum(np.cumsum(gaps.astype(np.int64)), bound)
    assert offsets.dtype == jnp.int32 and expected[-1] == bound > expected[0]
    np.testing.assert_array_equal(offsets, expected)


def test_poisson_chunk_counts_are_binomial_and_indices_uniform():
    n, q, m = 200, 0.1, 4000
    keys = jax.random.split(jax.random.key(11), m)
    indices, mask = jax.jit(jax.vmap(lambda k: poisson_chunk(k, -1, q, n, n)))(keys)
    indices, mask = np.asarray(indices), np.asarray(mask)
    assert indices.shape == (m, n) and mask.shape == (m, n)
    # the mask is "index < N" and a prefix; the sampled indices increase strictly (no duplicates, sorted)
    np.testing.assert_array_equal(mask, indices < n)
    assert np.all(mask[:, :-1] >= mask[:, 1:])
    assert np.all(np.diff(indices, axis=1) >= 0)
    assert np.all((np.diff(indices, axis=1) >= 1) | ~mask[:, 1:])
    assert indices.min() >= 0
    # one chunk of size N always reaches past the end
    assert np.all(indices[:, -1] >= n - 1)
    counts = mask.sum(1)
    _binomial_moment_checks(counts, n, q)
    # chi-square goodness of fit against the Binomial pmf, tails pooled so expected counts ≥ 5
    ks = np.arange(n + 1)
    expected = m * stats.binom.pmf(ks, n, q)
    lo = int(np.argmax(np.cumsum(expected) >= 5))
    hi = int(n - np.argmax(np.cumsum(expected[::-1]) >= 5))
    observed = np.bincount(counts, minlength=n + 1)
    obs = np.concatenate([[observed[: lo + 1].sum()], observed[lo + 1 : hi], [observed[hi:].sum()]])
    exp = np.concatenate([[expected[: lo + 1].sum()], expected[lo + 1 : hi], [expected[hi:].sum()]])
    assert exp.min() >= 5 and obs.sum() == m
    np.testing.assert_allclose(exp.sum(), m, rtol=1e-9)
    p_value = stats.chisquare(obs, exp).pvalue
    assert p_value > 1e-3, p_value
    # each index is included with probability q
    freq = np.bincount(indices[mask], minlength=n) / m
    assert freq.shape == (n,)
    assert np.max(np.abs(freq - q)) < 5 * math.sqrt(q * (1 - q) / m), np.max(np.abs(freq - q))


def test_multi_chunk_poisson_sample_has_the_same_count_distribution():
    n, q, m, size = 200, 0.1, 2000, 8
    keys = jax.random.split(jax.random.key(12), m)
    chunk = jax.jit(jax.vmap(lambda k, last: poisson_chunk(k, last, q, size, n)))
    last = jnp.full((m,), -1, jnp.int32)
    counts = np.zeros(m, int)
    seen = [[] for _ in range(m)]
    c, chunks_used = 0, np.zeros(m, int)
    while bool(jnp.any(last < n - 1)):
        active = np.asarray(last < n - 1)
        indices, mask = chunk(jax.vmap(jax.random.fold_in, (0, None))(keys, c), last)
        indices, mask = np.asarray(indices), np.asarray(mask)
        assert not np.any(mask[~active])  # a finished sample stays finished
        counts += mask.sum(1)
        chunks_used += active
        for j in np.flatnonzero(active):
            seen[j].extend(indices[j][mask[j]].tolist())
        last, c = jnp.asarray(indices[:, -1]), c + 1
    assert chunks_used.max() > 2  # the sample overflowed one chunk
    _binomial_moment_checks(counts, n, q)
    for row in seen:
        assert row == sorted(set(row)) and (not row or (row[0] >= 0 and row[-1] < n))
    # the python sampler of test 1 draws exactly this sample
    for j in (0, 1, 2):
        assert sampled_indices(keys[j], q, size, n) == seen[j]


# ---------------------------------------------------------------- 6. vmap over keys and data sets


# A small M1 shared by the vmap and the convergence tests: one compiled single-run program for both
M1_N, M1_STEPS = 200, 1000


def _small_m1():
    return from_numpyro(
        gamma_exponential,
        n_examples=M1_N,
        transforms="research",
        steps=M1_STEPS,
        sampling_rate=0.2,
        clip=2.0,
        grad_scale=(1.0, 100.0),
        init=(0.0, -4.0),
        mc_draws=4,
        batch_size=64,
    )


def test_record_dpvi_batch_equals_record_dpvi_per_data_set():
    bm = _small_m1()
    data = {"x": np.stack([np.asarray(bm.simulate(seed)[1]["x"]) for seed in (21, 22, 23)])}
    assert data["x"].shape == (3, M1_N)
    seeds = [5, 6, 7]
    traces = record_dpvi_batch(bm.model, data, keys=seeds, noise_multiplier=5.0, **bm.dpvi_settings)
    assert len(traces) == 3
    for m, trace in enumerate(traces):
        single = record_dpvi(bm.model, {"x": data["x"][m]}, key=seeds[m], noise_multiplier=5.0, **bm.dpvi_settings)
        assert trace.params.shape == (M1_STEPS, 2)
        np.testing.assert_allclose(trace.params, single.params, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(trace.grads, single.grads, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(trace.final_params, single.final_params, rtol=1e-5, atol=1e-5)
        assert trace.noise_multiplier == single.noise_multiplier == 5.0
        np.testing.assert_array_equal(trace.learning_rate, single.learning_rate)
    assert not np.allclose(traces[0].grads, traces[1].grads)


def test_same_key_same_trace_different_key_different_trace():
    bm = _small_m1()
    _, data = bm.simulate(3)
    run = lambda key: record_dpvi(bm.model, data, key=key, noise_multiplier=5.0, **bm.dpvi_settings)  # noqa: E731
    a, b, c = run(4), run(jax.random.key(4)), run(9)
    np.testing.assert_array_equal(a.params, b.params)
    np.testing.assert_array_equal(a.grads, b.grads)
    np.testing.assert_array_equal(a.final_params, b.final_params)
    assert not np.allclose(a.grads, c.grads)
    assert not np.allclose(a.params[1:], c.params[1:])


# ---------------------------------------------------------------- 7. settings


SMALL_DATA = normal_data(30)
SMALL = dict(mc_draws=4, batch_size=16)  # with steps ≤ 20 these runs share one compiled program


def test_kappa_learning_rate():
    steps, sigma, C = 20, 3.0, 1.5
    s, v = np.array([1.0, 50.0]), np.array([0.7, 2.5])
    settings = dict(steps=steps, sampling_rate=0.2, clip=C, noise_multiplier=sigma, grad_scale=tuple(s), **SMALL)
    recorder = build_recorder(normal_model, SMALL_DATA, lr_multiplier=tuple(v), **settings)
    expected = v * s / (math.sqrt(steps * 2) * sigma * C)
    np.testing.assert_allclose(recorder.settings.learning_rate, expected, rtol=1e-13)
    default = build_recorder(normal_model, SMALL_DATA, **settings)
    np.testing.assert_allclose(
        default.settings.learning_rate, math.sqrt(2) * s / (math.sqrt(steps * 2) * sigma * C), rtol=1e-13
    )
    trace = record_dpvi(normal_model, SMALL_DATA, key=0, lr_multiplier=tuple(v), init=(0.25, -2.0), **settings)
    np.testing.assert_allclose(trace.learning_rate, expected, rtol=1e-6)
    np.testing.assert_array_equal(trace.params[0], np.float32([0.25, -2.0]))
    # plain SGD with those step sizes
    np.testing.assert_allclose(
        trace.params[1:], trace.params[:-1] - trace.learning_rate * trace.grads[:-1], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        trace.final_params, trace.params[-1] - trace.learning_rate * trace.grads[-1], rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("name", ["grad_scale", "lr_multiplier", "init"])
def test_per_coordinate_settings_accept_scalar_pair_and_vector(name):
    # d = 2, P = 4
    x = np.asarray(np.random.default_rng(0).normal(size=(20, 2)), np.float32)
    spec = inspect_model(vector_normal_model, {"x": x})
    assert spec.site_map.dim == 2
    base = dict(steps=10, sampling_rate=0.5, clip=1.0)
    field = {"grad_scale": "grad_scale", "lr_multiplier": "learning_rate", "init": "init"}[name]
    got = {}
    for label, value in [
        ("scalar", 2.0),
        ("pair", (2.0, 5.0)),
        ("vector", (2.0, 3.0, 5.0, 7.0)),
        ("array", np.array([2.0, 3.0, 5.0, 7.0])),
        ("pair of blocks", ((2.0, 3.0), (5.0, 7.0))),
    ]:
        settings = resolve_settings(spec, DPVISettings(**base, **{name: value}), noise_multiplier=1.0)
        got[label] = np.asarray(getattr(settings, field))
    if name == "lr_multiplier":
        kappa = 1.0 / (math.sqrt(10 * 4) * 1.0 * 1.0)  # s = 1, σ = 1, C = 1
        got = {k: v / kappa for k, v in got.items()}
    np.testing.assert_allclose(got["scalar"], [2, 2, 2, 2], rtol=1e-12)
    np.testing.assert_allclose(got["pair"], [2, 2, 5, 5], rtol=1e-12)
    np.testing.assert_allclose(got["vector"], [2, 3, 5, 7], rtol=1e-12)
    np.testing.assert_allclose(got["array"], [2, 3, 5, 7], rtol=1e-12)
    np.testing.assert_allclose(got["pair of blocks"], [2, 3, 5, 7], rtol=1e-12)


def test_optax_optimizer():
    optimizer = optax.adam(1e-2)
    trace = record_dpvi(
        normal_model,
        SMALL_DATA,
        key=3,
        steps=20,
        sampling_rate=0.3,
        clip=1.0,
        noise_multiplier=1.0,
        optimizer=Optimizer("adam", 1e-2),
        init=(0.1, -1.0),
        **SMALL,
    )
    assert trace.optimizer == "optax.adam"
    assert trace.learning_rate is None
    assert trace.final_params is not None and trace.final_params.shape == (2,)
    # the recorded pairs are an Adam trajectory: replay Adam on the recorded gradients
    params = jnp.asarray(trace.params[0])
    state = optimizer.init(params)
    update = jax.jit(optimizer.update)
    for t in range(20):
        np.testing.assert_allclose(trace.params[t], params, rtol=1e-5, atol=1e-6)
        updates, state = update(jnp.asarray(trace.grads[t]), state, params)
        params = optax.apply_updates(params, updates)
    np.testing.assert_allclose(trace.final_params, params, rtol=1e-5, atol=1e-6)
    # Adam moves by ≈ lr per step, not by λ·G
    assert np.all(np.abs(np.diff(trace.params, axis=0)) < 1.5e-2)


def test_non_private_run_records_sigma_zero_and_infinite_epsilon():
    kwargs = dict(steps=5, sampling_rate=1.0, clip=100.0, learning_rate=(0.01, 0.002), init=(0.3, -1.0))
    trace = record_dpvi(normal_model, SMALL_DATA, key=5, non_private=True, **kwargs, **SMALL)
    assert trace.noise_multiplier == 0.0
    assert trace.epsilon == math.inf
    assert trace.delta is None and trace.accountant is None
    np.testing.assert_allclose(trace.learning_rate, [0.01, 0.002])
    # exactly the reference loop with σ = 0 (every example, no clipping, no noise)
    params, grads, final, counts, clipped = reference_normal_dpvi(
        SMALL_DATA["x"],
        key=5,
        steps=5,
        q=1.0,
        batch_size=16,
        S=4,
        C=100.0,
        s=(1.0, 1.0),
        sigma=0.0,
        lr=(0.01, 0.002),
        init=(0.3, -1.0),
    )
    assert counts == [30] * 5 and sum(clipped) == 0
    np.testing.assert_allclose(trace.params, params, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trace.grads, grads, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(trace.final_params, final, rtol=1e-5, atol=1e-6)


def test_epsilon_calibrates_sigma_with_the_pld_accountant(monkeypatch):
    q, steps = 0.3, 10
    calls = []

    def spy(*args):  # the public accountant, called once (a calibration takes seconds)
        calls.append((args, noiseaware.noise_multiplier(*args)))
        return calls[-1][1]

    monkeypatch.setattr(noiseaware.recording.settings, "calibrate_noise", spy)
    trace = record_dpvi(normal_model, SMALL_DATA, key=0, steps=steps, sampling_rate=q, clip=1.0, epsilon=1.0, **SMALL)
    assert len(calls) == 1 and calls[0][0] == (1.0, 1e-5, q, steps)
    assert trace.noise_multiplier == calls[0][1] > 0
    # σ is calibrated: private (ε(σ) ≤ 1) and tight (0.5 % less noise would spend more than ε = 1)
    assert noiseaware.epsilon_spent(trace.noise_multiplier, 1e-5, q, steps) <= 1.0
    assert noiseaware.epsilon_spent(trace.noise_multiplier * 0.995, 1e-5, q, steps) > 1.0
    assert trace.epsilon == 1.0 and trace.delta == 1e-5 and trace.accountant == "pld"
    explicit = record_dpvi(
        normal_model,
        SMALL_DATA,
        key=0,
        steps=steps,
        sampling_rate=q,
        clip=1.0,
        noise_multiplier=2.0,
        delta=1e-6,
        **SMALL,
    )
    assert explicit.noise_multiplier == 2.0 and explicit.delta == 1e-6 and explicit.accountant == "pld"
    assert explicit.epsilon == pytest.approx(noiseaware.epsilon_spent(2.0, 1e-6, q, steps), rel=1e-12)


# ---------------------------------------------------------------- 8. convergence (sign conventions end to end)


def test_non_private_dpvi_converges_to_the_m1_posterior():
    bm = _small_m1()
    _, data = bm.simulate(31)
    n = M1_N
    x = np.asarray(data["x"], np.float64)
    shape, rate = 8.0 + n, 2.0 + x.sum()  # the exact posterior of λ is Gamma(8 + N, 2 + Σx)
    lam_mean, lam_sd = shape / rate, math.sqrt(shape) / rate
    mu_target = float(np.log(np.expm1(lam_mean)))  # softplus⁻¹(E[λ])
    theta_sd = lam_sd / sigmoid(mu_target)  # delta method, dλ/dθ = sigmoid(θ)
    settings = {**bm.dpvi_settings, "clip": 1e3}  # no clipping
    trace = record_dpvi(bm.model, data, key=32, non_private=True, learning_rate=(0.04, 0.2), **settings)
    mu_final, rho_final = trace.final_params
    assert abs(mu_final - mu_target) < 3 * theta_sd, (mu_final, mu_target, theta_sd)
    tail = trace.params[M1_STEPS // 2 :]
    assert abs(tail[:, 0].mean() - mu_target) < 0.5 * theta_sd, (tail[:, 0].mean(), mu_target, theta_sd)
    # the variational sd approaches the posterior sd (a sign error in the ρ gradient would send it to 0 or ∞)
    sd_tail = softplus(tail[:, 1].astype(np.float64)).mean()
    assert 0.8 * theta_sd < sd_tail < 1.25 * theta_sd, (sd_tail, theta_sd)
    assert trace.params[0, 0] == 0.0 and trace.params[0, 1] == -4.0


# ---------------------------------------------------------------- 9. bad inputs

BASE = dict(key=0, steps=5, sampling_rate=0.5, clip=1.0)
DATA = normal_data(20)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(epsilon=1.0, noise_multiplier=1.0), "not both"),
        (dict(), "no privacy level"),
        (dict(non_private=True), "explicit learning_rate"),
        (dict(non_private=True, learning_rate=0.1, noise_multiplier=1.0), "non_private"),
        (dict(noise_multiplier=0.0), "noise_multiplier must be positive"),
        (dict(noise_multiplier=-1.0), "noise_multiplier must be positive"),
        (dict(noise_multiplier=1.0, sampling_rate=0.0), "sampling_rate must be positive"),
        (dict(noise_multiplier=1.0, sampling_rate=1.5), "sampling_rate must be positive and at most 1"),
        (dict(noise_multiplier=1.0, clip=0.0), "clip must be positive"),
        (dict(noise_multiplier=1.0, clip=-2.0), "clip must be positive"),
        (dict(noise_multiplier=1.0, steps=0), "steps must be a positive integer"),
        (dict(noise_multiplier=1.0, steps=2.5), "steps must be a positive integer"),
        (dict(noise_multiplier=1.0, mc_draws=0), "mc_draws must be a positive integer"),
        (dict(noise_multiplier=1.0, learning_rate=0.1, lr_multiplier=1.0), "learning_rate .* lr_multiplier"),
        (dict(noise_multiplier=1.0, grad_scale=(1.0, 2.0, 3.0)), "grad_scale must be a scalar, one entry per block"),
        (dict(noise_multiplier=1.0, grad_scale=(1.0, 0.0)), "grad_scale must be positive"),
        (dict(noise_multiplier=1.0, grad_scale=-1.0), "grad_scale must be positive"),
        (dict(noise_multiplier=1.0, init=(0.0, 1.0, 2.0)), "init must be a scalar, one entry per block of φ"),
        (dict(noise_multiplier=1.0, learning_rate=-0.1), "learning rates must be positive"),
        (dict(noise_multiplier=1.0, dtype="float64"), "jax_enable_x64"),
        (dict(noise_multiplier=1.0, dtype="int32"), "float32 or float64"),
        (dict(noise_multiplier=1.0, steps=True), "steps must be a positive integer"),
        (dict(noise_multiplier=1.0, mc_draws=True), "mc_draws must be a positive integer"),
        (dict(noise_multiplier=1.0, batch_size=True), "batch_size must be a positive integer"),
        (dict(epsilon=1.0, delta=None), "delta must be a number"),
        (dict(noise_multiplier=1.0, optimizer=Optimizer("adam", 1e-2), learning_rate=0.1), "no effect with an optim"),
        (dict(noise_multiplier=1.0, optimizer=Optimizer("adam", 1e-2), lr_multiplier=1.0), "no effect with an optim"),
        (dict(noise_multiplier=1.0, optimizer=optax.adam(1e-2)), r"data, not an optax object.*na\.Optimizer\('adam'"),
        (dict(noise_multiplier=1.0, stepz=10), r"unknown DPVI settings \['stepz'\]: the settings are steps, "),
        (dict(noise_multiplier=1.0, key=2**70), r"below 2\*\*63, got"),
    ],
)
def test_bad_settings_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        record_dpvi(normal_model, DATA, **{**BASE, **kwargs})


def test_nan_in_data_raises():
    x = DATA["x"].copy()
    x[3] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        record_dpvi(normal_model, {"x": x}, **BASE, noise_multiplier=1.0)
    X = np.ones((20, 3), np.float32)
    X[0, 1] = np.inf
    with pytest.raises(ValueError, match="NaN|invalid"):  # the model's own validation may fire first
        record_dpvi(logistic_regression, {"X": X, "y": np.zeros(20, np.int32)}, **BASE, noise_multiplier=1.0)


def test_batch_data_of_the_wrong_shape_raises():
    x = np.asarray(np.random.default_rng(0).normal(size=(3, 20)), np.float32)
    with pytest.raises(ValueError, match="2 keys for 3 data sets"):
        record_dpvi_batch(
            normal_model, {"x": x}, keys=[0, 1], steps=5, sampling_rate=0.5, clip=1.0, noise_multiplier=1.0
        )
    # unbatched data: the first "data set" has no example axis
    with pytest.raises(ModelError, match="example axis"):
        record_dpvi_batch(
            normal_model, {"x": x[0]}, keys=list(range(20)), steps=5, sampling_rate=0.5, clip=1.0, noise_multiplier=1.0
        )
    # per-example arrays of different lengths
    with pytest.raises(ModelError, match="y has 15 entries but x has 20: every per-example array needs the same"):
        record_dpvi(two_site_model, {"x": x[0], "y": x[0, :15]}, **BASE, noise_multiplier=1.0)


def discrete_latent_model(x=None, n_examples=None):
    k = numpyro.sample("k", dist.Bernoulli(0.5))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(k, 1.0), obs=x)


def local_latent_model(x=None, n_examples=None):
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", n_examples):
        z = numpyro.sample("z", dist.Normal(theta, 1.0))
        numpyro.sample("x", dist.Normal(z, 1.0), obs=x)


def subsampled_model(x=None, n_examples=None):
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", n_examples, subsample_size=5) as idx:
        numpyro.sample("x", dist.Normal(theta, 1.0), obs=x[idx])


def misnamed_model(values=None, n_examples=None):
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(theta, 1.0), obs=values)


def param_model(x=None, n_examples=None):
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    scale = numpyro.param("scale", 1.0)
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(theta, scale), obs=x)


def unsupported_support_model(x=None, n_examples=None):
    numpyro.sample("z", dist.ZeroSumNormal(1.0, event_shape=(3,)))  # support zero_sum (as LKJCholesky's)
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(theta, 1.0), obs=x)


def constant_plate_model(x=None, size=20):
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", size):  # sized by a constant, not by the data passed in
        numpyro.sample("x", dist.Normal(theta, 1.0), obs=x)


def vector_bounds_model(x=None, n_examples=None):
    a = numpyro.sample("a", dist.Uniform(jnp.zeros(2), jnp.ones(2)).to_event(1))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(a.sum(), 1.0), obs=x)


def unobserved_model(x=None, n_examples=None):
    numpyro.sample("theta", dist.Normal(0.0, 1.0))


def no_plate_model(x=None, n_examples=None):
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    numpyro.sample("x", dist.Normal(theta, 1.0).expand([n_examples]).to_event(1), obs=x)


@pytest.mark.parametrize(
    "model,data,match",
    [
        (discrete_latent_model, DATA, "discrete"),
        (local_latent_model, DATA, "local latent"),
        (subsampled_model, DATA, "subsample_size"),
        (misnamed_model, {"values": DATA["x"]}, "keyword argument named 'x'"),
        (param_model, DATA, "numpyro.param"),
        (normal_model, {**DATA, "extra": np.ones(20)}, r"\['extra'\] are not arguments"),
        (unsupported_support_model, DATA, "no supported unconstrained map"),
        (unobserved_model, DATA, "no observed site"),
        (no_plate_model, DATA, "not inside a numpyro.plate"),
        (normal_model, {**DATA, "n_examples": 20}, "do not pass 'n_examples'"),
        (constant_plate_model, DATA, "size the data plate from the data"),
        (vector_bounds_model, DATA, "per-element bounds"),
        (normal_model, [DATA["x"]], "must be a dict of keyword arrays"),
    ],
    ids=[
        "discrete",
        "local",
        "subsample",
        "misnamed",
        "param",
        "unknown-key",
        "unsupported-support",
        "unobserved",
        "no-plate",
        "n_examples",
        "constant-plate",
        "vector-bounds",
        "not-a-dict",
    ],
)
def test_model_contract_violations_raise_model_error(model, data, match):
    with pytest.raises(ModelError, match=match):
        record_dpvi(model, data, **BASE, noise_multiplier=1.0)


@pytest.mark.parametrize(
    "transforms,match",
    [
        ({"theta": "exp"}, "does not map onto it"),
        ({"theta": "sigmoid"}, "does not map onto it"),
        ({"thetta": "identity"}, r"\['thetta'\], which are not latent sites"),
        ({"*": "reserch"}, "not a preset"),
        ("reserch", "not a preset"),
    ],
)
def test_bad_transforms_raise_model_error(transforms, match):
    with pytest.raises(ModelError, match=match):
        record_dpvi(normal_model, DATA, **BASE, noise_multiplier=1.0, transforms=transforms)


def root_model(x=None, n_examples=None):
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", n_examples):
        # finite everywhere, but at x = 0 the gradient is 0/0 = NaN
        numpyro.sample("x", dist.Normal(jnp.sqrt(theta**2 * jnp.abs(x)), 1.0), obs=x)


def test_non_finite_per_example_gradients_contribute_zero():
    x = np.asarray(DATA["x"]).copy()
    x[0] = 0.0
    trace = record_dpvi(root_model, {"x": x}, **{**BASE, "sampling_rate": 1.0}, noise_multiplier=1.0)
    assert np.all(np.isfinite(trace.grads)) and np.all(np.isfinite(trace.params))


# ---------------------------------------------------------------- 10. privacy invariant

TRACE_FIELDS = {
    "params", "grads", "noise_multiplier", "clip", "sampling_rate", "n_examples", "grad_scale", "learning_rate",
    "final_params", "epsilon", "delta", "accountant", "mc_draws", "optimizer", "variational_family",
    "param_names", "sites", "convention", "batch_sizes",
    "step_noise_multipliers", "step_clips", "step_grad_scales",  # settings that vary per step: None here
    "clipped_counts", "count_noise_multiplier",  # the DP-released counts of clipped examples: None here
}  # fmt: skip
NPZ_FIELDS = {
    "schema", "schema_version", "params", "grads", "noise_multiplier", "clip", "sampling_rate", "n_examples",
    "final_params", "grad_scale", "learning_rate", "epsilon", "delta", "accountant", "mc_draws", "optimizer",
    "variational_family", "param_layout", "param_names", "site_names", "site_shapes", "site_transforms",
    "convention_normaliser", "convention_clipping", "convention_neighbouring", "convention_sampling",
    "convention_noise", "convention_producer",
}  # fmt: skip


def test_trace_holds_only_released_quantities(tmp_path):
    n, steps, data = 30, 7, SMALL_DATA
    trace = record_dpvi(
        normal_model, data, key=41, steps=steps, sampling_rate=0.5, clip=1.0, noise_multiplier=1.0, **SMALL
    )
    assert isinstance(trace, Trace)
    assert {f.name for f in dataclasses.fields(trace)} == TRACE_FIELDS
    assert not hasattr(trace, "__dict__") or set(vars(trace)) <= TRACE_FIELDS
    path = tmp_path / "trace.npz"
    trace.save(path)
    with np.load(path, allow_pickle=False) as archive:
        assert set(archive.files) == NPZ_FIELDS
        for name in archive.files:
            value = archive[name]
            # per-example norms, keys, seeds, data or indices: never (the convention's "normaliser" is a setting)
            assert not any(word in name for word in ("key", "seed", "data", "norms", "per_example", "index")), name
            if value.ndim >= 1:
                assert value.shape[0] != n, (name, value.shape)
            if value.dtype.kind == "f" and value.size >= 1:
                assert not np.isin(np.asarray(data["x"], value.dtype), value).any(), name
    loaded = Trace.load(path)
    np.testing.assert_array_equal(loaded.grads, trace.grads)
    assert loaded.n_examples == n
    assert loaded.convention.producer.startswith("noiseaware ") and loaded.convention.normaliser == "sum"


# ---------------------------------------------------------------- 11. float64


@pytest.mark.slow  # a fresh interpreter imports jax and compiles a DPVI run: ~10 s
def test_float64_run_in_a_subprocess():
    code = textwrap.dedent(
        """
        import jax
        jax.config.update("jax_enable_x64", True)
        import numpy as np, numpyro, numpyro.distributions as dist
        from noiseaware import record_dpvi

        def model(x=None, n_examples=None):
            theta = numpyro.sample("theta", dist.Normal(0.0, 3.0))
            with numpyro.plate("data", n_examples):
                numpyro.sample("x", dist.Normal(theta, 1.0), obs=x)

        x = np.random.default_rng(0).normal(size=20)
        t = record_dpvi(model, {"x": x}, key=0, steps=5, sampling_rate=0.5, clip=1.0, non_private=True,
                        learning_rate=0.01, dtype="float64")
        assert t.params.dtype == np.float64, t.params.dtype
        assert t.grads.dtype == np.float64, t.grads.dtype
        assert t.final_params.dtype == np.float64, t.final_params.dtype
        assert t.grad_scale.dtype == np.float64 and t.learning_rate.dtype == np.float64
        assert np.all(np.isfinite(t.grads)) and np.any(t.grads != 0)
        np.testing.assert_allclose(t.params[1:], t.params[:-1] - 0.01 * t.grads[:-1], rtol=1e-13, atol=1e-15)
        t32 = record_dpvi(model, {"x": x}, key=0, steps=5, sampling_rate=0.5, clip=1.0, non_private=True,
                          learning_rate=0.01, dtype="float32")
        assert t32.params.dtype == np.float32 and t32.grads.dtype == np.float32, t32.params.dtype
        print("OK")
        """
    )
    env = {**os.environ, "JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}  # as the compilation_effort fixture
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")
