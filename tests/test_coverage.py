"""The coverage driver end to end on small studies: shapes, failures counted, reproducible, files, plug-ins."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import noiseaware as na
from noiseaware.evaluation import METHODS, coverage, evaluate, register_method, simulate_traces
from noiseaware.util.keys import as_key
from noiseaware.models.builtin import GAMMA_PRIOR

SMALL = {"simulations": 12, "repeats": 2, "draws": 400, "steps": 1000, "chunk": 12}
M1 = na.models.get("gamma-exponential")


@pytest.fixture(scope="module")
def result():
    return coverage(M1, methods=("exact", "naive"), epsilon=1.0, key=3, **SMALL)


def test_small_study_scores_every_method_under_both_rules(result):
    assert set(result.curves) == {"research", "trace"}
    for rule in result.curves:
        assert set(result.curves[rule]) == {"exact", "naive"}
        assert result.curves[rule]["exact"].shape == (2, 21)
        assert result.marginal_curves[rule]["exact"].shape == (2, 21, 1)
        assert np.all((result.curves[rule]["exact"] >= 0) & (result.curves[rule]["exact"] <= 1))
    # with d = 1 the TARP ball is the interval |θ − θ_ref| < |θ_m − θ_ref|: joint and marginal agree
    np.testing.assert_array_equal(result.curves["research"]["exact"], result.marginal_curves["research"]["exact"][..., 0])
    assert result.ecp is result.curves["research"]
    assert result.failures == {"exact": 0, "naive": 0}
    assert set(result.rmse) == {"exact", "naive"} and all(0 <= m <= 1 for m, _ in result.rmse.values())
    assert result.settings["noise_multiplier"] == pytest.approx(na.noise_multiplier(1.0, 1e-5, 0.1, 1000))
    assert {"dpvi", "exact", "tarp_exact", "naive", "tarp_naive"} <= set(result.seconds)
    assert "exact" in result.table() and "research" in result.table()


def test_same_key_same_numbers_whichever_methods_run_beside(result):
    again = coverage(M1, methods=("naive",), epsilon=1.0, key=3, **SMALL)
    for rule in result.curves:
        np.testing.assert_array_equal(again.curves[rule]["naive"], result.curves[rule]["naive"])
    other = coverage(M1, methods=("naive",), epsilon=1.0, key=4, **SMALL)
    assert not np.array_equal(other.curves["research"]["naive"], result.curves["research"]["naive"])


def test_coverage_is_simulate_traces_then_evaluate(result):
    """The documented split: simulate with stream 0 of split(key, 4), evaluate with the same key; more
    methods can then be scored on the same simulations."""
    settings = dict(M1.dpvi_settings) | {"steps": 1000}
    sims = simulate_traces(M1, noise_multiplier=result.settings["noise_multiplier"], delta=1e-5, simulations=12,
                           key=jax.random.split(as_key(3), 4)[0], **settings)
    again = evaluate(sims, ("naive", "dpvim"), repeats=2, draws=400, key=3)
    np.testing.assert_array_equal(again.curves["trace"]["naive"], result.curves["trace"]["naive"])
    assert again.settings["simulations"] == 12 and again.settings["steps"] == 1000
    assert set(again.methods) == {"naive", "dpvim"}


def test_results_files(result, tmp_path):
    result.to_json(tmp_path / "c.json")
    payload = json.loads((tmp_path / "c.json").read_text())
    assert payload["settings"]["simulations"] == 12 and len(payload["levels"]) == 21
    assert set(payload["summary"]) == {"exact", "naive"}
    assert payload["summary"]["exact"]["rmse"]["research"]["mean"] == pytest.approx(result.rmse["exact"][0])
    assert set(payload["settings"]["reference_rules"]) == {"research", "trace"}
    result.to_csv(tmp_path / "c.csv")
    lines = (tmp_path / "c.csv").read_text().splitlines()
    assert lines[0] == "method,reference_rule,dimension,level,ecp_mean,ecp_sd"
    assert len(lines) == 1 + 2 * 2 * 2 * 21  # rules × methods × (joint + 1 dimension) × levels
    path = result.plot(tmp_path / "c.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class _GammaPosterior:
    """The exact conjugate posterior of M1, Gamma(8 + N, 2 + Σx), as draws of θ = softplus⁻¹(λ)."""

    def __init__(self, x):
        self.shape, self.rate = GAMMA_PRIOR[0] + x.size, GAMMA_PRIOR[1] + float(np.sum(x))

    def sample(self, key, n):
        rate = np.asarray(jax.random.gamma(key, self.shape, (n,), jnp.float32), np.float64) / self.rate
        return (rate + np.log(-np.expm1(-rate)))[:, None]  # softplus⁻¹


def test_an_exact_posterior_plugged_in_is_calibrated_and_failures_are_counted():
    """A registered method with the exact posterior: the driver's TARP curve lies on the diagonal within
    finite-M error (RMSE ≤ 0.07 at M = 120, whose expectation is ≈ 0.036), and a method failing on every
    third simulation is counted, not dropped."""
    register_method("oracle", lambda simulation, *, epsilon, delta, key: _GammaPosterior(np.asarray(simulation.data["x"])))

    def flaky(simulation, *, epsilon, delta, key):
        if simulation.index % 3 == 0:
            raise ValueError("no fit")
        assert not hasattr(simulation, "truth")
        return na.naive_posterior(simulation.trace)

    register_method("flaky", flaky)
    try:
        out = coverage(M1, methods=("oracle", "flaky"), epsilon=1.0, key=5, simulations=120, repeats=5,
                       draws=2000, steps=300, chunk=120)
    finally:
        METHODS.pop("oracle")
        METHODS.pop("flaky")
    assert out.failures == {"oracle": 0, "flaky": 40}
    mean, _ = out.rmse["oracle"]
    assert mean <= 0.07, out.table()


def normal_mean(x=None, n_examples=None):
    """μ ~ N(0, 1); x_i ~ N(μ, 1): a model made by from_numpyro, not a built-in."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(mu, 1.0), obs=x)


def test_any_from_numpyro_model_and_every_trace_method():
    bm = na.models.from_numpyro(normal_mean, n_examples=500, name="normal-mean", steps=600, sampling_rate=0.1,
                                clip=2.0, grad_scale=(1.0, 100.0), lr_multiplier=math.sqrt(2), init=(0.0, -4.0))
    out = coverage(bm, methods=("exact", "laplace", "nuts", "naive", "dpvim"), epsilon=1.0, key=1, simulations=8,
                   repeats=2, draws=300, method_options={"nuts": {"warmup": 100, "draws": 200}})
    assert set(out.methods) == {"exact", "laplace", "nuts", "naive", "dpvim"}
    assert all(count == 0 for count in out.failures.values())
    assert {"max_rhat", "divergences"} <= set(out.diagnostics["nuts"])
    assert "simulations_not_converged" in out.diagnostics["dpvim"]
    assert out.settings["model"] == "normal-mean" and out.theta_names == ("mu",)


def test_bad_requests_raise():
    with pytest.raises(ValueError, match="unknown methods"):
        coverage(M1, methods=("exact", "magic"), epsilon=1.0)
    with pytest.raises(ValueError, match="exactly one of epsilon and noise_multiplier"):
        coverage(M1, methods=("exact",))
    with pytest.raises(ValueError, match="simulations must be a positive int"):
        coverage(M1, methods=("exact",), epsilon=1.0, simulations=0)
