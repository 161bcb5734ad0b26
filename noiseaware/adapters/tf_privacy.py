"""TF Privacy: a trace from the arrays of a `DPKerasSGDOptimizer` run, clipped per microbatch.

TF Privacy splits each batch of B examples into B/b microbatches of b, clips each microbatch's mean gradient to C,
adds N(0, σ²C²) to their sum and divides by the number of microbatches: G̃_t = (Σ_j clip_C(ḡ_j) + ξ_t) / (B/b).
In per-example-sum units G_t = b·(B/b)·G̃_t, whose noise sd is σ·b·C (`Convention.clip_factor`): convention
"microbatches" with microbatch_size b and batch_sizes B. Batches are fixed-size (replace-one neighbours).
TensorFlow is not a dependency: the arithmetic is tested against a reimplementation of the optimizer's.
"""

from __future__ import annotations

from ..trace import Convention, Trace

__all__ = ["from_tf_privacy"]


def from_tf_privacy(
    params,
    grads,
    *,
    noise_multiplier: float,
    l2_norm_clip: float,
    batch_size: int,
    num_microbatches: int,
    n_examples: int,
    **fields,
) -> Trace:
    """params, grads (T, P) as released; batch_size B and num_microbatches (B/b) as given to the optimizer."""
    if batch_size % num_microbatches:
        raise ValueError(f"batch_size {batch_size} is not a multiple of num_microbatches {num_microbatches}")
    convention = Convention(
        normaliser="microbatches",
        clipping="microbatch",
        microbatch_size=batch_size // num_microbatches,
        neighbouring="replace",
        sampling="fixed",
        producer="tensorflow-privacy",
    )
    return Trace.from_arrays(
        params,
        grads,
        noise_multiplier=noise_multiplier,
        clip=l2_norm_clip,
        sampling_rate=batch_size / n_examples,
        n_examples=n_examples,
        convention=convention,
        batch_sizes=batch_size,
        **fields,
    )
