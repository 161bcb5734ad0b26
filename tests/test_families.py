"""Full-rank and low-rank Gaussian variational families (issue 17): the layout of φ, one recorder step against a
slow reference loop, the per-example ELBO gradients against their closed form, the noise-aware mixture's moments,
φ* coverage on traces drawn from the gradient model with a full-rank layout, and the trace schema (version 2,
version 1 still read)."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from messages import mentions
from ou import assert_nominal, ou_traces, stacked_models
from scipy import stats

import noiseaware as na
from noiseaware.inference.exact import GRID_DEFAULTS, exact_cdf, exact_grid
from noiseaware.posteriors.mixture import MixturePosterior
from noiseaware.recording.dpvi import build_recorder, record_dpvi, step_keys
from noiseaware.trace import Trace, TraceError
from noiseaware.trace.families import FULL_RANK, MEAN_FIELD, FamilyError, family_for, variational_family
from noiseaware.util.keys import as_key

TAUS = np.array([3.0, 2.0, 2.5, 1.5])
NOISE_COV = 0.8 ** np.abs(np.subtract.outer(np.arange(4), np.arange(4)))
"""The likelihood's covariance, AR(1) with correlation 0.8: the posterior of θ is correlated, as M3's is."""
FAMILIES = [("full-rank", None), ("low-rank", 1)]
"""The recorder's families on the 4-dimensional model (low-rank needs (d − r)² ≥ d + r: r = 1)."""


def correlated_model(x=None, n_examples=None):
    """x_i ~ N₄(θ, Σ_x) with correlated Σ_x, θ ~ N(0, diag τ²)."""
    theta = numpyro.sample("theta", dist.Normal(0.0, jnp.asarray(TAUS, jnp.float32)).to_event(1))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.MultivariateNormal(theta, covariance_matrix=jnp.asarray(NOISE_COV)), obs=x)


def correlated_data(n, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": np.asarray(rng.multivariate_normal([0.5, -1.0, 0.2, 0.8], NOISE_COV, size=n), np.float32)}


def family_of(kind, rank, d=2):
    return variational_family(kind, d, rank)


def closed_form_gradients(family, phi, x, eps=None):
    """Per-example ∇_φ ℓ_i (N, P) for the correlated model, f_i(θ) = ½(θ − x_i)ᵀK(θ − x_i) + θᵀDθ/(2N):
    ∇_μ = mean_s ∇f_i(θ_s), ∇_A = mean_s ∇f_i(θ_s) ε_sᵀ − (AAᵀ)⁻¹A/N (the entropy ½ log det AAᵀ), ρ's entries
    times sigmoid(ρ). With eps=None the exact expectation: ∇_μ = H_i μ − K x_i, ∇_A = H_i A − (AAᵀ)⁻¹A/N."""
    n, d = x.shape
    K, D = np.linalg.inv(NOISE_COV), np.diag(1 / TAUS**2)
    H = K + D / n
    mu, A = family.mean(phi), family.scale_matrix(phi)
    rows, cols = family.entries
    entropy = np.linalg.solve(A @ A.T, A) / n
    out = []
    for i in range(n):
        if eps is None:
            g_mu, g_A = H @ mu - K @ x[i], H @ A
        else:
            grads = np.stack([H @ (mu + A @ e) - K @ x[i] for e in eps])
            g_mu, g_A = grads.mean(0), np.einsum("si,sj->ij", grads, eps) / len(eps)
        rest = (g_A - entropy)[rows, cols]
        rest[:d] *= 1 / (1 + np.exp(-phi[d : 2 * d]))
        out.append(np.concatenate([g_mu, rest]))
    return np.asarray(out)


# ---------------------------------------------------------------- layout


@pytest.mark.parametrize("kind, rank, d, P", [("mean-field", None, 3, 6), ("full-rank", None, 11, 77),
                                              ("full-rank", None, 1, 2), ("low-rank", 2, 5, 19),
                                              ("low-rank", 1, 4, 12)])  # fmt: skip
def test_parameter_counts_and_round_trip_through_the_name(kind, rank, d, P):
    family = variational_family(kind, d, rank)
    assert family.n_params == P
    assert family_for(family.name, P) == family
    blocks = family.blocks
    assert blocks[0] == ("mu", slice(0, d)) and blocks[1] == ("rho", slice(d, 2 * d))
    assert blocks[-1][1].stop == P
    names = family.param_names([f"t{j}" for j in range(d)])
    assert len(set(names)) == P and names[0] == "mu:t0" and names[d] == "rho:t0"


def test_a_parameter_count_that_fits_no_dimension_is_refused():
    with pytest.raises(FamilyError) as info:
        family_for(FULL_RANK, 6)
    mentions(info, "P", "6", "θ", f"'{FULL_RANK}'")
    with pytest.raises(FamilyError) as info:
        family_for("student-t", 4)
    mentions(info, "'student-t'")
    with pytest.raises(FamilyError) as info:
        variational_family("low-rank", 2, 3)
    mentions(info, "1", "r", "2")


@pytest.mark.parametrize("kind, rank", [("mean-field", None), ("full-rank", None), ("low-rank", 1), ("low-rank", 2)])
def test_covariance_entropy_and_draws_match_their_definitions(kind, rank):
    family = family_of(kind, rank)
    phi = np.random.default_rng(3).normal(size=family.n_params) * 0.7
    A = family.scale_matrix(phi)
    sigma = family.covariance(phi)
    np.testing.assert_allclose(sigma, A @ A.T, rtol=1e-12)
    np.testing.assert_allclose(family.marginal_sd(phi), np.sqrt(np.diag(sigma)), rtol=1e-12)
    np.testing.assert_allclose(family.entropy(phi), 0.5 * np.linalg.slogdet(sigma)[1], rtol=1e-10)
    assert np.allclose(np.diag(A[:, :2]), np.logaddexp(0.0, phi[2:4]))
    if kind == "full-rank":
        assert np.all(np.triu(A, 1) == 0)
    eps = np.random.default_rng(4).standard_normal((200_000, family.noise_dim))
    theta = family.sample(phi, eps)
    np.testing.assert_allclose(theta.mean(0), phi[:2], atol=0.02)
    np.testing.assert_allclose(np.cov(theta.T), sigma, rtol=0.03, atol=0.005)


# ---------------------------------------------------------------- the recorder


def _recorder(family, rank, data, **kwargs):
    return build_recorder(
        correlated_model,
        data,
        steps=10,
        sampling_rate=1.0,
        clip=1.0,
        noise_multiplier=1.0,
        learning_rate=0.1,
        family=family,
        rank=rank,
        **kwargs,
    )


HADAMARD = np.kron(np.kron([[1, 1], [1, -1]], [[1, 1], [1, -1]]), [[1, 1], [1, -1]]).astype(np.float32)[:, 1:]
"""Eight draws whose columns have mean 0 and mean square 1 and are orthogonal: (1/S) Σ ε εᵀ = I exactly."""


@pytest.mark.parametrize("kind, rank", FAMILIES)
def test_per_example_gradients_equal_the_closed_form_elbo_gradient(kind, rank):
    n = 20
    data = correlated_data(n, seed=2)
    recorder = _recorder(kind, rank, data)
    family = recorder.settings.family
    phi = np.random.default_rng(5).normal(size=family.n_params) * 0.5
    eps = jnp.asarray(HADAMARD[:, : family.noise_dim])
    examples, constants = recorder.spec.split_data(recorder.prepare(data))
    per_example_gradients = jax.jit(recorder.program.per_example_gradients)  # one program, not one per operation
    g = per_example_gradients(jnp.asarray(phi, jnp.float32), eps, examples, constants)
    x = np.asarray(data["x"], np.float64)
    phi32 = np.asarray(np.float32(phi), np.float64)
    np.testing.assert_allclose(np.asarray(g), closed_form_gradients(family, phi32, x), rtol=2e-4, atol=2e-5)
    # with any draws, the draws' own average: the recorder's program is the reparametrised estimate
    eps = np.asarray(jax.random.normal(jax.random.key(1), (3, family.noise_dim)), np.float64)
    g = per_example_gradients(jnp.asarray(phi, jnp.float32), jnp.asarray(eps, jnp.float32), examples, constants)
    np.testing.assert_allclose(np.asarray(g), closed_form_gradients(family, phi32, x, eps), rtol=2e-4, atol=2e-5)


def reference_dpvi(family, x, *, key, steps, q, S, C, s, sigma, lr, init, sample_of):
    """Plain-python DP-SGD for the correlated model with the recorder's randomness, any family."""
    phi = np.asarray(init, np.float64)
    key = as_key(key)
    params, grads, clipped = [], [], 0
    for _ in range(steps):
        key, k_sample, k_mc, k_noise = step_keys(key)
        eps = np.asarray(jax.random.normal(k_mc, (S, family.noise_dim), jnp.float32), np.float64)
        xi = sigma * C * np.asarray(jax.random.normal(k_noise, (family.n_params,), jnp.float32), np.float64)
        per_example = closed_form_gradients(family, phi, x, eps)
        total = np.zeros(family.n_params)
        for i in sample_of(k_sample):
            h = s * per_example[i]
            norm = math.sqrt(float(np.sum(h**2)))
            if norm > C:
                h, clipped = h * (C / norm), clipped + 1
            total += h
        params.append(phi.copy())
        grads.append((total + xi) / s)
        phi = phi - lr * grads[-1]
    return np.array(params), np.array(grads), phi, clipped


@pytest.mark.parametrize("kind, rank", FAMILIES[:2])
def test_recorder_steps_equal_a_slow_reference_loop(kind, rank):
    from test_dpvi import sampled_indices

    n, q, batch_size, S, C, sigma = 40, 0.3, 4, 3, 1.5, 2.0
    data = correlated_data(n, seed=1)
    settings = dict(steps=3, sampling_rate=q, clip=C, noise_multiplier=sigma, mc_draws=S, batch_size=batch_size)
    trace = record_dpvi(correlated_model, data, key=7, family=kind, rank=rank, grad_scale=(1.0, 10.0),
                        learning_rate=(0.01, 0.002, 0.005), init=(0.3, -1.0), **settings)  # fmt: skip
    family = trace.family
    assert trace.variational_family == family.name and family.kind == kind
    params, grads, final, clipped = reference_dpvi(
        family, np.asarray(data["x"], np.float64), key=7, steps=3, q=q, S=S, C=C, s=trace.grad_scale,
        sigma=sigma, lr=trace.learning_rate, init=trace.params[0],
        sample_of=lambda k: sampled_indices(k, q, batch_size, n),
    )  # fmt: skip
    assert clipped > 0  # clipping mattered
    np.testing.assert_allclose(trace.params, params, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(trace.grads, grads, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(trace.final_params, final, rtol=1e-4, atol=1e-5)
    # a pair: the factor block takes μ's s row by row; a triple sets it; ℓ starts at 0, B at diag(softplus ρ₀)
    rest = slice(2 * family.dim, None)
    np.testing.assert_allclose(trace.grad_scale[rest], 1.0)
    np.testing.assert_allclose(trace.learning_rate[rest], 0.005)
    start = trace.params[0, rest]
    if kind == "full-rank":
        assert np.all(start == 0)
    else:
        assert np.allclose(start, [np.logaddexp(0.0, -1.0), 0.0, 0.0, 0.0], rtol=1e-6)


def test_pair_settings_extend_to_the_factor_block_by_row():
    data = correlated_data(30)
    mu, rho = [1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]
    recorder = _recorder("full-rank", None, data, grad_scale=(mu, rho), init=([0.1, 0.2, 0.3, 0.4], -3.0))
    settings = recorder.settings
    # ℓ = (L₁₀, L₂₀, L₂₁, L₃₀, L₃₁, L₃₂): each takes its row's μ value
    assert settings.grad_scale == tuple(mu + rho + [2.0, 3.0, 3.0, 4.0, 4.0, 4.0])
    assert settings.init == (0.1, 0.2, 0.3, 0.4, -3.0, -3.0, -3.0, -3.0) + (0.0,) * 6
    mean_field_vector = np.array(mu + rho)
    assert _recorder("full-rank", None, data, grad_scale=mean_field_vector).settings.grad_scale == settings.grad_scale


@pytest.mark.parametrize(
    "kwargs, tokens",
    [
        (dict(family="full-rank", rank=2), ("rank=2", "family='low-rank'")),
        (dict(family="low-rank"), ("family='low-rank'", "rank=r")),
        (dict(family="low-rank", rank=5), ("rank", "1", "r", "4")),
        (dict(family="low-rank", rank=2), ("B", "4", "family='full-rank'")),
        (dict(family="student-t"), ("family", "'student-t'")),
        (dict(family="full-rank", grad_scale=(1.0, 2.0, [3.0, 4.0])), ("grad_scale", "scalar")),
    ],
)
def test_bad_family_settings_are_refused_before_any_work(kwargs, tokens):
    with pytest.raises(ValueError) as info:
        record_dpvi(correlated_model, correlated_data(30), key=0, steps=5, sampling_rate=0.5, clip=1.0,
                    noise_multiplier=1.0, **kwargs)  # fmt: skip
    mentions(info, *tokens)


# ---------------------------------------------------------------- the noise-aware posterior


@pytest.mark.parametrize("factor", ["mixture", "mean"])
def test_mixture_moments_intervals_and_draws_equal_their_closed_forms(factor):
    family = family_of("full-rank", None)
    rng = np.random.default_rng(8)
    optimum = rng.normal(size=(2, 300, family.n_params)) * [0.3, 0.2, 0.2, 0.1, 0.3] + [1.0, -1.0, -1.0, -0.5, 0.4]
    names = family.param_names(["a", "b"])
    posterior = MixturePosterior(optimum, None, None, "test", names, family=FULL_RANK, factor=factor)
    draws = optimum.reshape(-1, family.n_params).copy()
    if factor == "mean":  # the components take ℓ at its posterior mean ℓ̄
        draws[:, 4:] = draws[:, 4:].mean(axis=0)
    means, covariances = family.mean(draws), family.covariance(draws)
    # E[θ] = E[μ*], Cov[θ] = Cov[μ*] + E[Σ(φ)] over the components
    total = np.cov(means.T, ddof=0) + covariances.mean(0)
    np.testing.assert_allclose(posterior.theta_mean, means.mean(0), rtol=1e-12)
    np.testing.assert_allclose(posterior.theta_sd, np.sqrt(np.diag(total)), rtol=1e-12)
    theta = posterior.sample(jax.random.key(0), 400_000)
    np.testing.assert_allclose(theta.mean(0), means.mean(0), atol=0.01)
    np.testing.assert_allclose(np.cov(theta.T), total, rtol=0.02, atol=0.002)
    low, high = posterior.interval(0.8)
    for j in range(2):  # the exact marginal mixture's 10 % and 90 % quantiles
        sds = np.sqrt(covariances[:, j, j])
        assert abs(np.mean(stats.norm.cdf(low[j], means[:, j], sds)) - 0.1) < 1e-6
        assert abs(np.mean(stats.norm.cdf(high[j], means[:, j], sds)) - 0.9) < 1e-6


def test_full_rank_fit_summary_arviz_and_file_round_trip(tmp_path):
    data = correlated_data(400, seed=3)
    trace = record_dpvi(correlated_model, data, key=3, steps=1500, sampling_rate=0.2, clip=5.0, noise_multiplier=1.0,
                        family="full-rank", grad_scale=(1.0, 20.0), lr_multiplier=1.0, init=(0.0, -2.0))  # fmt: skip
    posterior = na.fit(trace, method="exact", key=1, checks="off")
    verdicts = na.diagnose(trace).theta_verdicts()  # one per θ coordinate, over its μ, ρ and row of L
    assert len(verdicts) == 4 and set(na.diagnose(trace).rows) == set(range(4))
    names = [f"theta[{j}]" for j in range(4)]
    assert posterior.family == FULL_RANK and posterior.dim == 4 and posterior.n_params == 14
    assert posterior.theta_names == tuple(names)
    frame = posterior.summary(key=0)
    assert list(frame.index) == names
    tree = posterior.to_arviz(jax.random.key(2))
    theta = tree["posterior"]["theta"].values.reshape(-1, 4)
    # the draws are joint: they carry the posterior correlation that mean-field cannot represent
    assert np.corrcoef(theta.T)[0, 1] > 0.3
    path = tmp_path / "posterior.nc"
    posterior.save(path, key=2)
    loaded = na.load_posterior(path)
    assert loaded.family == FULL_RANK
    np.testing.assert_array_equal(loaded.optimum_chains, posterior.optimum_chains)
    np.testing.assert_allclose(loaded.sample(jax.random.key(4), 10), posterior.sample(jax.random.key(4), 10))
    naive = na.fit(trace, method="naive", key=0, checks="off")
    np.testing.assert_allclose(naive.theta_sd, trace.family.marginal_sd(np.float64(trace.final_params)), rtol=1e-6)


@pytest.mark.slow
def test_optimum_intervals_cover_on_traces_drawn_from_the_gradient_model_with_a_full_rank_layout():
    """200 OU traces with P = 5 (d = 2, full-rank), the off-diagonal coordinate like a μ: the exact route's
    central intervals of φ* cover at the nominal rate, per coordinate."""
    optimum, hessian = (0.5, -1.0, -3.0, -2.0, 0.3), (40.0, 400.0, 20.0, 5.0, 300.0)
    scale = np.array([1.0, 1.0, 50.0, 50.0, 1.0])
    traces = ou_traces(200, optimum=optimum, hessian=hessian, scale=scale, seed=12, family=FULL_RANK)
    assert traces[0].family.kind == "full-rank" and traces[0].dim == 2
    with jax.enable_x64(True):
        pits = jax.jit(jax.vmap(lambda m: exact_cdf(exact_grid(m, **GRID_DEFAULTS), jnp.asarray(optimum))))(
            stacked_models(traces)
        )
    assert_nominal(np.asarray(pits))


# ---------------------------------------------------------------- the trace schema


@pytest.mark.parametrize("kind, rank", FAMILIES)
@pytest.mark.parametrize("suffix", [".npz", ".nc"])
def test_family_traces_round_trip_through_files(tmp_path, kind, rank, suffix):
    family = family_of(kind, rank)
    rng = np.random.default_rng(0)
    trace = Trace.from_arrays(rng.normal(size=(6, family.n_params)), rng.normal(size=(6, family.n_params)),
                              noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=100,
                              variational_family=family.name)  # fmt: skip
    assert trace.dim == 2 and trace.param_names == family.param_names(["theta[0]", "theta[1]"])
    trace.save(tmp_path / f"t{suffix}")
    loaded = Trace.load(tmp_path / f"t{suffix}")
    assert loaded.variational_family == family.name and loaded.family == family
    np.testing.assert_array_equal(loaded.params, trace.params)


def _npz(path, **fields):
    np.savez(path, **{k: np.asarray(v) for k, v in fields.items()})
    return path


BASE = dict(noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=100)


def test_version_1_files_are_read_as_mean_field(tmp_path):
    path = _npz(tmp_path / "v1.npz", schema="noiseaware.trace", schema_version=1, params=np.zeros((3, 4)),
                grads=np.ones((3, 4)), variational_family=MEAN_FIELD, **BASE)  # fmt: skip
    trace = Trace.load(path)
    assert trace.family.kind == "mean-field" and trace.dim == 2
    no_family = _npz(tmp_path / "v1b.npz", schema_version=1, params=np.zeros((3, 4)), grads=np.ones((3, 4)), **BASE)
    assert Trace.load(no_family).variational_family == MEAN_FIELD


def test_a_version_1_file_naming_another_family_and_a_wrong_layout_are_refused(tmp_path):
    five = dict(params=np.zeros((3, 5)), grads=np.ones((3, 5)), **BASE)
    path = _npz(tmp_path / "v1.npz", schema_version=1, variational_family=FULL_RANK, **five)
    with pytest.raises(TraceError) as info:
        Trace.load(path)
    mentions(info, "schema_version", "1")
    layout = '{"family": "full-rank-normal-softplus", "dim": 2, "rank": null, "blocks": {"mu": [0, 1]}}'
    path = _npz(tmp_path / "v2.npz", schema_version=2, variational_family=FULL_RANK, param_layout=layout, **five)
    with pytest.raises(TraceError) as info:
        Trace.load(path)
    mentions(info, "param_layout")
    layout = json.dumps(family_of("full-rank", None).layout())
    right = _npz(tmp_path / "v2ok.npz", schema_version=2, variational_family=FULL_RANK, param_layout=layout, **five)
    assert Trace.load(right).dim == 2


def test_the_paper_laplace_style_is_refused_for_a_full_rank_trace():
    optimum, hessian = (0.5, -1.0, -3.0, -2.0, 0.3), (40.0, 400.0, 20.0, 5.0, 300.0)
    (trace,) = ou_traces(1, steps=600, optimum=optimum, hessian=hessian, scale=np.ones(5), family=FULL_RANK)
    with pytest.raises(ValueError) as info:
        na.fit(trace, "laplace", key=0, style="paper", checks="off")
    mentions(info, "style='paper'")


def test_a_coverage_study_runs_unchanged_with_a_low_rank_family():
    bm = na.models.from_numpyro(correlated_model, n_examples=200, steps=500, sampling_rate=0.2, clip=5.0,
                                grad_scale=(1.0, 20.0), lr_multiplier=1.0, init=(0.0, -2.0))  # fmt: skip
    result = na.coverage(bm, methods=("exact", "naive"), noise_multiplier=1.0, simulations=8, references=3,
                         samples=500, key=0, family="low-rank", rank=1)  # fmt: skip
    assert result.failures == {"exact": 0, "naive": 0}
    assert all(np.isfinite(mean) for mean, _ in result.rmse.values())
    assert result.theta_names == tuple(f"theta[{j}]" for j in range(4))
