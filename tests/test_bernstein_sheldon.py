"""Bernstein & Sheldon 2018 (docs/baselines.md §1.8): the primitives (T1), ε → ∞ (T2), the exact noise-aware
posterior of M2 on a grid (T3), wider than non-private (T4), calibration (T5), ε → 0 (T6), NUTS on the same
target (T7), the truncated moments (T8), the release's sensitivities and scales (T9), the posteriors'
protocol (intervals, summaries, files), the methods bs2018 and bs2018-naive, and bad inputs."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import xarray as xr
from messages import mentions
from numpyro.distributions import constraints
from scipy import stats
from scipy.special import betaln, digamma, gammaln, logsumexp, polygamma

import noiseaware as na
from noiseaware.baselines.bernstein_sheldon import (
    CONJUGATE,
    ConjugateLaw,
    GibbsSettings,
    Release,
    ReleaseSettings,
    bernstein_sheldon_naive,
    bernstein_sheldon_posterior,
    bs2018_batch,
    naive_posteriors,
    noise_aware_posteriors,
    release_statistics,
)
from noiseaware.baselines.expfam import FAMILIES, family, prior_predictive_bound
from noiseaware.baselines.mechanisms import analytic_gaussian_sigma
from noiseaware.baselines.primitives import condition_gaussian, draw_in_support, inverse_gaussian, mixing_variance
from noiseaware.baselines.sampled import (
    GIBBS,
    ClosedFormPosterior,
    GibbsDiagnostics,
    ReleaseDiagnostics,
    gibbs_posterior,
)
from noiseaware.evaluation.experiment import aggregate_diagnostics
from noiseaware.methods.base import Batch, fit_problems
from noiseaware.methods.data_baselines import BS2018, BS2018_NAIVE, BS2018NaiveOptions, BS2018Options
from noiseaware.models.builtin import get
from noiseaware.posteriors.base import Posterior
from noiseaware.util.errors import DIVERGED, FitFailure

SHORT = {"chains": 4, "warmup": 300, "draws": 2500}
TINY = {"chains": 2, "warmup": 30, "draws": 60}  # one compiled sampler for the plumbing tests
MODELS = tuple(FAMILIES)


def keys(seed, m):
    """m PRNG keys, one per data set."""
    return jax.random.split(jax.random.key(seed), m)


def simulate(model, n, m, seed):
    """m data sets of n records from the model's prior predictive: truth θ (m, d), x (m, n)."""
    bm = get(model)
    truth, data = jax.vmap(bm.simulate)(jax.random.split(jax.random.key(seed), m))
    return np.asarray(truth, np.float64), np.asarray(data["x"])[:, :n]  # the first n of N = 5000 are iid too


def conjugate(fam, params):
    """A conjugate closed-form posterior of given parameters (no release behind it)."""
    return ClosedFormPosterior(
        law=ConjugateLaw(fam, np.asarray(params, np.float64)),
        theta_names=fam.theta_names,
        method="reference",
        diagnostics=ReleaseDiagnostics(released=np.zeros(0), release={}),
    )


def exact_posterior(model, x, **family_options):
    """The non-private conjugate posterior given the true statistic, as a closed-form posterior."""
    fam = family(model, x.shape[-1], **family_options)
    with jax.enable_x64(True):
        latent = np.asarray(fam.statistic(jnp.asarray(x)))
        if model == "gamma-exponential":
            latent = np.array([latent[0], np.sum(np.where(x > fam.bound, x, 0.0))])
        params = np.asarray(fam.posterior_params(jnp.asarray(latent)))
    return conjugate(fam, params)


# ---------------------------------------------------------------- T1 primitives


@pytest.mark.parametrize("mean,shape", [(1.0, 1.0), (0.3, 5.0), (40.0, 0.01), (1e8, 1e12)])
def test_inverse_gaussian_mean_and_variance(mean, shape):
    with jax.enable_x64(True):
        x = np.asarray(inverse_gaussian(jax.random.key(0), jnp.full(200_000, mean), shape))
    sd_of_mean = math.sqrt(mean**3 / shape / x.size)
    assert np.all(x > 0)
    assert abs(x.mean() - mean) < 5 * sd_of_mean
    if mean**3 / shape < 1e6:  # the variance estimate is too heavy-tailed to test for very skewed laws
        assert x.var() == pytest.approx(mean**3 / shape, rel=0.1)


def test_laplace_is_a_gaussian_scale_mixture_and_the_mixing_conditional_is_right():
    b, n = 0.7, 200_000
    with jax.enable_x64(True):
        k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
        omega2 = 2 * b**2 * jax.random.exponential(k1, (n,), jnp.float64)
        w = np.asarray(jnp.sqrt(omega2) * jax.random.normal(k2, (n,), jnp.float64))
        # one Gibbs step ω² | w from the joint leaves the marginal of ω² at Exp(mean 2b²)
        refreshed = np.asarray(mixing_variance(k3, jnp.asarray(w), b))
    assert stats.kstest(w, stats.laplace(scale=b).cdf).pvalue > 0.01
    assert stats.kstest(refreshed, stats.expon(scale=2 * b**2).cdf).pvalue > 0.01


def test_gaussian_conditioning_matches_the_precision_form():
    rng = np.random.default_rng(0)
    root = rng.standard_normal((3, 3))
    cov, mean = root @ root.T + 0.1 * np.eye(3), rng.standard_normal(3)
    observe = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    z, noise = rng.standard_normal(2), np.array([0.3, 2.0])
    precision = np.linalg.inv(cov) + observe.T @ np.diag(1 / noise) @ observe
    want_cov = np.linalg.inv(precision)
    want_mean = want_cov @ (np.linalg.solve(cov, mean) + observe.T @ (z / noise))
    with jax.enable_x64(True):
        got_mean, got_cov = condition_gaussian(
            jnp.asarray(mean), jnp.asarray(cov), jnp.asarray(observe), jnp.asarray(z), jnp.asarray(noise)
        )
    np.testing.assert_allclose(got_mean, want_mean, rtol=1e-10)
    np.testing.assert_allclose(got_cov, want_cov, rtol=1e-10, atol=1e-12)


def test_support_draws_redraw_then_project_and_count():
    valid = lambda s: jnp.all(s >= 0)  # noqa: E731
    project = lambda s: jnp.maximum(s, 0.0)  # noqa: E731
    with jax.enable_x64(True):
        inside = draw_in_support(jax.random.key(0), jnp.array([0.5, 0.5]), jnp.eye(2), valid, project, 20)
        outside = draw_in_support(jax.random.key(0), jnp.array([-50.0, 1.0]), jnp.eye(2), valid, project, 20)
    assert np.all(np.asarray(inside[0]) >= 0) and 1 <= int(inside[1]) <= 20 and not bool(inside[2])
    assert int(outside[1]) == 20 and bool(outside[2]) and np.asarray(outside[0])[0] == 0.0


# ---------------------------------------------------------------- T9 the release


def test_sensitivities_by_brute_force_on_the_bounded_domain():
    bound = prior_predictive_bound()
    domains = {
        "gamma-exponential": np.concatenate([np.linspace(-1.0, 3 * bound, 4001), [bound]]),
        "beta-bernoulli": np.array([0.0, 1.0]),
        "dirichlet-categorical": np.array([0.0, 1.0, 2.0]),
    }
    for model, domain in domains.items():
        fam = family(model, 1)
        with jax.enable_x64(True):
            t = np.asarray(jax.vmap(lambda x, fam=fam: fam.statistic(x[None]))(jnp.asarray(domain)))
        add_remove = (np.abs(t).sum(1).max(), np.linalg.norm(t, axis=1).max())
        diffs = t[:, None, :] - t[None, :, :]
        substitute = (np.abs(diffs).sum(-1).max(), np.linalg.norm(diffs, axis=-1).max())
        assert fam.sensitivity("add-remove") == pytest.approx(add_remove, rel=1e-12), model
        assert fam.sensitivity("substitute") == pytest.approx(substitute, rel=1e-12), model


def test_release_reports_the_spec_sensitivity_and_scale_and_its_noise_has_that_scale():
    x = np.zeros((4000, 10))
    release = release_statistics("M1", x, epsilon=0.5, keys=keys(0, 4000))
    assert release.sensitivity == pytest.approx(1.5566, abs=1e-4) and release.delta == 0.0
    assert release.scale == pytest.approx(release.sensitivity / 0.5)
    assert stats.kstest(release.z[:, 0], stats.laplace(scale=release.scale).cdf).pvalue > 0.01
    sub = release_statistics(
        "M3", x, epsilon=0.5, keys=keys(1, 4000), settings=ReleaseSettings(neighbouring="substitute")
    )
    assert sub.sensitivity == 2.0 and sub.scale == 4.0 and abs(np.corrcoef(sub.z.T)[0, 1]) < 0.05
    gauss = release_statistics(
        "M3", x, epsilon=1.0, delta=1e-5, keys=keys(2, 4000), settings=ReleaseSettings(mechanism="gaussian")
    )
    assert gauss.sensitivity == 1.0 and gauss.delta == 1e-5
    assert gauss.scale == pytest.approx(3.7306, abs=1e-3)
    np.testing.assert_allclose(np.std(gauss.z, axis=0), gauss.scale, rtol=0.03)


@pytest.mark.parametrize("epsilon,want", [(0.1, 30.75), (0.3, 11.24), (1.0, 3.731)])
def test_analytic_gaussian_sigma_meets_delta_with_equality(epsilon, want):
    sigma = analytic_gaussian_sigma(1.0, epsilon, 1e-5)
    assert sigma == pytest.approx(want, abs=0.01)
    delta = stats.norm.cdf(0.5 / sigma - epsilon * sigma) - math.exp(epsilon) * stats.norm.cdf(
        -0.5 / sigma - epsilon * sigma
    )
    assert delta == pytest.approx(1e-5, rel=1e-6)
    assert analytic_gaussian_sigma(2.0, epsilon, 1e-5) == pytest.approx(2 * sigma)


def test_nothing_after_the_release_reads_the_data():
    """The sampler and the naive posterior take only (z, N): a Release built by hand gives the same answer."""
    _, x = simulate("M2", 100, 1, seed=3)
    release = release_statistics("M2", x, epsilon=1.0, keys=[5])
    by_hand = Release(family("M2", 100), release.z.copy(), "laplace", "add-remove", 1.0, 0.0, 1.0, 1.0)
    a = noise_aware_posteriors(release, [0], GibbsSettings(**SHORT))[0]  # N = 100: the program of the ε → 0 test
    b = noise_aware_posteriors(by_hand, [0], GibbsSettings(**SHORT))[0]
    np.testing.assert_array_equal(a.chains, b.chains)
    np.testing.assert_array_equal(naive_posteriors(release)[0].law.params, naive_posteriors(by_hand)[0].law.params)


# ---------------------------------------------------------------- T8 the truncated moments and the transforms


@pytest.mark.parametrize("lam", [0.7, 4.0, 9.0])
def test_truncated_section_moments_match_autodiff_and_monte_carlo(lam):
    fam = family("M1", 1)
    b = fam.bound
    with jax.enable_x64(True):
        theta = jnp.array([lam + math.log(-math.expm1(-lam))])
        mean, cov = (np.asarray(a) for a in fam.moments(theta))

        def log_section(eta, lo, hi):  # A(η) + log P_η(lo ≤ x ≤ hi) = log ∫_lo^hi e^{ηx} dx, A(η) = −log(−η)
            return jnp.log((jnp.exp(eta * hi) - jnp.exp(eta * lo)) / eta)

        eta = jnp.float64(-lam)
        p_in = jnp.exp(log_section(eta, 0.0, b) + jnp.log(-eta))
        m_in = jax.grad(log_section)(eta, 0.0, b)
        v_in = jax.hessian(log_section)(eta, 0.0, b)
        x = np.asarray(jax.random.exponential(jax.random.key(0), (1_000_000,), jnp.float64)) / lam
    assert mean[0] == pytest.approx(float(p_in * m_in), rel=1e-9)
    assert cov[0, 0] == pytest.approx(float(p_in * (v_in + m_in**2) - (p_in * m_in) ** 2), rel=1e-8)
    pair = np.stack([np.where(x <= b, x, 0.0), np.where(x > b, x, 0.0)])
    sd = np.sqrt(np.diag(np.cov(pair)) / x.size)
    np.testing.assert_allclose(mean, pair.mean(1), atol=5 * sd.max())
    np.testing.assert_allclose(cov, np.cov(pair), rtol=0.05, atol=5e-4 * np.cov(pair)[0, 0])


@pytest.mark.parametrize("model", MODELS)
def test_theta_space_and_prior_are_the_models(model):
    """Prior draws of the family, mapped by the model's own site map, have the model's prior mean; the CLT mean
    μ(θ) is the model's constrained parameter."""
    bm, fam = get(model), family(model, 10)
    assert fam.theta_names == bm.site_map.theta_names()
    with jax.enable_x64(True):
        theta = jnp.asarray(conjugate(fam, fam.prior).sample(0, 100_000))
        site = bm.site_map.constrain(theta)
        value = np.asarray(next(iter(site.values())))
        mu = np.asarray(jax.vmap(lambda t: fam.moments(t)[0])(theta[:5]))
    prior_mean = {"gamma-exponential": 4.0, "beta-bernoulli": 0.5, "dirichlet-categorical": np.full(3, 1 / 3)}
    np.testing.assert_allclose(value.mean(0), prior_mean[model], rtol=0.01)
    if model == "gamma-exponential":
        lam = value[:5]
        np.testing.assert_allclose(mu[:, 0] + mu[:, 1], 1 / lam, rtol=1e-10)  # E[x] = 1/λ
    else:
        np.testing.assert_allclose(mu, value[:5].reshape(5, -1)[:, : fam.released], rtol=1e-10)


# ---------------------------------------------------------------- T2, T6 limits


@pytest.mark.parametrize("model", MODELS)
def test_epsilon_to_infinity_gives_the_exact_conjugate_posterior(model):
    options = {"bound": 50.0} if model == "gamma-exponential" else {}  # nothing is dropped below B = 50
    _, x = simulate(model, 500, 1, seed=11)
    post = bernstein_sheldon_posterior(model, x[0], epsilon=1e6, key=1, **options, **SHORT)
    exact = exact_posterior(model, x[0], **options).sample(2, 20_000)
    draws = post.sample(3, 10_000)
    sd = exact.std(0)
    np.testing.assert_array_less(np.abs(draws.mean(0) - exact.mean(0)), 0.05 * sd)
    np.testing.assert_allclose(draws.std(0), sd, rtol=0.04)
    assert post.diagnostics.max_rhat < 1.01 and post.diagnostics.fallbacks == 0


def test_epsilon_to_zero_gives_the_prior():
    _, x = simulate("M2", 100, 1, seed=12)
    draws = bernstein_sheldon_posterior("M2", x[0], epsilon=1e-4, key=1, **SHORT).sample(0, 10_000)
    prior_sd = math.sqrt(2 * polygamma(1, 10.0))  # sd of logit p, p ~ Beta(10, 10)
    assert abs(draws.mean()) < 0.1 * prior_sd
    assert draws.std() == pytest.approx(prior_sd, rel=0.1)


# ---------------------------------------------------------------- T3, T4 the M2 noise-aware posterior


def grid_posterior_moments(z, n, noise_logpdf):
    """Mean and sd of p under p(p | z) ∝ Beta(p; 10, 10) Σ_k Binom(k; n, p) noise(z − k), on a fine grid."""
    p = np.linspace(1e-4, 1 - 1e-4, 4000)
    k = np.arange(n + 1)
    log_binom = (
        (gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1))[None, :]
        + np.outer(np.log(p), k)
        + np.outer(np.log1p(-p), n - k)
    )
    log_post = 9 * np.log(p) + 9 * np.log1p(-p) - betaln(10, 10) + logsumexp(log_binom + noise_logpdf(z - k), axis=1)
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    mean = np.sum(w * p)
    return mean, math.sqrt(np.sum(w * (p - mean) ** 2))


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_m2_matches_the_exact_noise_aware_posterior(mechanism):
    _, x = simulate("M2", 1000, 1, seed=13)
    release = release_statistics("M2", x, epsilon=0.1, keys=[4], settings=ReleaseSettings(mechanism=mechanism))
    post = noise_aware_posteriors(release, [1], GibbsSettings(**SHORT))[0]
    p = 1 / (1 + np.exp(-post.sample(0, 10_000)[:, 0]))
    noise = stats.laplace(scale=release.scale) if mechanism == "laplace" else stats.norm(scale=release.scale)
    mean, sd = grid_posterior_moments(release.z[0, 0], 1000, noise.logpdf)
    assert p.mean() == pytest.approx(mean, rel=0.05) and abs(p.mean() - mean) < 0.1 * sd
    assert p.std() == pytest.approx(sd, rel=0.05)
    non_private = exact_posterior("M2", x[0]).sample(0, 10_000)
    assert post.sample(0, 10_000).std() > 1.2 * non_private.std()


def test_wider_than_non_private_and_naive_on_average():
    _, x = simulate("M2", 1000, 20, seed=14)
    release = release_statistics("M2", x, epsilon=0.1, keys=keys(6, 20))
    bs = [p.sample(0, 10_000).std() for p in noise_aware_posteriors(release, keys(2, 20), GibbsSettings(**SHORT))]
    naive = [p.sample(0, 10_000).std() for p in naive_posteriors(release)]
    exact = [exact_posterior("M2", xm).sample(0, 10_000).std() for xm in x]
    assert np.mean(bs) > 1.1 * np.mean(exact) and np.mean(bs) > 1.1 * np.mean(naive)


# ---------------------------------------------------------------- T5 calibration


@pytest.mark.slow
def test_m2_intervals_are_calibrated_and_the_naive_ones_are_not():
    """R = 400 replicates at N = 100, ε = 0.1: the 90 % central interval covers θ_true in 0.90 ± 0.05 (3.3
    binomial sd) of them, the rank of θ_true among the draws is uniform; the naive SSP covers far less."""
    truth, x = simulate("M2", 100, 400, seed=15)
    release = release_statistics("M2", x, epsilon=0.1, keys=keys(7, 400))
    posts = noise_aware_posteriors(release, keys(3, 400), GibbsSettings(chains=2, warmup=200, draws=500))
    draws = np.stack([p.sample(0, 1000)[:, 0] for p in posts])
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=1)
    covered = np.mean((lo < truth[:, 0]) & (truth[:, 0] < hi))
    assert 0.85 <= covered <= 0.95
    ranks = (draws < truth[:, :1]).mean(1) + np.random.default_rng(0).uniform(0, 1e-3, truth.shape[0])
    assert stats.kstest(ranks, "uniform").pvalue > 0.01
    naive = np.stack([p.sample(0, 1000)[:, 0] for p in naive_posteriors(release)])
    lo, hi = np.quantile(naive, [0.05, 0.95], axis=1)
    assert np.mean((lo < truth[:, 0]) & (truth[:, 0] < hi)) < 0.75


# ---------------------------------------------------------------- T7 a second implementation


def nuts_draws(release, key):
    """θ draws of NUTS (numpyro) on p(θ) N(s; Nμ(θ), NΣ(θ)) Laplace(z; Hs, b), s continuous on its support."""
    fam, b, z = release.family, release.scale, jnp.asarray(release.z[0])

    def joint():
        if fam.name == "gamma-exponential":
            lam = numpyro.sample("lam", dist.Gamma(*fam.prior))
            theta = jnp.atleast_1d(lam + jnp.log(-jnp.expm1(-lam)))
            s_in = numpyro.sample("s_in", dist.ImproperUniform(constraints.interval(0.0, fam.n * fam.bound), (), ()))
            s_out = numpyro.sample("s_out", dist.ImproperUniform(constraints.positive, (), ()))
            latent = jnp.stack([s_in, s_out])
        else:
            p = numpyro.sample("p", dist.Dirichlet(jnp.asarray(fam.prior)))
            theta = jnp.log(p[:2] / p[2])
            latent = fam.n * numpyro.sample("u", dist.ImproperUniform(constraints.simplex, (), (3,)))[:2]
        mean, cov = fam.moments(theta)
        numpyro.factor("clt", dist.MultivariateNormal(fam.n * mean, fam.n * cov).log_prob(latent))
        numpyro.factor("release", dist.Laplace(jnp.asarray(fam.observe) @ latent, b).log_prob(z).sum())
        numpyro.deterministic("theta", theta)

    mcmc = numpyro.infer.MCMC(numpyro.infer.NUTS(joint), num_warmup=400, num_samples=2000, progress_bar=False)
    mcmc.run(jax.random.key(key))
    return np.asarray(mcmc.get_samples()["theta"])


@pytest.mark.slow
@pytest.mark.parametrize("model", ["M1", "M3"])
def test_nuts_on_the_same_target_agrees_with_gibbs(model):
    _, x = simulate(model, 5000, 1, seed=16)
    with jax.enable_x64(True):
        release = release_statistics(model, x, epsilon=0.1, keys=[8])
        nuts = nuts_draws(release, 0)
    gibbs = noise_aware_posteriors(release, [1], GibbsSettings(**SHORT))[0].sample(0, 10_000)
    sd = gibbs.std(0)
    np.testing.assert_array_less(np.abs(nuts.mean(0) - gibbs.mean(0)), 0.15 * sd)
    np.testing.assert_allclose(nuts.std(0), sd, rtol=0.1)


# ---------------------------------------------------------------- the methods and their posteriors


@pytest.fixture(scope="module")
def m3():
    """Three M3 data sets at ε = 0.3 through the Method records: (batch, keys, bs2018 (TINY), bs2018-naive)."""
    _, x = simulate("M3", 5000, 3, seed=17)
    batch = Batch((), get("M3"), {"x": x}, 0.3, 1e-5, size=3)
    k = keys(0, 3)
    return (
        batch,
        k,
        fit_problems(BS2018, batch, k, BS2018.make_options(TINY)),
        fit_problems(BS2018_NAIVE, batch, k, BS2018_NAIVE.make_options()),
    )


def test_problem_m_depends_on_keys_m_alone(m3):
    """bernstein_sheldon_posterior(model, x_m, key=k) is problem m of a batch whose keys[m] = k, bit for bit; the
    naive method releases the same z under the same key; another keys[0] leaves problem 1 as it was."""
    batch, k, posts, naive = m3
    x = np.asarray(batch.data["x"])
    one = bernstein_sheldon_posterior("M3", x[1], key=k[1], epsilon=0.3, **TINY)
    np.testing.assert_array_equal(one.chains, posts[1].chains)
    np.testing.assert_array_equal(one.diagnostics.released, posts[1].diagnostics.released)
    np.testing.assert_array_equal(naive[1].diagnostics.released, posts[1].diagnostics.released)
    np.testing.assert_array_equal(
        bernstein_sheldon_naive("M3", {"x": x[1]}, key=k[1], epsilon=0.3).law.params, naive[1].law.params
    )
    other = bs2018_batch(
        "M3",
        x,
        keys=jnp.concatenate([jax.random.key(99)[None], k[1:]]),
        epsilon=0.3,
        delta=1e-5,
        gibbs=GibbsSettings(**TINY),
    )
    assert not np.array_equal(other[0].chains, posts[0].chains)
    np.testing.assert_array_equal(other[1].chains, posts[1].chains)


def test_methods_release_at_the_batch_privacy_level(m3):
    batch, k, posts, naive = m3
    assert len(posts) == len(naive) == 3
    for post in posts + naive:
        assert isinstance(post, Posterior)
        assert post.sample(jax.random.key(1), 300).shape == (300, 2)
    assert (posts[0].kind, naive[0].kind) == (GIBBS, CONJUGATE) and isinstance(naive[0].law, ConjugateLaw)
    assert (posts[0].method, naive[0].method) == ("bs2018", "bs2018-naive")
    diagnostics = posts[0].diagnostics
    assert isinstance(diagnostics, GibbsDiagnostics) and diagnostics["max_rhat"] == diagnostics.max_rhat
    release = diagnostics.release
    assert release["epsilon"] == 0.3 and release["delta"] == 0.0 and release["mechanism"] == "laplace"
    assert release["sensitivity"] == 1.0 and release["noise_scale"] == pytest.approx(1 / 0.3)
    assert diagnostics.rhat.shape == diagnostics.ess.shape == diagnostics.iat.shape == (2,)
    assert diagnostics.sweeps == 2 * (30 + 60) and diagnostics.redraws >= 0 and diagnostics.fallbacks >= 0
    np.testing.assert_allclose(diagnostics.iat, 2 * 60 / diagnostics.ess)
    gauss = fit_problems(BS2018_NAIVE, batch, k, BS2018_NAIVE.make_options(mechanism="gaussian"))[0]
    assert gauss.diagnostics.release["delta"] == 1e-5
    assert gauss.diagnostics.release["noise_scale"] == pytest.approx(analytic_gaussian_sigma(1.0, 0.3, 1e-5))
    # repeated runs on one data set: each problem its own release of the shared records
    x = np.asarray(batch.data["x"])
    shared = fit_problems(
        BS2018_NAIVE, dataclasses.replace(batch, data={"x": x[:1]}, shared_data=True), k, BS2018_NAIVE.make_options()
    )
    assert len(shared) == 3 and not np.array_equal(shared[1].law.params, shared[2].law.params)
    np.testing.assert_array_equal(
        shared[1].law.params, bernstein_sheldon_naive("M3", x[0], key=k[1], epsilon=0.3).law.params
    )
    # a run given by σ: the ε it stands for as the option, or a clear error
    by_sigma = dataclasses.replace(batch, epsilon=None)
    given = fit_problems(BS2018_NAIVE, by_sigma, k, BS2018_NAIVE.make_options(epsilon=0.3))
    assert given[0].diagnostics.release["epsilon"] == 0.3
    with pytest.raises(ValueError) as info:
        BS2018.fit_batch(by_sigma, k, BS2018.make_options())
    mentions(info, "'bs2018'", "--epsilon", "'epsilon'")
    with pytest.raises(ValueError) as info:
        BS2018_NAIVE.fit_batch(dataclasses.replace(batch, model=get("linreg-10d")), k, BS2018_NAIVE.make_options())
    mentions(info, "bs2018-naive", "linreg-10d")


def test_the_study_summary_has_the_facts_of_the_old_driver(m3):
    _, _, posts, naive = m3
    summary = aggregate_diagnostics(posts)
    assert list(summary) == [
        "max_rhat",
        "simulations_rhat_above_1.01",
        "min_ess",
        "median_min_ess",
        "fallbacks",
        "simulations_with_fallbacks",
        "release",
    ]
    records = [p.diagnostics for p in posts]
    assert summary["max_rhat"] == max(r.max_rhat for r in records)
    assert summary["simulations_rhat_above_1.01"] == sum(r.max_rhat > 1.01 for r in records)
    assert summary["min_ess"] == min(r.min_ess for r in records)
    assert summary["median_min_ess"] == np.median([r.min_ess for r in records])
    assert summary["release"] == {
        "mechanism": "laplace",
        "neighbouring": "add-remove",
        "epsilon": 0.3,
        "delta": 0.0,
        "sensitivity": 1.0,
        "noise_scale": pytest.approx(1 / 0.3),
        **TINY,
        "retries": 20,
        "init": "naive",
        "n_examples": 5000,
    }
    counted = GibbsDiagnostics.aggregate([dataclasses.replace(r, fallbacks=f) for r, f in zip(records, (0, 3, 0))])
    assert counted["fallbacks"] == 3 and counted["simulations_with_fallbacks"] == 1
    assert aggregate_diagnostics(naive) == {
        "release": {
            "mechanism": "laplace",
            "neighbouring": "add-remove",
            "epsilon": 0.3,
            "delta": 0.0,
            "sensitivity": 1.0,
            "noise_scale": pytest.approx(1 / 0.3),
            "n_examples": 5000,
        }
    }


def test_gibbs_posterior_intervals_summary_and_file(m3, tmp_path):
    post = m3[2][0]
    draws = post.chains.reshape(-1, 2)
    low, high = post.interval(0.8)
    np.testing.assert_allclose(low, np.quantile(draws, 0.1, axis=0), rtol=1e-12)
    np.testing.assert_allclose(high, np.quantile(draws, 0.9, axis=0), rtol=1e-12)
    text = str(post.summary(0.8, scale="unconstrained"))
    assert text.splitlines()[0] == post.describe() and post.describe().startswith(post.kind)
    assert "80% low" in text and f"{draws[:, 1].mean():.4g}" in text and f"{high[0]:.4g}" in text
    post.save(tmp_path / "bs2018.nc")
    with xr.open_datatree(tmp_path / "bs2018.nc", engine="h5netcdf") as tree:
        theta = tree["posterior"]["theta"]
        assert theta.dims == ("chain", "draw", "theta_dim") and list(theta["theta_dim"].values) == ["p[0]", "p[1]"]
        np.testing.assert_array_equal(theta.values, post.chains)
        assert tree.attrs["method"] == "bs2018" and tree.attrs["kind"] == GIBBS
        assert json.loads(tree.attrs["diagnostics"])["release"]["epsilon"] == 0.3
    with pytest.raises(ValueError, match=r"\.nc"):
        post.save(tmp_path / "bs2018.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bs2018.nc"]  # atomic: no temporary left behind


def test_naive_posterior_summary_and_file(m3, tmp_path):
    post = m3[3][0]
    text = str(post.summary(key=0, scale="unconstrained"))
    mean, sd = post.moments()
    assert text.splitlines()[0] == post.describe() and f"{mean[0]:.4g}" in text and f"{sd[1]:.3g}" in text
    with pytest.raises(ValueError, match="key"):
        post.save(tmp_path / "naive.nc")
    post.save(tmp_path / "naive.nc", key=3)
    with xr.open_datatree(tmp_path / "naive.nc", engine="h5netcdf") as tree:
        theta = tree["posterior"]["theta"].values
        np.testing.assert_array_equal(theta, post.sample(3, 4000)[None])
        np.testing.assert_allclose(json.loads(tree.attrs["parameters"])["params"], post.law.params)
        assert tree.attrs["kind"] == post.kind == CONJUGATE


@pytest.mark.parametrize("model", MODELS)
def test_conjugate_intervals_are_exact_and_moments_match_the_draws(model):
    """The closed-form interval leaves 5 % of 200 000 exact draws in each tail; the integrated mean and sd are
    the draws' (and, for M2/M3, θ_j = log g_j − log g_last: ψ(α_j) − ψ(α_last) and √(ψ'(α_j) + ψ'(α_last)))."""
    fam = family(model, 50)
    params = (
        np.asarray(fam.prior)
        + {
            "gamma-exponential": [50.0, 27.0],
            "beta-bernoulli": [20.0, 30.0],
            "dirichlet-categorical": [10.0, 30.0, 10.0],
        }[model]
    )
    post = conjugate(fam, params)
    n = 200_000
    draws = post.sample(0, n)
    low, high = post.interval(0.9)
    tail = 5 * math.sqrt(0.05 * 0.95 / n)
    np.testing.assert_allclose((draws < low).mean(0), 0.05, atol=tail)
    np.testing.assert_allclose((draws > high).mean(0), 0.05, atol=tail)
    mean, sd = post.moments()
    np.testing.assert_array_less(np.abs(mean - draws.mean(0)), 5 * sd / math.sqrt(n))
    np.testing.assert_allclose(sd, draws.std(0), rtol=0.01)
    if model != "gamma-exponential":
        np.testing.assert_allclose(mean, digamma(params[:-1]) - digamma(params[-1]), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(sd, np.sqrt(polygamma(1, params[:-1]) + polygamma(1, params[-1])), rtol=1e-7)


def test_options_keep_their_defaults_and_check_values_before_any_work():
    assert dataclasses.asdict(BS2018Options()) == {
        "epsilon": None,
        "mechanism": "laplace",
        "neighbouring": "add-remove",
        "bound": None,
        "chains": 4,
        "warmup": 1000,
        "draws": 5000,
        "retries": 20,
        "init": "naive",
    }
    assert dataclasses.asdict(BS2018NaiveOptions()) == {
        "epsilon": None,
        "mechanism": "laplace",
        "neighbouring": "add-remove",
        "bound": None,
    }
    assert BS2018.models == BS2018_NAIVE.models == tuple(FAMILIES)
    assert BS2018.reads == "data" and BS2018.needs_epsilon and BS2018_NAIVE.needs_epsilon
    for bad, match in (
        ({"chains": 0}, "chains"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"init": "zero"}, "init"),
        ({"mechanism": "exponential"}, "'exponential'"),
        ({"bound": 0.0}, "bound"),
    ):
        with pytest.raises(ValueError) as info:
            BS2018.make_options(bad)
        mentions(info, match)


def test_bad_inputs_raise_clear_errors():
    x, k = np.zeros((1, 10)), [0]
    with pytest.raises(ValueError) as info:
        release_statistics("linreg-10d", x, keys=k, epsilon=1.0)
    mentions(info, "'linreg-10d'")
    for epsilon in (0.0, -1.0, math.inf, math.nan, None):
        with pytest.raises(ValueError) as info:
            release_statistics("M2", x, keys=k, epsilon=epsilon)
        mentions(info, "ε", "0")
    with pytest.raises(ValueError) as info:
        ReleaseSettings(mechanism="exponential")
    mentions(info, "'exponential'")
    with pytest.raises(ValueError, match="neighbouring"):
        ReleaseSettings(neighbouring="swap")
    with pytest.raises(ValueError) as info:
        release_statistics("M2", x, keys=k, epsilon=1.0, delta=0.0, settings=ReleaseSettings(mechanism="gaussian"))
    mentions(info, "0", "δ", "1")
    with pytest.raises(ValueError, match="bound"):
        release_statistics("M2", x, keys=k, epsilon=1.0, settings=ReleaseSettings(bound=2.0))
    with pytest.raises(ValueError, match="bound"):
        ReleaseSettings(bound=-1.0)
    with pytest.raises(ValueError) as info:
        release_statistics("M2", x + 2, keys=k, epsilon=1.0)
    mentions(info, "0", "1")
    with pytest.raises(ValueError) as info:
        release_statistics("M1", x - 1, keys=k, epsilon=1.0)
    mentions(info, "≥", "0")
    with pytest.raises(ValueError, match="shape"):
        release_statistics("M2", np.zeros((2, 2, 2)), keys=k, epsilon=1.0)
    with pytest.raises(ValueError) as info:
        release_statistics("M2", np.zeros((2, 10)), keys=k, epsilon=1.0)
    mentions(info, "1", "2")
    with pytest.raises(ValueError, match="chains"):
        bernstein_sheldon_posterior("M2", x[0], key=0, epsilon=1.0, chains=0)
    with pytest.raises(ValueError) as info:
        bernstein_sheldon_posterior("M2", x[0], key=0, epsilon=1.0, init="zero")
    mentions(info, "'zero'")
    with pytest.raises(ValueError, match="'x'"):
        bernstein_sheldon_naive("M2", {"y": x[0]}, key=0, epsilon=1.0)
    with pytest.raises(TypeError, match="key"):
        bernstein_sheldon_naive("M2", x[0], epsilon=1.0)  # a key is required: the release is random
    assert isinstance(bernstein_sheldon_naive("M2", {"x": x[0]}, key=0, epsilon=1.0), ClosedFormPosterior)


def test_a_non_finite_draw_is_returned_as_the_problems_failure():
    chains = np.zeros((2, 10, 1))
    chains[1, 3, 0] = np.nan
    outcome = gibbs_posterior(
        chains, method="bs2018", theta_names=("p",), fallbacks=0, redraws=0, sweeps=20, released=np.zeros(1), release={}
    )
    assert isinstance(outcome, FitFailure) and outcome.reason == DIVERGED and "non-finite" in str(outcome)


def test_coverage_runs_bs2018_end_to_end_and_refuses_what_it_cannot_do():
    """na.coverage with the B&S methods on a few simulations with short traces: curves, no failures, the
    sampler's diagnostics summarised; unsupported models and runs without an ε fail before any DPVI run."""
    bm = get("M3")
    tiny = {"simulations": 3, "references": 2, "samples": 200, "steps": 100, "chunk": 3}
    result = na.coverage(
        bm, methods=("bs2018", "bs2018-naive"), epsilon=0.3, key=2, method_options={"bs2018": TINY}, **tiny
    )
    assert result.failures == {"bs2018": 0, "bs2018-naive": 0}
    assert result.curves["research"]["bs2018"].shape == (2, 21)
    diagnostics = result.diagnostics["bs2018"]
    assert {"max_rhat", "min_ess", "fallbacks", "simulations_with_fallbacks"} <= set(diagnostics)
    assert diagnostics["release"] == {
        "mechanism": "laplace",
        "neighbouring": "add-remove",
        "epsilon": 0.3,
        "delta": 0.0,
        "sensitivity": 1.0,
        "noise_scale": pytest.approx(1 / 0.3),
        "n_examples": 5000,
        **TINY,
        "retries": 20,
        "init": "naive",
    }
    assert result.diagnostics["bs2018-naive"]["release"]["epsilon"] == 0.3
    with pytest.raises(ValueError) as info:
        na.coverage(bm, methods=("bs2018",), noise_multiplier=50.0, key=0, **tiny)
    mentions(info, "'bs2018'", "--epsilon", "'epsilon'")
    with pytest.raises(ValueError) as info:
        na.coverage(get("linreg-10d"), methods=("bs2018",), epsilon=1.0, key=0, **tiny)
    mentions(info, "'bs2018'", "'linreg-10d'")
    with pytest.raises(ValueError) as info:
        na.coverage(bm, methods=("bs2019",), epsilon=1.0, key=0, **tiny)
    mentions(info, "'bs2019'", "linreg-10d", "'dirichlet-categorical'")
