"""PRNG keys: every `key` argument of noiseaware takes a jax PRNG key or a non-negative integer seed below 2**63."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

KEY_REQUIREMENT = "key must be a jax.random key or a non-negative integer seed"


def as_key(key) -> jax.Array:
    """A typed jax PRNG key from an int seed in [0, 2**63), a typed key, or a raw uint32 (…, 2) key.

    A seed is a Python or numpy integer or a 0-d integer array (never a bool). Anything else — None, a
    string, a float, a negative or too large seed — is one clear error naming the value: TypeError for
    the wrong kind of value, ValueError for a seed out of range.
    """
    if _is_seed(key):
        seed = int(key)
        if not 0 <= seed < 2**63:
            raise ValueError(f"{KEY_REQUIREMENT} below 2**63, got {seed}")
        # The seed's high and low 32 bits, as jax.random.key makes them with 64-bit JAX; without it
        # jax.random.key keeps only the low 32 bits, which would leave a random 63-bit seed guessable.
        words = np.array([seed >> 32, seed & 0xFFFF_FFFF], np.uint32)
        return jax.random.wrap_key_data(words, impl="threefry2x32")
    if isinstance(key, (jax.Array, np.ndarray)):
        if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            return jnp.asarray(key)
        if key.dtype == np.uint32 and key.shape[-1:] == (2,):
            return jax.random.wrap_key_data(jnp.asarray(key))
    required = ": randomness reaches the result, so a key is required" if key is None else ""
    raise TypeError(f"{KEY_REQUIREMENT}, got {_shown(key)}{required}")


def _is_seed(key) -> bool:
    """Whether `key` is one integer: a Python or numpy integer, or a 0-d integer numpy or jax array (not a bool)."""
    if isinstance(key, (bool, np.bool_)):
        return False
    if isinstance(key, (int, np.integer)):
        return True
    return isinstance(key, (jax.Array, np.ndarray)) and key.ndim == 0 and jnp.issubdtype(key.dtype, jnp.integer)


def _shown(key) -> str:
    """`key` as an error message shows it: an array by its dtype and shape, anything else by its repr."""
    if isinstance(key, (jax.Array, np.ndarray)):
        return f"an array of dtype {key.dtype} and shape {key.shape}"
    text = repr(key)
    return text if len(text) <= 60 else f"a {type(key).__name__}"


def as_keys(keys) -> jax.Array:
    """(M,) typed PRNG keys from M int seeds, a typed key array of shape (M,), or raw keys (M, 2)."""
    if isinstance(keys, (list, tuple)) or (
        isinstance(keys, np.ndarray) and np.issubdtype(keys.dtype, np.integer) and keys.ndim == 1
    ):
        return jnp.stack([as_key(k) for k in keys])
    keys = as_key(keys)
    if keys.ndim != 1:
        raise ValueError(f"expected a 1-D array of PRNG keys, got shape {keys.shape}")
    return keys


def standard_normal(key, shape) -> np.ndarray:
    """N(0, 1) draws of `shape` in float64 whatever the global x64 setting, so a key gives the same numbers
    everywhere."""
    with jax.enable_x64(True):
        return np.asarray(jax.random.normal(as_key(key), shape, jnp.float64))


def key_words(key) -> np.ndarray:
    """A key's raw uint32 words (2,): what a study stores and fingerprints (`as_key` takes them back)."""
    return np.asarray(jax.random.key_data(as_key(key)), np.uint32)


def key_repr(key) -> int | list:
    """A key as a results file records it: the int seed, or the key's raw uint32 words."""
    return key if isinstance(key, int) else np.asarray(jax.random.key_data(as_key(key))).tolist()


def key_text(recorded: int | list) -> str:
    """A recorded key (`key_repr`) as a table heading shows it: "seed 3" for an int seed or for the raw words
    [0, 3] that jax.random.key(3) has, "key [a, b]" otherwise."""
    if isinstance(recorded, int):
        return f"seed {recorded}"
    if len(recorded) == 2 and recorded[0] == 0:
        return f"seed {recorded[1]}"
    return f"key {list(recorded)}"
