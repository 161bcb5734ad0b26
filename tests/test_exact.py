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


def _box(model, j, width=20.0):
    """An integration box for coordinate j from closed forms, never from the exact route's grid.

    ã: the prior's ±8 sd. The likelihood is at most its maximum, so the posterior mass outside is at most
    the prior's (≈ 1e-15) over ∫ prior × likelihood / max likelihood, which the sum itself shows is not small.
    φ*: the OLS estimate with a free intercept, φ̂* = φ̄ − (Σ G / T') / ĉ with ĉ = Σ Gφ̃ / Σ φ̃², ± `width`
    of its delta-method standard error sqrt(v̂ / T') / |ĉ| (v̂ the residual variance, at least the DP noise
    variance), within the prior's ±8 sd. u: 0 up to the root of the residual variance in excess of the DP
    noise plus 20 sampling sds of a variance estimate from T' steps, v̂·sqrt(2/T') (u² adds to the noise
    variance, which T' residuals pin down to that precision). The caller checks the mass at the box's faces.
    """
    s = jax.tree_util.tree_map(lambda x: np.asarray(x)[j] if np.ndim(x) else float(x), model.stats)
    count = s.count
    slope = s.sum_gphi / s.sum_phiphi
    intercept = s.sum_g / count
    residual = (s.sum_gg - s.sum_g**2 / count - slope**2 * s.sum_phiphi) / (count - 2)
    variance = max(residual, s.noise_var)
    optimum = s.centre - intercept / slope
    optimum_se = np.sqrt(variance / count) / abs(slope)
    loc, sd = float(model.optimum_loc[j]), float(model.optimum_sd[j])
    phi = (max(optimum - width * optimum_se, loc - 8 * sd), min(optimum + width * optimum_se, loc + 8 * sd))
    raw = (float(model.hessian_loc[j]) - 8 * float(model.hessian_sd[j]),
           float(model.hessian_loc[j]) + 8 * float(model.hessian_sd[j]))
    extra = np.sqrt(max(residual - s.noise_var, 0.0) + 20 * variance * np.sqrt(2 / count))
    return phi, raw, extra


def _brute_force(model, j, nodes=161):
    """φ*_j's posterior mean and sd by a plain 3-D Riemann sum of exp(log_density) over (φ*, ã, u) on `_box`,
    and the largest normalised mass on one face of the box (the u = 0 face excluded: the box starts there).

    Uniform nodes in φ* and ã; midpoints in u ∈ [0, top] (the integrand is even in u, so this is the midpoint
    rule of the integral over u ∈ (−top, top)).
    """
    with jax.enable_x64(True):
        m = jax.tree_util.tree_map(lambda x: jnp.asarray(x), model)
        (phi_lo, phi_hi), (raw_lo, raw_hi), top = _box(model, j)
        phi = jnp.linspace(phi_lo, phi_hi, nodes)
        raw = jnp.linspace(raw_lo, raw_hi, nodes)
        has_u = model.extra_noise != "none"
        extra = top * (jnp.arange(61) + 0.5) / 61 if has_u else jnp.zeros(1)
        P, A, U = jnp.meshgrid(phi, raw, extra, indexing="ij")
        shape = P.shape + (m.n_params,)
        def full(x, fill):
            return jnp.broadcast_to(fill, shape).at[..., j].set(x)
        logp = log_density(m, full(P, m.stats.centre), full(A, m.hessian_loc), full(U, m.extra_sd) if has_u else None)[..., j]
        w = jnp.exp(logp - logp.max())
        w = np.asarray(w / w.sum())
        faces = [w[0].sum(), w[-1].sum(), w[:, 0].sum(), w[:, -1].sum()] + ([w[:, :, -1].sum()] if has_u else [])
        mean_bf = float(np.sum(w * P))
        return (mean_bf, float(np.sqrt(np.sum(w * (np.asarray(P) - mean_bf) ** 2)))), max(faces)


@pytest.mark.parametrize(("prior", "coordinates"), [("default", (0, 2)), ("paper", (1, 2)), ("none", (0, 2))])
def test_grid_moments_match_a_brute_force_sum_over_all_three_unknowns(traces, prior, coordinates):
    """Coordinate 0 is weakly identified (long tail of ã towards a → 0); under the softplus link of the
    "paper" prior a uniform brute-force grid cannot resolve its kink, so that case is left to the
    convergence test."""
    model = gradient_model(traces[0], PRIORS[prior])
    _, _, moments = _grid(model)
    for j in coordinates:
        (mean_bf, sd_bf), face = _brute_force(model, j)
        assert face < 1e-8  # the box holds the posterior: (next to) no mass on its faces
        mean, sd = float(moments.optimum_mean[j]), float(moments.optimum_sd[j])
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
