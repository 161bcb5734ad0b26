"""The NUTS route against brute-force quadrature of the same posterior, across backends, chains and vmap."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from arviz_stats.base import array_stats
from messages import mentions
from ou import ou_trace
from solvers import fit_one

from noiseaware.inference import nuts, nuts_target
from noiseaware.inference.exact import GRID_DEFAULTS, exact_grid, marginal_quantiles
from noiseaware.inference.gradient_model import Prior, gradient_model, integrate_optimum, prior_distributions
from noiseaware.inference.nuts import fit_nuts_batch, initial_values, nuts_blackjax_draws
from noiseaware.inference.nuts_target import prior_placement, sampled_target, symmetric
from noiseaware.methods import NutsOptions
from noiseaware.util.defaults import WARM_START_WARMUP, WARMUP
from noiseaware.util.keys import as_key

PRIORS = {"default": "default", "paper": "paper", "none": Prior(extra_noise="none")}


def nuts_fit(model, key, **options):
    """The NUTS route's draws for one gradient model (a batch of one) with its options."""
    return fit_one(fit_nuts_batch, model, key, NutsOptions(**options))


@pytest.fixture(scope="module")
def trace():
    return ou_trace()


@pytest.fixture(scope="module")
def numpyro_fits(trace):
    """Fits with the route's defaults (the exact start, its warm-up, 4000 draws, 1 chain) under each prior."""
    return {name: nuts_fit(gradient_model(trace, prior), 0, backend="numpyro") for name, prior in PRIORS.items()}


@pytest.fixture(scope="module")
def blackjax_fit(trace):
    """The route's default: blackjax from the exact start."""
    return nuts_fit(gradient_model(trace), 0, backend="blackjax")


@pytest.fixture(scope="module")
def cold_fit(trace):
    """The cold start: blackjax from the prior means, with the cold start's warm-up."""
    return nuts_fit(gradient_model(trace), 0, backend="blackjax", start="prior")


def reference_moments(model, hessian_nodes=401, extra_nodes=201):
    """Marginal posterior mean and sd of φ*_j, (P,) each, by brute-force quadrature over (ã_j, u_j).

    φ* is integrated analytically given (ã, u) (`integrate_optimum`); ã on a uniform grid of ±10 prior sd,
    u = 8 σ_u x² with x on a midpoint grid of [0, 1] (the integrand is even in u, and u ≥ 0 suffices).
    Doubling both grids changes the moments by < 1e-5 relative on these traces.
    """
    with jax.enable_x64(True):
        model = jax.tree_util.tree_map(jnp.asarray, model)
        mean, sd = _quadrature_moments(model, hessian_nodes=hessian_nodes, extra_nodes=extra_nodes)
        return np.asarray(mean), np.asarray(sd)


@functools.partial(jax.jit, static_argnames=("hessian_nodes", "extra_nodes"))
def _quadrature_moments(model, *, hessian_nodes, extra_nodes):
    """`reference_moments` as one compiled program (not one per operation)."""
    priors = prior_distributions(model)
    raw = model.hessian_loc + model.hessian_sd * jnp.linspace(-10.0, 10.0, hessian_nodes)[:, None, None]
    log_weight = priors["hessian_raw"].log_prob(raw)
    extra = jnp.zeros((1, 1, 1))
    if "extra_noise" in priors:
        x = (jnp.arange(extra_nodes) + 0.5)[None, :, None] / extra_nodes
        extra = 8.0 * model.extra_sd * x**2
        log_weight = log_weight + priors["extra_noise"].log_prob(extra) + jnp.log(x)  # du ∝ x dx
    conditional = integrate_optimum(model, raw, extra**2)
    log_weight = (log_weight + conditional.log_marginal).reshape(-1, model.n_params)
    weight = jax.nn.softmax(log_weight, axis=0).reshape(conditional.mean.shape)
    mean = jnp.sum(weight * conditional.mean, axis=(0, 1))
    variance = jnp.sum(weight * (conditional.sd**2 + (conditional.mean - mean) ** 2), axis=(0, 1))
    return mean, jnp.sqrt(variance)


def moments_with_errors(draws):
    """Posterior mean and sd of φ* from NUTS draws with their Monte Carlo standard errors, (P,) each.

    The mean's MCSE is sd / sqrt(bulk ESS) with the ESS the fit reports; the sd's MCSE is ArviZ's.
    """
    optimum = draws.optimum
    sd = optimum.std(axis=(0, 1))
    sd_error = array_stats.mcse(optimum, chain_axis=0, draw_axis=1, method="sd")
    return optimum.mean(axis=(0, 1)), sd / np.sqrt(draws.diagnostics["ess_bulk"]["optimum"]), sd, sd_error


def test_initial_values_are_the_prior_means():
    model = gradient_model(ou_trace(steps=200))
    values = initial_values(model)
    np.testing.assert_array_equal(values["optimum"], model.optimum_loc)
    np.testing.assert_array_equal(values["hessian_raw"], model.hessian_loc)
    np.testing.assert_allclose(values["extra_noise"], model.extra_sd * np.sqrt(2 / np.pi))
    paper = gradient_model(ou_trace(steps=200), "paper")
    np.testing.assert_allclose(initial_values(paper)["extra_noise"], 0.5 * paper.extra_sd)
    assert "extra_noise" not in initial_values(gradient_model(ou_trace(steps=200), PRIORS["none"]))


@jax.jit
def exact_start(model):
    """The exact start by hand: the grid's medians of ã and u (u = 0 when one mode sits about 0), φ* at its
    conditional mean there; one compiled program."""
    grid = exact_grid(model, **GRID_DEFAULTS)
    expected = {"hessian_raw": marginal_quantiles(grid.hessian_raw, jnp.sum(grid.weights, axis=1))[:, 1]}
    low, median, high = marginal_quantiles(grid.extra_noise, jnp.sum(grid.weights, axis=0)).T
    expected["extra_noise"] = jnp.where(low > 0.5 * (high - low), median, 0.0)  # one mode about 0, or two
    conditional = integrate_optimum(model, expected["hessian_raw"], expected["extra_noise"] ** 2)
    return expected | {"optimum": conditional.mean}


@pytest.mark.slow
@pytest.mark.parametrize("start", nuts.STARTS)
@pytest.mark.parametrize("prior", ["default", "paper"])
def test_sampled_coordinates_are_a_change_of_variables_of_numpyros_potential(prior, start):
    """U_y(y) = U(z(y)) − log|det ∂z/∂y| + const, with the Jacobian by autodiff, and y₀ maps to the start: the prior
    means, or the exact grid's medians of ã and u with φ* at its conditional mean there."""
    from numpyro.infer.util import potential_energy

    from noiseaware.inference.gradient_model import numpyro_model

    with jax.enable_x64(True):
        model = jax.tree_util.tree_map(jnp.asarray, gradient_model(ou_trace(steps=500), prior))
        target, y0, warm = sampled_target(model, start)
        assert warm.shape == (model.n_params,) and bool(jnp.all(warm)) == (start == "exact")
        sites = target.sites(y0, 0)
        if start == "prior":
            expected = initial_values(model)
        else:
            expected = exact_start(model)
        for name, value in expected.items():
            np.testing.assert_allclose(sites[name], value, rtol=1e-9, atol=1e-12)
        sampled = target.model  # from the exact start, the sign-symmetric twin (u on the line) under either prior
        assert sampled.extra_noise == ("normal" if start == "exact" else model.extra_noise)

        def flat(y):
            z, _ = target.unconstrained(y)
            return jnp.stack([z[name] for name in ("optimum", *target.names)], axis=-1)

        @jax.jit
        def offset(y):
            jacobian = jax.jacfwd(flat)(y)  # (P, k, P, k), block diagonal over coordinates
            blocks = jacobian[jnp.arange(y.shape[0]), :, jnp.arange(y.shape[0]), :]
            log_det = jnp.sum(jnp.linalg.slogdet(blocks)[1])
            potential = potential_energy(numpyro_model, (sampled,), {}, target.unconstrained(y)[0])
            return target.potential(y) - potential + log_det

        offsets = [float(offset(y0 + jax.random.normal(jax.random.key(seed), y0.shape))) for seed in range(3)]
    np.testing.assert_allclose(offsets, offsets[0], rtol=0, atol=1e-8)


def test_the_sign_symmetric_twin_has_the_half_normal_posterior_of_abs_u():
    """For u > 0 the twin's potential in u is the half-normal model's in log u plus log u (the Jacobian) plus a
    constant (P·log 2, the half-normal's normalisation): the law of |u| under the twin is the model's posterior."""
    from numpyro.infer.util import potential_energy

    from noiseaware.inference.gradient_model import numpyro_model

    with jax.enable_x64(True):
        model = jax.tree_util.tree_map(jnp.asarray, gradient_model(ou_trace(steps=500)))
        twin = symmetric(model)
        assert (model.extra_noise, twin.extra_noise) == ("half-normal", "normal")
        differences = []
        for seed in range(3):
            keys = jax.random.split(jax.random.key(seed), 3)
            optimum = model.optimum_loc + 0.01 * jax.random.normal(keys[0], (model.n_params,))
            raw = model.hessian_loc + jax.random.normal(keys[1], (model.n_params,))
            extra = model.extra_sd * jax.random.uniform(keys[2], (model.n_params,), minval=0.01, maxval=2.0)
            on_line = potential_energy(numpyro_model, (twin,), {}, {"optimum": optimum, "hessian_raw": raw,
                                                                      "extra_noise": extra})  # fmt: skip
            in_log = potential_energy(numpyro_model, (model,), {}, {"optimum": optimum, "hessian_raw": raw,
                                                                     "extra_noise": jnp.log(extra)})  # fmt: skip
            differences.append(float(on_line - in_log - jnp.sum(jnp.log(extra))))
    np.testing.assert_allclose(differences, model.n_params * np.log(2.0), rtol=0, atol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("prior", list(PRIORS))
def test_nuts_matches_quadrature_within_monte_carlo_error(trace, numpyro_fits, prior):
    draws = numpyro_fits[prior]
    reference_mean, reference_sd = reference_moments(gradient_model(trace, PRIORS[prior]))
    mean, mean_error, sd, sd_error = moments_with_errors(draws)
    np.testing.assert_array_less(np.abs(mean - reference_mean), 4 * mean_error)
    np.testing.assert_array_less(np.abs(sd - reference_sd), 4 * sd_error)
    assert draws.diagnostics["max_rhat"] < 1.01
    assert draws.diagnostics["min_ess"] > 800


@pytest.mark.slow
def test_backends_agree_with_each_other_and_the_reference(trace, numpyro_fits, blackjax_fit):
    reference_mean, _ = reference_moments(gradient_model(trace))
    mean_n, error_n, sd_n, sd_error_n = moments_with_errors(numpyro_fits["default"])
    mean_b, error_b, sd_b, sd_error_b = moments_with_errors(blackjax_fit)
    np.testing.assert_array_less(np.abs(mean_n - mean_b), 4 * np.hypot(error_n, error_b))
    np.testing.assert_array_less(np.abs(sd_n - sd_b), 4 * np.hypot(sd_error_n, sd_error_b))
    np.testing.assert_array_less(np.abs(mean_b - reference_mean), 4 * error_b)
    for site in ("hessian", "extra_noise"):
        a, b = getattr(numpyro_fits["default"], site), getattr(blackjax_fit, site)
        error = np.hypot(*(x.std(axis=(0, 1)) / np.sqrt(array_stats.ess(x, chain_axis=0, draw_axis=1)) for x in (a, b)))
        np.testing.assert_array_less(np.abs(a.mean(axis=(0, 1)) - b.mean(axis=(0, 1))), 4 * error)
    diagnostics = blackjax_fit.diagnostics
    assert diagnostics["backend"] == "blackjax" and diagnostics["max_rhat"] < 1.01 and diagnostics["divergences"] == 0


@pytest.mark.slow
def test_from_the_exact_start_the_target_is_near_unit_scale_and_the_moments_match(trace, blackjax_fit):
    """From the exact start the sampled coordinates are near unit scale, so an identity mass matrix fits them: y_ã
    has posterior mean within 0.5 of 0 and sd within a factor 1.5 of 1, and y_u (on the line, seen through |u|)
    has E y_u² within a factor 1.5² of 1; φ*'s moments agree with brute-force quadrature within Monte Carlo
    error."""
    model = gradient_model(trace)
    with jax.enable_x64(True):
        target, _, warm = sampled_target(jax.tree_util.tree_map(jnp.asarray, model), "exact")
    centre, scale = ({name: np.asarray(v) for name, v in values.items()} for values in (target.centre, target.scale))
    assert bool(jnp.all(warm)) and model.hessian_link == "exp"
    y = (np.log(blackjax_fit.hessian) - centre["hessian_raw"]) / scale["hessian_raw"]
    np.testing.assert_array_less(np.abs(y.mean(axis=(0, 1))), 0.5)
    np.testing.assert_array_less(np.abs(np.log(y.std(axis=(0, 1)))), np.log(1.5))
    y = (blackjax_fit.extra_noise - centre["extra_noise"]) / scale["extra_noise"]
    np.testing.assert_array_less(np.abs(np.log(np.mean(y**2, axis=(0, 1)))), 2 * np.log(1.5))
    reference_mean, reference_sd = reference_moments(model)
    mean, mean_error, sd, sd_error = moments_with_errors(blackjax_fit)
    np.testing.assert_array_less(np.abs(mean - reference_mean), 4 * mean_error)
    np.testing.assert_array_less(np.abs(sd - reference_sd), 4 * sd_error)
    diagnostics = blackjax_fit.diagnostics
    assert (diagnostics["start"], diagnostics["cold_coordinates"]) == ("exact", 0)
    assert diagnostics["max_rhat"] < 1.01 and diagnostics["min_ess"] > 800


@pytest.mark.slow
def test_the_cold_start_still_matches_quadrature(trace, cold_fit):
    reference_mean, reference_sd = reference_moments(gradient_model(trace))
    mean, mean_error, sd, sd_error = moments_with_errors(cold_fit)
    np.testing.assert_array_less(np.abs(mean - reference_mean), 4 * mean_error)
    np.testing.assert_array_less(np.abs(sd - reference_sd), 4 * sd_error)
    diagnostics = cold_fit.diagnostics
    assert (diagnostics["start"], diagnostics["warmup"]) == ("prior", WARMUP)
    assert diagnostics["max_rhat"] < 1.01 and diagnostics["min_ess"] > 800


def test_coordinates_without_a_usable_grid_start_cold(monkeypatch):
    """A coordinate whose grid holds more than EDGE_TRUST of its mass on its edge starts at the prior means, placed
    as the cold start places the sampled (sign-symmetric) model."""
    monkeypatch.setattr(nuts_target, "EDGE_TRUST", -1.0)
    with jax.enable_x64(True):
        model = jax.tree_util.tree_map(jnp.asarray, gradient_model(ou_trace(steps=500)))
        exact, exact_y0, warm = sampled_target(model, "exact")
        prior, prior_y0 = prior_placement(symmetric(model))
    assert not bool(jnp.any(warm))
    np.testing.assert_array_equal(exact_y0, prior_y0)
    for name in prior.names:
        np.testing.assert_array_equal(exact.centre[name], prior.centre[name])
        np.testing.assert_array_equal(exact.scale[name], prior.scale[name])


@pytest.mark.slow
def test_draws_shapes_and_diagnostics(numpyro_fits):
    draws = numpyro_fits["default"]
    for value in (draws.optimum, draws.hessian, draws.extra_noise):
        assert value.shape == (1, 4000, 4) and value.dtype == np.float64
    assert np.all(draws.hessian > 0) and np.all(draws.extra_noise >= 0)
    diagnostics = draws.diagnostics
    assert set(diagnostics["rhat"]) == set(diagnostics["ess_bulk"]) == {"optimum", "hessian", "extra_noise_squared"}
    assert all(value.shape == (4,) for value in diagnostics["rhat"].values())
    assert (diagnostics["warmup"], diagnostics["draws"], diagnostics["chains"]) == (WARM_START_WARMUP, 4000, 1)
    assert diagnostics["step_size"].shape == (1,) and diagnostics["divergences"] == 0


@pytest.mark.slow
def test_without_extra_noise_there_is_no_extra_noise_site(numpyro_fits):
    draws = numpyro_fits["none"]
    assert draws.extra_noise is None
    assert set(draws.diagnostics["rhat"]) == {"optimum", "hessian"}


@pytest.mark.slow
def test_several_chains_converge(trace):
    draws = nuts_fit(gradient_model(trace), 1, chains=3, warmup=500, draws=1000, backend="numpyro")
    assert draws.optimum.shape == (3, 1000, 4) and draws.diagnostics["step_size"].shape == (3,)
    assert not np.array_equal(draws.optimum[0], draws.optimum[1])
    assert draws.diagnostics["max_rhat"] < 1.01


@pytest.mark.slow
def test_same_key_same_draws(trace, numpyro_fits, blackjax_fit):
    model = gradient_model(trace)
    np.testing.assert_array_equal(nuts_fit(model, 0, backend="numpyro").optimum, numpyro_fits["default"].optimum)
    again, other = (nuts_fit(model, key, backend="blackjax") for key in (0, 1))
    np.testing.assert_array_equal(again.optimum, blackjax_fit.optimum)
    np.testing.assert_array_equal(again.extra_noise, blackjax_fit.extra_noise)
    assert not np.array_equal(other.optimum, blackjax_fit.optimum)


@pytest.mark.slow
def test_vmapped_blackjax_matches_separate_runs():
    """One vmapped run over 3 traces against separate runs with the same keys.

    Not bitwise: batched reductions round differently and NUTS amplifies last-bit differences within
    ~100 transitions, so each simulation must agree with its own separate run within Monte Carlo error
    and be told apart from the other simulations' runs.
    """
    models = [gradient_model(ou_trace(seed=seed)) for seed in (1, 2, 3)]
    keys = [as_key(10 + seed) for seed in (1, 2, 3)]
    with jax.enable_x64(True):
        stacked = jax.tree_util.tree_map(lambda *leaves: jnp.stack([jnp.asarray(x) for x in leaves]), *models)
        run = jax.jit(jax.vmap(lambda model, key: nuts_blackjax_draws(model, key, 1000, 4000)))
        batch = run(stacked, jnp.stack(keys))
    batch = jax.tree_util.tree_map(np.asarray, batch)
    assert batch.optimum.shape == (3, 1, 4000, 4) and batch.extra_noise.shape == (3, 1, 4000, 4)
    assert batch.divergences.shape == batch.step_size.shape == (3, 1) and batch.finite.shape == (3,)
    assert np.all(batch.finite) and np.sum(batch.divergences) == 0
    singles = [moments_with_errors(nuts_fit(model, key, backend="blackjax")) for model, key in zip(models, keys)]
    for i, batched in enumerate(batch.optimum):
        batched_error = batched.std(axis=(0, 1)) / np.sqrt(array_stats.ess(batched, chain_axis=0, draw_axis=1))
        for j, (mean, error, *_) in enumerate(singles):
            close = np.all(np.abs(batched.mean(axis=(0, 1)) - mean) < 4 * np.hypot(error, batched_error))
            assert close == (i == j)


@pytest.mark.slow
def test_the_batch_gives_model_m_the_key_m():
    """fit_nuts_batch(models, keys=…, options): with numpyro (one model after another) model m's draws are its
    batch of one's with keys[m] exactly; with blackjax (vmapped) each model gets its own key's chain."""
    models = [gradient_model(ou_trace(steps=1000, seed=seed)) for seed in (1, 2)]
    keys = jax.random.split(jax.random.key(4), 2)
    settings = {"warmup": 100, "draws": 100}
    batch = fit_nuts_batch(models, keys=keys, options=NutsOptions(backend="numpyro", **settings))
    for model, key, result in zip(models, keys, batch):
        single = nuts_fit(model, key, backend="numpyro", **settings)
        np.testing.assert_array_equal(result.optimum, single.optimum)
        assert result.diagnostics["backend"] == "numpyro"
    same_model = fit_nuts_batch([models[0], models[0]], keys=keys, options=NutsOptions(chunk=2, **settings))
    assert same_model[0].diagnostics["backend"] == "blackjax"
    assert not np.array_equal(same_model[0].optimum, same_model[1].optimum)  # one key each, not one for all
    with pytest.raises(TypeError):  # one key for the batch is no longer accepted
        fit_nuts_batch(models, key=keys[0], options=NutsOptions(**settings))


def test_bad_arguments_raise():
    model = gradient_model(ou_trace(steps=200))
    with pytest.raises(ValueError) as info:
        nuts_fit(model, 0, backend="stan")
    mentions(info, "backend", "'stan'", "numpyro", "blackjax")
    with pytest.raises(ValueError, match="target_accept"):
        nuts_fit(model, 0, target_accept=1.0)
    with pytest.raises(ValueError) as info:
        nuts_fit(model, 0, chains=0)
    mentions(info, "chains", "chains=0")
    with pytest.raises(ValueError) as info:
        nuts_fit(model, 0, start="cold")
    mentions(info, "'cold'", "exact", "prior")
