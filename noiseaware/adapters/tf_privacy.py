"""TF Privacy: a trace from the arrays of a `DPKerasSGDOptimizer` run, clipped per microbatch.

TF Privacy splits each batch of B examples into B/b microbatches of b, clips each microbatch's mean gradient to C,
adds N(0, σ²C²) to their sum and divides by the number of microbatches: G̃_t = (Σ_j clip_C(ḡ_j) + ξ_t) / (B/b).
In per-example-sum units G_t = b·(B/b)·G̃_t, whose noise sd is σ·b·C (`Convention.clip_factor`): convention
"microbatches" with microbatch_size b and batch_sizes B. Batches are fixed-size (replace-one neighbours).
TensorFlow is not a dependency: the arithmetic is tested against a reimplementation of the optimizer's.
"""

from __future__ import annotations

from ..trace import Convention, Trace
from ..util.checks import positive_float, positive_int

__all__ = ["from_tf_privacy"]


def from_tf_privacy(
    params,
    grads,
    *,
    noise_multiplier: float,
    l2_norm_clip: float,
    batch_size: int,
    num_microbatches: int | None,
    n_examples: int,
    **fields,
) -> Trace:
    """params, grads (T, P) as released; batch_size B and num_microbatches (B/b) as given to the optimizer (None, TF
    Privacy's default: one microbatch per example); n_examples N ≥ B, the size of the training set."""
    batch_size = positive_int("batch_size", batch_size, hint="the examples per batch fed to the optimizer")
    if num_microbatches is None:
        num_microbatches = batch_size
    num_microbatches = positive_int(
        "num_microbatches", num_microbatches, hint="as given to the optimizer (None: one per example)"
    )
    if batch_size % num_microbatches:
        raise ValueError(
            f"batch_size {batch_size} is not a multiple of num_microbatches {num_microbatches}: TF Privacy splits "
            "each batch into num_microbatches equal microbatches"
        )
    positive_float("l2_norm_clip", l2_norm_clip, hint="the clip norm C of each microbatch's mean gradient")
    positive_float("noise_multiplier", noise_multiplier, allow_zero=True, hint="σ: the noise sd over l2_norm_clip")
    n_examples = positive_int("n_examples", n_examples, hint="the size of the training set")
    if batch_size > n_examples:
        raise ValueError(
            f"batch_size {batch_size} exceeds n_examples {n_examples}: n_examples is the size of the training set"
        )
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
