"""Traces drawn exactly from the gradient model: Ornstein–Uhlenbeck traces with known φ* and A, and the
coverage check of intervals of φ* on many of them."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from noiseaware.inference.gradient_model import gradient_model
from noiseaware.trace import Trace

Q, N, SIGMA, CLIP = 0.1, 1000, 5.0, 2.0
SCALE = np.array([1.0, 1.0, 50.0, 50.0])
OPTIMUM = (0.5, -1.0, -3.0, -2.0)
HESSIAN = (40.0, 400.0, 20.0, 5.0)
LEVELS = (0.5, 0.9)


def ou_traces(
    count,
    steps=4000,
    optimum=OPTIMUM,
    hessian=HESSIAN,
    scale=SCALE,
    lr=1e-3,
    extra=0.0,
    seed=0,
    sigma=SIGMA,
    family="diagonal-normal-softplus",
):
    """`count` traces with G_t = q A (φ_t − φ*) + e_t, e_t ~ N(0, (σC/s)² + extra²), φ_{t+1} = φ_t − λ s ⊙ G_t;
    A = diag(hessian), or hessian itself when it is a (P, P) matrix (a coupled Hessian); sigma=0 gives
    non-private traces (ε = ∞), whose noise is all extra noise; family: the variational family the traces
    name (P must fit it)."""
    rng = np.random.default_rng(seed)
    optimum, hessian, scale = np.asarray(optimum), np.asarray(hessian), np.asarray(scale)
    sd = np.sqrt((sigma * CLIP / scale) ** 2 + np.asarray(extra) ** 2)
    phi = np.zeros((count, optimum.size))
    params, grads = np.empty((steps, count, optimum.size)), np.empty((steps, count, optimum.size))
    for t in range(steps):
        drift = (phi - optimum) @ hessian.T if hessian.ndim == 2 else hessian * (phi - optimum)
        grads[t] = Q * drift + sd * rng.standard_normal(phi.shape)
        params[t] = phi
        phi = phi - lr * scale * grads[t]
    return [
        Trace.from_arrays(
            params[:, m],
            grads[:, m],
            noise_multiplier=sigma,
            epsilon=math.inf if sigma == 0 else None,
            clip=CLIP,
            sampling_rate=Q,
            n_examples=N,
            grad_scale=scale,
            learning_rate=lr * scale,
            variational_family=family,
        )
        for m in range(count)
    ]


def ou_trace(steps=4000, optimum=OPTIMUM, hessian=HESSIAN, lr=1e-3, seed=0):
    """One OU trace of the four default coordinates."""
    return ou_traces(1, steps, optimum, hessian, SCALE, lr, seed=seed)[0]


def stacked_models(traces):
    """The default-prior gradient models of `traces`, float64 leaves stacked on a leading axis (len(traces))."""
    with jax.enable_x64(True):
        models = [jax.tree_util.tree_map(jnp.asarray, gradient_model(t)) for t in traces]
        return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *models)


def assert_nominal(pits: np.ndarray, coordinates=slice(None)) -> None:
    """pits (traces, P) = P(φ* ≤ truth | trace); central `level` intervals cover iff |pit − ½| < level/2. At each
    level the coverage lies within 3.5 binomial standard errors of the level, pooled and per coordinate (those
    given; n = 200 traces: ±0.074 at 90 %)."""
    for level in LEVELS:
        covered = np.abs(pits - 0.5) < level / 2
        sd = np.sqrt(level * (1 - level))
        assert abs(covered.mean() - level) < 3.5 * sd / np.sqrt(covered.size), (level, covered.mean(axis=0))
        per_coordinate = np.abs(covered.mean(axis=0) - level) < 3.5 * sd / np.sqrt(covered.shape[0])
        assert np.all(per_coordinate[coordinates]), (level, covered.mean(axis=0))


def scale_traces(count, steps=4000, lr=(1e-3, 0.1), noise=1.0, seed=0, a_mu=1000.0):
    """`count` two-coordinate traces (μ, ρ) of a mean-field scale whose ρ-gradient follows the variance model
    exactly: G_μ = q A_μ (μ − μ*) + e, G_ρ = q A_ψ w(ρ) (softplus(ρ)² − sd*²) + e, w = sigmoid/softplus,
    e ~ N(0, noise²) (the conjugate normal model's ELBO gradient with N = 1000, sd* = 0.0316: A_ψ = 1000 and, by
    Stein's identity, A_μ = `a_mu` = 1000; another a_mu breaks the identity, as clipping the μ row would);
    φ_{t+1} = φ_t − lr ⊙ G_t, from (μ*, ρ* + 1). Returns the traces and the true φ* (2,)."""
    rng = np.random.default_rng(seed)
    a_psi, mu_star, sd_star = 1000.0, 0.3, 0.0316
    optimum = np.array([mu_star, np.log(np.expm1(sd_star))])
    phi = np.tile(optimum + [0.0, 1.0], (count, 1))
    params, grads = np.empty((steps, count, 2)), np.empty((steps, count, 2))
    for t in range(steps):
        mu, rho = phi[:, 0], phi[:, 1]
        softplus = np.logaddexp(0.0, rho)
        weight = 1.0 / (1.0 + np.exp(-rho)) / softplus
        drift = np.stack([a_mu * (mu - mu_star), a_psi * weight * (softplus**2 - sd_star**2)], axis=1)
        grads[t] = Q * drift + noise * rng.standard_normal(phi.shape)
        params[t] = phi
        phi = phi - np.asarray(lr) * grads[t]
    traces = [
        Trace.from_arrays(params[:, m], grads[:, m], noise_multiplier=1.0, clip=noise, sampling_rate=Q, n_examples=N)
        for m in range(count)
    ]
    return traces, optimum


def coupled_traces(count, steps=4000, lr=(5e-4, 0.1), noise=1.0, seed=0):
    """`count` mean-field traces (μ₁, μ₂, ρ₁, ρ₂) of a Gaussian target whose coordinates are strongly coupled, with
    both rows of each coordinate from Stein's identity: G_μ = q Λ (μ − μ*) + e, G_ρj = q w_j (Λ_jj ψ_j − 1) + e,
    Λ = [[1000, 900], [900, 1000]] (conditional curvature 1000, marginal 190), ψ = softplus(ρ)², w = sigmoid/softplus,
    e ~ N(0, noise²); φ_{t+1} = φ_t − lr ⊙ G_t from (μ* + 0.05, ρ* + 1). Returns the traces and the true φ* (4,):
    μ* and ρ*_j = softplus⁻¹(Λ_jj^(−½))."""
    rng = np.random.default_rng(seed)
    curvature, mu_star = np.array([[1000.0, 900.0], [900.0, 1000.0]]), np.array([0.3, -0.2])
    optimum = np.concatenate([mu_star, np.log(np.expm1(np.diag(curvature) ** -0.5))])
    phi = np.tile(optimum + [0.05, 0.05, 1.0, 1.0], (count, 1))
    rates = np.repeat(np.asarray(lr), 2)
    params, grads = np.empty((steps, count, 4)), np.empty((steps, count, 4))
    for t in range(steps):
        mu, rho = phi[:, :2], phi[:, 2:]
        softplus = np.logaddexp(0.0, rho)
        weight = 1.0 / (1.0 + np.exp(-rho)) / softplus
        drift = np.concatenate([(mu - mu_star) @ curvature, weight * (np.diag(curvature) * softplus**2 - 1.0)], axis=1)
        grads[t] = Q * drift + noise * rng.standard_normal(phi.shape)
        params[t] = phi
        phi = phi - rates * grads[t]
    traces = [
        Trace.from_arrays(params[:, m], grads[:, m], noise_multiplier=1.0, clip=noise, sampling_rate=Q, n_examples=N)
        for m in range(count)
    ]
    return traces, optimum
