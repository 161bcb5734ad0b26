"""Seeds and keys: every bit of an int seed reaches the PRNG key."""

import jax
import numpy as np
import pytest
from messages import mentions

from noiseaware.util.keys import as_key, as_keys


def test_small_seeds_give_jax_random_key():
    np.testing.assert_array_equal(jax.random.key_data(as_key(7)), jax.random.key_data(jax.random.key(7)))


def test_all_63_bits_of_a_seed_are_kept():
    data = {int(np.asarray(jax.random.key_data(as_key(s))).view(np.uint64)[0]) for s in (5, 2**32 + 5, 2**62 + 5)}
    assert len(data) == 3


@pytest.mark.parametrize("seed", [-1, 2**63, True])
def test_bad_seeds_raise(seed):
    with pytest.raises((ValueError, TypeError)):
        as_key(seed)


def test_as_keys_from_seeds_and_keys():
    keys = as_keys([1, 2, 3])
    assert keys.shape == (3,)
    assert as_keys(jax.random.split(jax.random.key(0), 4)).shape == (4,)


def test_a_missing_key_is_refused_not_defaulted():
    with pytest.raises(TypeError) as info:
        as_key(None)
    mentions(info, "key")


def test_a_recorded_key_reads_as_its_seed_where_it_is_one():
    from noiseaware.util.keys import key_repr, key_text, key_words

    assert key_text(key_repr(key_words(3))) == "seed 3" and key_text(7) == "seed 7"
    assert key_text(key_repr(jax.random.split(jax.random.key(0))[1])).startswith("key [")
