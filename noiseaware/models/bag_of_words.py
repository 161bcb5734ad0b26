"""A Bayesian logistic regression on a bag-of-words design: the showcase at scale (docs/windowed.md).

Document i holds k words w_i1 … w_ik drawn from a vocabulary of d words with Zipf-like frequencies p_j ∝ j^(−a);
θ ~ N(0, I_d); y_i ~ Bernoulli(sigmoid(η_i)), η_i = Σ_j θ[w_ij]·x_ij with x_ij = 1/√k (a word drawn twice counts
twice), so η's prior sd is 1 whatever k. The head of the vocabulary is seen in most documents, its tail in one or
none: the model's own prior is what an honest posterior of a tail word falls back on. Recorded with sparse
per-example clipping (`noiseaware.recording.sparse`), a step costs O(B·k + P) rather than O(B·P).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from ..recording.sparse import SparseFeatures
from .benchmark import BenchmarkModel, from_numpyro

__all__ = ["SPARSE", "bag_of_words", "bag_of_words_logistic", "word_frequencies", "zipf_design"]

SPARSE = SparseFeatures(indices="words", values="x", response="y", likelihood="bernoulli-logit")
"""How the model's data declare their sparsity to the recorder."""


def bag_of_words_logistic(words, x, y=None, n_features: int = 1):
    """θ ~ N(0, I_d), d = n_features; y_i ~ Bernoulli(logit η_i), η_i = Σ_j θ[words_ij]·x_ij. words (N, k) int, x
    (N, k), y (N,)."""
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([n_features]).to_event(1))
    eta = jnp.sum(theta[words] * x, axis=-1)
    with numpyro.plate("data", words.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=eta), obs=y)


def word_frequencies(d: int, exponent: float) -> jax.Array:
    """p_j ∝ (j + 1)^(−exponent), j = 0..d−1: the vocabulary's word frequencies, (d,)."""
    weights = jnp.arange(1, d + 1, dtype=jnp.float32) ** -exponent
    return weights / jnp.sum(weights)


def zipf_design(key, n: int, *, d: int, k: int, exponent: float) -> dict:
    """n documents of k words from a vocabulary of d with `word_frequencies`, drawn by inverting the cumulative
    frequencies (O(n·k·log d), never an n × d array): {"words": (n, k) int32, "x": (n, k) = 1/√k}."""
    cumulative = jnp.cumsum(word_frequencies(d, exponent))
    words = jnp.searchsorted(cumulative, jax.random.uniform(key, (n, k)) * cumulative[-1])
    return {"words": jnp.minimum(words, d - 1).astype(jnp.int32), "x": jnp.full((n, k), 1 / math.sqrt(k))}


def bag_of_words(d: int, n_examples: int, *, k: int = 8, exponent: float = 0.8, **dpvi_settings) -> BenchmarkModel:
    """The showcase model at vocabulary size d and N = n_examples, recorded with sparse clipping; `dpvi_settings`
    (steps, sampling_rate, clip, learning_rate, …) go to `record_dpvi`."""
    model = functools.partial(bag_of_words_logistic, n_features=d)
    design = functools.partial(zipf_design, d=d, k=k, exponent=exponent)
    return from_numpyro(
        model,
        n_examples=n_examples,
        covariates=design,
        name=f"bag-of-words-{d}",
        description=f"logistic regression on {k} words a document from a Zipf({exponent}) vocabulary of {d}",
        sparse=SPARSE,
        **dpvi_settings,
    )
