"""The exact route: closed-form φ* and adaptive quadrature against brute force, convergence and coverage."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from messages import mentions
from ou import ou_traces
from solvers import fit_one

from noiseaware.inference.exact import GRID_DEFAULTS, exact_cdf, exact_grid, exact_moments, fit_exact_batch
from noiseaware.inference.gradient_model import Prior, gradient_model, log_density
from noiseaware.methods import ExactOptions

PRIORS = {
    "default": "default",
    "paper": "paper",
    "softplus": Prior(hessian_link="softplus", hessian_width=5.0),
    "none": Prior(extra_noise="none"),
}


@pytest.fixture(scope="module")
def traces():
    return ou_traces(2, steps=4000, seed=3)


@functools.partial(jax.jit, static_argnames=("hessian_nodes", "extra_nodes", "passes"))
def _grid_and_moments(model, **options):
    """exact_grid and exact_moments as one compiled program per grid size (not one per operation)."""
    grid = exact_grid(model, **options)
    return grid, exact_moments(model, grid)


def _grid(model, **options):
    with jax.enable_x64(True):
        model = jax.tree_util.tree_map(jnp.asarray, model)
        grid, moments = _grid_and_moments(model, **(GRID_DEFAULTS | options))
        return model, jax.tree_util.tree_map(np.asarray, grid), jax.tree_util.tree_map(np.asarray, moments)


def _scales(model, j):
    """Closed-form scales of coordinate j's posterior, from the trace's sums alone (never the exact route's grid).

    φ*: the standard error sqrt(v̂ / T') / |ĉ| of the OLS estimate φ̄ − (Σ G / T') / ĉ, with ĉ = Σ Gφ̃ / Σ φ̃²
    and v̂ the residual variance (at least the DP noise variance); u: sqrt(v̂·sqrt(2/T')), the sampling sd
    of a variance estimated from T' residuals in gradient units (u² adds to the noise variance).
    """
    s = jax.tree_util.tree_map(lambda x: np.asarray(x)[j] if np.ndim(x) else float(x), model.stats)
    slope = s.sum_gphi / s.sum_phiphi
    residual = (s.sum_gg - s.sum_g**2 / s.count - slope**2 * s.sum_phiphi) / (s.count - 2)
    variance = max(residual, float(np.broadcast_to(model.noise_var, np.shape(model.optimum_loc))[j]))
    return (
        s.centre - s.sum_g / s.count / slope,
        np.sqrt(variance / s.count) / abs(slope),
        np.sqrt(variance * np.sqrt(2 / s.count)),
    )


def _sinh_nodes(centre, scale, low, high, nodes, midpoints=False):
    """Nodes x = centre + scale·sinh(t) for t equally spaced over [asinh((low − centre)/scale), asinh((high −
    centre)/scale)] (or the midpoints of its cells), with their Riemann weights scale·cosh(t)·Δt: dense
    where the posterior is (the closed-form scale), reaching the whole box."""
    t_low, t_high = np.arcsinh((low - centre) / scale), np.arcsinh((high - centre) / scale)
    step = (t_high - t_low) / (nodes if midpoints else nodes - 1)
    t = t_low + step * (np.arange(nodes) + (0.5 if midpoints else 0.0))
    return centre + scale * np.sinh(t), scale * np.cosh(t) * step


def _brute_force(model, j, nodes=161):
    """φ*_j's posterior mean and sd by a plain 3-D Riemann sum of exp(log_density) over (φ*, ã, u), and the
    largest normalised mass on one face of the box (the u = 0 face excluded: the box starts there).

    The box comes from the prior alone: φ* and ã within ±8 prior sds, u in [0, 8 σ_u]. Since the likelihood
    is at most its maximum, the posterior mass outside is at most the prior's (≈ 1e-15) divided by
    ∫ prior × likelihood / max likelihood; the face masses show that the box holds the posterior. ã's nodes
    are uniform; φ*'s and u's are sinh-spaced around the closed-form scales of `_scales` (u's at cell
    midpoints: the integrand is even in u, so this is the midpoint rule over (−8 σ_u, 8 σ_u)).
    """
    with jax.enable_x64(True):
        m = jax.tree_util.tree_map(lambda x: jnp.asarray(x), model)
        loc, sd = float(model.optimum_loc[j]), float(model.optimum_sd[j])
        raw_loc, raw_sd = float(model.hessian_loc[j]), float(model.hessian_sd[j])
        optimum, optimum_se, extra_scale = _scales(model, j)
        phi, phi_weight = _sinh_nodes(optimum, optimum_se, loc - 8 * sd, loc + 8 * sd, nodes)
        raw = np.linspace(raw_loc - 8 * raw_sd, raw_loc + 8 * raw_sd, nodes)
        has_u = model.extra_noise != "none"
        if has_u:
            extra, extra_weight = _sinh_nodes(0.0, extra_scale, 0.0, 8 * float(model.extra_sd[j]), 61, midpoints=True)
        else:
            extra, extra_weight = np.zeros(1), np.ones(1)
        P, A, U = np.meshgrid(phi, raw, extra, indexing="ij")
        shape = P.shape + (m.n_params,)

        def full(x, fill):
            return jnp.broadcast_to(fill, shape).at[..., j].set(x)

        logp = log_density(m, full(P, m.stats.centre), full(A, m.hessian_loc), full(U, m.extra_sd) if has_u else None)[
            ..., j
        ]
        logp = np.asarray(logp) + np.log(phi_weight)[:, None, None] + np.log(extra_weight)[None, None, :]
        w = np.exp(logp - logp.max())
        w = w / w.sum()
        faces = [w[0].sum(), w[-1].sum(), w[:, 0].sum(), w[:, -1].sum()] + ([w[:, :, -1].sum()] if has_u else [])
        mean_bf = float(np.sum(w * P))
        return (mean_bf, float(np.sqrt(np.sum(w * (P - mean_bf) ** 2)))), max(faces)


@pytest.mark.slow
@pytest.mark.parametrize(("prior", "coordinates"), [("default", (0, 2)), ("paper", (0, 1, 2)), ("none", (0, 2))])
def test_grid_moments_match_a_brute_force_sum_over_all_three_unknowns(traces, prior, coordinates):
    """Coordinate 0 is weakly identified (long tail of ã towards a → 0, so a heavy tail of φ*); the brute-force
    box is the prior's, far wider than the posterior, and its sinh-spaced φ* and u nodes resolve both the bulk
    and the tails. Both sides are deterministic quadratures (they agree to ~1e-3 of an sd or better)."""
    model = gradient_model(traces[0], PRIORS[prior])
    _, _, moments = _grid(model)
    for j in coordinates:
        (mean_bf, sd_bf), face = _brute_force(model, j)
        assert face < 1e-12  # the box holds the posterior: no mass on its faces
        mean, sd = float(moments.optimum_mean[j]), float(moments.optimum_sd[j])
        assert mean == pytest.approx(mean_bf, abs=0.005 * sd)
        assert sd == pytest.approx(sd_bf, rel=0.005)


@pytest.mark.slow
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
    np.testing.assert_allclose(
        results[2].optimum_mean, finest.optimum_mean, rtol=0, atol=tolerance * float(np.max(finest.optimum_sd))
    )


@pytest.mark.slow
def test_draws_follow_the_grid_moments_and_cdf(traces):
    model = gradient_model(traces[0])
    draws = fit_one(fit_exact_batch, model, 0, ExactOptions(draws=20000))
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


@pytest.mark.slow
def test_same_key_same_draws(traces):
    model = gradient_model(traces[0])
    first, second, other = (fit_one(fit_exact_batch, model, key, ExactOptions(draws=100)) for key in (5, 5, 6))
    np.testing.assert_array_equal(first.optimum, second.optimum)
    assert not np.array_equal(first.optimum, other.optimum)


@pytest.mark.slow
def test_the_batch_gives_model_m_the_key_m(traces):
    """fit_exact_batch(models, keys=…): model m's draws are its batch of one's with keys[m], whatever its
    neighbours."""
    models = [gradient_model(t) for t in traces]
    keys = jax.random.split(jax.random.key(3), 2)
    options = ExactOptions(draws=100)
    batch = fit_exact_batch(models, keys=keys, options=options)
    for model, key, result in zip(models, keys, batch):
        single = fit_one(fit_exact_batch, model, key, options)
        np.testing.assert_allclose(result.optimum, single.optimum, rtol=1e-8)
        np.testing.assert_allclose(result.diagnostics["optimum_sd"], single.diagnostics["optimum_sd"], rtol=1e-10)
    swapped = fit_exact_batch(models[::-1], keys=keys[::-1], options=options)
    np.testing.assert_allclose(swapped[1].optimum, batch[0].optimum, rtol=1e-8)
    assert not np.array_equal(batch[0].optimum, fit_exact_batch(models, keys=keys[::-1], options=options)[0].optimum)
    with pytest.raises(TypeError):  # one key for the batch, to be split inside, is no longer accepted
        fit_exact_batch(models, key=jax.random.key(3), options=options)


@pytest.mark.slow
def test_vmapped_grids_equal_single_grids(traces):
    models = [gradient_model(t) for t in traces]
    with jax.enable_x64(True):
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *models)
        grid = functools.partial(exact_grid, **GRID_DEFAULTS)
        batch = jax.jit(jax.vmap(grid))(stacked)
        for i, model in enumerate(models):
            single = jax.jit(grid)(jax.tree_util.tree_map(jnp.asarray, model))
            np.testing.assert_allclose(batch.weights[i], single.weights, rtol=1e-9, atol=1e-300)


def test_bad_grid_settings_raise(traces):
    model = gradient_model(traces[0])
    for options in ({"passes": 0}, {"hessian_nodes": 2}, {"extra_nodes": 2}):
        with pytest.raises(ValueError) as info:
            exact_grid(model, **(GRID_DEFAULTS | options))
        mentions(info, "passes", "1", "3")
    exact_grid(gradient_model(traces[0], PRIORS["none"]), extra_nodes=1, hessian_nodes=8, passes=1)  # no u axis


_ON_TWO_DEVICES = """
import faulthandler; faulthandler.dump_traceback_later(240, exit=True)  # a hang fails with its stacks
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import numpy as np
import noiseaware as na
from tests_ou import ou_traces
(trace,) = ou_traces(1, steps=600, optimum=np.full(24, 0.5), hessian=np.full(24, 50.0), scale=np.ones(24))
one = na.fit(trace, "exact", key=2, checks="off", block=8, devices=1, draws=50, prior="trace")
two = na.fit(trace, "exact", key=2, checks="off", block=8, devices=2, draws=50, prior="trace", progress=True)
print(float(np.max(np.abs(np.asarray(one.sample(0, 40)) - np.asarray(two.sample(0, 40))))))
"""


def test_blocks_shared_by_two_devices_give_the_same_draws(tmp_path):
    """Issue 42: block b runs on device b mod n (here two CPU devices in a fresh process), with the same draws."""
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "tests_ou.py").write_text((Path(__file__).parent / "ou.py").read_text())
    run = subprocess.run(
        [sys.executable, "-c", _ON_TWO_DEVICES], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "on 2 devices" in run.stderr
    assert float(run.stdout.strip().splitlines()[-1]) == 0.0
    with pytest.raises(ValueError) as info:
        ExactOptions(devices=2)
    mentions(info, "1", "devices")
