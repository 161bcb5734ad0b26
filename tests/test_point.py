"""Plain DP-SGD runs of a point estimate (family "point", docs/dp-sgd.md): the layout, the recorded gradient, the
noise-aware Laplace posterior against the closed form and in simulation, the sandwich, and the command line."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from cli_helpers import run
from messages import mentions

import noiseaware as na
from noiseaware.posteriors.laplace import point_components
from noiseaware.trace.families import Point, family_for

PRIOR_SD, N, D = 3.0, 500, 2


def linear(X, y=None):
    """θ ~ N(0, 3² I); y_i ~ N(X_i·θ, 1): Λ = XᵀX + I/9 whatever θ, so N(θ̂, Λ⁻¹) is the exact posterior."""
    theta = numpyro.sample("theta", dist.Normal(0.0, PRIOR_SD).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ theta, 1.0), obs=y)


THETA0 = np.array([0.5, -0.3])
X = np.random.default_rng(0).uniform(-1.0, 1.0, (N, D))
X[:, 1] = 0.8 * X[:, 0] + 0.6 * X[:, 1]  # correlated features: Λ is far from diagonal
PRECISION = X.T @ X + np.eye(D) / PRIOR_SD**2
SETTINGS = {"family": "point", "mc_draws": 1, "steps": 3000, "sampling_rate": 0.1, "clip": 4.0}
SETTINGS["learning_rate"] = 0.2 / (0.1 * np.linalg.eigvalsh(PRECISION).max())


def simulated(runs: int, epsilon: float, steps: int = SETTINGS["steps"]):
    """`runs` data sets y ~ N(Xθ₀, I) on the design X and their point traces of `steps` steps."""
    y = X @ THETA0 + np.random.default_rng(1).normal(size=(runs, N))
    data = {"X": jnp.broadcast_to(jnp.asarray(X), (runs, N, D)), "y": jnp.asarray(y)}
    keys = jax.random.split(jax.random.key(1), runs)
    return y, na.record_dpvi_batch(linear, data, keys=keys, epsilon=epsilon, **SETTINGS | {"steps": steps})


def test_the_point_family_is_theta_itself():
    family = Point(3)
    assert family.n_params == 3 and family.noise_dim == 0 and family_for("point", 3) == family
    assert family.param_names(["a", "b", "c"]) == ("mu:a", "mu:b", "mu:c")
    phi = np.array([1.0, -2.0, 0.5])
    np.testing.assert_array_equal(family.sample(phi, np.zeros((4, 0))), np.broadcast_to(phi, (4, 3)))
    assert not np.any(family.marginal_sd(phi)) and family.entropy(phi) == 0.0


def test_a_point_run_releases_the_gradient_of_the_negative_log_joint():
    """Without noise and with every example in each batch (q = 1), G_t = Σ_i (X_iθ_t − y_i) X_i + θ_t/9 exactly."""
    y = X @ THETA0
    trace = na.record_dpvi(
        linear, {"X": X, "y": y}, key=0, non_private=True, **SETTINGS | {"steps": 5, "sampling_rate": 1.0}
    )
    theta = np.asarray(trace.params, np.float64)
    expected = (theta @ X.T - y) @ X + theta / PRIOR_SD**2
    np.testing.assert_allclose(trace.grads, expected, rtol=1e-4, atol=1e-3)
    assert trace.variational_family == "point" and trace.n_params == D


def test_at_a_weak_privacy_level_the_laplace_posterior_is_the_exact_posterior():
    """At ε = 30, over 12 000 steps, the DP noise is small: the components' covariance, Λ⁻¹ with Λ read whole off
    the trace (full-rank components), is the exact posterior's within 10 % on average; the posterior's sds are the
    exact ones within −10 % (Λ's own estimate) and +20 % (the spread of θ̂ that the gradient noise leaves), and its
    means are the exact posterior's within half an sd."""
    y, traces = simulated(4, 30.0, steps=12_000)
    covariance = np.linalg.inv(PRECISION)
    sd = np.sqrt(np.diag(covariance))
    for data, post in zip(y, na.fit_batch(traces, key=2, checks="off")):
        assert post.family == "full-rank-normal-softplus" and post.kind.startswith("noise-aware Laplace")
        components = post.variational_family.covariance(post.optimum_draws).mean(axis=0)
        np.testing.assert_allclose(components, covariance, rtol=0.1, atol=0.1 * sd.min() ** 2)
        assert np.all((post.theta_sd > 0.9 * sd) & (post.theta_sd < 1.2 * sd)), post.theta_sd / sd
        mean = np.linalg.solve(PRECISION, X.T @ data)
        assert np.all(np.abs(post.theta_mean - mean) < 0.5 * sd)


@pytest.mark.slow
def test_the_laplace_posterior_and_the_sandwich_cover_the_truth():
    """Over 40 simulated data sets at ε = 1, the 90 % intervals of both cover θ₀ in 0.75–1 of them per coordinate
    (binomial sd 0.047), and the naive reading of the same traces (the last iterate) never does."""
    _, traces = simulated(40, 1.0)
    for method in ("exact", "sandwich"):
        posts = na.fit_batch(traces, method, key=2, checks="off")
        low, high = (np.array(ends) for ends in zip(*(post.interval(0.9) for post in posts)))
        covered = np.mean((low < THETA0) & (THETA0 < high), axis=0)
        assert np.all((covered >= 0.75) & (covered <= 1.0)), (method, covered)


def test_the_sandwich_is_the_laplace_posterior_where_v_is_lambda():
    """With V = Λ (u_j² = q(1 − q) Λ_jj), Λ⁻¹VΛ⁻¹ = Λ⁻¹: the two readings' components agree."""
    rng = np.random.default_rng(0)
    root = rng.normal(size=(50, 3, 3))
    matrix = root @ np.swapaxes(root, 1, 2) + 3.0 * np.eye(3)
    optimum, q = rng.normal(size=(50, 3)), 0.1
    extra = np.sqrt(q * (1 - q) * np.diagonal(matrix, axis1=1, axis2=2))
    hessian = np.diagonal(matrix, axis1=1, axis2=2)
    laplace = point_components(optimum, hessian, matrix, extra, q, "laplace")
    sandwich = point_components(optimum, hessian, matrix, extra, q, "sandwich")
    np.testing.assert_allclose(laplace[1], sandwich[1], rtol=1e-8, atol=1e-10)
    family, phi, kept, notes = laplace
    assert family.kind == "full-rank" and kept.all() and not notes
    np.testing.assert_allclose(family.covariance(phi), np.linalg.inv(matrix), rtol=1e-8, atol=1e-12)


def test_draws_of_an_indefinite_hessian_fall_back_to_its_diagonal_and_say_so():
    """Most draws of Λ not positive definite: the components take the diagonal (variances 1/a) and a note says
    the coupling was not identified."""
    matrix = np.broadcast_to(np.array([[1.0, 2.0], [2.0, 1.0]]), (10, 2, 2))
    hessian = np.full((10, 2), 4.0)
    family, phi, kept, notes = point_components(np.zeros((10, 2)), hessian, matrix, None, 0.1)
    assert family.kind == "mean-field" and kept.all() and [note.kind for note in notes] == ["coupling not identified"]
    np.testing.assert_allclose(family.marginal_sd(phi), 0.5)


def test_the_sandwich_refuses_a_dpvi_trace_before_any_work():
    bm = na.models.get("gamma-exponential", preset="research")
    _, data = bm.simulate(jax.random.key(0))
    trace = na.record_dpvi(bm.model, data, key=1, epsilon=1.0, **bm.dpvi_settings | {"steps": 300})
    with pytest.raises(ValueError) as info:
        na.fit(trace, method="sandwich", key=0)
    mentions(info, "'sandwich'", "point", "mean-field", "exact")


def test_noiseaware_fit_reads_a_point_trace(capsys, tmp_path):
    _, traces = simulated(1, 3.0)
    traces[0].save(tmp_path / "run.npz")
    status, out, _ = run(capsys, "fit", tmp_path / "run.npz", "--method", "sandwich", "--checks", "off")
    assert status == 0 and "sandwich" in out and "theta[0]" in out
    status, out, _ = run(capsys, "fit", tmp_path / "run.npz", "--out", tmp_path / "post.nc", "--checks", "off")
    post = na.load_posterior(tmp_path / "post.nc")
    assert status == 0 and post.kind.startswith("noise-aware Laplace") and post.dim == D
