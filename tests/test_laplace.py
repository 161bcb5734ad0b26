"""The Laplace route against brute force: scipy's optimiser, finite differences and 3-D quadrature."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from messages import mentions
from ou import ou_trace
from scipy import optimize
from scipy import stats as scipy_stats
from solvers import fit_one

from noiseaware.inference.gradient_model import Prior, gradient_model, log_likelihood
from noiseaware.inference.laplace import fit_laplace_batch, laplace_approximation, unconstrained_log_density
from noiseaware.methods import LaplaceOptions

# "paper" has the softplus link and a normal u; "exp" is the default's link now, so it compiles nothing new
PRIORS = {"default": "default", "paper": "paper", "none": Prior(extra_noise="none"), "exp": Prior(hessian_link="exp")}


def laplace(model, key, **options):
    """The Laplace route's draws for one gradient model (a batch of one) with its options."""
    return fit_one(fit_laplace_batch, model, key, LaplaceOptions(**options))


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="module")
def trace():
    return ou_trace(steps=4000)


@pytest.fixture(scope="module")
def long_trace():
    return ou_trace(steps=50_000, seed=1)


def as_jax(model):
    return jax.tree.map(jnp.asarray, model)


@jax.jit
def coordinate_log_density(model, mode, j, x):
    return unconstrained_log_density(model, mode.at[j].set(x))[j]


# the coordinates are independent, so the gradient of the sum is every coordinate's own gradient, (P, k)
gradients = jax.jit(jax.grad(lambda model, x: jnp.sum(unconstrained_log_density(model, x)), argnums=1))


def coordinate_objective(model, mode, j):
    """f(x) = −log p(x | trace) of coordinate j alone, x (k,) in the unconstrained space, as a numpy function."""
    return lambda x: -float(coordinate_log_density(model, mode, j, x))


def test_the_mode_is_stationary_and_matches_a_brute_force_optimiser(trace):
    model = as_jax(gradient_model(trace))
    fit = laplace_approximation(model)
    assert fit.mode.shape == (4, 3) and fit.covariance.shape == (4, 3, 3)
    assert np.all(fit.converged) and np.all(fit.positive_definite) and np.all(fit.finite)
    sd = np.sqrt(np.diagonal(fit.covariance, axis1=-2, axis2=-1))
    assert np.max(np.abs(gradients(model, fit.mode) * sd)) < 1e-6
    for j in (0, 3):
        objective = coordinate_objective(model, fit.mode, j)
        # Nelder–Mead in posterior-sd units, started one sd off in every direction
        result = optimize.minimize(
            lambda z, objective=objective, j=j: objective(fit.mode[j] + sd[j] * z),
            np.array([1.0, -1.0, 1.0]),
            method="Nelder-Mead",
            options={"xatol": 1e-9, "fatol": 1e-13, "maxiter": 5000},
        )
        np.testing.assert_allclose(result.x, 0.0, atol=1e-4)
        assert -result.fun <= float(fit.log_density[j]) + 1e-9


def test_the_covariance_is_the_inverse_of_a_finite_difference_hessian(trace):
    model = as_jax(gradient_model(trace))
    fit = laplace_approximation(model)
    j = 2
    objective = coordinate_objective(model, fit.mode, j)
    sd = np.sqrt(np.diag(fit.covariance[j]))
    h = 1e-2
    # central second differences of f in posterior-sd units z, x = mode + sd ⊙ z
    steps = h * np.eye(3)
    hessian = np.array(
        [
            [
                (
                    objective(fit.mode[j] + sd * (a + b))
                    - objective(fit.mode[j] + sd * (a - b))
                    - objective(fit.mode[j] + sd * (b - a))
                    + objective(fit.mode[j] - sd * (a + b))
                )
                / (4 * h * h)
                for b in steps
            ]
            for a in steps
        ]
    )
    standardised = np.asarray(fit.covariance[j]) / np.outer(sd, sd)
    np.testing.assert_allclose(np.linalg.inv(hessian), standardised, atol=1e-3)


def quadrature_moments(model):
    """φ*'s posterior mean and sd per coordinate by brute force, and the largest weight on the grid's edge: a
    trapezoid grid over all three unknowns, φ*, ã (±8 prior sds) and u, of the pointwise log-likelihood
    (`log_likelihood`) times the priors, with nothing integrated in closed form.

    u's prior is ∝ exp(−u²/2σ_u²) on u ≥ 0 for both the half-normal and the folded normal; its grid reaches the
    smaller of 4 σ_u and u² = 20 sampling sds of a variance estimate from T' steps, v·sqrt(2/T'). φ*'s grid is
    placed three times: ±60 standard errors of the slope-free mean around φ̄ first, then twice ±25 sds around the
    mean the last grid found.
    """
    stats = model.stats
    a = model.hessian_loc + model.hessian_sd * np.linspace(-8.0, 8.0, 121)[:, None, None, None]
    u = np.zeros((1, 1, 1, 1))
    if model.extra_noise != "none":
        top = np.minimum(4.0 * model.extra_sd, np.sqrt(20.0 * model.noise_var * np.sqrt(2.0 / stats.count)))
        u = top * np.linspace(0.0, 1.0, 61)[None, :, None, None]
    log_prior = scipy_stats.norm.logpdf(a, model.hessian_loc, model.hessian_sd)
    if model.extra_noise != "none":
        log_prior = log_prior - 0.5 * (u / model.extra_sd) ** 2
    hessian = np.asarray(model.hessian(jnp.asarray(a)))
    spread = 60.0 * np.sqrt(model.noise_var / stats.count) / (model.sampling_rate * hessian.min(axis=(0, 1, 2)))

    def on_grid(centre, width):
        """φ*'s posterior weights on a grid of 301 values per coordinate over centre ± width, with their mean and sd."""
        optimum = centre + width * np.linspace(-1.0, 1.0, 301)[:, None]
        log_weight = np.asarray(log_likelihood(model, optimum, hessian, u**2)) + log_prior
        log_weight = log_weight + scipy_stats.norm.logpdf(optimum, model.optimum_loc, model.optimum_sd)
        weight = np.exp(log_weight - log_weight.max(axis=(0, 1, 2)))
        weight /= weight.sum(axis=(0, 1, 2))
        mean = np.sum(weight * optimum, axis=(0, 1, 2))
        return weight, mean, np.sqrt(np.sum(weight * (optimum - mean) ** 2, axis=(0, 1, 2)))

    weight, mean, sd = on_grid(np.asarray(stats.centre), spread)
    for _ in range(2):  # each grid placed where the last found the mass: ±25 of its sds (φ*'s tail where a → 0)
        weight, mean, sd = on_grid(mean, 25.0 * sd)
    on_edge = [weight[[0, -1]].max(), weight[:, :, [0, -1]].max()]
    if model.extra_noise != "none":
        on_edge.append(weight[:, -1].max())
    return mean, sd, max(on_edge)


@pytest.mark.parametrize("prior", PRIORS)
def test_laplace_matches_quadrature_when_the_posterior_is_near_gaussian(long_trace, prior):
    model = gradient_model(long_trace, PRIORS[prior])
    draws = laplace(model, 0)
    mean, sd, edge = quadrature_moments(model)
    assert edge < 1e-12
    diagnostics = draws.diagnostics
    np.testing.assert_allclose((diagnostics["optimum_map"] - mean) / sd, 0.0, atol=0.01)
    # Laplace is too narrow where A is least identified: coordinate 0 by 3–4 % here, 7 % at T = 2·10⁴ and
    # 20 % at T = 4000 (10× with a softplus link and a 5× wider prior): ã's posterior has a long tail
    # towards a → 0, where φ* is barely constrained by the trace
    np.testing.assert_allclose(diagnostics["optimum_sd"] / sd, 1.0, atol=0.05)
    # and the draws follow that Gaussian (Monte Carlo error of 4000 draws ≈ 1.6 % of an sd)
    np.testing.assert_allclose((draws.optimum[0].mean(axis=0) - mean) / sd, 0.0, atol=0.06)
    np.testing.assert_allclose(draws.optimum[0].std(axis=0) / sd, 1.0, atol=0.06)
    assert (draws.extra_noise is None) == (prior == "none")


def test_full_draws_follow_the_laplace_gaussian_in_the_unconstrained_space(trace):
    model = gradient_model(trace)
    draws = laplace(model, 1, draws=20_000)
    assert draws.optimum.shape == draws.hessian.shape == draws.extra_noise.shape == (1, 20_000, 4)
    assert draws.optimum.dtype == np.float64
    assert np.all(draws.hessian > 0) and np.all(draws.extra_noise > 0)
    hessian_raw = np.log(draws.hessian[0]) if model.hessian_link == "exp" else np.log(np.expm1(draws.hessian[0]))
    x = np.stack([draws.optimum[0], hessian_raw, np.log(draws.extra_noise[0])], axis=-1)
    covariance = draws.diagnostics["covariance"]
    sd = np.sqrt(np.diagonal(covariance, axis1=-2, axis2=-1))
    for j in range(4):
        empirical = np.cov(x[:, j].T) / np.outer(sd[j], sd[j])
        np.testing.assert_allclose(empirical, covariance[j] / np.outer(sd[j], sd[j]), atol=0.04)


def test_paper_style_draws_only_the_mu_half_with_u_fixed_at_zero(trace):
    draws = laplace(gradient_model(trace), 2, style="paper")
    # u = 0 with the default prior's (φ*, ã) priors is the same target as the prior without extra noise
    no_extra = laplace(gradient_model(trace, Prior(extra_noise="none")), 2).diagnostics
    diagnostics = draws.diagnostics
    assert diagnostics["style"] == "paper" and diagnostics["extra_noise_map"] is None
    np.testing.assert_allclose(diagnostics["optimum_map"], no_extra["optimum_map"], rtol=1e-10)
    np.testing.assert_allclose(diagnostics["optimum_sd"], no_extra["optimum_sd"], rtol=1e-8)
    optimum = draws.optimum[0]
    np.testing.assert_array_equal(optimum[:, 2:], np.broadcast_to(diagnostics["optimum_map"][2:], (4000, 2)))
    np.testing.assert_allclose(optimum[:, :2].std(axis=0) / diagnostics["optimum_sd"][:2], 1.0, atol=0.05)
    np.testing.assert_allclose(
        (optimum[:, :2].mean(axis=0) - diagnostics["optimum_map"][:2]) / diagnostics["optimum_sd"][:2], 0.0, atol=0.06
    )
    np.testing.assert_array_equal(draws.hessian[0], np.broadcast_to(diagnostics["hessian_map"], (4000, 4)))
    np.testing.assert_array_equal(draws.extra_noise, 0.0)


def saddle_and_improper(model):
    """The model with coordinate 2's statistics at a saddle and coordinate 1's likelihood improper.

    Coordinate 2: Σφ̃ with (Σφ̃)² > T'Σφ̃² (impossible for real data), Σ G = c Σφ̃ and Σ Gφ̃ = c Σφ̃² at
    c = q·link(prior mean of ã): the prior means are stationary and the Hessian there is indefinite.
    Coordinate 1: Σφ̃² < 0, so the likelihood grows without bound as a → ∞.
    """
    stats = model.stats
    c = model.sampling_rate * float(model.hessian(model.hessian_loc[2]))
    sum_phi = stats.sum_phi.copy()
    sum_phi[2] = 1e3 * np.sqrt(stats.count * stats.sum_phiphi[2])
    sum_g, sum_gphi, sum_phiphi = stats.sum_g.copy(), stats.sum_gphi.copy(), stats.sum_phiphi.copy()
    sum_g[2], sum_gphi[2] = c * sum_phi[2], c * sum_phiphi[2]
    sum_phiphi[1] = -1e3 * stats.sum_phiphi[1]
    stats = stats._replace(sum_phi=sum_phi, sum_g=sum_g, sum_gphi=sum_gphi, sum_phiphi=sum_phiphi)
    return dataclasses.replace(model, stats=stats)


def test_a_saddle_or_an_improper_posterior_raises_a_clear_error_and_no_nan_escapes(trace):
    model = saddle_and_improper(gradient_model(trace, Prior(extra_noise="none")))
    fit = laplace_approximation(as_jax(model))
    assert not fit.positive_definite[2] and fit.converged[2]
    assert not (fit.converged[1] and fit.finite[1])
    for j in (0, 3):
        assert fit.converged[j] and fit.positive_definite[j] and fit.finite[j]
    with pytest.raises(ValueError) as error:
        laplace(model, 0)
    mentions(error, "[2]")
    message = str(error.value)
    mentions(message, "[1]", 'method="exact"', "longer", "trace")
    assert "[0" not in message and "3]" not in message


def test_same_key_same_draws_and_int_keys_work(trace):
    model = gradient_model(trace)
    first, again = laplace(model, 5, draws=100), laplace(model, 5, draws=100)
    other = laplace(model, jax.random.key(6), draws=100)
    for name in ("optimum", "hessian", "extra_noise"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
        assert not np.array_equal(getattr(first, name), getattr(other, name))


def test_the_batch_gives_model_m_the_key_m_and_a_failed_model_its_error(trace):
    """fit_laplace_batch(models, keys=…): model m's draws are its batch of one's with keys[m]; a model whose solve
    fails gets the ValueError its batch of one raises, in its place, and the others are unaffected."""
    prior = Prior(extra_noise="none")
    good = gradient_model(trace, prior)
    bad = saddle_and_improper(gradient_model(ou_trace(steps=3000, seed=3), prior))
    keys = jax.random.split(jax.random.key(8), 3)
    batch = fit_laplace_batch([good, bad, good], keys=keys, options=LaplaceOptions(draws=100))
    assert isinstance(batch[1], ValueError)
    mentions(batch[1], "positive", "definite")
    for m in (0, 2):
        single = laplace(good, keys[m], draws=100)
        np.testing.assert_allclose(batch[m].optimum, single.optimum, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(batch[m].diagnostics["optimum_map"], single.diagnostics["optimum_map"], rtol=1e-10)
    assert not np.array_equal(batch[0].optimum, batch[2].optimum)  # the same model, its own key
    with pytest.raises(TypeError):  # one key for the batch is no longer accepted
        fit_laplace_batch([good], key=keys[0], options=LaplaceOptions(draws=100))


def test_vmapped_over_stacked_models_equals_one_model_at_a_time():
    models = [as_jax(gradient_model(ou_trace(steps=steps, seed=seed))) for steps, seed in ((3000, 3), (5000, 4))]
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *models)
    together = jax.vmap(laplace_approximation)(stacked)
    for m, model in enumerate(models):
        alone = laplace_approximation(model)
        for name, value in alone._asdict().items():
            np.testing.assert_allclose(getattr(together, name)[m], value, rtol=1e-9, err_msg=name)


def test_bad_arguments_raise(trace):
    model = gradient_model(trace)
    with pytest.raises(ValueError) as info:
        laplace(model, 0, style="research")
    mentions(info, "Laplace", "'research'")
    with pytest.raises(ValueError) as info:
        laplace(model, 0, draws=0)
    mentions(info, "draws", "draws=0")
    odd = jax.tree.map(lambda leaf: leaf[:3] if np.ndim(leaf) else leaf, model)
    with pytest.raises(ValueError) as info:
        laplace(odd, 0, style="paper")
    mentions(info, "P", "3")
