"""The method contract's machinery: the registry, typed options, keys, posterior kinds, and the worked plug-in
example of docs/methods.md run as written in fit, coverage and calibration (the contract over every registered
trace method is tests/test_method_contract.py)."""

import dataclasses

import jax
import numpy as np
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.methods import ExactOptions, LaplaceOptions
from noiseaware.posteriors.base import Posterior

M1 = na.models.get("gamma-exponential", preset="research")


@pytest.fixture(scope="module")
def traces():
    _, data = jax.vmap(M1.simulate)(jax.random.split(jax.random.key(0), 3))
    return na.record_dpvi_batch(
        M1.model, data, keys=jax.random.split(jax.random.key(1), 3), epsilon=1.0, **M1.dpvi_settings | {"steps": 2000}
    )


def test_registry_resolves_names_and_records_and_never_mutates():
    registry = na.DEFAULT_REGISTRY
    assert {"exact", "laplace", "nuts", "naive", "dpvim", "bs2018", "bs2019", "nonprivate"} <= set(registry)
    assert registry.names("trace") == (
        "exact", "laplace", "nuts", "sandwich", "naive", "dpvim", "random-scaling", "bootstrap"
    )  # fmt: skip
    mine = na.per_trace("mine", lambda trace, key, options: na.naive_posterior(trace))
    bigger = registry.including(mine)
    assert "mine" in bigger and "mine" not in registry
    assert [m.name for m in registry.resolve(["exact", mine])] == ["exact", "mine"]
    with pytest.raises(ValueError) as info:
        registry.resolve(["exact", "exakt"])
    mentions(info, "['exakt']", "exact", "laplace")
    with pytest.raises(ValueError) as info:
        na.Registry([mine, mine])
    mentions(info, "'mine'")
    with pytest.raises(ValueError) as info:
        registry.resolve(["naive", "naive"])
    mentions(info, "naive")


def test_options_are_typed_and_unknown_options_are_refused():
    exact = na.DEFAULT_REGISTRY["exact"]
    assert exact.make_options() == ExactOptions()
    assert exact.make_options({"prior": "paper"}, passes=2) == ExactOptions(prior="paper", passes=2)
    with pytest.raises(ValueError) as info:
        exact.make_options(style="paper")
    mentions(info, "'exact'", "'style'", "block", "burn_in", "devices", "draws")


def test_fit_needs_a_key(traces):
    with pytest.raises(TypeError) as info:
        na.fit(traces[0], "exact", key=None)
    mentions(info, "key")
    with pytest.raises(TypeError) as info:
        na.fit(traces[0], "exact")
    mentions(info, "1", "'key'")


def test_paper_prior_does_not_switch_the_laplace_algorithm(traces):
    post = na.fit(traces[0], "laplace", key=0, prior="paper", draws=200)
    assert post.diagnostics.style == "full"
    paper = na.fit(traces[0], "laplace", key=0, options=LaplaceOptions(prior="paper", style="paper", draws=200))
    assert paper.diagnostics.style == "paper"


def test_posteriors_say_what_they_are(traces, tmp_path):
    kinds = {"exact": "noise-aware posterior", "naive": "naive posterior", "dpvim": "DPVIm posterior"}
    for method, kind in kinds.items():
        post = na.fit(traces[0], method, key=1)
        assert post.kind == kind and isinstance(post, Posterior)
        assert str(post.summary(key=0)).startswith(kind)
        post.save(tmp_path / f"{method}.nc", key=2)
        loaded = na.load_posterior(tmp_path / f"{method}.nc")
        assert loaded.kind == kind and type(loaded.diagnostics) is type(post.diagnostics)
    assert "noise-aware" not in str(na.naive_posterior(traces[0]).summary(key=0))


def test_a_failed_fit_raises_in_fit_and_is_none_with_skip(traces):
    short = na.Trace.from_arrays(
        traces[0].params[:40], traces[0].grads[:40], noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=100
    )
    with pytest.raises(ValueError) as info:
        na.fit(short, "exact", key=0)
    mentions(info, "50")


@pytest.fixture(scope="module")
def simulations():
    """Eight small M1 simulations (one DPVI program), scored by several tests with `evaluate`."""
    from noiseaware.evaluation import simulate_traces

    sigma = na.noise_multiplier(1.0, 1e-5, 0.1, 1000)
    settings = M1.dpvi_settings | {"steps": 1000}
    return simulate_traces(M1, noise_multiplier=sigma, delta=1e-5, simulations=8, key=4, epsilon=1.0, **settings)


def test_plugin_is_scored_like_the_builtin_it_copies(simulations):
    copy = na.per_trace("naive-copy", lambda trace, key, options: na.naive_posterior(trace))
    result = na.evaluation.evaluate(simulations, ("naive", copy), references=2, samples=300, key=4)
    assert result.curves["research"]["naive"].shape == (2, 21)
    assert result.failures == {"naive": 0, "naive-copy": 0}
    # the same posteriors; only the θ draws differ (each method has its own key stream)
    assert result.rmse["naive"][0] == pytest.approx(result.rmse["naive-copy"][0], abs=0.15)
    # and a method's numbers do not depend on which other methods run beside it
    alone = na.evaluation.evaluate(simulations, (copy,), references=2, samples=300, key=4)
    np.testing.assert_array_equal(alone.curves["research"]["naive-copy"], result.curves["research"]["naive-copy"])


def test_a_method_that_fails_is_counted_not_fatal(simulations):
    @dataclasses.dataclass(frozen=True)
    class Never:
        pass

    def broken(trace, key, options):
        raise na.FitFailure("no finite optimum", "no")

    method = na.per_trace("broken", broken, options=Never)
    result = na.evaluation.evaluate(simulations, (method,), references=2, samples=100, key=0)
    assert result.failures == {"broken": 8}


def test_a_fit_over_its_delay_shows_a_line_counting_its_seconds(traces, capfd, monkeypatch):
    """Work with no steps to count (compiling and solving) is never silent for long: past the delay a line on
    stderr counts its seconds; progress=False shows nothing; an explicit progress is also the route's own option."""
    import importlib
    import time

    from noiseaware.util import progress

    fit_module = importlib.import_module("noiseaware.methods.fit")

    with progress.busy("fit exact", True, delay=0.2):
        time.sleep(1.5)
    assert "fit exact: 00:01 elapsed" in capfd.readouterr().err
    with progress.busy("fit exact", False, delay=0.0):
        time.sleep(0.3)
    assert capfd.readouterr().err == ""
    slow, seen = fit_module.fit_each, []

    def slow_fit_each(method, batch, keys, opts, **kwargs):
        seen.append(opts.progress)
        time.sleep(1.5)
        return slow(method, batch, keys, opts, **kwargs)

    monkeypatch.setattr(fit_module, "fit_each", slow_fit_each)
    monkeypatch.setattr(fit_module, "busy", lambda what, shown: progress.busy(what, shown, delay=0.2))
    post = na.fit(traces[0], "exact", key=0, checks="off")
    assert "fit exact: 00:01 elapsed" in capfd.readouterr().err
    na.fit(traces[0], "exact", key=0, checks="off", progress=False)
    assert "elapsed" not in capfd.readouterr().err
    assert post.kind == "noise-aware posterior"
    na.fit(traces[0], "exact", key=0, checks="off", progress=True)
    assert seen == [False, False, True]  # the route's own bar: its default, then as given
