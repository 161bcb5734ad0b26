"""jax-privacy: record a run of its i.i.d. Gaussian privatizer as a trace; refuse correlated noise before any work.

jax-privacy's `clipping.clipped_grad(..., l2_clip_norm=C, normalize_by=n)` returns Σ_i clip_C(g_i) / n, and its
privatizer adds noise of sd `stddev`: G̃_t = Σ clip / n + stddev·z_t. In sum units n·G̃_t = Σ clip + n·stddev·z_t,
so σ = n·stddev / C and the convention is "realised-batch" with B_t = n (normalize_by, usually the batch size;
1 for the plain sum). Its flagship examples use BandMF: noise correlated across steps through a noising matrix,
which the gradient model (independent noise per step) cannot describe. `check_noising_matrix` accepts only the
identity, as a dense array or a streaming matrix (probed on a few steps), and refuses anything else with the
reason, before a privatizer is built.

    privatizer = recording_privatizer(stddev=sigma * clip / n, prng_key=key, steps=T, normalize_by=n)
    opt = optax.chain(privatizer, optax.sgd(learning_rate))
    ... grads = clipped_grad(loss, l2_clip_norm=clip, normalize_by=n)(params, batch)
    ... updates, state = opt.update(grads, state, params) ...
    trace = trace_of(state, clip=clip, stddev=sigma * clip / n, normalize_by=n, sampling_rate=q, n_examples=N)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..trace import Convention, Trace
from ..util.checks import positive_float
from .recorder import producer, recorded_trace, recording

__all__ = ["CorrelatedNoiseError", "check_noising_matrix", "recording_privatizer", "trace_of"]

PROBE_STEPS = 8
"""Steps a streaming noising matrix is probed on."""


class CorrelatedNoiseError(ValueError):
    """The run adds noise correlated across steps: its trace cannot be fitted."""


REFUSAL = (
    "this run adds noise correlated across steps (a noising matrix other than the identity: BandMF or another matrix "
    "factorisation), and noiseaware's gradient model assumes independent noise at every step, so its intervals "
    "would be wrong; record the run with jax-privacy's gaussian_privatizer (i.i.d. noise) instead"
)


def check_noising_matrix(noising_matrix) -> None:
    """Nothing when `noising_matrix` is None or the identity (a square array, or a jax-privacy StreamingMatrix that
    returns its inputs unchanged over PROBE_STEPS steps); a CorrelatedNoiseError otherwise."""
    if noising_matrix is None:
        return
    if hasattr(noising_matrix, "multiply_next"):
        probe = jax.random.normal(jax.random.key(0), (PROBE_STEPS, 3))
        state = noising_matrix.init_multiply(probe[0])
        for value in probe:
            out, state = noising_matrix.multiply_next(value, state)
            if not np.allclose(np.asarray(out), np.asarray(value)):
                raise CorrelatedNoiseError(REFUSAL)
        return
    matrix = np.asarray(noising_matrix)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"a noising matrix is square; got shape {matrix.shape}")
    if not np.array_equal(matrix, np.eye(matrix.shape[0])):
        raise CorrelatedNoiseError(REFUSAL)


def recording_privatizer(
    *, stddev: float, prng_key, steps: int, normalize_by: float = 1.0, noising_matrix=None
) -> optax.GradientTransformation:
    """jax-privacy's `gaussian_privatizer(stddev=stddev, prng_key=prng_key)` recording up to `steps` updates (its
    outputs unchanged). noising_matrix: refused unless the identity (`check_noising_matrix`), before anything is
    built. normalize_by: the n given to `clipped_grad`, recorded as each step's divisor."""
    check_noising_matrix(noising_matrix)
    _check_noise(stddev, normalize_by)
    from jax_privacy import noise_addition  # an optional dependency: the error names it

    inner = noise_addition.gaussian_privatizer(stddev=stddev, prng_key=prng_key)
    return recording(inner, steps=steps, divisor=lambda updates: jnp.asarray(normalize_by))


def trace_of(
    opt_state,
    *,
    clip: float,
    stddev: float,
    normalize_by: float,
    sampling_rate: float,
    n_examples: int,
    sampling: str = "poisson",
    neighbouring: str = "add-remove",
    final_params=None,
    grad_scale=None,
    scales=None,
    **fields,
) -> Trace:
    """The trace of the run recorded in `opt_state`: σ = normalize_by·stddev/C, convention "realised-batch" with
    B_t = normalize_by (module doc; a normalize_by that is not a whole number, such as an expected batch size q·N,
    is recorded as the constant divisor it is: "expected-batch" with batch_divisor n); grad_scale: as in
    `adapters.optax.trace_of`; scales s_t (T, P): the scale `scale_then_privatize` (jax-privacy ≥ 2.2) applied to
    the per-example gradients before clipping at each step, 1 / (√v_(t−1) + eps) from the adaptive optimizer's
    state, when the recorded privatizer saw the scaled gradients (the trace holds G_t ⊘ s_t and s_t per step; the
    gradient model refuses a scale that varies); fields: any other `Trace.from_arrays` keyword."""
    _check_noise(stddev, normalize_by)
    positive_float("clip", clip, hint="the l2_clip_norm given to clipped_grad")
    version = producer("jax-privacy")
    if float(normalize_by).is_integer():
        convention = Convention(
            normaliser="realised-batch", neighbouring=neighbouring, sampling=sampling, producer=version
        )
    else:
        convention = Convention(
            normaliser="expected-batch",
            batch_divisor=float(normalize_by),
            neighbouring=neighbouring,
            sampling=sampling,
            producer=version,
        )
    return recorded_trace(
        opt_state,
        convention=convention,
        noise_multiplier=normalize_by * stddev / clip,
        clip=clip,
        sampling_rate=sampling_rate,
        n_examples=n_examples,
        final_params=final_params,
        grad_scale=grad_scale,
        step_scales=scales,
        **fields,
    )


def _check_noise(stddev, normalize_by) -> None:
    """stddev ≥ 0 and normalize_by > 0, finite, in jax-privacy's words."""
    positive_float("stddev", stddev, allow_zero=True, hint="the gaussian_privatizer's noise sd (0 for no noise)")
    positive_float("normalize_by", normalize_by, hint="the n clipped_grad divided the clipped sum by (1 for the sum)")
