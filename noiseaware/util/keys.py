"""PRNG keys: every `key` argument of noiseaware takes a jax PRNG key or an int seed."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def as_key(key) -> jax.Array:
    """A typed jax PRNG key from an int seed, a typed key, or a raw uint32 (2,) key."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        seed = int(key)
        if not 0 <= seed < 2**63:
            raise ValueError(f"an int seed must lie in [0, 2**63), got {key}")
        # The seed's high and low 32 bits, as jax.random.key makes them with 64-bit JAX; without it
        # jax.random.key keeps only the low 32 bits, which would leave a random 63-bit seed guessable.
        words = np.array([seed >> 32, seed & 0xFFFF_FFFF], np.uint32)
        return jax.random.wrap_key_data(words, impl="threefry2x32")
    if not isinstance(key, (jax.Array, np.ndarray)):
        raise TypeError(
            f"key must be an int seed or a jax PRNG key, got {type(key).__name__}"
            + (": randomness reaches the result, so a key is required" if key is None else "")
        )
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    if key.dtype == jnp.uint32 and key.shape[-1:] == (2,):
        return jax.random.wrap_key_data(key)
    raise TypeError(f"key must be an int seed or a jax PRNG key, got {type(key).__name__} {getattr(key, 'dtype', '')}")


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


def key_repr(key) -> int | list:
    """A key as a results file records it: the int seed, or the key's raw uint32 words."""
    return key if isinstance(key, int) else np.asarray(jax.random.key_data(as_key(key))).tolist()
