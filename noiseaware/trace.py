"""Trace: the released output of DP variational inference, its validation and its file format.

A trace is T aligned pairs (φ_t, G_t) plus the DP-SGD settings, where φ_t = (μ, ρ) ∈ R^P is read before
step t and G_t = (Σ_{i ∈ B_t} clip_C(s ⊙ ∇ℓ_i(φ_t)) + ξ_t) ⊘ s, ξ_t ~ N(0, σ²C² I_P), is the noisy
sum of clipped per-example gradients of the negative ELBO (docs/method.md §1); plain SGD is
φ_{t+1} = φ_t − λ ⊙ G_t.

Only DP-released values (iterates, noisy gradients, settings) may enter a trace. Files are `.npz` or
`.nc` (netCDF4 via h5netcdf), never pickled; docs/trace-format.md describes the schema.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import h5netcdf
import h5py
import numpy as np

from noiseaware.files import atomic_write
from noiseaware.sites import SiteMap, SiteSpec, transform_from_name

__all__ = ["Trace", "TraceError", "SCHEMA", "SCHEMA_VERSION", "VARIATIONAL_FAMILIES"]

SCHEMA = "noiseaware.trace"
SCHEMA_VERSION = 1
VARIATIONAL_FAMILIES = ("diagonal-normal-softplus",)
BURN_IN = 0.2
"""Fraction of the steps that `Trace.summary` treats as burn-in."""

REQUIRED_FIELDS = ("params", "grads", "noise_multiplier", "clip", "sampling_rate", "n_examples")
OPTIONAL_FIELDS = (
    "schema",
    "schema_version",
    "steps",
    "final_params",
    "grad_scale",
    "learning_rate",
    "epsilon",
    "delta",
    "accountant",
    "mc_draws",
    "optimizer",
    "variational_family",
    "param_names",
    "site_names",
    "site_shapes",
    "site_transforms",
)
_ARRAY_FIELDS = ("params", "grads", "final_params", "grad_scale", "learning_rate")
_SITE_FIELDS = ("site_names", "site_shapes", "site_transforms")
_NC_DIMS = {
    "params": ("step", "param"),
    "grads": ("step", "param"),
    "final_params": ("param",),
    "grad_scale": ("param",),
    "learning_rate": ("param",),
    "param_names": ("param",),
    "site_names": ("site",),
    "site_shapes": ("site",),
    "site_transforms": ("site",),
}
_NC_VARIABLE = {"param_names": "param"}
"""Fields stored in .nc under another variable name: the `param` coordinate holds the labels."""
_NC_FIELD = {variable: field for field, variable in _NC_VARIABLE.items()}
_NC_IGNORED_VARIABLE_ATTRS = ("_FillValue",)
"""Variable attributes that netCDF writers add on their own (xarray writes a NaN _FillValue)."""


_FORMAT_NAMES = {
    ".npz": "a numpy .npz archive",
    ".nc": "netCDF4 (HDF5-based; netCDF3 is not read: with xarray use to_netcdf(engine='h5netcdf'))",
}


class TraceError(ValueError):
    """A trace (in memory or in a file) breaks the schema; the message names the field and the fix."""


@dataclass(frozen=True, eq=False)
class Trace:
    """The released output of DPVI: T aligned pairs (φ_t, G_t) and the DP-SGD settings.

    params (T, P) φ_t before step t, P = 2d: all μ, then all ρ (softplus(ρ) is the sd).
    grads (T, P) G_t: noisy sum of clipped per-example gradients of the negative ELBO, un-preconditioned.
    grad_scale (P,) s and learning_rate (P,) λ accept a scalar, which is broadcast.
    param_names (P,) default to the site map's labels, else 'mu:theta[j]' / 'rho:theta[j]'.
    Every array is stored as a read-only copy (float32 kept, other numbers become float64);
    a non-private run has noise_multiplier 0 and epsilon math.inf. Equality is identity.
    """

    params: np.ndarray
    grads: np.ndarray
    noise_multiplier: float
    clip: float
    sampling_rate: float
    n_examples: int
    grad_scale: np.ndarray | float = 1.0
    learning_rate: np.ndarray | float | None = None
    final_params: np.ndarray | None = None
    epsilon: float | None = None
    delta: float | None = None
    accountant: str | None = None
    mc_draws: int | None = None
    optimizer: str | None = None
    variational_family: str = VARIATIONAL_FAMILIES[0]
    param_names: tuple[str, ...] | None = None
    sites: tuple[SiteSpec, ...] | None = None

    def __post_init__(self):
        params = _float_array("params", self.params, ndim=2)
        grads = _float_array("grads", self.grads, ndim=2)
        _check_shapes(params, grads)
        n_params = params.shape[1]
        noise_multiplier = _real("noise_multiplier", self.noise_multiplier)
        epsilon = None if self.epsilon is None else _real("epsilon", self.epsilon, allow_inf=True)
        _check_privacy(noise_multiplier, epsilon)
        sites = _sites(self.sites, n_params // 2)
        grad_scale = 1.0 if self.grad_scale is None else self.grad_scale
        self._set(
            params=params,
            grads=grads,
            noise_multiplier=noise_multiplier,
            clip=_positive("clip", _real("clip", self.clip), "the clipping norm C"),
            sampling_rate=_sampling_rate(self.sampling_rate),
            n_examples=_positive_int("n_examples", self.n_examples, "the number of examples N"),
            grad_scale=_positive_vector("grad_scale", grad_scale, n_params, "the preconditioning scale s"),
            learning_rate=_positive_vector("learning_rate", self.learning_rate, n_params, "the step sizes λ"),
            final_params=_vector("final_params", self.final_params, n_params),
            epsilon=epsilon,
            delta=_delta(self.delta),
            accountant=_string("accountant", self.accountant),
            mc_draws=None if self.mc_draws is None else _positive_int("mc_draws", self.mc_draws, "S"),
            optimizer=_string("optimizer", self.optimizer),
            variational_family=_family(self.variational_family),
            param_names=_param_names(self.param_names, n_params, sites),
            sites=sites,
        )

    def _set(self, **values) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def steps(self) -> int:
        """T, the number of recorded steps."""
        return self.params.shape[0]

    @property
    def n_params(self) -> int:
        """P = 2d, the length of φ = (μ, ρ)."""
        return self.params.shape[1]

    @property
    def dim(self) -> int:
        """d = P/2, the dimension of θ."""
        return self.n_params // 2

    @property
    def site_map(self) -> SiteMap | None:
        """The map from θ (d,) to the model's named sites, or None when the trace has none."""
        return None if self.sites is None else SiteMap(self.sites)

    @property
    def noise_sd(self) -> np.ndarray:
        """σC/s, shape (P,): the standard deviation of the DP noise in G_t per coordinate."""
        return self.noise_multiplier * self.clip / self.grad_scale

    def final_iterate(self) -> np.ndarray:
        """φ_T (P,): final_params, else φ_{T−1} − λ ⊙ G_{T−1} for a plain-SGD trace with known λ."""
        if self.final_params is not None:
            return self.final_params
        if self.learning_rate is None or self.optimizer != "sgd":
            missing = "learning_rate" if self.learning_rate is None else f"optimizer is {self.optimizer!r}, not 'sgd'"
            raise TraceError(
                f"final_params is absent and cannot be derived ({missing}): φ_T = φ_(T-1) − λ ⊙ G_(T-1) "
                "holds only for plain SGD with known step sizes; record final_params in the trace, or give "
                "learning_rate with optimizer='sgd' if the run was plain SGD"
            )
        return self.params[-1] - self.learning_rate * self.grads[-1]

    def summary(self) -> str:
        """A readable multi-line table: the settings, then per θ coordinate the final μ and sd, the
        post-burn-in mean of μ, and the sd of G over the last 80 % next to the DP noise sd σC/s."""
        return "\n".join([*_settings_lines(self), "", _coordinate_table(self)])

    def save(self, path: str | os.PathLike) -> None:
        """Write the trace to `path` (.nc or .npz) atomically: a failed write leaves the target untouched."""
        path = Path(path)
        write, _ = _format(path)
        if not path.parent.is_dir():
            raise TraceError(f"cannot save {path}: the directory {path.parent} does not exist; create it first")
        fields = _to_fields(self)
        atomic_write(path, lambda temporary: write(temporary, fields))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Trace:
        """Read and validate a trace file (.nc or .npz); nothing is ever unpickled."""
        path = Path(path)
        _, read = _format(path)
        if not path.is_file():
            raise TraceError(f"no trace file at {path}: check the path")
        try:
            return _from_fields(_read_fields(read, path))
        except TraceError as error:
            raise TraceError(f"{path}: {error}") from None

    @classmethod
    def from_arrays(
        cls,
        params,
        grads,
        *,
        noise_multiplier: float,
        clip: float,
        sampling_rate: float,
        n_examples: int,
        grad_scale=1.0,
        learning_rate=None,
        final_params=None,
        epsilon: float | None = None,
        delta: float | None = None,
        param_names: Sequence[str] | None = None,
        sites: Sequence[SiteSpec] | None = None,
        accountant: str | None = None,
        mc_draws: int | None = None,
        optimizer: str | None = None,
        reduction: str = "sum",
    ) -> Trace:
        """A trace from any other DP-SGD implementation (PyTorch/Opacus, d3p, TensorFlow).

        params, grads (T, P) as lists or arrays (float64 and float32 kept). reduction="sum" when grads
        are the noisy sum of clipped per-example gradients; "mean" when they are that sum divided by the
        expected batch size q·N (Opacus, optax's DP aggregate): they are multiplied by q·N. A given
        learning_rate with optimizer=None records optimizer="sgd", since per-coordinate step sizes
        describe plain SGD.
        """
        if reduction not in ("sum", "mean"):
            raise TraceError(
                f"reduction={reduction!r} is not supported: use 'sum' when grads are the noisy sum of clipped "
                "per-example gradients, 'mean' when they were divided by the expected batch size q·N"
            )
        if learning_rate is not None and optimizer is None:
            optimizer = "sgd"
        trace = cls(
            params,
            grads,
            noise_multiplier=noise_multiplier,
            clip=clip,
            sampling_rate=sampling_rate,
            n_examples=n_examples,
            grad_scale=grad_scale,
            learning_rate=learning_rate,
            final_params=final_params,
            epsilon=epsilon,
            delta=delta,
            accountant=accountant,
            mc_draws=mc_draws,
            optimizer=optimizer,
            param_names=param_names,
            sites=sites,
        )
        if reduction == "mean":
            trace = replace(trace, grads=trace.grads * (trace.sampling_rate * trace.n_examples))
        return trace


# ---------------------------------------------------------------- validation


def _read_only(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _float_array(name: str, value, ndim: int) -> np.ndarray:
    """A read-only float copy of `value` with `ndim` dimensions, all finite; float32 stays float32."""
    try:
        array = np.array(value)
    except (TypeError, ValueError) as error:
        raise TraceError(f"{name} is not an array of numbers ({error}); pass a numeric array") from None
    if array.dtype.kind not in "iuf":
        raise TraceError(f"{name} has dtype {array.dtype}; pass real numbers (float64 or float32)")
    if array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
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
    steps, n_params = params.shape
    if steps < 1:
        raise TraceError("params and grads have no rows; a trace needs at least one step (T ≥ 1)")
    if n_params < 2 or n_params % 2:
        raise TraceError(
            f"params and grads have P = {n_params} columns; P must be even and ≥ 2 (all μ, then all ρ)"
        )


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
    integral = array.ndim == 0 and (
        array.dtype.kind in "iu" or (array.dtype.kind == "f" and float(array).is_integer())
    )
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


def _family(value) -> str:
    if value not in VARIATIONAL_FAMILIES:
        raise TraceError(
            f"variational_family is {value!r}; noiseaware reads only {VARIATIONAL_FAMILIES}: "
            "φ = (μ, ρ) with θ ~ N(μ, diag(softplus(ρ)²))"
        )
    return str(value)


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
            f"sites cover {total} unconstrained coordinates but θ has d = P/2 = {dim}; the site map must "
            "describe exactly the μ block (fix the sites or the parameter count)"
        )
    return sites


def _site(site) -> SiteSpec:
    """`site` with its shape as a tuple of ints, checked to have a valid transform for that shape."""
    if not isinstance(site, SiteSpec):
        raise TraceError(f"sites holds {site!r}; pass noiseaware.sites.SiteSpec(name, shape, transform) entries")
    try:
        spec = SiteSpec(str(site.name), tuple(int(k) for k in site.shape), str(site.transform))
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


def _param_names(value, n_params: int, sites: tuple[SiteSpec, ...] | None) -> tuple[str, ...]:
    if value is None:
        if sites is not None:
            return SiteMap(sites).param_names()
        dim = n_params // 2
        return tuple(f"mu:theta[{j}]" for j in range(dim)) + tuple(f"rho:theta[{j}]" for j in range(dim))
    names = tuple(value)
    if not all(isinstance(name, str) for name in names):
        raise TraceError(f"param_names holds non-strings {names!r}; pass one string label per parameter")
    if len(names) != n_params:
        raise TraceError(f"param_names has {len(names)} labels; it needs P = {n_params}, one per parameter")
    if len(set(names)) != n_params:
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise TraceError(f"param_names repeats {repeated}; every parameter needs a unique label")
    return tuple(str(name) for name in names)


# ---------------------------------------------------------------- fields (shared by both formats)


def _to_fields(trace: Trace) -> dict[str, np.ndarray]:
    """Every schema field that `trace` holds, as numpy arrays: 0-d for scalars, fixed-width unicode
    for strings; absent optionals are omitted."""
    sites = trace.sites or ()
    values = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "params": trace.params,
        "grads": trace.grads,
        "noise_multiplier": trace.noise_multiplier,
        "clip": trace.clip,
        "sampling_rate": trace.sampling_rate,
        "n_examples": trace.n_examples,
        "final_params": trace.final_params,
        "grad_scale": trace.grad_scale,
        "learning_rate": trace.learning_rate,
        "epsilon": trace.epsilon,
        "delta": trace.delta,
        "accountant": trace.accountant,
        "mc_draws": trace.mc_draws,
        "optimizer": trace.optimizer,
        "variational_family": trace.variational_family,
        "param_names": list(trace.param_names),
        "site_names": [site.name for site in sites] or None,
        "site_shapes": [json.dumps(list(site.shape)) for site in sites] or None,
        "site_transforms": [site.transform for site in sites] or None,
    }
    return {name: np.asarray(value) for name, value in values.items() if value is not None}


def _from_fields(fields: Mapping[str, Any]) -> Trace:
    """A validated Trace from a file's fields {name: array or scalar}; checks schema, unknown and missing fields."""
    fields = dict(fields)
    schema = _item("schema", fields.pop("schema", SCHEMA))
    _check_schema(schema, _item("schema_version", fields.pop("schema_version", SCHEMA_VERSION)))
    unknown = sorted(set(fields) - set(REQUIRED_FIELDS + OPTIONAL_FIELDS))
    if unknown:
        raise TraceError(
            f"unknown field(s) {unknown}: a trace holds only DP-released values "
            f"({', '.join(REQUIRED_FIELDS + OPTIONAL_FIELDS)}) — never data, per-example quantities, clean "
            "gradients or RNG keys/seeds; remove the field(s)"
        )
    missing = [name for name in REQUIRED_FIELDS if name not in fields]
    if missing:
        raise TraceError(f"required field(s) {missing} are missing; a trace needs {', '.join(REQUIRED_FIELDS)}")
    steps = fields.pop("steps", None)
    sites = _sites_from_fields(*(fields.pop(name, None) for name in _SITE_FIELDS))
    trace = Trace(**{name: _decode(name, value) for name, value in fields.items()}, sites=sites)
    if steps is not None:
        _check_steps(_item("steps", steps), trace)
    return trace


def _check_steps(steps, trace: Trace) -> None:
    if steps != trace.steps:
        raise TraceError(f"steps is {steps!r} but params has {trace.steps} rows; drop steps or fix it")


def _check_schema(schema, version) -> None:
    if schema != SCHEMA:
        raise TraceError(f"schema is {schema!r}, not {SCHEMA!r}; this file is not a noiseaware trace")
    if version != SCHEMA_VERSION:
        raise TraceError(
            f"schema_version {version!r} is not supported; this noiseaware reads schema_version {SCHEMA_VERSION}: "
            "upgrade noiseaware or rewrite the file in version 1"
        )


def _decode(name: str, value):
    if name in _ARRAY_FIELDS:
        return np.asarray(value)
    if name == "param_names":
        return _strings(name, value)
    return _item(name, value)


def _item(name: str, value):
    """A single value (number or str) from a 0-d array, a one-element array, a scalar or bytes."""
    array = np.asarray(value)
    if array.size != 1:
        raise TraceError(f"{name} has shape {array.shape}; it must be a single value")
    item = array.reshape(()).item()
    return item.decode() if isinstance(item, bytes) else item


def _strings(name: str, value) -> tuple[str, ...]:
    array = np.asarray(value)
    if array.ndim != 1:
        raise TraceError(f"{name} has shape {array.shape}; it must be a 1-D array of strings")
    items = [item.decode() if isinstance(item, bytes) else item for item in array.tolist()]
    if not all(isinstance(item, str) for item in items):
        raise TraceError(f"{name} holds non-strings; write it as a 1-D array of strings")
    return tuple(items)


def _sites_from_fields(names, shapes, transforms) -> tuple[SiteSpec, ...] | None:
    given = [value is not None for value in (names, shapes, transforms)]
    if not any(given):
        return None
    if not all(given):
        raise TraceError(f"{', '.join(_SITE_FIELDS)} come together (one entry per site): write all three or none")
    columns = [_strings(name, value) for name, value in zip(_SITE_FIELDS, (names, shapes, transforms))]
    if len({len(column) for column in columns}) != 1:
        lengths = [len(column) for column in columns]
        raise TraceError(f"{', '.join(_SITE_FIELDS)} have lengths {lengths}; they need one entry per site")
    return tuple(SiteSpec(name, _shape(name, text), transform) for name, text, transform in zip(*columns))


def _shape(site: str, text: str) -> tuple[int, ...]:
    try:
        shape = json.loads(text)
    except json.JSONDecodeError:
        shape = None
    if not isinstance(shape, list) or not all(type(k) is int and k >= 0 for k in shape):  # not true/false
        raise TraceError(
            f"site_shapes entry {text!r} of site {site!r} must be a JSON list of sizes such as '[]' or '[3]'"
        )
    return tuple(shape)


# ---------------------------------------------------------------- files


def _format(path: Path) -> tuple[Callable[[Path, dict], None], Callable[[Path], dict]]:
    formats = {".npz": (_write_npz, _read_npz), ".nc": (_write_nc, _read_nc)}
    suffix = path.suffix.lower()
    if suffix not in formats:
        raise TraceError(f"{path} has suffix {path.suffix!r}; a trace file ends in .nc (netCDF4) or .npz (numpy)")
    return formats[suffix]


def _read_fields(read: Callable[[Path], dict], path: Path) -> dict[str, Any]:
    """read(path), with any failure of the file itself turned into a TraceError."""
    try:
        return read(path)
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        if isinstance(error, TraceError):
            raise
        raise TraceError(
            f"could not be read as a {path.suffix} trace ({error}); the file is corrupted or not "
            f"{_FORMAT_NAMES[path.suffix.lower()]}: write it as described in docs/trace-format.md"
        ) from None


def _write_npz(path: Path, fields: dict[str, np.ndarray]) -> None:
    with open(path, "xb") as handle:
        np.savez(handle, **fields)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {name: _npz_member(archive, name) for name in archive.files}


def _npz_member(archive, name: str) -> np.ndarray:
    try:
        return archive[name]
    except ValueError as error:
        raise TraceError(
            f"field {name!r} is a Python object array ({error}), and traces are never unpickled; write "
            "strings as fixed-width unicode arrays, e.g. np.array(['a', 'b'])"
        ) from None


def _write_nc(path: Path, fields: dict[str, np.ndarray]) -> None:
    """Arrays become variables on dims step/param/site (param_names as the `param` coordinate),
    scalars and strings global attributes."""
    arrays = {name: value for name, value in fields.items() if name in _NC_DIMS}
    with h5netcdf.File(path, "w") as file:
        file.dimensions = {dim: n for name, value in arrays.items() for dim, n in zip(_NC_DIMS[name], value.shape)}
        for name, value in arrays.items():
            if value.dtype.kind == "U":
                value, dtype = value.astype(object), h5py.string_dtype()
            else:
                dtype = value.dtype
            file.create_variable(_NC_VARIABLE.get(name, name), _NC_DIMS[name], dtype=dtype, data=value)
        for name, value in fields.items():
            if name not in arrays:
                file.attrs[name] = value.item()


def _read_nc(path: Path) -> dict[str, Any]:
    fields = {}
    with h5netcdf.File(path, "r") as file:
        for variable_name, variable in file.variables.items():
            name = _NC_FIELD.get(variable_name, variable_name)
            extra = sorted(set(variable.attrs) - set(_NC_IGNORED_VARIABLE_ATTRS))
            if extra:
                raise TraceError(
                    f"variable {variable_name!r} carries attributes {extra}; a trace holds only the schema's "
                    "fields: remove them"
                )
            if name in _NC_DIMS and variable.dimensions != _NC_DIMS[name]:
                raise TraceError(
                    f"variable {variable_name!r} has dims {variable.dimensions}; it must have dims {_NC_DIMS[name]}"
                )
            _add(fields, name, variable[...])
        for name, value in file.attrs.items():
            _add(fields, name, value)
    return fields


def _add(fields: dict, name: str, value) -> None:
    if name in fields:
        raise TraceError(
            f"field {name!r} appears twice (a variable and an attribute, or both param and param_names); keep one"
        )
    fields[name] = value


# ---------------------------------------------------------------- summary


def _fmt(value) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, float):
        return "∞" if value == math.inf else f"{value:.4g}"
    return str(value)


def _range(values: np.ndarray | None) -> str:
    if values is None:
        return "unknown"
    low, high = float(values.min()), float(values.max())
    return _fmt(low) if low == high else f"{_fmt(low)} … {_fmt(high)}"


def _settings_lines(trace: Trace) -> list[str]:
    privacy = "non-private (σ = 0)" if trace.epsilon == math.inf else f"ε = {_fmt(trace.epsilon)}"
    sites = trace.sites or ()
    rows = [
        ("privacy", f"{privacy}, δ = {_fmt(trace.delta)}, accountant {_fmt(trace.accountant)}"),
        ("DP-SGD", f"σ = {_fmt(trace.noise_multiplier)}, C = {_fmt(trace.clip)}, q = {_fmt(trace.sampling_rate)}"),
        ("size", f"N = {trace.n_examples}, T = {trace.steps}, S = {_fmt(trace.mc_draws)}"),
        ("optimizer", f"{_fmt(trace.optimizer)}, learning rate λ {_range(trace.learning_rate)}"),
        ("grad scale", f"s {_range(trace.grad_scale)}"),
        ("family", f"{trace.variational_family}, d = {trace.dim}, P = {trace.n_params}"),
        ("sites", ", ".join(f"{s.name}{list(s.shape)} {s.transform}" for s in sites) or "unknown"),
    ]
    width = max(len(label) for label, _ in rows)
    title = f"noiseaware trace (schema {SCHEMA} v{SCHEMA_VERSION})"
    return [title] + [f"  {label:<{width}}  {text}" for label, text in rows]


def _coordinate_table(trace: Trace) -> str:
    """One row per θ coordinate j: final μ_j and softplus(ρ_j), post-burn-in mean of μ_j, sd of G vs σC/s."""
    try:
        final, source = trace.final_iterate(), "φ_T"
    except TraceError:
        final, source = trace.params[-1], "φ_(T-1), φ_T unknown"
    d, start = trace.dim, int(BURN_IN * trace.steps)
    grad_sd, noise_sd = trace.grads[start:].std(axis=0), trace.noise_sd
    mean_mu, final_sd = trace.params[start:, :d].mean(axis=0), np.logaddexp(0.0, final[d:])
    header = (
        "θ", f"μ at {source}", "softplus(ρ)", f"mean μ last {1 - BURN_IN:.0%}",
        "sd G_μ", "noise sd_μ", "sd G_ρ", "noise sd_ρ",
    )  # fmt: skip
    columns = (final[:d], final_sd, mean_mu, grad_sd[:d], noise_sd[:d], grad_sd[d:], noise_sd[d:])
    rows = [
        (label.removeprefix("mu:"), *(f"{float(column[j]):.4g}" for column in columns))
        for j, label in enumerate(trace.param_names[:d])
    ]
    return text_table(header, rows)


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: bool = True) -> str:
    """A plain text table: the first column left-aligned, the others right-aligned when `numeric`."""
    cells = [tuple(header), *map(tuple, rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    align = str.rjust if numeric else str.ljust
    return "\n".join(
        "  ".join([row[0].ljust(widths[0]), *(align(c, w) for c, w in zip(row[1:], widths[1:]))]).rstrip()
        for row in cells
    )
