"""The method contract, checked over every registered trace method as one table (docs/methods.md): the batch-key
convention, a batch of one, the options' round trip, a posterior that keeps its kind, notes and checks, and a
failure that is a value."""

import dataclasses

import jax
import numpy as np
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.methods.base import Batch, fit_problems, split_keys
from noiseaware.posteriors.base import Posterior
from noiseaware.util.errors import FROZEN, FitFailure

M1 = na.models.get("gamma-exponential", preset="research")
SMALL = {
    "exact": {"draws": 200},
    "laplace": {"draws": 200},
    "nuts": {"draws": 100, "warmup": 100, "backend": "numpyro"},
    "sandwich": {"draws": 200},
    "naive": {},
    "dpvim": {"draws": 200},
    "random-scaling": {"draws": 200},
    "bootstrap": {"replicates": 20},
}
"""Each trace method's options at sizes that take seconds; the table must name every registered trace method."""
NEEDS_MOVEMENT = {"exact", "laplace", "nuts", "sandwich"}
"""The methods that fit the gradients' response to the iterates: a trace whose iterates never moved fails them."""
TRACE_METHODS = na.DEFAULT_REGISTRY.names("trace")
HEAVY = {"nuts", "bootstrap"}
"""Methods whose fits take seconds each (NUTS chains, the bootstrap's DP-SGD re-runs): make test-fast skips them."""
CASES = [pytest.param(name, marks=pytest.mark.slow) if name in HEAVY else name for name in TRACE_METHODS]


def test_the_table_names_every_registered_trace_method():
    assert set(SMALL) == set(TRACE_METHODS)


@pytest.fixture(scope="module")
def recorded():
    """Two DPVI traces of M1, and two plain DP-SGD traces (family "point") of the same data."""
    _, data = jax.vmap(M1.simulate)(jax.random.split(jax.random.key(0), 2))
    keys = jax.random.split(jax.random.key(1), 2)
    settings = M1.dpvi_settings | {"steps": 600}
    point = {"steps": 600, "sampling_rate": 0.1, "clip": 2.0, "learning_rate": 1e-3, "family": "point"}
    point["transforms"] = M1.dpvi_settings["transforms"]
    return {
        None: na.record_dpvi_batch(M1.model, data, keys=keys, epsilon=1.0, **settings),
        ("point",): na.record_dpvi_batch(M1.model, data, keys=keys, epsilon=1.0, mc_draws=1, **point),
    }


@pytest.fixture
def traces(recorded, name):
    """The traces of the family the method fits."""
    return recorded[na.DEFAULT_REGISTRY[name].families]


def draws_of(post) -> np.ndarray:
    """What a posterior's draws depend on: φ* draws for a mixture, θ draws for a posterior known by its draws."""
    return np.asarray(post.optimum_chains if hasattr(post, "optimum_chains") else post.chains)


@pytest.mark.parametrize("name", CASES)
def test_a_batch_is_its_traces_fitted_one_by_one_with_the_split_keys(traces, name):
    """fit_batch(traces, key=k)[m] is fit(traces[m], key=split(k, M)[m]); a batch of one is fit with k itself; the
    posterior is a Posterior that says its kind and keeps its trace checks."""
    options = SMALL[name]
    keys = jax.random.split(jax.random.key(7), len(traces))
    batch = na.fit_batch(traces, name, key=7, model=M1, **options)
    singles = [na.fit(trace, name, key=key, model=M1, **options) for trace, key in zip(traces, keys)]
    for post, single in zip(batch, singles):
        np.testing.assert_allclose(draws_of(post), draws_of(single), rtol=1e-9, atol=1e-12)
        assert isinstance(post, Posterior) and post.method == name and post.describe().startswith(post.kind + ": ")
    alone = na.fit_batch(traces[1:], name, key=keys[1], model=M1, **options)[0]  # a batch of one: the key itself
    np.testing.assert_allclose(draws_of(alone), draws_of(singles[1]), rtol=1e-9, atol=1e-12)
    assert getattr(batch[0], "checks", True) is not None  # the trace checks' report travels with a mixture
    if name != "naive":  # the last iterate draws nothing
        assert not np.array_equal(draws_of(batch[0]), draws_of(batch[1]))


@pytest.mark.parametrize("name", TRACE_METHODS)
def test_options_round_trip_and_unknown_ones_are_refused(name):
    method = na.DEFAULT_REGISTRY[name]
    default = method.make_options()
    assert method.make_options(dataclasses.asdict(default)) == default == method.make_options(default)
    assert method.make_options(**SMALL[name]) == dataclasses.replace(default, **SMALL[name])
    with pytest.raises(ValueError) as info:
        method.make_options(colour="red")
    mentions(info, f"'{name}'", "'colour'")


@pytest.mark.parametrize("name", CASES)
def test_a_failure_is_a_value_in_its_place(traces, name):
    """A trace whose iterates never moved cannot be fitted by the gradient model's routes: that problem's outcome
    is its FitFailure, in its place, and its neighbour is fitted; the baselines, which read the iterates alone,
    fit it (the last iterate, a tail without spread)."""
    frozen = dataclasses.replace(traces[1], params=np.broadcast_to(traces[1].params[:1], traces[1].params.shape))
    method = na.DEFAULT_REGISTRY[name]
    options = method.make_options(**SMALL[name])
    outcomes = fit_problems(method, Batch((traces[0], frozen), model=M1), split_keys(3, 2), options)
    assert len(outcomes) == 2 and isinstance(outcomes[0], Posterior)
    if name in NEEDS_MOVEMENT:
        assert isinstance(outcomes[1], FitFailure) and outcomes[1].reason == FROZEN
    else:
        assert isinstance(outcomes[1], Posterior)
