"""Batches of simulations that share compiled programs: padded chunks, the batch strategies, compile counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from messages import mentions
from toy_models import normal_mean

import noiseaware as na
from noiseaware.models.benchmark import ModelError
from noiseaware.recording.dpvi import record_dpvi_batch
from noiseaware.util.chunks import padded_chunks
from noiseaware.util.compiles import counting_compiles


def test_padded_chunks_have_one_size_and_drop_their_copies():
    chunks = padded_chunks(11, 4)
    assert [index.tolist() for index, _ in chunks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 10]]
    assert [kept for _, kept in chunks] == [4, 4, 3]
    assert padded_chunks(3, 8)[0][0].tolist() == [0, 1, 2, 2]  # fewer than a batch: the next power of two
    assert [len(index) for index, _ in padded_chunks(6, 8)] == [8] and padded_chunks(1, 50)[0][0].tolist() == [0]


def test_map_and_vmap_record_the_same_traces():
    bm = na.models.from_numpyro(normal_mean, n_examples=200)
    data = jax.vmap(bm.simulate)(jax.random.split(jax.random.key(0), 3))[1]
    keys = jax.random.split(jax.random.key(1), 3)
    settings = {"steps": 50, "sampling_rate": 0.2, "clip": 1.0, "mc_draws": 2, "noise_multiplier": 1.0}
    vmapped = record_dpvi_batch(bm.model, data, keys=keys, batch="vmap", **settings)
    mapped = record_dpvi_batch(bm.model, data, keys=keys, batch="map", **settings)
    for a, b in zip(vmapped, mapped):
        np.testing.assert_allclose(a.params, b.params, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a.grads, b.grads, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError) as info:
        record_dpvi_batch(bm.model, data, keys=keys, batch="pmap", **settings)
    mentions(info, "batch", "'pmap'")
    with pytest.raises(ModelError) as info:
        na.models.from_numpyro(normal_mean, n_examples=200, batch="loop")
    mentions(info, "batch", "'loop'")


def test_compiles_are_counted_once_per_shape():
    double = jax.jit(lambda x: 2.0 * x + 1.0)
    with counting_compiles() as first:
        double(jnp.ones(17)).block_until_ready()
    with counting_compiles() as again:
        double(jnp.ones(17)).block_until_ready()
    with counting_compiles() as other:
        double(jnp.ones(19)).block_until_ready()
    assert first.programs >= 1 and again.programs == 0 and other.programs >= 1


def test_a_builtin_keeps_its_batch_strategy_through_every_preset():
    """M1's measured strategy ("map") holds as a user writes it, at the research preset and at its tuned preset."""
    for model in (
        na.models.get("M1", preset=False),
        na.models.get("M1", preset="research"),
        na.models.get("M1", epsilon=1.0),
    ):
        assert model.batch == "map", model.preset
    assert na.models.get("M3", epsilon=1.0).batch == "vmap"
