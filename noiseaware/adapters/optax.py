"""optax: record a run of `optax.contrib.differentially_private_aggregate` as a trace, or keep it as a windowed trace.

optax's aggregate releases G̃_t = (Σ_i clip_C(g_i) + C·σ·z_t) / B_t, B_t the leading dimension of the per-example
gradients it is given (the batch as fed, padding rows included): convention "realised-batch" with batch_sizes B_t.
Chain `recording_aggregate` first, as optax requires of the aggregate:

    opt = optax.chain(recording_aggregate(clip, sigma, key, steps=T), optax.sgd(learning_rate))
    ... updates, state = opt.update(per_example_grads, state, params) ...
    trace = trace_of(state, clip=clip, noise_multiplier=sigma, sampling_rate=B / N, n_examples=N)

`windowing_aggregate(clip, sigma, key, steps=T)` and `windowed_of_aggregate(state, …)` keep the run as a
`WindowedTrace` (window sums and a sample of rows, O(P) memory) instead.

The batch sizes are public only when batches have a fixed (or padded) size: pass sampling="fixed" for shuffled
fixed-size batches, or sampling="poisson" for Poisson samples padded to one size (a varying B_t under Poisson
sampling is refused: it is not DP-released).

`recording_aggregate(..., count_noise_multiplier=σ_b)` also releases, each step, the number of examples the
aggregate clipped plus N(0, σ_b²) noise, for the clipping check; split one ε between the two with
`na.privacy.split_noise_multiplier` (docs/adapters.md, "Clipping made visible").
"""

from __future__ import annotations

import jax
import optax
from optax.contrib import differentially_private_aggregate

from ..trace import Convention, Trace
from ..trace.families import MEAN_FIELD
from ..trace.windowed import ROWS, WINDOWS, WindowedTrace
from ..util.checks import positive_float
from ..util.deprecation import deprecated_names
from .recorder import clipped_count_query, recorded_trace, recording
from .windowing import windowed_of, windowing

__all__ = ["recording_aggregate", "windowing_aggregate", "windowed_of_aggregate", "trace_of"]


def recording_aggregate(
    l2_norm_clip: float, noise_multiplier: float, key, *, steps: int, count_noise_multiplier: float | None = None
) -> optax.GradientTransformation:
    """optax's `differentially_private_aggregate(l2_norm_clip, noise_multiplier, key)`, recording up to `steps`
    updates: its outputs are unchanged, bit for bit. count_noise_multiplier σ_b: also release each step the number of
    examples clipped (global norm over the gradient's leaves above C) plus N(0, σ_b²), its noise from `key` on a
    stream of its own (`recorder.clipped_count_query`); the trace keeps them, and its ε must account the pair
    (`na.privacy.combined_noise_multiplier`)."""
    inner = _aggregate(l2_norm_clip, noise_multiplier, key)
    count = _clipped_count(l2_norm_clip, noise_multiplier, key, count_noise_multiplier)
    return recording(inner, steps=steps, divisor=_batch_size, clipped_count=count)


def _clipped_count(clip: float, noise_multiplier: float, key, count_noise_multiplier) -> tuple | None:
    """(count, σ_b) of the released clipped count (`recorder.clipped_count_query`), or None without one."""
    if count_noise_multiplier is None:
        return None
    sigma = positive_float(
        "count_noise_multiplier",
        count_noise_multiplier,
        allow_zero=noise_multiplier == 0,
        hint="the noise sd σ_b of the clipped count (e.g. from na.privacy.split_noise_multiplier)",
    )
    return clipped_count_query(clip, sigma, key), sigma


def windowing_aggregate(
    l2_norm_clip: float,
    noise_multiplier: float,
    key,
    *,
    steps: int,
    family: str = MEAN_FIELD,
    windows: int = WINDOWS,
    rows: int = ROWS,
    grad_scale=None,
    count_noise_multiplier: float | None = None,
) -> optax.GradientTransformation:
    """optax's `differentially_private_aggregate(l2_norm_clip, noise_multiplier, key)`, its `steps` updates kept as
    a windowed trace (`windowing.windowing`: `windows` window sums, `rows` sample rows; grad_scale s: the run optimised
    φ' = φ ⊘ s) instead of a trace; its outputs are unchanged, bit for bit. count_noise_multiplier σ_b: release the
    clipped counts too, as `recording_aggregate` does, kept as window sums."""
    inner = _aggregate(l2_norm_clip, noise_multiplier, key)
    count = _clipped_count(l2_norm_clip, noise_multiplier, key, count_noise_multiplier)
    return windowing(
        inner,
        steps=steps,
        divisor=_batch_size,
        family=family,
        windows=windows,
        rows=rows,
        grad_scale=grad_scale,
        clipped_count=count,
    )


def _aggregate(l2_norm_clip: float, noise_multiplier: float, key) -> optax.GradientTransformation:
    positive_float("l2_norm_clip", l2_norm_clip, hint="the clip norm C of each per-example gradient")
    positive_float("noise_multiplier", noise_multiplier, allow_zero=True, hint="σ: the noise sd over l2_norm_clip")
    return differentially_private_aggregate(l2_norm_clip, noise_multiplier, key)


def _batch_size(updates):
    """B_t, the per-example gradients' leading dimension: what optax's aggregate divides by."""
    return jax.tree.leaves(updates)[0].shape[0]


def _convention(sampling: str, neighbouring: str) -> Convention:
    return Convention(
        normaliser="realised-batch", neighbouring=neighbouring, sampling=sampling, producer=f"optax {optax.__version__}"
    )


def trace_of(
    opt_state,
    *,
    clip: float,
    noise_multiplier: float,
    sampling_rate: float,
    n_examples: int,
    sampling: str = "fixed",
    neighbouring: str = "replace",
    final_params=None,
    grad_scale=None,
    **fields,
) -> Trace:
    """The trace of the run recorded in `opt_state` (a chain's state holding one `recording_aggregate`).

    sampling_rate q = B/N for fixed-size batches; neighbouring: the relation of the run's guarantee ("replace" for
    fixed-size batches, "add-remove" for Poisson); final_params: φ_T as a pytree (or flat); grad_scale s (P,) or a
    scalar: the run optimised φ' = φ ⊘ s (a preconditioned parameterisation, `recorder.unscaled`); fields: any other
    `Trace.from_arrays` keyword (learning_rate, epsilon, delta, variational_family, sites, labels …).
    """
    return recorded_trace(
        opt_state,
        convention=_convention(sampling, neighbouring),
        noise_multiplier=noise_multiplier,
        clip=clip,
        sampling_rate=sampling_rate,
        n_examples=n_examples,
        final_params=final_params,
        grad_scale=grad_scale,
        **fields,
    )


def windowed_of_aggregate(opt_state, **settings) -> WindowedTrace:
    """The windowed trace of the run kept in `opt_state` (a chain's state holding one `windowing_aggregate`). settings:
    `trace_of`'s keywords (clip, noise_multiplier, sampling_rate, n_examples, sampling, neighbouring, final_params
    and the other `Trace.from_arrays` fields); grad_scale was the windowing transformation's."""
    sampling, neighbouring = settings.pop("sampling", "fixed"), settings.pop("neighbouring", "replace")
    return windowed_of(opt_state, convention=_convention(sampling, neighbouring), **settings)


__getattr__ = deprecated_names(
    __name__,
    {
        "summarizing_aggregate": ("windowing_aggregate", windowing_aggregate),
        "summary_of_aggregate": ("windowed_of_aggregate", windowed_of_aggregate),
    },
)
