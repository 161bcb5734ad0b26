"""B&S 2019 Gibbs-SS-Noisy for linear regression (docs/baselines.md §2.8): sensitivities by brute force
(R4), moments against Monte Carlo and the §2.3 list (R2, R3), the ε → ∞ limit against the exact NIG
posterior (R1), noise widening the posterior, the noise-naive SS and its exact NIG posterior, the methods
bs2019 and bs2019-naive, and argument errors.

Small problems (d = 2 covariates, N = 400) keep every test to seconds; the samplers share two compiled
programs (one simulation, and a chunk of two)."""

import dataclasses
import itertools
import json
import math

import jax
import numpy as np
import pytest
import xarray as xr
from messages import mentions
from scipy import integrate, stats

from noiseaware.baselines import bernstein_sheldon_regression as bs
from noiseaware.baselines import regression_moments as moments
from noiseaware.baselines import regression_release as rel
from noiseaware.baselines import sampled
from noiseaware.baselines.mechanisms import analytic_gaussian_sigma
from noiseaware.baselines.regression_gibbs import NIGPrior, RegressionGibbs, theta_names
from noiseaware.evaluation.experiment import aggregate_diagnostics
from noiseaware.methods.base import Batch, fit_problems
from noiseaware.methods.data_baselines import BS2019, BS2019_NAIVE, BS2019NaiveOptions, BS2019Options
from noiseaware.models.builtin import get
from noiseaware.posteriors.base import Posterior

D, N, BOUNDS = 2, 400, (3.0, 4.0)
W_TRUE, SIGMA2_TRUE = np.array([0.8, -0.5, 0.3]), 0.25
GIBBS = {"chains": 4, "warmup": 100, "draws": 400, "thin": 1}


def dataset(seed, n=N, d=D, w=W_TRUE, sigma2=SIGMA2_TRUE):
    """X (n, d+1) with the bias last, y = X w + N(0, σ²)."""
    rng = np.random.default_rng(seed)
    X = np.c_[rng.standard_normal((n, d)), np.ones(n)]
    return X, X @ w + math.sqrt(sigma2) * rng.standard_normal(n)


def exact_nig(X, y, bound_x=BOUNDS[0], bound_y=BOUNDS[1], a0=20.0, b0=0.5, scale=2.0):
    """The non-private NIG posterior of the clamped data: mean and sd of w (d+1,) and of σ²."""
    Xc = np.c_[np.clip(X[:, :-1], -bound_x, bound_x), X[:, -1]]
    yc = np.clip(y, -bound_y, bound_y)
    precision = Xc.T @ Xc + np.eye(X.shape[1]) / scale**2
    mu = np.linalg.solve(precision, Xc.T @ yc)
    a_n, b_n = a0 + len(y) / 2, b0 + 0.5 * (yc @ yc - mu @ Xc.T @ yc)
    sigma2_mean = b_n / (a_n - 1)
    w_sd = np.sqrt(b_n / (a_n - 1) * np.diag(np.linalg.inv(precision)))  # Student-t marginal sd
    return mu, w_sd, sigma2_mean, sigma2_mean / math.sqrt(a_n - 2)


def constrained(draws):
    """(w, σ²) from θ draws (n, d+2)."""
    return draws[:, :-1], np.logaddexp(0.0, draws[:, -1])


def release_one(X, y, key=0, **options):
    """The release of one data set: `Released` fields without the leading axis."""
    released = rel.release_statistics(X[None], y[None], keys=[key], **options)
    return rel.Released(*(field[0] for field in released))


# ---------------------------------------------------------------- R4: sensitivities


def corners(d, bound_x, bound_y, levels=(-1.0, 1.0)):
    """u = (x, 1, y) at every sign pattern of |x_j| = B_x, |y| = B_y: (2^{d+1}, d+2); levels (−1, 0, 1)
    adds the centre of each coordinate, where the squares reach their minimum 0."""
    signs = np.array(list(itertools.product(levels, repeat=d + 1)))
    return np.c_[bound_x * signs[:, :d], np.ones(len(signs)), bound_y * signs[:, d]]


def statistic(u):
    a, b = np.triu_indices(u.shape[-1])
    keep = ~((a == u.shape[-1] - 2) & (b == u.shape[-1] - 2))
    return u[:, a[keep]] * u[:, b[keep]]


def quartet_statistic(x):
    q = [c for c in itertools.combinations_with_replacement(range(x.shape[1]), 4) if c != (x.shape[1] - 1,) * 4]
    return np.stack([np.prod(x[:, list(c)], axis=1) for c in q], axis=1)


def test_statistic_sensitivity_is_the_sup_over_the_bounded_domain():
    d, bx, by = 4, 1.5, 2.5
    t = statistic(corners(d, bx, by))
    assert rel.statistic_sensitivity(d, bx, by) == pytest.approx(np.abs(t).sum(1).max(), rel=1e-12)
    assert rel.statistic_sensitivity(d, bx, by, norm=2) == pytest.approx(np.sqrt((t**2).sum(1)).max(), rel=1e-12)
    # interior points never exceed it; substitution: the component ranges bound every pair of records
    rng = np.random.default_rng(0)
    inner = np.c_[rng.uniform(-bx, bx, (2000, d)), np.ones(2000), rng.uniform(-by, by, 2000)]
    assert np.abs(statistic(inner)).sum(1).max() < rel.statistic_sensitivity(d, bx, by)
    grid = statistic(corners(d, bx, by, levels=(-1.0, 0.0, 1.0)))  # every component's extremes lie on it
    pairs = np.abs(grid[:, None] - grid[None]).sum(-1).max()
    ranges = (grid.max(0) - grid.min(0)).sum()
    assert pairs <= rel.statistic_sensitivity(d, bx, by, neighbouring="substitute") == pytest.approx(ranges)
    # the closed form of §2.2 and its numbers for d = 10
    closed = math.comb(d, 2) * bx**2 + d * bx**2 + d * bx + d * bx * by + by + by**2
    assert rel.statistic_sensitivity(d, bx, by) == pytest.approx(closed)
    assert rel.statistic_sensitivity(10, 3.0, 4.0) == pytest.approx(665.0)
    assert rel.statistic_sensitivity(10, 3.0, 4.0, neighbouring="substitute") == pytest.approx(1224.0)
    assert rel.statistic_sensitivity(10, 3.0, 4.0, norm=2) == pytest.approx(79.1, abs=0.05)


def test_moment_sensitivity_is_the_sup_over_the_bounded_domain():
    d, bx = 4, 1.5
    x = corners(d, bx, 1.0)[:, :-1]
    t = quartet_statistic(x)
    assert t.shape[1] == math.comb(d + 4, 4) - 1
    assert rel.moment_sensitivity(d, bx) == pytest.approx(np.abs(t).sum(1).max(), rel=1e-12)
    grid = quartet_statistic(corners(d, bx, 1.0, levels=(-1.0, 0.0, 1.0))[:, :-1])
    assert rel.moment_sensitivity(d, bx, neighbouring="substitute") == pytest.approx((grid.max(0) - grid.min(0)).sum())
    assert rel.moment_sensitivity(10, 3.0) == pytest.approx(64_380.0)
    assert rel.moment_sensitivity(10, 1.0) == pytest.approx(1000.0)


# ---------------------------------------------------------------- R2, R3: moments


def clt_reference(w, sigma2, second, K):
    """§2.3's list, block by block, over the D components (slow and obvious)."""
    k = len(w)
    a, b = moments.pairs(k - 1)
    y = k  # index of y in u

    def moment(i, j):  # E[u_i u_j]
        if i == y and j == y:
            return w @ second @ w + sigma2
        if j == y:
            return second[i] @ w
        return second[i, j]

    def cov(i, j, p, q):  # Cov(u_i u_j, u_p u_q) with i ≤ j, p ≤ q
        ys = int(j == y) + int(i == y), int(q == y) + int(p == y)  # ints: numpy bools would add as "or"
        if ys == (0, 0):
            return K[i, j, p, q]
        if ys == (0, 1):
            return K[i, j, p] @ w
        if ys == (1, 0):
            return K[p, q, i] @ w
        if ys == (0, 2):
            return w @ K[i, j] @ w
        if ys == (2, 0):
            return w @ K[p, q] @ w
        if ys == (1, 1):
            return w @ K[i, :, p, :] @ w + sigma2 * second[i, p]
        if ys == (1, 2):
            return np.einsum("jkl,j,k,l", K[i], w, w, w) + 2 * sigma2 * second[i] @ w
        if ys == (2, 1):
            return np.einsum("jkl,j,k,l", K[p], w, w, w) + 2 * sigma2 * second[p] @ w
        return np.einsum("ijkl,i,j,k,l", K, w, w, w, w) + 4 * sigma2 * w @ second @ w + 2 * sigma2**2

    mean = np.array([moment(i, j) for i, j in zip(a, b)])
    covariance = np.array([[cov(i, j, p, q) for p, q in zip(a, b)] for i, j in zip(a, b)])
    return mean, covariance


def test_clt_moments_match_the_blockwise_formulas():
    rng = np.random.default_rng(1)
    d = 3
    second, factor = moments.known_moments(d, 2.0)
    K = (factor @ factor.T).reshape((d + 1,) * 4)
    w, sigma2 = rng.standard_normal(d + 1), 0.7
    mean, cov = moments.clt_moments(w, sigma2, second, factor)
    ref_mean, ref_cov = clt_reference(w, sigma2, second, K)
    np.testing.assert_allclose(mean, ref_mean, atol=1e-12)
    np.testing.assert_allclose(cov, ref_cov, atol=1e-10)


def test_clt_moments_match_monte_carlo():
    """Mean and covariance of t(u) per record against 2·10⁵ simulated records (R2), d = 2, no clamping."""
    w, sigma2, n = np.array([0.7, -0.4, 0.3]), 0.5, 200_000
    second, factor = moments.known_moments(D, 50.0)
    mean, cov = moments.clt_moments(w, sigma2, second, factor)
    X, y = dataset(2, n=n, w=w, sigma2=sigma2)
    t = statistic(np.c_[X, y])
    se = np.sqrt(np.diag(cov) / n)
    assert np.all(np.abs(t.mean(0) - mean) < 5 * se)
    centred = t - t.mean(0)
    empirical = centred.T @ centred / n
    # sd of a covariance estimate: sqrt(E[(t_a t_b)²] − Cov²)/√n, bounded via fourth moments of t
    se_cov = np.sqrt(np.maximum((centred[:, :, None] ** 2 * centred[:, None, :] ** 2).mean(0) - empirical**2, 0) / n)
    assert np.all(np.abs(empirical - cov) < 6 * se_cov + 1e-9)


def test_known_moments_are_the_censored_normal_moments():
    """Against quadrature of E[clip(x, ±B)^k], x ~ N(0, 1)."""
    bound = 1.0

    def moment(k):
        inside = integrate.quad(lambda x: x**k * stats.norm.pdf(x), -bound, bound, epsabs=1e-13)[0]
        return inside + 2 * bound**k * stats.norm.sf(bound)

    m2, m4 = moment(2), moment(4)
    second, factor = moments.known_moments(D, bound)
    K = (factor @ factor.T).reshape((D + 1,) * 4)
    assert second[0, 0] == pytest.approx(m2, rel=1e-10)
    assert second[0, 1] == pytest.approx(0.0, abs=1e-12) and second[-1, -1] == pytest.approx(1.0)
    assert K[0, 0, 0, 0] == pytest.approx(m4 - m2**2, rel=1e-8)  # Var(x²)
    assert K[0, 0, 1, 1] == pytest.approx(0.0, abs=1e-10)  # independent coordinates
    assert K[0, -1, 0, -1] == pytest.approx(m2, rel=1e-8)  # Var(x · 1)


def test_noisy_moments_tend_to_the_sample_moments_of_the_clamped_data():
    """R3: as ε → ∞ the Gibbs-SS-Noisy release gives M̂₂ = X̃ᵀX̃/N and K̂ = the sample covariance of x̃x̃ᵀ."""
    X, y = dataset(4)
    r = release_one(X, y, epsilon=1e12, release=rel.RegressionRelease(bound_x=1.0))
    Xc = np.c_[np.clip(X[:, :-1], -1.0, 1.0), X[:, -1]]
    np.testing.assert_allclose(r.second, Xc.T @ Xc / N, atol=1e-6)
    outer = np.einsum("ni,nj->nij", Xc, Xc).reshape(N, -1)
    centred = outer - outer.mean(0)
    np.testing.assert_allclose(np.asarray(r.factor) @ np.asarray(r.factor).T, centred.T @ centred / N, atol=1e-6)
    u = np.c_[Xc, np.clip(y, -4, 4)]
    np.testing.assert_allclose(r.z, statistic(u).sum(0), atol=1e-6)


def test_release_noise_scales():
    X, y = dataset(5)
    noisy = release_one(X, y, epsilon=0.5)
    assert float(noisy.scale) == pytest.approx(rel.statistic_sensitivity(D, *BOUNDS) / 0.25)
    known = release_one(X, y, epsilon=0.5, release=rel.RegressionRelease(moments="known"))
    assert float(known.scale) == pytest.approx(rel.statistic_sensitivity(D, *BOUNDS) / 0.5)
    gauss = release_one(X, y, epsilon=0.5, delta=1e-5, release=rel.RegressionRelease(mechanism="gaussian"))
    assert float(gauss.scale) == pytest.approx(
        analytic_gaussian_sigma(rel.statistic_sensitivity(D, *BOUNDS, norm=2), 0.25, 5e-6)
    )
    # the noise has the stated scale: z − s over many releases of one data set
    s = statistic(np.c_[X[:, :-1], X[:, -1], y]).sum(0)
    draws = (
        rel.release_statistics(
            np.broadcast_to(X, (200, *X.shape)),
            np.broadcast_to(y, (200, *y.shape)),
            keys=list(range(200)),
            epsilon=0.5,
            release=rel.RegressionRelease(moments="known"),
        ).z
        - s
    )
    assert np.std(draws) == pytest.approx(math.sqrt(2) * float(known.scale), rel=0.05)


# ---------------------------------------------------------------- R1 and noise: the sampler


def test_gibbs_tends_to_the_exact_posterior_as_epsilon_grows():
    X, y = dataset(6)
    post = bs.bs2019_posterior(X, y, epsilon=1e7, key=1, moments="known", **GIBBS)
    w, sigma2 = constrained(post.sample(0, 1600))
    mu, w_sd, s2_mean, s2_sd = exact_nig(X, y)
    np.testing.assert_array_less(np.abs(w.mean(0) - mu), 0.15 * w_sd)
    np.testing.assert_allclose(w.std(0), w_sd, rtol=0.1)
    assert abs(sigma2.mean() - s2_mean) < 0.15 * s2_sd and sigma2.std() == pytest.approx(s2_sd, rel=0.1)
    diag = post.diagnostics
    assert diag["max_rhat"] < 1.05 and diag["fallbacks"] == 0
    assert diag.ess.shape == (D + 2,) and diag.release["mechanism"] == "laplace" and diag.release["epsilon"] == 1e7


def test_noise_widens_the_posterior():
    X, y = dataset(7)
    mu, w_sd, _, _ = exact_nig(X, y)
    post = bs.bs2019_posterior(X, y, epsilon=2.0, key=2, **GIBBS)
    w, _ = constrained(post.sample(0, 1600))
    assert np.all(w.std(0) > 1.5 * w_sd)
    assert np.all(np.isfinite(post.diagnostics["rhat"]))
    release = post.diagnostics.release
    assert release["statistic_noise_scale"] == pytest.approx(rel.statistic_sensitivity(D, *BOUNDS) / 1.0)
    assert release["moment_sensitivity"] == pytest.approx(rel.moment_sensitivity(D, BOUNDS[0]))


def test_naive_ss_is_exact_without_noise_and_narrower_than_the_noise_aware_posterior():
    X, y = dataset(8)
    mu, w_sd, s2_mean, _ = exact_nig(X, y)
    w, sigma2 = constrained(bs.naive_ss_posterior(X, y, epsilon=1e9, key=0).sample(1, 20_000))
    np.testing.assert_allclose(w.mean(0), mu, atol=0.05 * w_sd.max())
    np.testing.assert_allclose(w.std(0), w_sd, rtol=0.03)
    assert sigma2.mean() == pytest.approx(s2_mean, rel=0.01)
    naive = bs.naive_ss_posterior(X, y, epsilon=2.0, key=0)
    assert naive.diagnostics.release["statistic_noise_scale"] == pytest.approx(
        rel.statistic_sensitivity(D, *BOUNDS) / 2.0
    )
    w_naive, _ = constrained(naive.sample(1, 4000))
    w_aware, _ = constrained(bs.bs2019_posterior(X, y, epsilon=2.0, key=2, **GIBBS).sample(0, 1600))
    assert np.all(w_aware.std(0) > w_naive.std(0))


# ---------------------------------------------------------------- the methods and their posteriors


@pytest.fixture(scope="module")
def three():
    """Three data sets at ε = 10⁷ through the Method records: (batch, keys, bs2019 in chunks of two, bs2019-naive)."""
    sets = [dataset(10 + m) for m in range(3)]
    batch = Batch(
        (), get(bs.MODEL), {"X": np.stack([s[0] for s in sets]), "y": np.stack([s[1] for s in sets])}, 1e7, 1e-5, size=3
    )
    keys = jax.random.split(jax.random.key(0), 3)
    return (
        batch,
        keys,
        fit_problems(BS2019, batch, keys, BS2019.make_options(chunk=2, moments="known", **GIBBS)),
        fit_problems(BS2019_NAIVE, batch, keys, BS2019_NAIVE.make_options()),
    )


def test_batch_gives_one_posterior_per_problem_in_padded_chunks(three):
    batch, keys, posts, naive = three
    assert len(posts) == len(naive) == 3
    for X, y, post in zip(batch.data["X"], batch.data["y"], posts):
        w, _ = constrained(post.sample(0, 500))
        mu, w_sd, _, _ = exact_nig(X, y)
        np.testing.assert_array_less(np.abs(w.mean(0) - mu), 0.3 * w_sd)
        assert post.sample(1, 5000).shape == (5000, D + 2)  # more than the pool: drawn with replacement
    assert naive[0].sample(0, 3).shape == (3, D + 2)
    for post in posts + naive:
        assert isinstance(post, Posterior) and post.theta_names == ("w[0]", "w[1]", "w[2]", "sigma2")
    assert (posts[0].method, naive[0].method) == ("bs2019", "bs2019-naive")
    # problem m is the data set alone under keys[m] (the third ran padded in the second chunk)
    one = bs.bs2019_posterior(
        batch.data["X"][2], batch.data["y"][2], key=keys[2], epsilon=1e7, moments="known", **GIBBS
    )
    np.testing.assert_allclose(one.chains, posts[2].chains, rtol=1e-9, atol=1e-12)
    one = bs.naive_ss_posterior(batch.data["X"][1], batch.data["y"][1], key=keys[1], epsilon=1e7)
    np.testing.assert_allclose(one.law.mu, naive[1].law.mu, rtol=1e-12)


def test_the_study_summary_reports_mixing_fallbacks_and_the_release(three):
    _, _, posts, naive = three
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
    assert summary["release"] == {
        "mechanism": "laplace",
        "neighbouring": "add-remove",
        "epsilon": 1e7,
        "delta": 0.0,
        "bounds": [3.0, 4.0],
        "moments": "known",
        "statistic_epsilon": 1e7,
        "statistic_sensitivity": pytest.approx(rel.statistic_sensitivity(D, *BOUNDS)),
        "statistic_noise_scale": pytest.approx(rel.statistic_sensitivity(D, *BOUNDS) / 1e7),
        "chains": 4,
        "warmup": 100,
        "draws": 400,
        "thin": 1,
    }
    diagnostics = posts[0].diagnostics
    assert diagnostics.sweeps == 4 * 400 and diagnostics.warmup_fallbacks >= 0
    assert diagnostics.fallback_rate == diagnostics.fallbacks / diagnostics.sweeps
    assert list(aggregate_diagnostics(naive)) == ["release"]
    assert aggregate_diagnostics(naive)["release"]["moments"] == "none"


def test_nig_posterior_intervals_moments_summary_and_file(three, tmp_path):
    """Exact marginals: w_j Student-t, σ² inverse gamma; the 90 % interval leaves 5 % of exact draws in each
    tail, the moments are the closed forms (and the draws')."""
    post = three[3][0]
    n = 200_000
    draws = post.sample(2, n)
    low, high = post.interval(0.9)
    tail = 5 * math.sqrt(0.05 * 0.95 / n)
    np.testing.assert_allclose((draws < low).mean(0), 0.05, atol=tail)
    np.testing.assert_allclose((draws > high).mean(0), 0.05, atol=tail)
    mean, sd = post.moments()
    covariance = np.linalg.inv(post.law.chol @ post.law.chol.T)
    np.testing.assert_allclose(mean[:-1], post.law.mu, rtol=1e-7)
    np.testing.assert_allclose(sd[:-1], np.sqrt(post.law.b_n / (post.law.a_n - 1) * np.diag(covariance)), rtol=1e-6)
    np.testing.assert_array_less(np.abs(mean - draws.mean(0)), 5 * sd / math.sqrt(n))
    np.testing.assert_allclose(sd, draws.std(0), rtol=0.01)
    text = str(post.summary(0.9, key=0, scale="unconstrained"))
    assert text.splitlines()[0] == post.describe() and "sigma2" in text and f"{high[-1]:.4g}" in text
    with pytest.raises(ValueError, match="key"):
        post.save(tmp_path / "naive.nc")
    post.save(tmp_path / "naive.nc", key=4)
    with xr.open_datatree(tmp_path / "naive.nc", engine="h5netcdf") as tree:
        np.testing.assert_array_equal(tree["posterior"]["theta"].values, post.sample(4, 4000)[None])
        assert list(tree["posterior"]["theta_dim"].values) == list(post.theta_names)
        assert json.loads(tree.attrs["parameters"])["a_n"] == post.law.a_n and tree.attrs["kind"] == bs.NIG


def test_gibbs_posterior_file_holds_the_chains(three, tmp_path):
    post = three[2][1]
    assert post.kind == sampled.GIBBS
    post.save(tmp_path / "bs2019.nc")
    with xr.open_datatree(tmp_path / "bs2019.nc", engine="h5netcdf") as tree:
        np.testing.assert_array_equal(tree["posterior"]["theta"].values, post.chains)
        assert json.loads(tree.attrs["diagnostics"])["warmup_fallbacks"] == post.diagnostics.warmup_fallbacks


def test_options_keep_their_defaults_and_theta_is_the_models():
    assert dataclasses.asdict(BS2019Options()) == {
        "epsilon": None,
        "bound_x": 3.0,
        "bound_y": 4.0,
        "mechanism": "laplace",
        "neighbouring": "add-remove",
        "a0": 20.0,
        "b0": 0.5,
        "prior_scale": 2.0,
        "moments": "noisy",
        "chains": 4,
        "warmup": 500,
        "draws": 500,
        "thin": 2,
        "redraws": 10,
        "chunk": 50,
    }
    assert dataclasses.asdict(BS2019NaiveOptions()) == {
        "epsilon": None,
        "bound_x": 3.0,
        "bound_y": 4.0,
        "mechanism": "laplace",
        "neighbouring": "add-remove",
        "a0": 20.0,
        "b0": 0.5,
        "prior_scale": 2.0,
    }
    assert BS2019Options().settings() == {
        "release": rel.RegressionRelease(),
        "gibbs": RegressionGibbs(),
        "prior": NIGPrior(),
        "chunk": 50,
    }
    assert BS2019.models == BS2019_NAIVE.models == ("linreg-10d",) and BS2019.needs_epsilon
    assert theta_names(10) == get("linreg-10d").site_map.theta_names()
    for bad, match in (
        ({"chunk": 0}, "chunk"),
        ({"thin": 0}, "thin"),
        ({"moments": "exact"}, "moments"),
        ({"bound_y": -1.0}, "bound_y"),
        ({"epsilon": math.inf}, "epsilon"),
    ):
        with pytest.raises(ValueError) as info:
            BS2019.make_options(bad)
        mentions(info, match)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("epsilon", [None, 0.0, -1.0, math.inf])
def test_bad_epsilon_raises(epsilon):
    X, y = dataset(0, n=20)
    with pytest.raises(ValueError, match="epsilon"):
        release_one(X, y, epsilon=epsilon)


def test_bad_arguments_raise_clear_errors():
    X, y = dataset(0, n=20)
    with pytest.raises(ValueError) as info:
        release_one(X[:, :-1], y, epsilon=1.0)
    mentions(info, "bias")
    with pytest.raises(ValueError, match="y"):
        release_one(X, y[:-1], epsilon=1.0)
    with pytest.raises(ValueError, match="finite"):
        release_one(X, np.where(np.arange(20) == 3, np.nan, y), epsilon=1.0)
    with pytest.raises(ValueError) as info:
        rel.release_statistics(X[None], y[None], keys=[0, 1], epsilon=1.0)
    mentions(info, "2", "1")
    with pytest.raises(ValueError, match="bound_x"):
        rel.RegressionRelease(bound_x=0.0)
    with pytest.raises(ValueError, match="mechanism"):
        rel.RegressionRelease(mechanism="exponential")
    with pytest.raises(ValueError, match="draws"):
        RegressionGibbs(draws=2)
    with pytest.raises(ValueError) as info:
        bs.bs2019_posterior(X, y, key=0, epsilon=1.0, chain=3)
    mentions(info, "chain")
    with pytest.raises(ValueError) as info:
        bs.naive_ss_posterior(X, y, key=0, epsilon=1.0, chains=2)  # exact: no sampler settings
    mentions(info, "chains")
    with pytest.raises(ValueError, match="delta"):
        release_one(X, y, epsilon=1.0, delta=0.0, release=rel.RegressionRelease(mechanism="gaussian"))
    with pytest.raises(TypeError, match="key"):
        bs.naive_ss_posterior(X, y, epsilon=1.0)  # a key is required: the release is random
    batch = Batch((), get(bs.MODEL), {"X": X[None], "y": y[None]}, 1.0, 1e-5, size=1)
    options = BS2019_NAIVE.make_options()
    with pytest.raises(ValueError, match="'X'"):
        BS2019_NAIVE.fit_batch(dataclasses.replace(batch, data={"x": np.zeros((1, 5))}), [0], options)
    with pytest.raises(ValueError) as info:
        BS2019_NAIVE.fit_batch(dataclasses.replace(batch, model=get("logistic-3d")), [0], options)
    mentions(info, "'bs2019-naive'", "linreg-10d", "'logistic-3d'")
    with pytest.raises(ValueError) as info:
        BS2019_NAIVE.fit_batch(dataclasses.replace(batch, epsilon=None), [0], options)
    mentions(info, "'bs2019-naive'", "--epsilon", "'epsilon'")
