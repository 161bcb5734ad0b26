"""The model's own prior on the VI optimum (docs/method.md §2.3, §2.10): its facts against closed forms, the wander
shift against a slow loop, and a trace that says nothing giving back the prior."""

import re
import warnings

import jax
import numpy as np
import pytest
from messages import mentions
from scipy import stats

import noiseaware as na
from noiseaware.checks.clipping import clip_reach
from noiseaware.cli import main
from noiseaware.inference.gradient_model import gradient_model
from noiseaware.inference.model_prior import model_optimum_prior
from noiseaware.methods.base import Batch
from noiseaware.trace.moments import moments_of_rows, without_wander
from noiseaware.util.errors import UNINFORMATIVE
from noiseaware.util.numerics import softplus


def test_optimum_prior_matches_closed_forms():
    """regression-1d: θ ~ N(0, 5), y ~ N(θx, 0.5²), x ~ U(−1, 1): h = Σx²/0.25 + 1/5, E h = N/0.75 + 0.2."""
    bm = na.models.get("regression-1d")
    facts = bm.optimum_prior(draws=4000, simulations=32)
    assert abs(facts.theta_mean[0]) < 3 * np.sqrt(5.0 / 4000)
    assert facts.theta_sd[0] == pytest.approx(np.sqrt(5.0), rel=0.05)
    expected = bm.n_examples / 0.75 + 0.2
    spread = np.sqrt(bm.n_examples * (1 / 5 - 1 / 9)) / 0.25  # sd of Σx²/0.25 over designs
    assert abs(facts.curvature.mean() - expected) < 4 * spread / np.sqrt(32)
    assert facts.coupling.shape == (1, 1) and abs(facts.coupling[0, 0]) < 1e-6  # a Gaussian: no third derivative


def test_coupling_of_a_regression_noise_scale():
    """linreg-10d: σ² = softplus(θ_σ²) scales every weight's curvature h_k ∝ 1/σ², so ∂_σ² h_k / h_k = −d log σ²/dθ,
    −sigmoid(θ)/softplus(θ) ≈ −0.99 at the prior's θ ≈ −3.65, the same for every weight; weights do not couple."""
    bm = na.models.get("linreg-10d")
    facts = bm.optimum_prior(draws=200, simulations=16)
    theta = facts.theta_mean[-1]
    expected = -jax.nn.sigmoid(theta) / softplus(theta)
    np.testing.assert_allclose(facts.coupling[:-1, -1], expected, atol=0.01)
    assert np.max(np.abs(facts.coupling[:-1, :-1])) < 0.05
    moments = model_optimum_prior(facts)
    d = bm.dim
    # ρ*'s prior: softplus⁻¹ of h^(−1/2), the weights' sd* ≈ 0.0022 at N = 5000
    np.testing.assert_allclose(
        softplus(moments.optimum_loc[d : 2 * d - 1]), facts.curvature[:, :-1].mean() ** -0.5, rtol=0.05
    )


def test_the_wander_correction_is_the_moments_of_the_gradients_less_a_slow_loops_shift():
    """`without_wander` from the cross moments = the moments of G − shift, shift_tj = ½ q Σ_{k≠j} c_kj h_k δ_tk²
    summed step by step."""
    rng = np.random.default_rng(0)
    d, steps, q = 3, 7, 0.1
    params = np.concatenate([rng.normal(size=(steps, d)), rng.normal(-2.0, 0.3, size=(steps, d))], axis=1)
    grads = rng.normal(size=(steps, 2 * d))
    coupling, curvature = rng.normal(size=(d, d)), rng.uniform(1.0, 9.0, size=d)
    mean = params[:, :d]
    shift = np.zeros_like(params)
    for t in range(steps):
        for j in range(d):
            for k in range(d):
                if k != j:
                    shift[t, j] += 0.5 * q * coupling[k, j] * curvature[k] * (mean[t, k] - mean[:, k].mean()) ** 2
    rho = slice(d, 2 * d)
    got = without_wander(moments_of_rows(params, grads, 0, rho, cross=d), q, coupling, curvature)
    want = moments_of_rows(params, grads - shift, 0, rho)
    for name in ("sum_g", "sum_gg", "grad_ss", "sum_gphi"):
        np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.fixture(scope="module")
def silent_trace():
    """M1 at ε = 10⁻⁶: DP noise swamps the gradient (σ ≈ 10⁵), so the trace says nothing about λ."""
    bm = na.models.get("M1")
    _, data = bm.simulate(0)
    settings = dict(bm.dpvi_settings, steps=2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bm, na.record_dpvi(bm.model, data, epsilon=1e-6, key=1, **settings)


def test_a_silent_trace_gives_back_the_models_prior(silent_trace):
    bm, trace = silent_trace
    prior = np.asarray(jax.vmap(lambda k: bm.simulate(k)[0])(jax.random.split(jax.random.key(3), 4000)))[:, 0]
    prior_low, prior_high = np.quantile(prior, [0.05, 0.95])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = na.fit(trace, "exact", key=0, model=bm, checks="off")
    low, high = (float(x[0]) for x in post.interval(0.9, key=0))
    # close to the prior's own 90 % interval, never a narrow one wherever the iterates sat
    assert high - low > 0.8 * (prior_high - prior_low)
    assert low < np.quantile(prior, 0.25) and high > np.quantile(prior, 0.75)
    assert post.info["optimum_prior"] == "model"
    # its clip bounds every mean gradient by q·N·√n/σ = 0.1 · 5000 · √1600 / σ standard errors, far below 2
    reach = clip_reach(trace.settings, 1600)
    assert reach == pytest.approx(0.1 * 5000 * 40 / trace.settings.noise_multiplier) and reach < 2
    mentions([w for w in caught if "uninformative" in str(w.message)], "model's", "prior", f"{reach:.4g}")
    # the posterior is the model's prior, drawn: every route gives the same draws
    for method in ("laplace", "nuts"):
        other = na.fit(trace, method, key=0, model=bm, checks="off")
        np.testing.assert_array_equal(other.optimum_chains, post.optimum_chains)


def test_without_the_model_a_trace_that_says_nothing_is_a_typed_failure(silent_trace):
    """Without the model the prior would be centred on the trace's own position: a confident wrong answer."""
    _, trace = silent_trace
    with pytest.raises(na.FitFailure) as caught:
        na.fit(trace, "exact", key=0, checks="off")
    assert caught.value.reason == UNINFORMATIVE
    mentions(caught, "model=bm", "--model", "ε")
    # the baselines that read the iterates answer, and say the trace cannot locate the optimum
    for method in ("naive", "dpvim", "random-scaling"):
        with pytest.warns(UserWarning) as warned:
            post = na.fit(trace, method, key=0, checks="off")
        assert [note.kind for note in post.notes][-1] == "trace uninformative"
        mentions([w for w in warned if "uninformative" in str(w.message)], "iterates", "method='exact'")


def test_a_tiny_data_set_is_never_narrower_than_its_non_private_posterior():
    """M1 recorded on N = 1 and 2 examples (every example each step, ε = 1): the trace cannot see the optimum, so the
    fit with the model is its prior, and its 90 % interval for λ holds the exact non-private one, Gamma(8 + N, 2 + Σx),
    where the linear model once read the trace's own position as the optimum (N = 2: [2.7, 5.3] against [1.6, 4.7])."""
    bm = na.models.get("M1")
    x = np.random.default_rng(1).exponential(1 / 4.24, size=2)
    settings = dict(bm.dpvi_settings) | {"sampling_rate": 1.0, "steps": 4000}
    for n in (1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = na.record_dpvi(bm.model, {"x": x[:n]}, key=0, epsilon=1.0, **settings)
            post = na.fit(trace, "exact", key=0, model=bm)
        low, high = np.quantile(np.asarray(post.constrained_sample(jax.random.key(1), 20_000)["rate"]), [0.05, 0.95])
        exact_low, exact_high = stats.gamma(8 + n, scale=1 / (2 + x[:n].sum())).ppf([0.05, 0.95])
        assert low < exact_low and high > exact_high, (n, low, high, exact_low, exact_high)
        assert [note.kind for note in post.notes] == ["trace uninformative"]


def test_the_trace_prior_and_the_paper_ignore_the_model(silent_trace):
    bm, trace = silent_trace
    facts = bm.optimum_prior(draws=100, simulations=4)
    for name in ("trace", "paper"):
        with_model = gradient_model(trace, name, model_prior=facts)
        without = gradient_model(trace, name)
        np.testing.assert_array_equal(with_model.optimum_loc, without.optimum_loc)
        np.testing.assert_array_equal(with_model.stats.sum_g, without.stats.sum_g)


def test_a_model_of_other_sites_is_refused_before_any_work(silent_trace):
    _, trace = silent_trace
    with pytest.raises(ValueError, match="latent sites"):
        na.fit(trace, "exact", key=0, model=na.models.get("M2"))
    with pytest.raises(TypeError, match="BenchmarkModel"):
        na.fit(trace, "exact", key=0, model="M1")


def test_a_study_and_fit_refuse_a_model_of_other_sites_alike(silent_trace):
    """The model is matched once, where a batch is made: a study's batch (its traces and model) says what `fit`
    says, rather than dropping the model's prior; a batch that does not take its prior from the model is free."""
    _, trace = silent_trace
    other = na.models.get("M2")
    with pytest.raises(ValueError) as in_fit:
        na.fit(trace, "exact", key=0, model=other)
    with pytest.raises(ValueError) as in_study:
        Batch((trace,), other)
    assert str(in_study.value) == str(in_fit.value)
    mentions(in_fit, "'beta-bernoulli'", "latent", "sites")
    assert Batch((trace,), other, model_prior=False).model is other


def _gamma50(x=None, n_examples=None):
    """M1 with its prior changed after recording: λ ~ Gamma(50, 2) (mean 25) where the data were drawn at λ ≈ 4."""
    import numpyro
    import numpyro.distributions as dist

    rate = numpyro.sample("rate", dist.Gamma(50.0, 2.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Exponential(rate), obs=x)


def test_a_model_whose_prior_the_traces_contradict_is_not_used_and_the_fit_says_so():
    """Ten M1 traces at ε = 1 fitted with their own model: no trace is flagged, and the fits take the model's prior.
    Fitted with M1's prior changed to Gamma(50, 2) (the sites still match): every trace puts the model's prior on μ*
    in its far tail, so those fits use priors centred on the trace, are the fits without a model bit for bit, and
    the warning names the coordinate and what to do."""
    m1 = na.models.get("m1")
    wrong = na.models.from_numpyro(_gamma50, n_examples=m1.n_examples, name="gamma50", **m1.dpvi_settings)
    keys = jax.random.split(jax.random.key(0), 10)
    _, data = jax.vmap(m1.simulate)(keys)
    traces = na.record_dpvi_batch(m1.model, data, keys=keys, epsilon=1.0, **m1.dpvi_settings)
    right = na.fit_batch(traces, "exact", key=1, model=m1, checks="off")
    assert not any("contradicted" in str(post.notes) for post in right)
    with pytest.warns(UserWarning) as caught:
        flagged = na.fit_batch(traces, "exact", key=1, model=wrong, checks="off")
    mentions([w for w in caught if "contradicted" in str(w.message)], "10", "mu:rate", "recorded", "model")
    alone = na.fit_batch(traces, "exact", key=1, checks="off")
    for post, own in zip(flagged, alone):
        np.testing.assert_array_equal(post.optimum_chains, own.optimum_chains)


def test_cli_fit_with_the_model_gives_back_the_prior(silent_trace, tmp_path, capsys):
    """`noiseaware fit TRACE --model M1`: the noise-aware interval of a silent trace spans the prior's middle half
    (λ ~ Gamma(8, 2): quartiles 3.1 and 4.8), and the description says whose prior it used."""
    _, trace = silent_trace
    path = tmp_path / "silent.nc"
    trace.save(path)
    status = main(["fit", str(path), "--model", "M1", "--checks", "off"])
    out = capsys.readouterr().out
    assert status == 0
    row = next(line for line in out.splitlines() if line.startswith("rate"))
    low, high = (float(x) for x in re.findall(r"\[([-0-9.e+]+), ([-0-9.e+]+)\]", row)[0])
    assert low < 3.1 and high > 4.8
    assert "φ*'s prior from the model" in out
    assert main(["fit", str(path), "--model", "M2", "--checks", "off"]) == 2
    assert "latent sites" in capsys.readouterr().err


def test_a_full_rank_trace_takes_only_the_mean_rows_from_the_model():
    """sd*_j = h_j^(−1/2) holds for the mean-field optimum only: a full-rank trace's ρ and factor rows keep the
    trace's priors, its μ rows take the model's (μ*'s prior and slope h_j hold for every Gaussian family)."""
    bm = na.models.get("logistic-3d")
    _, data = bm.simulate(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = na.record_dpvi(
            bm.model, data, epsilon=1.0, key=1, family="full-rank", **{**bm.dpvi_settings, "steps": 300}
        )
    facts = bm.optimum_prior(draws=200, simulations=4)
    with_model, without = gradient_model(trace, model_prior=facts), gradient_model(trace)
    d = bm.dim
    np.testing.assert_allclose(with_model.optimum_loc[:d], facts.theta_mean)
    np.testing.assert_array_equal(with_model.optimum_loc[d:], without.optimum_loc[d:])
    np.testing.assert_array_equal(with_model.hessian_loc[d:], without.hessian_loc[d:])
    np.testing.assert_array_equal(with_model.stats.sum_g, without.stats.sum_g)  # no wander shift off mean-field


def test_the_optimum_prior_spread_is_the_van_trees_bound():
    """μ*_j's prior variance is Var θ_j − 1/E h_j (E Var(θ_j | x) ≥ 1/E h_j, so never too narrow), not
    Var θ_j − E[1/h_j], which Jensen makes smaller; at least 0.1·Var θ_j; Var θ_j where E h_j ≤ 0.

    A normal mean with known noise (θ ~ N(0, τ²), x_i ~ N(θ, 1), N = 4): h = 1/τ² + N for every data set, and
    E[θ | x] = x̄·N/h has variance exactly τ² − 1/h, which the prior equals."""
    from noiseaware.models.benchmark import ModelOptimumPrior

    tau2, n = 2.0, 4
    h = 1 / tau2 + n
    curvature = np.array([[h, 1.0, 1.05, -1.0], [h, 3.0, 1.05, 0.5]])  # conjugate; Jensen's case; floored; E h ≤ 0
    facts = ModelOptimumPrior(np.zeros(4), np.sqrt([tau2, 1.0, 1.0, 1.0]), curvature, None)
    sd = model_optimum_prior(facts).optimum_sd[:4]
    np.testing.assert_allclose(sd[0] ** 2, tau2 - 1 / h)  # Var E[θ | x], exactly
    np.testing.assert_allclose(sd[1] ** 2, 1.0 - 1 / 2.0)  # 1/mean h = 0.5, not mean 1/h = 2/3
    np.testing.assert_allclose(sd[2] ** 2, 0.1)  # 1/1.05 > 0.9: the floor
    np.testing.assert_allclose(sd[3] ** 2, 1.0)  # mean h ≤ 0: the bound says nothing


def test_prior_sensitivity_says_when_the_intervals_are_the_priors(silent_trace, tmp_path):
    """ArviZ's power-scaling sensitivity of the noise-aware posterior (each φ* draw's gradient-model log prior and
    log-likelihood, kept with it and in its file): the silent trace's posterior is all prior ("strong prior / weak
    likelihood"); a trace at ε = 1 moves with its likelihood and barely with its prior; a baseline has none."""
    bm, silent = silent_trace
    _, data = bm.simulate(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        healthy = na.record_dpvi(bm.model, data, key=1, epsilon=1.0, **bm.dpvi_settings)
        quiet = na.fit(silent, "exact", key=0, model=bm, checks="off")
        heard = na.fit(healthy, "exact", key=0, checks="off")
    table = quiet.prior_sensitivity(key=1)
    assert table.loc["rate", "prior"] > 0.05 and table.loc["rate", "likelihood"] < 0.05
    assert "strong prior" in table.loc["rate", "diagnosis"]
    table = heard.prior_sensitivity(key=1)
    assert table.loc["rate", "prior"] < 0.05 and table.loc["rate", "diagnosis"] == "✓"
    assert heard.log_prior.shape == heard.log_likelihood.shape == heard.optimum_chains.shape[:2]
    heard.save(tmp_path / "p.nc", key=2)
    again = na.load_posterior(tmp_path / "p.nc")
    np.testing.assert_array_equal(again.log_likelihood, heard.log_likelihood)
    with pytest.raises(ValueError) as info:
        na.fit(healthy, "naive", key=0, checks="off").prior_sensitivity(key=1)
    mentions(info, "exact", "refit")
