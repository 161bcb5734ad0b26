"""`na.DPVISettings` and `na.Optimizer`: settings as data (defaults written once, validated in one place, a JSON
round trip, fingerprints that see every value) and record_dpvi's keyword sugar over them."""

import dataclasses
import inspect
import json

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.recording.config import setting_names
from noiseaware.recording.dpvi import _run, build_recorder, record_dpvi_batch
from noiseaware.util.fingerprint import canonical, fingerprint

REQUIRED = dict(steps=12, sampling_rate=0.5, clip=1.0)
TINY = dict(REQUIRED, mc_draws=2, batch_size=16)


def normal_model(x=None, n_examples=None):
    theta = numpyro.sample("theta", dist.Normal(0.0, 3.0))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(theta, 1.0), obs=x)


DATA = {"x": np.asarray(np.random.default_rng(0).normal(1.0, 1.0, 20), np.float32)}


def _record(**kwargs):
    with pytest.warns(na.recording.settings.SettingsHint):
        return na.record_dpvi(normal_model, DATA, key=3, noise_multiplier=1.0, **kwargs)


def test_the_defaults_are_the_settings_class_fields_and_nowhere_else():
    settings = na.DPVISettings(**REQUIRED)
    defaults = {f.name: f.default for f in dataclasses.fields(na.DPVISettings) if f.name not in REQUIRED}
    assert {name: settings[name] for name in defaults} == defaults
    assert settings.init == (0.0, -4.0) and settings.mc_draws == 10 and settings.optimizer is None
    # record_dpvi and build_recorder take the settings as **overrides: none is a parameter with a default of its own
    for function in (na.record_dpvi, build_recorder, record_dpvi_batch):
        assert not set(inspect.signature(function).parameters) & set(setting_names())
    resolved = build_recorder(normal_model, DATA, noise_multiplier=1.0, **REQUIRED).settings
    assert resolved.mc_draws == 10 and resolved.init == (0.0, -4.0)


@pytest.mark.parametrize(
    "settings, tokens",
    [
        (dict(steps=10), ("DPVI", "sampling_rate", "clip")),
        (dict(REQUIRED, stepz=3), ("DPVI", "['stepz']", "steps", "sampling_rate")),
        (dict(REQUIRED, steps=0), ("steps",)),
        (dict(REQUIRED, sampling_rate=1.5), ("sampling_rate", "1")),
        (dict(REQUIRED, grad_scale=(1.0, np.inf)), ("grad_scale", "finite")),
        (dict(REQUIRED, init="zero"), ("init",)),
        (dict(REQUIRED, learning_rate=0.1, lr_multiplier=1.0), ("learning_rate", "lr_multiplier")),
        (dict(REQUIRED, optimizer=na.Optimizer("adam", 1e-2), learning_rate=0.1), ("learning_rate", "optimizer")),
        (dict(REQUIRED, optimizer=optax.adam(1e-2)), ("optimizer", "optax")),
        (dict(REQUIRED, optimizer="adam"), ("optimizer", "None", "na.Optimizer")),
        (dict(REQUIRED, family="student-t"), ("family", "'student-t'")),
        (dict(REQUIRED, labels=["a"]), ("labels", "{site:")),
        (dict(REQUIRED, dtype="int32"), ("dtype", "float32", "float64")),
        (dict(REQUIRED, sites="theta"), ("sites",)),
    ],
)
def test_bad_settings_are_refused_by_the_settings_class(settings, tokens):
    with pytest.raises(ValueError) as info:
        na.DPVISettings.create(**settings)
    mentions(info, *tokens)


def test_replace_names_unknown_fields_and_validates_again():
    settings = na.DPVISettings(**REQUIRED)
    assert settings.replace(steps=20).steps == 20 and settings.steps == 12
    with pytest.raises(ValueError) as info:
        settings.replace(clipping=2.0)
    mentions(info, "DPVI", "['clipping']")
    with pytest.raises(ValueError) as info:
        settings.replace(clip=-1.0)
    mentions(info, "clip")


def test_settings_round_trip_through_plain_json():
    settings = na.DPVISettings(
        **REQUIRED,
        grad_scale=(1.0, np.array([100.0])),
        init=np.array([0.5, -3.0]),
        optimizer=na.Optimizer("adam", 1e-3, schedule="cosine-decay", options={"b1": 0.8}),
        transforms={"theta": "identity"},
        sites=["theta"],
        labels={"theta": np.array(["mean"])},
        dtype=np.float32,
    )
    data = settings.to_data()
    text = json.dumps(data)  # plain JSON: no numpy scalars, tuples or objects left
    back = na.DPVISettings.from_data(json.loads(text))
    assert back == settings and hash(back) == hash(settings)
    assert back.grad_scale == (1.0, (100.0,)) and back.init == (0.5, -3.0) and back.dtype == "float32"
    assert canonical(back) == canonical(settings)
    with pytest.raises(ValueError) as info:
        na.DPVISettings.from_data({**data, "extra": 1})
    mentions(info, "DPVI", "['extra']")


def test_equal_values_are_equal_settings_whatever_their_container():
    as_array = na.DPVISettings(**REQUIRED, grad_scale=np.array([1.0, 2.0], np.float32), sites=("a", "b"))
    as_tuple = na.DPVISettings(**REQUIRED, grad_scale=(1.0, 2.0), sites=["a", "b"])
    assert as_array == as_tuple and fingerprint(as_array) == fingerprint(as_tuple)
    assert fingerprint(as_tuple) != fingerprint(as_tuple.replace(grad_scale=(1.0, 2.5)))


@pytest.mark.parametrize("name", na.models.names())
def test_every_builtin_preset_is_valid_settings(name):
    bm = na.models.get(name)
    settings = na.DPVISettings.create(**bm.dpvi_settings)
    assert na.DPVISettings.from_data(json.loads(json.dumps(settings.to_data()))) == settings
    for key in ("steps", "sampling_rate", "clip", "transforms"):
        assert settings[key] == bm.dpvi_settings[key]


def test_keywords_a_settings_object_and_its_unpacking_record_the_same_trace():
    by_keywords = _record(**TINY, grad_scale=(1.0, 2.0), init=(0.1, -1.0))
    settings = na.DPVISettings(**TINY, grad_scale=(1.0, 2.0), init=(0.1, -1.0))
    by_object = _record(settings=settings)
    by_unpacking = _record(**settings)
    by_override = _record(settings=settings.replace(steps=5), steps=12)
    for trace in (by_object, by_unpacking, by_override):
        np.testing.assert_array_equal(trace.params, by_keywords.params)
        np.testing.assert_array_equal(trace.grads, by_keywords.grads)
    other = _record(settings=settings.replace(clip=2.0))
    assert not np.array_equal(other.grads, by_keywords.grads)  # the comparison can fail


def test_a_batch_takes_a_settings_object_as_it_takes_keywords():
    data = {"x": np.stack([DATA["x"], DATA["x"][::-1]])}
    settings = na.DPVISettings(**TINY)
    by_keywords = record_dpvi_batch(normal_model, data, keys=[1, 2], noise_multiplier=1.0, **TINY)
    by_object = record_dpvi_batch(normal_model, data, keys=[1, 2], noise_multiplier=1.0, settings=settings)
    for a, b in zip(by_keywords, by_object):
        np.testing.assert_array_equal(a.params, b.params)
        np.testing.assert_array_equal(a.grads, b.grads)


def test_optimizers_with_other_hyper_parameters_are_other_data():
    slow, fast = na.Optimizer("adam", 1e-3), na.Optimizer("adam", 1e-1)
    assert slow.to_data() != fast.to_data() and fingerprint(slow) != fingerprint(fast)
    base = na.DPVISettings(**REQUIRED)
    assert fingerprint(base.replace(optimizer=slow)) != fingerprint(base.replace(optimizer=fast))
    assert na.Optimizer("adam", 1e-3, options={"b1": 0.9}) != na.Optimizer("adam", 1e-3, options={"b1": 0.8})
    assert na.Optimizer.from_data(slow.to_data()) == slow
    assert slow.transformation(10) is na.Optimizer("adam", 1e-3).transformation(10)  # built once, shared


def test_an_optimizer_builds_the_optax_transformation_it_names():
    steps, grads = 6, jnp.asarray(np.random.default_rng(1).normal(size=(6, 3)), jnp.float32)
    ours = na.Optimizer("adam", 0.05, schedule="cosine-decay", options={"b1": 0.8}).transformation(steps)
    theirs = optax.adam(optax.cosine_decay_schedule(0.05, steps), b1=0.8)
    params = jnp.zeros(3)
    state_ours, state_theirs = ours.init(params), theirs.init(params)
    for g in grads:
        step_ours, state_ours = ours.update(g, state_ours, params)
        step_theirs, state_theirs = theirs.update(g, state_theirs, params)
        np.testing.assert_array_equal(step_ours, step_theirs)


def test_a_recorded_optimizer_is_named_in_the_trace():
    trace = _record(**TINY, optimizer=na.Optimizer("sgd", 0.05, options={"momentum": 0.9}))
    assert trace.optimizer == "optax.sgd" and trace.learning_rate is None
    plain = _record(**TINY, learning_rate=0.05)
    assert plain.optimizer == "sgd" and plain.learning_rate is not None
    assert not np.array_equal(trace.params, plain.params)  # momentum moved it otherwise


@pytest.mark.parametrize(
    "kwargs, tokens",
    [
        (dict(name="adamm", learning_rate=1e-3), ("optimizer", "'adamm'", "sgd", "adam")),
        (dict(name="adam", learning_rate=0.0), ("learning_rate",)),
        (dict(name="adam", learning_rate=1e-3, schedule="linear"), ("schedule", "'linear'")),
        (dict(name="adam", learning_rate=1e-3, options={"beta1": 0.9}), ("optax.adam", "['beta1']")),
        (dict(name="adam", learning_rate=1e-3, options={"b1": [0.9]}), ("b1", "number", "bool", "None")),
    ],
)
def test_bad_optimizers_are_refused(kwargs, tokens):
    with pytest.raises(ValueError) as info:
        na.Optimizer(**kwargs)
    mentions(info, *tokens)


def test_settings_values_are_traced_so_a_tuner_compiles_once_per_model_and_shape():
    # σ, C, s and λ are arguments of the compiled program, not constants in it: a second run with other values
    # reuses the first run's compiled chunks (T, q, S and the family fix the shapes and do recompile)
    first = _record(**TINY)
    compiled = _run._cache_size()
    other = dict(TINY, clip=2.5, grad_scale=(2.0, 30.0), lr_multiplier=0.5)
    with pytest.warns(na.recording.settings.SettingsHint):
        second = na.record_dpvi(normal_model, DATA, key=3, noise_multiplier=4.0, **other)
    assert _run._cache_size() == compiled
    assert (second.noise_multiplier, second.clip) == (4.0, 2.5) and (first.noise_multiplier, first.clip) == (1.0, 1.0)
    assert not np.allclose(second.params[1:], first.params[1:])
    longer = dict(TINY, steps=TINY["steps"] + 40)  # the counter sees a compilation when one happens
    with pytest.warns(na.recording.settings.SettingsHint):
        na.record_dpvi(normal_model, DATA, key=3, noise_multiplier=4.0, **longer)
    assert _run._cache_size() > compiled
