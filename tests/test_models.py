"""Benchmark models: simulators, research transforms and presets (docs/experiments.md), prior and
likelihood of the simulated data, `get`, `from_numpyro` and a short DPVI run per built-in."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from messages import mentions

import noiseaware
import noiseaware.recording.settings
from noiseaware.models import from_numpyro, get, names
from noiseaware.models.adult import ADULT_FEATURE_NAMES
from noiseaware.recording.contract import ModelError
from noiseaware.recording.dpvi import build_recorder, record_dpvi
from noiseaware.trace.sites import SiteSpec

N = 5_000
ADULT_N = 30_162
SQRT2 = math.sqrt(2)

# name → (d, data shapes, site specs)
SHAPES = {
    "gamma-exponential": (1, {"x": (N,)}, (SiteSpec("rate", (), "softplus"),)),
    "beta-bernoulli": (1, {"x": (N,)}, (SiteSpec("p", (), "sigmoid"),)),
    "dirichlet-categorical": (2, {"x": (N,)}, (SiteSpec("p", (3,), "alr"),)),
    "linreg-10d": (
        12,
        {"X": (N, 11), "y": (N,)},
        (SiteSpec("w", (11,), "identity"), SiteSpec("sigma2", (), "softplus")),
    ),
    "logistic-3d": (3, {"X": (N, 3), "y": (N,)}, (SiteSpec("theta", (3,), "identity"),)),
    "regression-1d": (1, {"X": (N, 1), "y": (N,)}, (SiteSpec("theta", (), "identity"),)),
    "adult-logistic": (
        57,
        {"X": (ADULT_N, 57), "y": (ADULT_N,)},
        (SiteSpec("theta", (57,), "identity", ADULT_FEATURE_NAMES),),
    ),
}

# name → (N, C, s_ρ, v (per coordinate of φ), init (per coordinate of φ)), from docs/experiments.md
_V_LINREG = [4 * SQRT2] * 11 + [4 * SQRT2 / 28] + [4 * SQRT2] * 12
PRESETS = {
    "gamma-exponential": (N, 2.0, 100.0, [SQRT2] * 2, [0.0, -4.0]),
    "beta-bernoulli": (N, 2.0, 120.0, [SQRT2] * 2, [0.0, -4.0]),
    "dirichlet-categorical": (N, SQRT2, 100.0, [SQRT2] * 4, [0.0] * 2 + [-6.0] * 2),
    "linreg-10d": (N, 260.0, 1500.0, _V_LINREG, [1.0] * 11 + [-4.0] + [-6.0] * 12),
    "logistic-3d": (N, 2.0, 100.0, [SQRT2] * 6, [0.0] * 3 + [-6.0] * 3),
    "regression-1d": (N, 2.0, 100.0, [SQRT2] * 2, [0.0, -4.0]),
    "adult-logistic": (ADULT_N, 11.0, 550.0, [math.sqrt(114)] * 114, [0.0] * 57 + [-6.0] * 57),
}


# One vmapped simulation batch per model, shared by the tests. Vmapping the samplers is costly at the
# full N (and compiles once per shape), so the batches use the same model with fewer examples:
# name → (number of simulations M, examples per simulation)
# (The same M for the four models with gamma-based priors: the vmapped gamma sampler compiles once per shape.)
SIMS = {
    "gamma-exponential": (1000, 200),
    "beta-bernoulli": (1000, 200),
    "dirichlet-categorical": (1000, 200),
    "linreg-10d": (1000, 20),
    "logistic-3d": (3, 50),
}


def small(name):
    """The built-in with fewer examples per simulated data set (same model, map and presets)."""
    return dataclasses.replace(get(name), n_examples=SIMS[name][1])


@functools.cache
def simulations(name):
    keys = jax.random.split(jax.random.key(100 + sorted(SIMS).index(name)), SIMS[name][0])
    thetas, data = jax.vmap(small(name).simulate)(keys)
    return keys, thetas, data


def test_names_are_the_seven_builtins():
    assert set(names()) == set(SHAPES)
    assert len(names()) == 7


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_builtin_simulates(name):
    d, shapes, sites = SHAPES[name]
    bm = get(name)
    assert bm.name == name and bm.dim == d and bm.n_examples == shapes[next(iter(shapes))][0]
    assert bm.site_map.sites == sites
    theta, data = bm.simulate(3)
    assert theta.shape == (d,) and np.all(np.isfinite(theta))
    assert {k: v.shape for k, v in data.items()} == shapes
    assert all(np.all(np.isfinite(np.asarray(v))) for v in data.values())
    # int seed and PRNG key give the same draw; another key another draw
    theta_k, data_k = bm.simulate(jax.random.key(3))
    np.testing.assert_array_equal(theta, theta_k)
    theta_other, _ = bm.simulate(4)
    assert not np.allclose(theta, theta_other)
    # values in the likelihood's support
    if name == "gamma-exponential":
        assert np.all(np.asarray(data["x"]) > 0)
    if name in ("beta-bernoulli", "logistic-3d", "adult-logistic"):
        y = np.asarray(data["x" if name == "beta-bernoulli" else "y"])
        assert set(np.unique(y)) <= {0, 1}
    if name == "dirichlet-categorical":
        assert set(np.unique(np.asarray(data["x"]))) == {0, 1, 2}
    if name in ("linreg-10d", "adult-logistic"):
        np.testing.assert_array_equal(np.asarray(data["X"][:, -1]), 1.0)  # bias column
    if name not in SIMS:
        # Adult-sized designs: check that the simulator traces under vmap (executing it is the same
        # code as logistic-3d's, and compiling the vmapped design costs seconds)
        shapes_out = jax.eval_shape(jax.vmap(bm.simulate), jax.random.split(jax.random.key(0), 2))
        assert shapes_out[0].shape == (2, d)
        assert {k: v.shape for k, v in shapes_out[1].items()} == {k: (2,) + s for k, s in shapes.items()}
        return
    # jax.vmap over keys (with fewer examples per data set, see SIMS)
    keys, thetas, batch = simulations(name)
    m, n = SIMS[name]
    assert thetas.shape == (m, d)
    assert {k: v.shape for k, v in batch.items()} == {k: (m, n) + s[1:] for k, s in shapes.items()}
    assert np.all(np.isfinite(thetas)) and not np.allclose(thetas[0], thetas[1])
    if name in ("gamma-exponential", "logistic-3d"):  # vmapped = one by one (the simulator is generic code)
        theta1, data1 = small(name).simulate(keys[1])
        np.testing.assert_allclose(thetas[1], theta1, rtol=1e-6)
        for k in shapes:
            np.testing.assert_allclose(batch[k][1], data1[k], rtol=1e-6)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_match_the_research_settings(name, monkeypatch):
    n, clip, s_rho, v, init = PRESETS[name]
    bm = get(name)
    d = bm.dim
    settings = dict(bm.dpvi_settings)
    assert settings["steps"] == 10_000 and settings["sampling_rate"] == 0.1 and settings["mc_draws"] == 10
    assert settings["clip"] == pytest.approx(clip, rel=1e-15)
    assert settings["transforms"] == "research"
    assert bm.n_examples == n
    # resolve the per-coordinate vectors (σ given, so the κ learning rate reveals v); skip the accountant
    monkeypatch.setattr(noiseaware.recording.settings, "epsilon_spent", lambda *args: 1.0)
    _, data = bm.simulate(0)
    sigma = 37.81
    recorder = build_recorder(bm.model, data, noise_multiplier=sigma, **settings)
    resolved = recorder.settings
    scale = np.array([1.0] * d + [s_rho] * d)
    np.testing.assert_allclose(resolved.grad_scale, scale, rtol=1e-15)
    np.testing.assert_allclose(resolved.init, init, rtol=1e-15)
    kappa = np.asarray(v) * scale / (math.sqrt(10_000 * 2 * d) * sigma * clip)
    np.testing.assert_allclose(resolved.learning_rate, kappa, rtol=1e-12)
    assert resolved.clip == pytest.approx(clip) and resolved.sampling_rate == 0.1 and resolved.mc_draws == 10
    assert recorder.spec.site_map.sites == SHAPES[name][2]


def test_linreg_site_order_is_w_then_sigma2():
    bm = get("linreg-10d")
    assert bm.site_map.names == ("w", "sigma2")
    assert bm.dpvi_settings["sites"] == ("w", "sigma2")
    names_ = bm.site_map.theta_names()
    assert names_[:11] == tuple(f"w[{i}]" for i in range(11)) and names_[11] == "sigma2"


def test_get_aliases_and_unknown_names():
    for alias, name in (
        ("M1", "gamma-exponential"),
        ("m2", "beta-bernoulli"),
        ("M3", "dirichlet-categorical"),
        ("Logistic-3D", "logistic-3d"),
    ):
        assert get(alias).name == name
    with pytest.raises(KeyError) as info:
        get("M4")
    mentions(info, "'M4'")


# ---------------------------------------------------------------- simulated θ follow the prior, data the likelihood


def _z_mean_ok(values, mean, sd, m):
    return abs(float(np.mean(values)) - mean) < 5 * sd / math.sqrt(m)


def test_m1_prior_and_likelihood():
    _, thetas, data = simulations("gamma-exponential")
    m, n = SIMS["gamma-exponential"]
    lam = np.asarray(jax.nn.softplus(thetas[:, 0]), np.float64)
    assert _z_mean_ok(lam, 4.0, math.sqrt(8) / 2, m), lam.mean()  # Gamma(8, rate 2)
    assert abs(lam.var() - 2.0) < 0.25, lam.var()  # var 8/4 = 2; SE of the variance ≈ 0.08
    # x_i ~ Exponential(λ): the sample mean is 1/λ with sd 1/(λ sqrt(n))
    z = (np.asarray(data["x"], np.float64).mean(1) - 1 / lam) / (1 / (lam * math.sqrt(n)))
    assert abs(z.mean()) < 5 / math.sqrt(m) and abs(z.var() - 1) < 5 * math.sqrt(2 / m), (z.mean(), z.var())


def test_m2_prior_and_likelihood():
    _, thetas, data = simulations("beta-bernoulli")
    m, n = SIMS["beta-bernoulli"]
    p = np.asarray(jax.nn.sigmoid(thetas[:, 0]), np.float64)
    assert _z_mean_ok(p, 0.5, math.sqrt(100 / (400 * 21)), m), p.mean()  # Beta(10, 10)
    np.testing.assert_allclose(p.var(), 100 / (400 * 21), rtol=0.2)
    z = (np.asarray(data["x"], np.float64).mean(1) - p) / np.sqrt(p * (1 - p) / n)
    assert abs(z.mean()) < 5 / math.sqrt(m) and abs(z.var() - 1) < 5 * math.sqrt(2 / m), (z.mean(), z.var())


def test_m3_prior_and_likelihood():
    _, thetas, data = simulations("dirichlet-categorical")
    m, n = SIMS["dirichlet-categorical"]
    assert thetas.shape == (m, 2)
    p = np.asarray(jax.nn.softmax(jnp.concatenate([thetas, jnp.zeros((m, 1))], axis=1), axis=1), np.float64)
    sd = math.sqrt(5 * 10 / (15**2 * 16))  # Dirichlet(5, 5, 5) marginal sd
    for k in range(3):
        assert _z_mean_ok(p[:, k], 1 / 3, sd, m), (k, p[:, k].mean())
    x = np.asarray(data["x"])
    for k in range(3):
        freq = (x == k).mean(1)
        z = (freq - p[:, k]) / np.sqrt(p[:, k] * (1 - p[:, k]) / n)
        assert abs(z.mean()) < 5 / math.sqrt(m) and abs(z.var() - 1) < 5 * math.sqrt(2 / m), (k, z.mean(), z.var())


def test_linreg_prior_and_likelihood():
    bm = get("linreg-10d")
    _, thetas, batch = simulations("linreg-10d")
    m = SIMS["linreg-10d"][0]
    sigma2 = np.asarray(jax.nn.softplus(thetas[:, 11]), np.float64)
    # σ² ~ InvGamma(20, 0.5): mean 0.5/19, sd mean/sqrt(18)
    mean = 0.5 / 19
    assert _z_mean_ok(sigma2, mean, mean / math.sqrt(18), m), sigma2.mean()
    # w | σ² ~ N(0, 4σ²): w / (2σ) is standard normal
    w_std = np.asarray(thetas[:, :11], np.float64) / (2 * np.sqrt(sigma2))[:, None]
    assert abs(w_std.mean()) < 5 / math.sqrt(w_std.size) and abs(w_std.var() - 1) < 0.1
    # y_i = w·x_i + N(0, σ²) in every simulated data set: standardised residuals are N(0, 1)
    X, y = np.asarray(batch["X"], np.float64), np.asarray(batch["y"], np.float64)
    resid = (y - np.einsum("mnk,mk->mn", X, np.asarray(thetas[:, :11], np.float64))) / np.sqrt(sigma2)[:, None]
    assert abs(resid.mean()) < 5 / math.sqrt(resid.size) and abs(resid.var() - 1) < 5 * math.sqrt(2 / resid.size)
    # one data set: OLS recovers w within 5 SE and the residual variance is σ²
    theta, data = bm.simulate(105)
    X, y = np.asarray(data["X"], np.float64), np.asarray(data["y"], np.float64)
    w, s2 = np.asarray(theta[:11], np.float64), float(jax.nn.softplus(theta[11]))
    w_hat, *_ = np.linalg.lstsq(X, y, rcond=None)
    se = np.sqrt(s2 * np.diag(np.linalg.inv(X.T @ X)))
    assert np.all(np.abs(w_hat - w) < 5 * se), (w_hat - w) / se
    resid = y - X @ w
    np.testing.assert_allclose(resid.var(), s2, rtol=5 * math.sqrt(2 / N))
    # the design is N(0, I) with a bias column
    assert abs(X[:, :10].mean()) < 0.01 and abs(X[:, :10].var() - 1) < 0.02


def test_logistic_likelihood():
    bm = get("logistic-3d")
    theta, data = bm.simulate(106)
    X, y = np.asarray(data["X"], np.float64), np.asarray(data["y"], np.float64)
    assert X.min() >= -1 and X.max() <= 1 and abs(X.mean()) < 0.02
    p = 1 / (1 + np.exp(-X @ np.asarray(theta, np.float64)))
    # the score at the true θ has mean 0 and variance Σ p(1 − p) x²
    score = ((y - p)[:, None] * X).sum(0)
    se = np.sqrt(((p * (1 - p))[:, None] * X**2).sum(0))
    assert np.all(np.abs(score) < 5 * se), score / se
    # and a wrong θ is detected by the same statistic
    p_wrong = 1 / (1 + np.exp(-X @ (np.asarray(theta, np.float64) + 1.0)))
    assert np.any(np.abs(((y - p_wrong)[:, None] * X).sum(0)) > 5 * se)


# ---------------------------------------------------------------- from_numpyro


def regression(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ w, s), obs=y)


def design(key, n):
    return {"X": jax.random.normal(key, (n, 2))}


def waiting_times(x=None, n_examples=None):
    rate = numpyro.sample("rate", dist.LogNormal(0.0, 1.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Exponential(rate), obs=x)


def test_from_numpyro_with_covariates():
    bm = from_numpyro(regression, n_examples=40, covariates=design, name="reg", steps=20, sampling_rate=0.5, clip=3.0)
    assert bm.name == "reg" and bm.n_examples == 40 and bm.observed == ("y",) and bm.dim == 3
    assert bm.site_map.sites == (SiteSpec("w", (2,), "identity"), SiteSpec("s", (), "exp"))
    assert dict(bm.dpvi_settings) == {
        "transforms": "numpyro",
        "sites": None,
        "steps": 20,
        "sampling_rate": 0.5,
        "clip": 3.0,
    }
    theta, data = bm.simulate(1)
    assert theta.shape == (3,) and set(data) == {"X", "y"}
    assert data["X"].shape == (40, 2) and data["y"].shape == (40,)
    # θ is the unconstrained latent: y − Xw has sd s = exp(θ_s)
    s = float(np.exp(theta[2]))
    resid = np.asarray(data["y"] - data["X"] @ theta[:2], np.float64)
    assert 0.5 * s < resid.std() < 1.5 * s
    # a per-site override and a site order
    other = from_numpyro(regression, n_examples=40, covariates=design, transforms={"s": "softplus"}, sites=("s", "w"))
    assert other.site_map.sites == (SiteSpec("s", (), "softplus"), SiteSpec("w", (2,), "identity"))
    assert other.dpvi_settings["sites"] == ("s", "w")
    # the simulated data set is accepted by the recorder as it is (the built-ins' smoke runs below record)
    recorder = build_recorder(bm.model, data, noise_multiplier=1.0, **bm.dpvi_settings)
    assert recorder.spec.n_examples == 40 and recorder.spec.per_example == ("X", "y")
    assert recorder.spec.site_map == bm.site_map and recorder.settings.steps == 20


def test_from_numpyro_with_n_examples():
    bm = from_numpyro(waiting_times, n_examples=30)
    theta, data = bm.simulate(2)
    assert bm.observed == ("x",) and theta.shape == (1,) and set(data) == {"x"}  # n_examples is not data
    assert data["x"].shape == (30,)
    assert bm.site_map.sites == (SiteSpec("rate", (), "exp"),)
    assert np.all(np.asarray(data["x"]) > 0)


def no_observed(data=None, n_examples=None):
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    with numpyro.plate("plate", n_examples):
        numpyro.sample("x", dist.Normal(theta, 1.0), obs=data)


def test_from_numpyro_errors():
    with pytest.raises(ModelError) as info:
        from_numpyro(regression, n_examples=10)  # X is needed but no covariates given
    mentions(info, "regression")
    with pytest.raises(ModelError) as info:
        from_numpyro(no_observed, n_examples=10)
    mentions(info, "keyword", "obs=y")
    with pytest.raises(ModelError) as info:
        from_numpyro(waiting_times, n_examples=0)
    mentions(info, "n_examples", "0")
    with pytest.raises(ModelError) as info:
        from_numpyro(waiting_times, n_examples=2.5)
    mentions(info, "n_examples", "2.5")
    with pytest.raises(ModelError) as info:
        from_numpyro(waiting_times, n_examples=10, epsilon=1.0)
    mentions(info, "['epsilon']")


def test_from_numpyro_accepts_numpy_integers_and_simulate_numpy_seeds():
    bm = from_numpyro(waiting_times, n_examples=np.int64(10))
    assert bm.n_examples == 10 and type(bm.n_examples) is int
    np.testing.assert_array_equal(bm.simulate(np.int64(3))[0], bm.simulate(3)[0])


# ---------------------------------------------------------------- a short DPVI run per built-in


@pytest.mark.parametrize("name", [n for n in sorted(SHAPES) if n != "adult-logistic"])
def test_record_dpvi_smoke_with_the_preset(name):
    bm = get(name)
    _, data = bm.simulate(7)
    trace = record_dpvi(bm.model, data, key=8, noise_multiplier=37.81, **{**bm.dpvi_settings, "steps": 20})
    d = bm.dim
    assert trace.params.shape == (20, 2 * d) and trace.grads.shape == (20, 2 * d)
    assert np.all(np.isfinite(trace.params)) and np.all(np.isfinite(trace.grads))
    np.testing.assert_allclose(trace.params[0], PRESETS[name][4], rtol=1e-6)
    assert trace.sites == bm.site_map.sites
    assert trace.n_examples == bm.n_examples and trace.mc_draws == 10 and trace.clip == pytest.approx(PRESETS[name][1])
    assert trace.noise_multiplier == 37.81 and trace.accountant == "pld"
    # the κ step is tiny at this σ: the iterates move, but only a little
    assert np.any(trace.params[-1] != trace.params[0])
    np.testing.assert_allclose(trace.noise_sd, 37.81 * PRESETS[name][1] / np.asarray(trace.grad_scale))


# ---------------------------------------------------------------- one default, chosen by ε (issue 40)


def test_a_builtin_takes_the_preset_the_command_line_would_at_each_epsilon(capsys):
    """na.models.get(name) chooses its preset where it is used, through the function `--preset` uses: the tuned
    preset at a shipped ε (also 1.0000000001, equal up to rounding), the research one elsewhere, and again at
    every other ε; preset="research" never changes; preset="tuned" insists."""
    from noiseaware.cli.presets import preset_models

    bm = get("M1")
    assert bm.preset == "research" and bm.by_epsilon  # the research settings until used at an ε
    for epsilon in (1.0, 1.0000000001, 0.3):
        chosen = noiseaware.models.preset_at(bm, epsilon)
        (cli,) = preset_models(get("M1", preset="research"), None, [epsilon]).values()
        assert chosen.preset == "tuned" and chosen.model.dpvi_settings == cli.dpvi_settings
        assert chosen.model.dpvi_settings["clip"] == noiseaware.tuning.tuned_preset("M1", epsilon)["clip"]
    at_one = get("M1", epsilon=1.0)
    elsewhere = noiseaware.models.preset_at(at_one, 0.5)
    assert elsewhere.preset == "research" and elsewhere.model.dpvi_settings["clip"] == 2.0
    mentions(elsewhere.why, "ε", "0.5", "0.1,", "0.3,", "1)")  # the ε asked for, and those shipped
    assert noiseaware.models.preset_at(at_one, 0.1).model.dpvi_settings == get("M1", epsilon=0.1).dpvi_settings
    research = get("M1", preset="research")
    assert noiseaware.models.preset_at(research, 1.0).model is research
    assert noiseaware.models.preset_at(bm, None).preset == "research"  # a level given as σ
    with pytest.raises(ValueError) as info:
        get("M1", preset="tuned", epsilon=0.5)
    mentions(info, "preset='tuned'", "ε", "0.5")
    with pytest.raises(ValueError) as info:
        get("M1", preset="tuned")
    mentions(info, "epsilon")
    with pytest.raises(ValueError) as info:
        get("M1", preset="paper")
    mentions(info, "'paper'", "'auto'", "'tuned'", "'research'")
    own = from_numpyro(waiting_times, n_examples=50, steps=10, sampling_rate=0.5, clip=1.0)
    assert noiseaware.models.preset_at(own, 1.0).model is own
    assert get("M1", preset=True).by_epsilon  # True is the default, "auto"
    resized = dataclasses.replace(at_one, n_examples=50)  # a size of the user's: kept whatever preset applies
    for epsilon in (1.0, 0.37):
        chosen = noiseaware.models.preset_at(resized, epsilon)
        assert chosen.preset == "research" and chosen.model.n_examples == 50
    assert "not N = 50" in noiseaware.models.preset_at(resized, 1.0).why


def test_coverage_and_preflight_use_the_preset_chosen_by_epsilon(monkeypatch):
    """na.coverage and na.preflight run a built-in at ε with the preset `noiseaware coverage`/`preflight` would;
    a method that draws θ under the research transforms keeps the research preset."""
    import sys

    from noiseaware.evaluation.coverage import coverage_spec

    preflight_module = sys.modules["noiseaware.tuning.preflight"]  # the package's `preflight` is the function

    class Checked(Exception):
        pass

    def capture(bm, settings, **_):
        raise Checked(bm.preset, settings["clip"])

    monkeypatch.setattr(preflight_module, "fresh_check", capture)

    tuned = noiseaware.tuning.tuned_preset("M3", 1.0)
    spec = coverage_spec(get("M3"), key=0, epsilon=1.0, methods=("exact",), simulations=2)
    assert spec.settings["clip"] == tuned["clip"] and spec.model.preset == "tuned"
    spec = coverage_spec(get("M3"), key=0, epsilon=1.0, methods=("exact", "bs2018"), simulations=2)
    assert spec.model.preset == "research"
    with pytest.raises(Checked) as checked:
        noiseaware.preflight(get("M2"), epsilon=0.3, simulations=2, key=0)
    assert checked.value.args == ("tuned", noiseaware.tuning.tuned_preset("M2", 0.3)["clip"])
