"""`DPVISettings`: a DPVI run's settings as one frozen, validated value, each default written here once.

    settings = na.DPVISettings(steps=10_000, sampling_rate=0.1, clip=2.0)
    settings.replace(steps=2000)                      # a new value; an unknown name is an error
    na.DPVISettings.from_data(settings.to_data())     # plain JSON, for settings files and fingerprints
    na.record_dpvi(model, data, key=1, epsilon=1.0, settings=settings)
    na.record_dpvi(model, data, key=1, epsilon=1.0, **settings)   # a mapping of its fields, too

Beside the settings a run takes its privacy level (ε or σ, δ) and key: the same settings serve every level.
Checks that need the model (the length P of per-coordinate values, the family's rank) run when the settings
are resolved against it (`recording.settings.resolve_settings`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..trace.families import FAMILY_KINDS
from ..util.checks import positive_float, positive_int
from .optimizer import Optimizer, as_optimizer
from .sparse import SparseFeatures, as_sparse

__all__ = ["DEFAULT_INIT", "DPVISettings", "as_settings", "check_names", "required_settings", "setting_names"]

DEFAULT_INIT = (0.0, -4.0)
"""φ₀ = (μ₀, ρ₀) unless given: every mean 0, every sd softplus(−4) ≈ 0.018."""

COORDINATES = ("grad_scale", "lr_multiplier", "learning_rate", "init")
"""Per-coordinate settings: a scalar, one entry per block of φ, a pair (μ block, ρ block) or a (P,) vector."""
DTYPES = ("float32", "float64")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DPVISettings(Mapping[str, Any]):
    """The settings of a DPVI run (docs/recording.md), less its privacy level and key.

    steps T, sampling_rate q, clip C; grad_scale s, lr_multiplier v (None: √2 in the κ heuristic λ = v ⊙ s /
    (sqrt(T·P)·σ·C)), learning_rate λ (instead of v), init (μ₀, ρ₀) (None: the default): per-coordinate values,
    stored as tuples of floats; mc_draws S; family 'mean-field', 'full-rank' or 'low-rank' with `rank`;
    optimizer: None (SGD with λ) or an `Optimizer`; transforms 'numpyro', 'research' or {site: name}; sites:
    the order of θ's sites; labels {site: names}; batch_size: the padded chunk of sampled examples (None: Nq
    + 6 sd); dtype 'float32' or 'float64' (None: JAX's default float); sparse: a `SparseFeatures` (a GLM on sparse
    features, clipped in O(B·k) rather than O(B·P): `recording.sparse`) or None; clip_count_share r: release each
    step a noisy count of the examples clipped, spending the share r of the run's privacy on it (the gradient's noise
    multiplier grows by 1/√(1 − r): `privacy.split_noise_multiplier`), or None for no count.
    """

    steps: int
    sampling_rate: float
    clip: float
    grad_scale: Any = 1.0
    lr_multiplier: Any = None
    learning_rate: Any = None
    init: Any = DEFAULT_INIT
    mc_draws: int = 10
    family: str = "mean-field"
    rank: int | None = None
    optimizer: Optimizer | None = None
    transforms: str | Mapping[str, str] = "numpyro"
    sites: tuple[str, ...] | None = None
    labels: Mapping[str, tuple[str, ...]] | None = None
    batch_size: int | None = None
    dtype: str | None = None
    sparse: SparseFeatures | None = None
    clip_count_share: float | None = None

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("steps", positive_int("steps", self.steps, hint="the number T of DP-SGD steps"))
        put("sampling_rate", positive_float("sampling_rate", self.sampling_rate, maximum=1.0))
        put("clip", positive_float("clip", self.clip, hint="the clipping norm C"))
        put("mc_draws", positive_int("mc_draws", self.mc_draws, hint="the Monte Carlo draws S per step"))
        for name in COORDINATES:
            value = getattr(self, name)
            if name == "init" and value is None:
                value = DEFAULT_INIT
            put(name, None if value is None else _coordinates(name, value))
        if self.learning_rate is not None and self.lr_multiplier is not None:
            raise ValueError("pass either learning_rate (explicit λ) or lr_multiplier (v of the κ heuristic), not both")
        if self.family not in FAMILY_KINDS:
            raise ValueError(f"unknown variational family {self.family!r}: choose one of {', '.join(FAMILY_KINDS)}")
        if self.rank is not None:
            put("rank", positive_int("rank", self.rank, hint="the columns of B of a low-rank family"))
        put("optimizer", as_optimizer(self.optimizer))
        if self.optimizer is not None and (self.learning_rate is not None or self.lr_multiplier is not None):
            raise ValueError(
                "learning_rate and lr_multiplier have no effect with an optimizer: set its step size there, "
                "e.g. na.Optimizer('adam', learning_rate=1e-3)"
            )
        put("transforms", _transforms(self.transforms))
        put("sites", None if self.sites is None else _names("sites", self.sites))
        put("labels", None if self.labels is None else _labels(self.labels))
        if self.batch_size is not None:
            put("batch_size", positive_int("batch_size", self.batch_size))
        put("dtype", _dtype(self.dtype))
        put("sparse", as_sparse(self.sparse))
        if self.clip_count_share is not None:
            put(
                "clip_count_share",
                positive_float(
                    "clip_count_share",
                    self.clip_count_share,
                    maximum=0.5,
                    hint="the share of the run's privacy spent on the count of clipped examples, e.g. 0.01",
                ),
            )

    @classmethod
    def create(cls, **settings) -> DPVISettings:
        """`DPVISettings(**settings)` with one ValueError naming unknown or missing settings."""
        check_names(settings)
        missing = [name for name in required_settings() if name not in settings]
        if missing:
            raise ValueError(f"DPVI settings need {', '.join(missing)} (a model preset or settings file gives them)")
        return cls(**settings)

    def replace(self, **overrides) -> DPVISettings:
        """A copy with `overrides` in place (validated again); an unknown name is a ValueError naming the fields."""
        check_names(overrides)
        return dataclasses.replace(self, **overrides)

    def to_data(self) -> dict[str, Any]:
        """Plain JSON data (numbers, strings, lists, dicts, None): `from_data` reads it back to an equal value."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["optimizer"] = None if self.optimizer is None else self.optimizer.to_data()
        data["sparse"] = None if self.sparse is None else self.sparse.to_data()
        return json.loads(json.dumps(data))

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> DPVISettings:
        """The settings of `to_data`'s output (or of a settings file's JSON)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"DPVI settings must be a mapping of setting names to values, got {type(data).__name__}")
        return cls.create(**data)

    def __getitem__(self, name: str) -> Any:
        if name not in setting_names():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(setting_names())

    def __len__(self) -> int:
        return len(setting_names())

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_data(), sort_keys=True))


def as_settings(settings: DPVISettings | Mapping | None, overrides: Mapping[str, Any]) -> DPVISettings:
    """The settings of a run: `settings` (a DPVISettings or a mapping of its fields) with `overrides` in place,
    or the overrides alone."""
    if isinstance(settings, DPVISettings):
        return settings.replace(**overrides)
    if settings is None or isinstance(settings, Mapping):
        return DPVISettings.create(**{**(settings or {}), **overrides})
    raise ValueError(f"settings must be a na.DPVISettings or a mapping of its fields, got {type(settings).__name__}")


def setting_names() -> tuple[str, ...]:
    """The names of the DPVI settings, in `DPVISettings`' order."""
    return tuple(f.name for f in dataclasses.fields(DPVISettings))


def required_settings() -> tuple[str, ...]:
    """The settings without a default (T, q, C): a model preset or a settings file gives them."""
    return tuple(f.name for f in dataclasses.fields(DPVISettings) if f.default is dataclasses.MISSING)


def check_names(settings: Mapping[str, Any]) -> None:
    """A ValueError naming the keys of `settings` that are not DPVI settings."""
    unknown = sorted(set(settings) - set(setting_names()))
    if unknown:
        raise ValueError(f"unknown DPVI settings {unknown}: the settings are {', '.join(setting_names())}")


def _coordinates(name: str, value) -> float | tuple:
    """A per-coordinate value as plain data: a float, or a tuple of floats and tuples of floats (one nesting:
    the blocks of φ), every entry finite. Its length is checked against the model's P when resolved."""
    if _vector(value, 0):
        parts = flat = float(value)
    elif isinstance(value, (tuple, list)) and value and all(_vector(v, 0) or _vector(v, 1) for v in value):
        parts = tuple(float(v) if _vector(v, 0) else tuple(np.asarray(v, float).tolist()) for v in value)
        flat = np.concatenate([np.ravel(p) for p in parts])
    elif _vector(value, 1):
        parts = flat = tuple(np.asarray(value, float).tolist())
    else:
        raise ValueError(
            f"{name} must be a number, a sequence of numbers or of per-block vectors, or a vector; got {name}={value!r}"
        )
    if not np.all(np.isfinite(flat)):
        raise ValueError(f"{name} must be finite, got {name}={value!r}")
    return parts


def _vector(value, ndim: int) -> bool:
    """Whether `value` is a non-empty real array (or number) of `ndim` dimensions (a bool is not a number)."""
    if isinstance(value, (bool, np.bool_, str)):
        return False
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        return False
    return array.ndim == ndim and array.dtype.kind in "iuf" and array.size > 0


def _transforms(value) -> str | dict[str, str]:
    """A preset name or {site: transform name}, as data (the names are checked against the model's sites)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return dict(value)
    raise ValueError(f"transforms must be 'numpyro', 'research' or {{site: transform name}}, got {value!r}")


def _names(name: str, value) -> tuple[str, ...]:
    sequence = isinstance(value, (tuple, list, np.ndarray)) and np.ndim(value) == 1
    if not sequence or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a sequence of names, got {name}={value!r}")
    return tuple(value)


def _labels(value) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        raise ValueError(f"labels must be {{site: one label per element}}, got {value!r}")
    return {str(site): tuple(str(n) for n in _names(f"labels[{site!r}]", names)) for site, names in value.items()}


def _dtype(value) -> str | None:
    if value is None:
        return None
    try:
        name = np.dtype(value).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"dtype must be float32 or float64 (or None for JAX's default), got {value!r}")
    return name
