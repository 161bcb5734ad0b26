"""Issue 14, defects 9 and 11 and what users expect of posteriors: summaries and tables on each site's own scale
(labelled, the unconstrained θ on request) as DataFrames with MCSEs and HDIs, descriptions that say what each
posterior is, short reprs, checked `sample(n)`, and the DPVI iterates in `to_arviz` for az.plot_trace.

Closed forms: a naive posterior θ ~ N(m, s²) of a site scale = exp(θ) is LogNormal(m, s²); the M1 conjugate
posterior of the rate λ = softplus(θ) is Gamma(shape, rate).
"""

import math

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from scipy import optimize, stats

import noiseaware as na
from noiseaware.baselines.bernstein_sheldon import ConjugateLaw
from noiseaware.baselines.bernstein_sheldon_regression import NIGLaw
from noiseaware.baselines.dpvim import dpvim_posterior
from noiseaware.baselines.expfam import family
from noiseaware.baselines.regression_gibbs import theta_names as regression_names
from noiseaware.baselines.regression_gibbs import theta_sites
from noiseaware.baselines.sampled import ClosedFormPosterior, ReleaseDiagnostics, gibbs_posterior
from noiseaware.methods.reference import NONPRIVATE_KIND
from noiseaware.posteriors.base import SUMMARY_DRAWS
from noiseaware.posteriors.draws import DrawsPosterior
from noiseaware.posteriors.summary import comparison_table
from noiseaware.trace.sites import SiteSpec

M, S = 0.7, 0.4  # the naive posterior θ ~ N(M, S²); scale = exp(θ) ~ LogNormal(M, S²)
STEPS = 300
COLUMNS = ["mean", "sd", "mcse_mean", "eti90_lb", "eti90_ub", "hdi90_lb", "hdi90_ub"]
RELEASE = {"epsilon": 1.0, "mechanism": "laplace", "delta": 0.0}


def lognormal_trace(sites=(SiteSpec("scale", (), "exp"),)):
    """A trace whose last iterate is φ_T = (M, softplus⁻¹(S)) for a one-site model (or the given sites)."""
    rng = np.random.default_rng(0)
    d = sum(site.size for site in sites)
    params = np.cumsum(rng.normal(0.0, 0.01, (STEPS, 2 * d)), axis=0) + np.r_[np.full(d, M), np.full(d, -1.0)]
    final = np.r_[np.full(d, M), np.full(d, np.log(np.expm1(S)))]
    return na.Trace.from_arrays(
        params,
        rng.normal(size=(STEPS, 2 * d)),
        noise_multiplier=1.0,
        clip=1.0,
        sampling_rate=0.1,
        n_examples=100,
        final_params=final,
        sites=sites,
    )


def mixture(sites=(SiteSpec("scale", (), "exp"),), k=400, seed=1):
    """A noise-aware posterior with K spread-out components over the sites' θ."""
    rng = np.random.default_rng(seed)
    d = sum(site.size for site in sites)
    optimum = np.concatenate([rng.normal(M, 0.3, (1, k, d)), rng.normal(-1.5, 0.3, (1, k, d))], axis=-1)
    names = tuple(f"mu:{n}" for n in range(d)) + tuple(f"rho:{n}" for n in range(d))
    return na.MixturePosterior(optimum, None, None, "exact", names, sites=sites, prior="default")


def lognormal_hdi(level):
    """The shortest interval of LogNormal(M, S²) holding `level`: minimise q(p + level) − q(p) over p."""
    law = stats.lognorm(S, scale=math.exp(M))
    p = optimize.minimize_scalar(
        lambda p: law.ppf(p + level) - law.ppf(p), bounds=(1e-9, 1 - level - 1e-9), method="bounded"
    ).x
    return law.ppf(p), law.ppf(p + level)


# ---------------------------------------------------------------- defect 9: the sites' own scale


def test_naive_summary_is_the_lognormal_of_the_site_not_theta():
    """scale = exp(θ), θ ~ N(M, S²): the summary's row 'scale' is LogNormal's mean, sd, central interval and
    HDI (not θ's 0.7 under the name 'scale'), with its Monte Carlo standard error."""
    post = na.naive_posterior(lognormal_trace())
    table = post.summary(key=0)
    assert table.index.name == "site (constrained)" and list(table.index) == ["scale"]
    row = table.loc["scale"]
    mean = math.exp(M + S**2 / 2)
    sd = mean * math.sqrt(math.expm1(S**2))
    n = SUMMARY_DRAWS
    assert row["mcse_mean"] == pytest.approx(sd / math.sqrt(n), rel=0.05)
    assert abs(row["mean"] - mean) < 4 * row["mcse_mean"]
    assert row["sd"] == pytest.approx(sd, rel=0.03)
    z = stats.norm.ppf(0.95)
    np.testing.assert_allclose([row["eti90_lb"], row["eti90_ub"]], np.exp([M - z * S, M + z * S]), rtol=1e-12)
    np.testing.assert_allclose([row["hdi90_lb"], row["hdi90_ub"]], lognormal_hdi(0.9), rtol=0.03)
    # a right-skewed site: the HDI lies in the support, is no wider than the central interval and sits left of it
    assert 0 < row["hdi90_lb"] < row["eti90_lb"] and row["hdi90_ub"] < row["eti90_ub"]
    assert row["hdi90_ub"] - row["hdi90_lb"] <= row["eti90_ub"] - row["eti90_lb"]


def test_mixture_summary_matches_draws_of_the_sites_and_exact_transformed_quantiles():
    """A noise-aware mixture with a positive, an interval and a simplex site: each row is a site element on its
    own scale; means agree with an independent large sample of the constrained draws within their MCSE; the
    central ends of elementwise sites are exactly T of θ's exact quantiles, the simplex's its draws'."""
    sites = (SiteSpec("sigma2", (), "softplus"), SiteSpec("p", (), "sigmoid"), SiteSpec("pi", (3,), "alr"))
    post = mixture(sites)
    table = post.summary(key=0)
    assert list(table.index) == ["sigma2", "p", "pi[0]", "pi[1]", "pi[2]"]
    big = post.constrained_sample(key=7, n=400_000)
    draws = np.column_stack([big["sigma2"], big["p"], big["pi"]])
    error = np.sqrt(table["mcse_mean"] ** 2 + draws.std(axis=0) ** 2 / draws.shape[0])
    np.testing.assert_array_less(np.abs(table["mean"] - draws.mean(axis=0)), 4 * error)
    np.testing.assert_allclose(table["sd"], draws.std(axis=0), rtol=0.03)
    low, high = post.interval(0.9)
    central = table[["eti90_lb", "eti90_ub"]].to_numpy()
    np.testing.assert_allclose(central[0], np.logaddexp(0, [low[0], high[0]]), rtol=1e-12)
    np.testing.assert_allclose(central[1], 1 / (1 + np.exp(-np.array([low[1], high[1]]))), rtol=1e-12)
    np.testing.assert_allclose(central[2:, 0], np.quantile(draws[:, 2:], 0.05, axis=0), atol=0.01)
    assert np.all(table["hdi90_lb"] > 0) and np.all(table["hdi90_ub"][1:] < 1)  # inside each site's support
    assert "simplex" not in table.note and "exact" in table.note


def test_unconstrained_view_on_request_is_theta_exactly():
    post = mixture()
    table = post.summary(key=0, scale="unconstrained")
    assert table.index.name == "θ (unconstrained)" and "θ (unconstrained)" in str(table)
    np.testing.assert_array_equal(table["mean"], post.theta_mean)
    np.testing.assert_array_equal(table["sd"], post.theta_sd)
    np.testing.assert_array_equal(table["mcse_mean"], 0.0)  # exact moments: no Monte Carlo error
    np.testing.assert_array_equal(table[["eti90_lb", "eti90_ub"]].to_numpy()[0], [e[0] for e in post.interval()])
    with pytest.raises(ValueError, match="unknown scale 'natural': choose one of constrained, unconstrained"):
        post.summary(key=0, scale="natural")


def test_without_a_site_map_theta_is_shown_and_labelled_unconstrained():
    optimum = np.array([[[0.2, -1.0]]])
    post = na.MixturePosterior(optimum, None, None, "naive", ("mu:a", "rho:a"), kind="naive posterior")
    table = post.summary(key=0)
    assert table.index.name == "θ (unconstrained)" and "no site map" in str(table)
    with pytest.raises(ValueError, match="needs the model's site map"):
        post.constrained_sample(0, 5)


def test_summary_is_a_dataframe_with_az_summary_columns_and_prints_as_text():
    post = na.naive_posterior(lognormal_trace())
    table = post.summary(key=0)
    assert isinstance(table, pd.DataFrame) and list(table.columns) == COLUMNS
    assert isinstance(post.summary(key=0)["mean"], pd.Series)
    assert list(post.summary(0.8, key=0).columns)[3:] == ["eti80_lb", "eti80_ub", "hdi80_lb", "hdi80_ub"]
    text = str(table)
    assert text.splitlines()[0] == post.describe() and repr(table) == text
    assert "site (constrained)" in text and "90% low" in text and "HDI high" in text and "mcse" in text
    assert "Monte Carlo" in text.splitlines()[-1]
    # the same key gives the same table
    pd.testing.assert_frame_equal(table, post.summary(key=0))


def test_keys_are_required_where_the_summary_draws():
    post = na.naive_posterior(lognormal_trace())
    with pytest.raises(TypeError, match=r"pass key=…"):
        post.summary()
    with pytest.raises(TypeError, match="key must be"):
        post.summary(key="abc")
    with pytest.raises(TypeError, match="key"):
        comparison_table({"naive": post})


def test_stored_draws_need_no_key_and_their_mcse_follows_the_autocorrelation():
    """Summaries of stored MCMC draws use them as they are (no key); the MCSE is sd/√n for independent draws
    and sd·√((1 + a)/(1 − a))/√n for an AR(1) chain with coefficient a."""
    rng = np.random.default_rng(3)
    n = 20_000
    independent = DrawsPosterior(rng.normal(size=(1, n, 1)), "ref", sites=(SiteSpec("x", (), "identity"),))
    row = independent.summary().loc["x"]
    assert row["mcse_mean"] == pytest.approx(row["sd"] / math.sqrt(n), rel=0.15)
    a, chain = 0.9, np.zeros(n)
    for t in range(1, n):
        chain[t] = a * chain[t - 1] + rng.normal()
    correlated = DrawsPosterior(chain[None, :, None], "ref")
    row = correlated.summary().loc["theta[0]"]
    assert row["mcse_mean"] == pytest.approx(row["sd"] * math.sqrt((1 + a) / (1 - a) / n), rel=0.25)
    assert "MCMC draws" in str(correlated.summary())


def test_m1_conjugate_posterior_summary_is_the_gamma_of_the_rate():
    """bs2018-naive on M1: λ ~ Gamma(shape, rate) and θ = softplus⁻¹(λ); the rate's row is Gamma's, its central
    interval exactly Gamma's quantiles; the unconstrained view keeps the exact integrated moments."""
    fam = family("gamma-exponential", 50)
    shape, rate = 52.0, 30.0
    post = ClosedFormPosterior(
        law=ConjugateLaw(fam, np.array([shape, rate])),
        theta_names=fam.theta_names,
        sites=fam.sites,
        method="bs2018-naive",
        diagnostics=ReleaseDiagnostics(released=np.zeros(2), release=RELEASE),
    )
    row = post.summary(key=0).loc["rate"]
    law = stats.gamma(shape, scale=1 / rate)
    assert abs(row["mean"] - law.mean()) < 4 * row["mcse_mean"] and row["sd"] == pytest.approx(law.std(), rel=0.03)
    np.testing.assert_allclose([row["eti90_lb"], row["eti90_ub"]], law.ppf([0.05, 0.95]), rtol=1e-9)
    unconstrained = post.summary(key=0, scale="unconstrained")
    np.testing.assert_array_equal(unconstrained["mean"], post.moments()[0])
    assert (unconstrained["mcse_mean"] == 0).all()


def test_comparison_table_shows_the_sites_own_scale_labelled_and_theta_on_request():
    post, naive = mixture(), na.naive_posterior(lognormal_trace())
    table = comparison_table({"noise-aware": post, "naive": naive}, truth=[0.5], key=0)
    header, row = table.splitlines()
    assert header.startswith("site (constrained)") and "truth" in header and row.startswith("scale")
    low, high = post.interval(0.9)
    assert f"[{np.exp(low[0]):.4g}, {np.exp(high[0]):.4g}]" in row and row.endswith(f"{np.exp(0.5):.4g}")
    table = comparison_table({"noise-aware": post}, truth=[0.5], key=0, scale="unconstrained")
    assert table.startswith("θ (unconstrained)") and f"[{low[0]:.4g}, {high[0]:.4g}]" in table
    assert table.splitlines()[1].endswith("0.5")


def test_labelled_sites_name_their_rows_and_survive_the_file(tmp_path):
    sites = (SiteSpec("theta", (3,), "identity", labels=("age", "hours", "bias")),)
    post = mixture(sites)
    assert list(post.summary(key=0).index) == ["theta[age]", "theta[hours]", "theta[bias]"]
    post.save(tmp_path / "p.nc", key=0)
    assert na.load_posterior(tmp_path / "p.nc").sites == sites


# ---------------------------------------------------------------- defect 11: each type says what it is


def test_each_mixture_type_describes_itself():
    trace = lognormal_trace()
    naive = na.naive_posterior(trace)
    assert naive.describe() == "naive posterior: the DPVI last iterate φ_T, ignores the DP noise"
    text = str(naive.summary(key=0))
    assert "noise-aware" not in text and "draws of φ*" not in text and "method naive" not in text
    dpvim = dpvim_posterior(trace, key=0, draws=50)
    assert dpvim.describe().startswith("DPVIm posterior: 50 draws of φ: the last iterate φ_T spread by the variance")
    assert mixture().describe() == "noise-aware posterior: method exact, prior default, 400 draws of φ*"


# ---------------------------------------------------------------- every type: repr, sample(n), site draws


def every_posterior():
    """One posterior of every type behind the protocol, each with a site map."""
    rng = np.random.default_rng(5)
    trace = lognormal_trace()
    fam = family("gamma-exponential", 50)
    release = ReleaseDiagnostics(released=np.zeros(2), release=RELEASE)
    sites = (SiteSpec("scale", (), "exp"),)
    return [
        mixture(),
        na.naive_posterior(trace),
        dpvim_posterior(trace, key=0, draws=50),
        DrawsPosterior(rng.normal(size=(2, 100, 1)), "ref", sites=sites),
        DrawsPosterior(rng.normal(size=(1, 100, 1)), "nonprivate", sites=sites, kind=NONPRIVATE_KIND),
        gibbs_posterior(
            rng.normal(size=(2, 100, 1)),
            method="bs2018",
            theta_names=fam.theta_names,
            sites=fam.sites,
            fallbacks=0,
            redraws=0,
            sweeps=200,
            released=np.zeros(2),
            release=RELEASE,
        ),
        ClosedFormPosterior(
            law=ConjugateLaw(fam, np.array([52.0, 30.0])),
            theta_names=fam.theta_names,
            sites=fam.sites,
            method="bs2018-naive",
            diagnostics=release,
        ),
        ClosedFormPosterior(
            law=NIGLaw(np.array([0.5, -0.2]), np.eye(2) * 10.0, 20.0, 5.0),
            theta_names=regression_names(1),
            sites=theta_sites(1),
            method="bs2019-naive",
            diagnostics=release,
        ),
    ]


@pytest.mark.parametrize("index", range(8))
def test_every_type_has_a_short_repr_a_checked_sample_and_site_draws(index):
    post = every_posterior()[index]
    text = repr(post)
    assert text.startswith(type(post).__name__ + "(") and post.describe() in text
    assert "array(" not in text and len(text) < 300 and "d = " in text and "sites: " in text
    for bad in (-5, 0, 2.5, "10", True):
        with pytest.raises(ValueError, match="n must be a positive integer"):
            post.sample(0, bad)
    n = SUMMARY_DRAWS  # the summary's number of draws: the baselines' samplers compile once per n
    draws = post.constrained_sample(0, n)
    assert set(draws) == set(post.site_map.names)
    for site in post.site_map.sites:
        assert draws[site.name].shape == (n, *site.shape) and draws[site.name].dtype == np.float64
    assert isinstance(post, na.Posterior)
    assert list(post.summary(key=0).columns) == COLUMNS


def test_trace_repr_is_short():
    text = repr(lognormal_trace())
    assert text == f"Trace(T = {STEPS} steps, d = 1, ε = unknown, σ = 1, N = 100, sites: scale)"


# ---------------------------------------------------------------- the DPVI iterates in ArviZ and in the file


def test_to_arviz_holds_the_dpvi_iterates_for_az_plot_trace(tmp_path):
    sites = (SiteSpec("scale", (), "exp"), SiteSpec("pi", (3,), "alr"))
    trace = lognormal_trace(sites)
    post = na.naive_posterior(trace)
    tree = post.to_arviz(key=0)
    dpvi = tree["dpvi"]
    assert dpvi["scale"].dims == ("chain", "draw") and dpvi["scale"].shape == (1, STEPS)
    assert dpvi["pi"].shape == (1, STEPS, 2)
    np.testing.assert_array_equal(dpvi["scale"].values[0], trace.params[:, 0])
    np.testing.assert_array_equal(dpvi["pi"].values[0], trace.params[:, 1:3])
    assert list(az.summary(tree, group="dpvi").index) == ["scale", "pi[0]", "pi[1]"]
    az.plot_trace(tree, group="dpvi")
    plt.close("all")
    post.save(tmp_path / "naive.nc", key=0)
    np.testing.assert_array_equal(na.load_posterior(tmp_path / "naive.nc").iterates, trace.params[:, :3])
    # a posterior without iterates (e.g. written before they were kept) saves and loads without the group
    bare = mixture()
    bare.save(tmp_path / "bare.nc", key=0)
    assert "dpvi" not in bare.to_arviz(key=0).children and na.load_posterior(tmp_path / "bare.nc").iterates is None
