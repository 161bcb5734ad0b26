"""The trace's field validators: each checks one field, normalises it and names the fix when it is wrong.

`validate(given)` checks every field of a trace as given to its constructor ({field name: value}) and returns the
normalised values: arrays become read-only copies, finite everywhere, of dtype float32 or float64 as given (an
array of any other dtype, such as int64 or float16, is refused; Python numbers become float64); params and grads
(T, P) share their shape, with P fitting the variational family (2d for mean-field, `families`); vectors (P,)
accept a scalar, which is broadcast; the site map must cover exactly d unconstrained coordinates.
Every failure is a TraceError.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .convention import Convention, ConventionError, check_batch_sizes
from .families import MEAN_FIELD, FamilyError, VariationalFamily, family_for
from .sites import SiteMap, SiteSpec, transform_from_name

__all__ = ["TraceError", "VARIATIONAL_FAMILIES", "validate"]

VARIATIONAL_FAMILIES = (MEAN_FIELD, "full-rank-normal-softplus", "low-rank-normal-softplus(r)", "point")
"""The families a trace may name (r: the rank, an integer ≥ 1); the first is the default."""
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""The dtypes of a trace's arrays (docs/trace-format.md); other arrays are refused, never converted."""


class TraceError(ValueError):
    """A trace (in memory or in a file) breaks the schema; the message names the field and the fix."""


def validate(given: Mapping[str, Any]) -> dict[str, Any]:
    """Every field of a trace, {field name: value as given}, checked and normalised, {field name: value};
    TraceError names the first bad one."""
    params = _float_array("params", given["params"], ndim=2)
    grads = _float_array("grads", given["grads"], ndim=2)
    _check_shapes(params, grads)
    n_params = params.shape[1]
    family = _family(given["variational_family"], n_params)
    noise_multiplier = _real("noise_multiplier", given["noise_multiplier"])
    epsilon = None if given["epsilon"] is None else _real("epsilon", given["epsilon"], allow_inf=True)
    _check_privacy(noise_multiplier, epsilon)
    sites = _sites(given["sites"], family.dim)
    grad_scale = 1.0 if given["grad_scale"] is None else given["grad_scale"]
    clip = _positive("clip", _real("clip", given["clip"]), "the clipping norm C")
    grad_scale = _positive_vector("grad_scale", grad_scale, n_params, "the preconditioning scale s")
    return dict(
        params=params,
        grads=grads,
        noise_multiplier=noise_multiplier,
        clip=clip,
        sampling_rate=_sampling_rate(given["sampling_rate"]),
        n_examples=_positive_int("n_examples", given["n_examples"], "the number of examples N"),
        grad_scale=grad_scale,
        learning_rate=_positive_vector("learning_rate", given["learning_rate"], n_params, "the step sizes λ"),
        final_params=_vector("final_params", given["final_params"], n_params),
        epsilon=epsilon,
        delta=_delta(given["delta"]),
        accountant=_string("accountant", given["accountant"]),
        mc_draws=None if given["mc_draws"] is None else _positive_int("mc_draws", given["mc_draws"], "S"),
        optimizer=_string("optimizer", given["optimizer"]),
        variational_family=family.name,
        param_names=_param_names(given["param_names"], family, sites),
        sites=sites,
        **_convention(given["convention"], given["batch_sizes"], params.shape[0]),
        step_noise_multipliers=_per_step("noise_multiplier", given["step_noise_multipliers"], noise_multiplier, params),
        step_clips=_per_step("clip", given["step_clips"], clip, params),
        step_grad_scales=_per_step("grad_scale", given["step_grad_scales"], grad_scale, params),
        **_clip_count(given["clipped_counts"], given["count_noise_multiplier"], noise_multiplier, params.shape[0]),
    )


def _clip_count(counts, count_noise, noise_multiplier: float, steps: int) -> dict[str, Any]:
    """clipped_counts (T,) c̃_t, finite, and count_noise_multiplier σ_b ≥ 0 (0 only in a non-private run), both or
    neither."""
    if counts is None and count_noise is None:
        return {"clipped_counts": None, "count_noise_multiplier": None}
    if counts is None or count_noise is None:
        given, missing = ("clipped_counts", "count_noise_multiplier")[:: 1 if counts is not None else -1]
        raise TraceError(
            f"{given} is given without {missing}: a released count of clipped examples comes with its noise sd "
            "(count_noise_multiplier σ_b, over the count's sensitivity 1); give both or neither"
        )
    sigma = _real("count_noise_multiplier", count_noise)
    if sigma < 0 or (sigma == 0) != (noise_multiplier == 0):
        raise TraceError(
            f"count_noise_multiplier is {sigma} with noise_multiplier {noise_multiplier}; the count's noise sd σ_b "
            "must be > 0 in a private run (0 only in a non-private one): give the σ_b the run used"
        )
    array = _float_array("clipped_counts", counts, ndim=np.ndim(counts))
    if array.shape != (steps,):
        raise TraceError(f"clipped_counts has shape {array.shape}; it must have shape ({steps},): one count per step")
    return {"clipped_counts": array, "count_noise_multiplier": sigma}


STEP_MEANINGS = {
    "noise_multiplier": ("the noise multiplier σ_t", (), "(T,): one per step"),
    "clip": ("the clip norm C_t", (), "(T,): one per step"),
    "grad_scale": ("the scale s_t", (1,), "(T, P): one row per step"),
}
"""Per-step settings: {trace field: (meaning, the trailing shape after T (P for grad_scale), the shape in words)}."""


def _per_step(name: str, value, constant, params: np.ndarray) -> np.ndarray | None:
    """step_<name>: None, or a read-only (T,) or (T, P) array of positive finite values that vary over the steps and
    start at the constant field's value (`constant`: the first step's); constant per-step values collapse to None."""
    if value is None:
        return None
    field = f"step_{name}s"
    meaning, trailing, words = STEP_MEANINGS[name]
    _check_positive_steps(field, value, meaning)
    array = _float_array(field, value, ndim=np.ndim(value))  # the shape is checked below, against T (and P)
    expected = params.shape[:1] + (params.shape[1:] if trailing else ())
    if array.shape != expected:
        raise TraceError(f"{field} has shape {array.shape}; it must have shape {expected} {words}, as params has")
    if not np.array_equal(array[0], np.broadcast_to(constant, array.shape[1:])):
        raise TraceError(
            f"{field} starts at {array[0]} but {name} is {constant}; {name} holds the first step's value when it "
            f"varies: pass {name}={field}[0], or the per-step values alone to Trace.from_arrays"
        )
    return None if np.all(array == array[0]) else array


def _check_positive_steps(field: str, value, meaning: str) -> None:
    """A TraceError naming the first step whose setting is not a finite number > 0 (a step without noise releases its
    gradient unprotected); arrays that are not numbers are left to `_float_array`."""
    try:
        array = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        return
    bad = np.argwhere(~(np.isfinite(array) & (array > 0)))
    if bad.size:
        index = tuple(int(i) for i in bad[0])
        raise TraceError(
            f"{field} is {array[index]} at step {index[0]}; {meaning} must be a finite number > 0 at every step (a "
            "NaN or infinite setting means a broken record; a step without noise releases its gradient unprotected)"
        )


def _convention(convention, batch_sizes, steps: int) -> dict[str, Any]:
    """The convention (a `Convention`) and its batch sizes B_t (T,) checked (`convention.check_batch_sizes`)."""
    if not isinstance(convention, Convention):
        raise TraceError(
            f"convention is a {type(convention).__name__}; pass a noiseaware.trace.Convention, e.g. "
            "Convention(normaliser='expected-batch')"
        )
    try:
        return {"convention": convention, "batch_sizes": check_batch_sizes(convention, batch_sizes, steps)}
    except ConventionError as error:
        raise TraceError(str(error)) from None


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _float_array(name: str, value, ndim: int) -> np.ndarray:
    """A read-only copy of `value` with `ndim` dimensions, all finite, float32 or float64 as given.

    An array (anything with a dtype: numpy, jax, a file's variable) must already be float32 or float64;
    Python numbers, which have no width, become float64.
    """
    try:
        array = np.array(value)
    except (TypeError, ValueError) as error:
        raise TraceError(f"{name} is not an array of numbers ({error}); pass a numeric array") from None
    if array.dtype.kind not in "iuf":
        raise TraceError(f"{name} has dtype {array.dtype}; pass real numbers (float64 or float32)")
    if not hasattr(value, "dtype") and array.dtype.kind in "iu":
        array = array.astype(np.float64)
    if array.dtype not in FLOAT_DTYPES:
        raise TraceError(
            f"{name} has dtype {array.dtype}; a trace holds float32 or float64: convert with .astype(np.float64)"
        )
    if array.ndim != ndim:
        expected = "(T, P): one row per step" if ndim == 2 else "(P,): one entry per parameter"
        raise TraceError(f"{name} has shape {array.shape}; it must have shape {expected}")
    _check_finite(name, array)
    return _read_only(array)


def _check_finite(name: str, array: np.ndarray) -> None:
    bad = np.argwhere(~np.isfinite(array))
    if bad.size:
        index = tuple(int(i) for i in bad[0])
        where = f"step {index[0]}, parameter {index[1]}" if array.ndim == 2 else f"parameter {index[0]}"
        raise TraceError(
            f"{name} holds {array[index]} at {where} (the first non-finite value); a trace must be finite: "
            "a diverged or corrupted run must be re-recorded (e.g. with a smaller learning rate)"
        )


def _check_shapes(params: np.ndarray, grads: np.ndarray) -> None:
    if params.shape != grads.shape:
        raise TraceError(
            f"params has shape {params.shape} but grads has shape {grads.shape}; they must be aligned "
            "pairs (φ_t, G_t) of the same shape (T, P)"
        )
    if params.shape[0] < 1:
        raise TraceError("params and grads have no rows; a trace needs at least one step (T ≥ 1)")


def _real(name: str, value, allow_inf: bool = False) -> float:
    array = np.asarray(value)
    if array.ndim != 0 or array.dtype.kind not in "iuf":
        raise TraceError(f"{name} must be a single real number, got {value!r}")
    number = float(array)
    if math.isnan(number) or (math.isinf(number) and not allow_inf):
        raise TraceError(f"{name} is {number}; it must be a finite number")
    return number


def _positive(name: str, number: float, meaning: str) -> float:
    if number <= 0:
        raise TraceError(f"{name} is {number}; {meaning} must be > 0")
    return number


def _positive_int(name: str, value, meaning: str) -> int:
    array = np.asarray(value)
    integral = array.ndim == 0 and (array.dtype.kind in "iu" or (array.dtype.kind == "f" and float(array).is_integer()))
    if not integral or int(array) < 1:
        raise TraceError(f"{name} is {value!r}; {meaning} must be a positive integer")
    return int(array)


def _sampling_rate(value) -> float:
    rate = _real("sampling_rate", value)
    if not 0 < rate <= 1:
        raise TraceError(
            f"sampling_rate is {rate}; the Poisson sampling rate q must be in (0, 1] (expected batch size / N)"
        )
    return rate


def _check_privacy(noise_multiplier: float, epsilon: float | None) -> None:
    if noise_multiplier < 0:
        raise TraceError(f"noise_multiplier is {noise_multiplier}; the noise multiplier σ must be ≥ 0")
    if noise_multiplier == 0 and epsilon != math.inf:
        raise TraceError(
            f"noise_multiplier is 0 (a non-private run) but epsilon is {epsilon}; mark an explicitly "
            "non-private run with epsilon=math.inf, or give the noise multiplier that was used"
        )
    if epsilon == math.inf and noise_multiplier != 0:
        raise TraceError(
            f"epsilon is inf but noise_multiplier is {noise_multiplier}; epsilon=inf marks a non-private run "
            "(noise_multiplier 0): give the run's ε, or None when unknown"
        )
    if epsilon is not None and epsilon <= 0:
        raise TraceError(f"epsilon is {epsilon}; ε must be > 0 (or None when unknown)")


def _delta(value) -> float | None:
    if value is None:
        return None
    delta = _real("delta", value)
    if not 0 < delta < 1:
        raise TraceError(f"delta is {delta}; δ must be in (0, 1) (or None when unknown)")
    return delta


def _vector(name: str, value, n_params: int) -> np.ndarray | None:
    """None, or a read-only (P,) float array; a scalar is broadcast to (P,)."""
    if value is None:
        return None
    if np.ndim(value) == 0:
        value = np.full(n_params, _real(name, value))
    array = _float_array(name, value, ndim=1)
    if array.shape != (n_params,):
        raise TraceError(f"{name} has shape {array.shape}; it must have shape ({n_params},), one entry per parameter")
    return array


def _positive_vector(name: str, value, n_params: int, meaning: str) -> np.ndarray | None:
    array = _vector(name, value, n_params)
    if array is not None and np.any(array <= 0):
        index = int(np.argmax(array <= 0))
        raise TraceError(f"{name} is {array[index]} at parameter {index}; {meaning} must be > 0 everywhere")
    return array


def _string(name: str, value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise TraceError(f"{name} is {value!r}; it must be a non-empty string (or None when unknown)")
    return str(value)


def _family(value, n_params: int) -> VariationalFamily:
    """The family the trace names, with the θ dimension d its P implies."""
    try:
        return family_for(value, n_params)
    except FamilyError as error:
        raise TraceError(f"{error}; fix variational_family or the parameter count") from None


def _sites(value, dim: int) -> tuple[SiteSpec, ...] | None:
    """The site map as a tuple of SiteSpec with integer shapes; the unconstrained sizes must sum to d."""
    if value is None:
        return None
    sites = tuple(_site(site) for site in value)
    names = [site.name for site in sites]
    if len(set(names)) != len(names):
        raise TraceError(f"sites has repeated names {names}; each site appears once")
    total = sum(site.size for site in sites)
    if total != dim:
        raise TraceError(
            f"sites cover {total} unconstrained coordinates but θ has d = {dim} (the μ block of φ); the site map "
            "must describe exactly the μ block (fix the sites or the parameter count)"
        )
    return sites


def _site(site) -> SiteSpec:
    """`site` with its shape as a tuple of ints, checked to have a valid transform for that shape."""
    if not isinstance(site, SiteSpec):
        raise TraceError(f"sites holds {site!r}; pass noiseaware.sites.SiteSpec(name, shape, transform) entries")
    try:
        spec = SiteSpec(str(site.name), tuple(int(k) for k in site.shape), str(site.transform), site.labels)
        if any(k < 0 for k in spec.shape):
            raise ValueError(f"its shape {spec.shape} has a negative size")
        transform_from_name(spec.transform)
    except (ValueError, TypeError) as error:
        raise TraceError(f"site {site.name!r} in sites is invalid ({error}); fix its shape or transform") from None
    if _unconstrained_size(spec) < 1:
        raise TraceError(f"site {spec.name!r} in sites has no unconstrained coordinates; fix its shape or transform")
    return spec


def _unconstrained_size(spec: SiteSpec) -> int:
    """The number of θ coordinates of a site with a known transform; a simplex map on a scalar is an error."""
    try:
        return spec.size
    except (IndexError, ValueError):  # the transform's inverse_shape needs a last axis
        raise TraceError(
            f"site {spec.name!r}: transform {spec.transform!r} needs a vector shape, got {spec.shape}"
        ) from None


def _param_names(value, family: VariationalFamily, sites: tuple[SiteSpec, ...] | None) -> tuple[str, ...]:
    n_params = family.n_params
    if value is None:
        theta = SiteMap(sites).theta_names() if sites is not None else tuple(f"theta[{j}]" for j in range(family.dim))
        return family.param_names(theta)
    names = tuple(value)
    if not all(isinstance(name, str) for name in names):
        raise TraceError(f"param_names holds non-strings {names!r}; pass one string label per parameter")
    if len(names) != n_params:
        raise TraceError(f"param_names has {len(names)} labels; it needs P = {n_params}, one per parameter")
    if len(set(names)) != n_params:
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise TraceError(f"param_names repeats {repeated}; every parameter needs a unique label")
    return tuple(str(name) for name in names)
