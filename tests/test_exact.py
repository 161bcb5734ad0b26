"""The exact route: closed-form φ* and adaptive quadrature against brute force, convergence and coverage."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ou import ou_traces

from noiseaware.inference.gradient_model import Prior, gradient_model, log_density
from noiseaware.inference.exact import exact_cdf, exact_grid, exact_moments, fit_exact

PRIORS = {"default": "default", "paper": "paper", "softplus": Prior(hessian_link="softplus", hessian_width=5.0),
          "none": Prior(extra_noise="none")}


@pytest.fixture(scope="module")
def traces():
    return ou_traces(2, steps=4000, seed=3)


def _grid(model, **options):
    with jax.enable_x64(True):
        model = jax.tree_util.tree_map(jnp.asarray, model)
        grid = exact_grid(model, **options)
        moments = jax.tree_util.tree_map(np.asarray, exact_moments(model, grid))
        return model, jax.tree_util.tree_map(np.asarray, grid), moments


def _brute_force(model, j):
    """φ*_j's posterior mean and sd by a plain 3-D Riemann sum of exp(log_density) over (φ*, ã, u)."""
    with jax.enable_x64(True):
        m = jax.tree_util.tree_map(lambda x: jnp.asarray(x), model)
        centre = float(m.stats.centre[j])
        _, grid, moments = _grid(model)
        mean, sd = float(moments.optimum_mean[j]), float(moments.optimum_sd[j])
        raw_lo, raw_hi = float(grid.hessian_raw[0, j]), float(grid.hessian_raw[-1, j])
        phi = jnp.linspace(mean - 12 * sd, mean + 12 * sd, 121)
        raw = jnp.linspace(raw_lo, raw_hi, 121)
        has_u = model.extra_noise != "none"
        extra = jnp.linspace(1e-300, float(grid.extra_noise[-1, j]), 61) if has_u else jnp.zeros(1)
        P, A, U = jnp.meshgrid(phi, raw, extra, indexing="ij")
        shape = P.shape + (m.n_params,)
        def full(x, fill):
            return jnp.broadcast_to(fill, shape).at[..., j].set(x)
        logp = log_density(m, full(P, m.stats.centre), full(A, m.hessian_loc), full(U, m.extra_sd) if has_u else None)[..., j]
        w = jnp.exp(logp - logp.max())
        w = w / w.sum()
        mean_bf = float(jnp.sum(w * P))
        return centre, (mean, sd), (mean_bf, float(jnp.sqrt(jnp.sum(w * (P - mean_bf) ** 2))))


@pytest.mark.parametrize(("prior", "coordinates"), [("default", (0, 2)), ("paper", (1, 2)), ("none", (0, 2))])
def test_grid_moments_match_a_brute_force_sum_over_all_three_unknowns(traces, prior, coordinates):
    """Coordinate 0 is weakly identified (long tail of ã towards a → 0); under the softplus link of the
    "paper" prior a uniform brute-force grid cannot resolve its kink, so that case is left to the
    convergence test."""
    model = gradient_model(traces[0], PRIORS[prior])
    for j in coordinates:
        _, (mean, sd), (mean_bf, sd_bf) = _brute_force(model, j)
        assert mean == pytest.approx(mean_bf, abs=0.02 * sd)
        assert sd == pytest.approx(sd_bf, rel=0.02)


@pytest.mark.parametrize(("prior", "tolerance"), [("default", 1e-3), ("paper", 5e-3), ("none", 1e-3)])
def test_quadrature_converges_as_the_grid_refines(traces, prior, tolerance):
    """Relative change of φ*'s posterior sd against a 256-node grid shrinks as the grid refines; the
    softplus link converges more slowly (its kink near a = 0 is a second, narrow feature in ã)."""
    model = gradient_model(traces[1], PRIORS[prior])
    results = [_grid(model, hessian_nodes=n, extra_nodes=n // 2)[2] for n in (24, 48, 96, 256)]
    finest = results[-1]
    errors = [np.max(np.abs(r.optimum_sd / finest.optimum_sd - 1)) for r in results[:-1]]
    assert errors[2] < tolerance
    assert errors[2] <= errors[0]
    np.testing.assert_allclose(results[2].optimum_mean, finest.optimum_mean, rtol=0, atol=tolerance * float(np.max(finest.optimum_sd)))


def test_draws_follow_the_grid_moments_and_cdf(traces):
    model = gradient_model(traces[0])
    draws = fit_exact(model, key=0, draws=20000)
    optimum = draws.optimum[0]
    moments = draws.diagnostics
    se = moments["optimum_sd"] / np.sqrt(optimum.shape[0])
    assert np.all(np.abs(optimum.mean(axis=0) - moments["optimum_mean"]) < 4 * se)
    np.testing.assert_allclose(optimum.std(axis=0), moments["optimum_sd"], rtol=0.05)
    _, grid, _ = _grid(model)
    with jax.enable_x64(True):
        median = np.median(optimum, axis=0)
        np.testing.assert_allclose(np.asarray(exact_cdf(grid, jnp.asarray(median))), 0.5, atol=0.015)
    assert draws.optimum.shape == draws.hessian.shape == draws.extra_noise.shape == (1, 20000, 4)
    assert np.all(draws.hessian > 0) and np.all(draws.extra_noise >= 0)


def test_same_key_same_draws(traces):
    model = gradient_model(traces[0])
    first, second = fit_exact(model, key=5, draws=100), fit_exact(model, key=5, draws=100)
    np.testing.assert_array_equal(first.optimum, second.optimum)
    assert not np.array_equal(first.optimum, fit_exact(model, key=6, draws=100).optimum)


def test_vmapped_grids_equal_single_grids(traces):
    models = [gradient_model(t) for t in traces]
    with jax.enable_x64(True):
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *models)
        batch = jax.vmap(exact_grid)(stacked)
        for i, model in enumerate(models):
            single = exact_grid(jax.tree_util.tree_map(jnp.asarray, model))
            np.testing.assert_allclose(batch.weights[i], single.weights, rtol=1e-9, atol=1e-300)
