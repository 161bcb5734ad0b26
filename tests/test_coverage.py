"""The coverage driver end to end on small studies: shapes, failures counted, reproducible, files, plug-ins."""

import dataclasses
import json
import math

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import scipy.stats
import xarray as xr

import noiseaware as na
from noiseaware.evaluation import coverage, evaluate, simulate_traces
from noiseaware.evaluation.result import REFERENCE_RULES
from noiseaware.models.builtin import GAMMA_PRIOR
from noiseaware.plots import plot_coverage
from noiseaware.util.diagnostics import NoDiagnostics
from noiseaware.util.keys import as_key

SMALL = {"simulations": 12, "references": 2, "samples": 400, "steps": 1000, "chunk": 12}
M1 = na.models.get("gamma-exponential", preset="research")


@pytest.fixture(scope="module")
def result():
    return coverage(M1, methods=("exact", "naive"), epsilon=1.0, key=3, **SMALL)


@pytest.mark.slow
def test_small_study_scores_every_method_under_both_rules(result):
    assert set(result.curves) == {"research", "trace"}
    for rule in result.curves:
        assert set(result.curves[rule]) == {"exact", "naive"}
        assert result.curves[rule]["exact"].shape == (2, 21)
        assert result.marginal_curves[rule]["exact"].shape == (2, 21, 1)
        assert np.all((result.curves[rule]["exact"] >= 0) & (result.curves[rule]["exact"] <= 1))
    # with d = 1 the TARP ball is the interval |θ − θ_ref| < |θ_m − θ_ref|: joint and marginal agree
    np.testing.assert_array_equal(
        result.curves["research"]["exact"], result.marginal_curves["research"]["exact"][..., 0]
    )
    assert result.ecp is result.curves["research"]
    assert result.failures == {"exact": 0, "naive": 0}
    assert set(result.rmse) == {"exact", "naive"} and all(0 <= m <= 1 for m, _ in result.rmse.values())
    assert result.settings["noise_multiplier"] == pytest.approx(na.noise_multiplier(1.0, 1e-5, 0.1, 1000))
    assert {"dpvi", "exact", "tarp_exact", "naive", "tarp_naive"} <= set(result.seconds)
    assert "exact" in result.table() and "research" in result.table()
    # every trace method records how many of the study's traces each trace check fired on
    for method in ("exact", "naive"):
        counts = result.diagnostics[method]["trace_checks"]
        assert counts["traces"] == 12 and 0 <= counts["any"] <= 12
        assert set(counts) == {"traces", "any", *na.checks.CHECKS}
    assert "trace checks" in result.table().splitlines()[0] and "width ×" in result.table().splitlines()[0]
    # issue 26: the columns are explained where they are printed, each reference rule in full
    legend = result.table().splitlines()[3:]
    assert legend[0].startswith("RMSE: sqrt(mean over the 21 levels")
    assert legend[0].endswith(f"{(6 * 12) ** -0.5:.3f} for these M = 12 simulations")  # sqrt(1/(6M)), issue 40
    assert [f"  {rule}: {REFERENCE_RULES[rule]}" for rule in ("research", "trace")] == legend[2:4]


@pytest.mark.slow
def test_same_key_same_numbers_whichever_methods_run_beside(result):
    again = coverage(M1, methods=("naive",), epsilon=1.0, key=3, **SMALL)
    for rule in result.curves:
        np.testing.assert_array_equal(again.curves[rule]["naive"], result.curves[rule]["naive"])
    other = coverage(M1, methods=("naive",), epsilon=1.0, key=4, **SMALL)
    assert not np.array_equal(other.curves["research"]["naive"], result.curves["research"]["naive"])


@pytest.mark.slow
def test_coverage_is_simulate_traces_then_evaluate(result):
    """The documented split: simulate with stream 0 of split(key, 4), evaluate with the same key; more
    methods can then be scored on the same simulations."""
    settings = dict(M1.dpvi_settings) | {"steps": 1000}
    sims = simulate_traces(
        M1,
        noise_multiplier=result.settings["noise_multiplier"],
        delta=1e-5,
        simulations=12,
        key=jax.random.split(as_key(3), 4)[0],
        **settings,
    )
    again = evaluate(sims, ("naive", "dpvim"), references=2, samples=400, key=3)
    np.testing.assert_array_equal(again.curves["trace"]["naive"], result.curves["trace"]["naive"])
    assert again.settings["simulations"] == 12 and again.settings["steps"] == 1000
    assert again.settings["references"] == 2 and again.settings["samples"] == 400
    assert set(again.methods) == {"naive", "dpvim"}


@pytest.mark.slow
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
    assert payload["settings"]["references"] == 2 and payload["settings"]["samples"] == 400
    plot_coverage(result, tmp_path / "c.png")
    plot_coverage(result, tmp_path / "t.png", rule="trace")
    assert (tmp_path / "c.png").read_bytes()[:8] == (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the PIT survives the DataTree and is ArviZ's SBC input: one variable per method, the simulations as draws
    result.to_netcdf(tmp_path / "c.nc")
    again = na.evaluation.CoverageResult.from_datatree(xr.open_datatree(tmp_path / "c.nc"))
    np.testing.assert_array_equal(again.pit["exact"], result.pit["exact"])
    sbc = again.pit_tree()["prior_sbc"].dataset
    assert set(sbc.data_vars) == {"exact", "naive"} and sbc["exact"].shape == (1, 12, 1)
    az.plot_ecdf_pit(again.pit_tree(), coverage=True).savefig(tmp_path / "pit.png")
    assert (tmp_path / "pit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no PIT"):
        dataclasses.replace(result, pit={}).pit_tree()


class _GammaPosterior:
    """The exact conjugate posterior of M1, Gamma(8 + N, 2 + Σx), as draws of θ = softplus⁻¹(λ)."""

    diagnostics = NoDiagnostics()

    def __init__(self, x):
        self.shape, self.rate = GAMMA_PRIOR[0] + x.size, GAMMA_PRIOR[1] + float(np.sum(x))

    def sample(self, key, n):
        rate = np.asarray(jax.random.gamma(key, self.shape, (n,), jnp.float32), np.float64) / self.rate
        return (rate + np.log(-np.expm1(-rate)))[:, None]  # softplus⁻¹


@pytest.mark.slow
def test_an_exact_posterior_plugged_in_is_calibrated_and_failures_are_counted():
    """A plug-in method with the exact posterior: the driver's TARP curve lies on the diagonal within
    finite-M error (RMSE ≤ 0.07 at M = 120: each ECP has binomial sd ≤ sqrt(0.25/120) ≈ 0.046 and the RMSE
    averages their squares over the levels, sqrt(mean l(1 − l) / 120) ≈ 0.036), and a method failing on
    every third simulation is counted, not dropped. Plug-ins are Method records passed in `methods`: no
    registry is changed."""

    def oracle(problem, key, options):
        """The exact posterior given the simulation's data (a non-private reference, not a release)."""
        return _GammaPosterior(np.asarray(problem.data["x"]))

    def flaky(problem, key, options):
        """The naive posterior, failing on every third simulation."""
        if problem.index % 3 == 0:
            raise na.FitFailure("no fit", "the flaky method fails on every third simulation")
        assert not hasattr(problem, "truth")
        return na.naive_posterior(problem.trace)

    methods = (na.per_problem("oracle", oracle, private=False), na.per_problem("flaky", flaky))
    out = coverage(
        M1, methods=methods, epsilon=1.0, key=5, simulations=120, references=5, samples=2000, steps=300, chunk=120
    )
    assert "oracle" not in na.DEFAULT_REGISTRY and "flaky" not in na.DEFAULT_REGISTRY
    assert out.failures == {"oracle": 0, "flaky": 40}
    mean, _ = out.rmse["oracle"]
    assert mean <= 0.07, out.table()
    # issue 28: width beside coverage. The exact posterior's 90 % intervals are the non-private posterior's own
    # (Laplace at N = 5000 is within 1 % of the Gamma posterior; 2000 draws leave ≈ 3 % per simulation)
    assert out.width_ratio["oracle"].shape == (120, 1) and out.width_ratio["flaky"].shape == (80, 1)
    assert abs(out.median_width_ratio()["oracle"][0] - 1.0) < 0.02
    assert "width ×" in out.table().splitlines()[0]
    assert out.headline()["oracle"]["width_ratio"]["rate"] == pytest.approx(out.median_width_ratio()["oracle"][0])
    # the marginal PIT of the truth: uniform for the exact posterior (Kolmogorov–Smirnov at M = 120), piled up at
    # 0 and 1 for the naive one, which ignores the DP noise (far more than 10 % outside its central 90 % intervals)
    assert out.pit["oracle"].shape == (120, 1) and out.pit["flaky"].shape == (80, 1)
    assert scipy.stats.kstest(out.pit["oracle"][:, 0], "uniform").pvalue > 0.01
    outside = np.mean(np.abs(out.pit["flaky"] - 0.5) > 0.45)
    assert outside > 0.3, outside


@pytest.mark.slow
def test_a_plug_in_in_a_registry_and_its_options():
    """A per-trace plug-in with typed options, looked up by name in a registry that includes it; its options
    come from method_options and unknown ones are refused before any work."""

    @dataclasses.dataclass(frozen=True)
    class Shift:
        offset: float = 0.0

    seen = []

    def shifted(trace, key, options):
        seen.append(options)
        post = na.naive_posterior(trace)
        return dataclasses.replace(post, optimum_chains=post.optimum_chains + options.offset)

    registry = na.DEFAULT_REGISTRY.including(na.per_trace("shifted", shifted, options=Shift))
    out = coverage(
        M1,
        methods=("naive", "shifted"),
        registry=registry,
        epsilon=1.0,
        key=3,
        method_options={"shifted": {"offset": 0.0}},
        **SMALL,
    )
    assert seen == [Shift(0.0)] * SMALL["simulations"] and out.failures == {"naive": 0, "shifted": 0}
    for rule in out.curves:  # offset 0 is the naive posterior, scored on the same traces with its own θ draws
        assert out.curves[rule]["shifted"].shape == out.curves[rule]["naive"].shape == (2, 21)
    with pytest.raises(ValueError, match="method 'shifted' has no option 'scale'"):
        coverage(
            M1,
            methods=("shifted",),
            registry=registry,
            epsilon=1.0,
            key=3,
            method_options={"shifted": {"scale": 2.0}},
            **SMALL,
        )
    with pytest.raises(ValueError, match="unknown methods"):
        coverage(M1, methods=("shifted",), epsilon=1.0, key=3, **SMALL)  # not in the default registry


def normal_mean(x=None, n_examples=None):
    """μ ~ N(0, 1); x_i ~ N(μ, 1): a model made by from_numpyro, not a built-in."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(mu, 1.0), obs=x)


@pytest.mark.slow
def test_any_from_numpyro_model_and_every_trace_method():
    bm = na.models.from_numpyro(
        normal_mean,
        n_examples=500,
        name="normal-mean",
        steps=600,
        sampling_rate=0.1,
        clip=2.0,
        grad_scale=(1.0, 100.0),
        lr_multiplier=math.sqrt(2),
        init=(0.0, -4.0),
    )
    out = coverage(
        bm,
        methods=("exact", "laplace", "nuts", "naive", "dpvim"),
        epsilon=1.0,
        key=1,
        simulations=8,
        references=2,
        samples=300,
        method_options={"nuts": {"warmup": 100, "draws": 200}},
    )
    assert set(out.methods) == {"exact", "laplace", "nuts", "naive", "dpvim"}
    assert all(count == 0 for count in out.failures.values())
    assert {"max_rhat", "divergences"} <= set(out.diagnostics["nuts"])
    assert "simulations_not_converged" in out.diagnostics["dpvim"]
    assert out.settings["model"] == "normal-mean" and out.theta_names == ("mu",)


def test_bad_requests_raise():
    with pytest.raises(ValueError, match="unknown methods"):
        coverage(M1, methods=("exact", "magic"), epsilon=1.0, key=0)
    with pytest.raises(ValueError, match="exactly one of epsilon and noise_multiplier"):
        coverage(M1, methods=("exact",), key=0)
    with pytest.raises(ValueError, match="simulations must be an integer ≥ 2"):
        coverage(M1, methods=("exact",), epsilon=1.0, simulations=0, key=0)
    with pytest.raises(ValueError, match="coverage is a fraction over simulations"):
        coverage(M1, methods=("exact",), epsilon=1.0, simulations=1, key=0)
    with pytest.raises(ValueError, match="references must be a positive int"):
        coverage(M1, methods=("exact",), epsilon=1.0, references=0, key=0)
    with pytest.raises(TypeError, match="key"):  # the numbers depend on the key: there is no default
        coverage(M1, methods=("exact",), epsilon=1.0)
    with pytest.raises(ValueError, match="method_options names methods that do not run"):
        coverage(M1, methods=("exact",), epsilon=1.0, key=0, method_options={"laplace": {"style": "paper"}})
    with pytest.raises(ValueError, match="method 'exact' has no option 'style'"):
        coverage(M1, methods=("exact",), epsilon=1.0, key=0, method_options={"exact": {"style": "paper"}})


@pytest.mark.slow
def test_the_paper_prior_is_a_method_option():
    """method_options={"exact": {"prior": "paper"}} (what `prior="paper"` used to do) reaches the exact fits,
    and the results file records it."""
    out = coverage(M1, methods=("exact",), epsilon=1.0, key=3, method_options={"exact": {"prior": "paper"}}, **SMALL)
    assert out.settings["method_options"]["exact"] == repr(na.methods.ExactOptions(prior="paper"))
    assert out.failures == {"exact": 0}
    # coverage itself has no prior argument any more: refused before any work, with the fix
    with pytest.raises(ValueError, match=r"unknown settings \['prior'\].*method_options=\{'exact': \{'prior'"):
        coverage(M1, methods=("exact",), noise_multiplier=37.81, key=0, prior="paper", **SMALL)


def test_the_non_private_reference_sd_is_the_beta_posteriors_on_the_logit_scale():
    """M2's posterior is Beta(10 + k, 10 + N − k): logit(p) has sd sqrt(ψ₁(a) + ψ₁(b)) exactly (ψ₁ the trigamma);
    the Laplace sd at the MAP in the traces' θ = logit(p) is within 0.1 % of it at N = 5000."""
    from scipy.special import polygamma

    from noiseaware.evaluation.reference_sd import nonprivate_sd

    bm = na.models.get("beta-bernoulli")
    theta, data = jax.vmap(bm.simulate)(jax.random.split(jax.random.key(2), 4))
    trace = na.record_dpvi(bm.model, {"x": data["x"][0]}, epsilon=1.0, key=0, **(bm.dpvi_settings | {"steps": 100}))
    sd = nonprivate_sd(bm.model, trace, data, theta)
    k = np.asarray(data["x"]).sum(axis=1)
    exact = np.sqrt(polygamma(1, 10 + k) + polygamma(1, 10 + bm.n_examples - k))
    np.testing.assert_allclose(sd[:, 0], exact, rtol=1e-3)
