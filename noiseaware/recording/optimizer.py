"""An optax optimizer as data: `Optimizer(name, learning_rate, schedule, options)` (docs/recording.md).

A DPVI run's update rule must be fingerprinted with the rest of its settings, and an optax
`GradientTransformation` is a pair of closures: `optax.adam(1e-3)` and `optax.adam(1e-1)` look the same.
`Optimizer` names the optax factory and holds its hyper-parameters as plain numbers; `transformation(steps)`
builds `optax.<name>(learning_rate, **options)` (with `schedule="cosine-decay"` the step size decays from
`learning_rate` to 0 over the run's T steps, `optax.cosine_decay_schedule`).
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import optax

from ..util.checks import choice, positive_float, positive_int

__all__ = ["OPTIMIZERS", "SCHEDULES", "Optimizer", "as_optimizer"]

OPTIMIZERS = {
    "sgd": optax.sgd,
    "adam": optax.adam,
    "adamw": optax.adamw,
    "adagrad": optax.adagrad,
    "adabelief": optax.adabelief,
    "rmsprop": optax.rmsprop,
    "lion": optax.lion,
}
"""The optax factories an `Optimizer` may name, each called as factory(learning_rate, **options)."""
SCHEDULES = ("constant", "cosine-decay")
"""How the step size moves over the T steps of a run: fixed, or `optax.cosine_decay_schedule(lr, T)`."""
DATA_FORM = "na.Optimizer('adam', learning_rate=1e-3) (a name, a step size and options such as {'b1': 0.9})"


@dataclass(frozen=True)
class Optimizer:
    """optax.<name>(learning_rate, **options), with the step size fixed or decaying by `schedule` (module doc).

    options: the factory's further hyper-parameters by name (numbers, bools, strings), e.g. {"b1": 0.9};
    stored as sorted (name, value) pairs, so equal optimizers are equal data.
    """

    name: str
    learning_rate: float
    schedule: str = "constant"
    options: tuple[tuple[str, Any], ...] | Mapping[str, Any] = field(default=())

    def __post_init__(self):
        choice("optimizer", self.name, tuple(OPTIMIZERS))
        object.__setattr__(
            self, "learning_rate", positive_float("learning_rate", self.learning_rate, hint="the optimizer's step size")
        )
        choice("schedule", self.schedule, SCHEDULES)
        object.__setattr__(self, "options", _options(self.name, self.options))

    def transformation(self, steps: int) -> optax.GradientTransformation:
        """The optax transformation of a run of `steps` steps (built once per optimizer and T, then shared)."""
        return _build(self, positive_int("steps", steps))

    def to_data(self) -> dict[str, Any]:
        """Plain JSON data; `Optimizer.from_data` reads it back."""
        return {
            "name": self.name,
            "learning_rate": self.learning_rate,
            "schedule": self.schedule,
            "options": dict(self.options),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Optimizer:
        """The Optimizer of `to_data`'s output; unknown keys are an error."""
        if not isinstance(data, Mapping):
            raise ValueError(f"an optimizer must be given as a mapping of its fields, got {data!r}")
        unknown = sorted(set(data) - {"name", "learning_rate", "schedule", "options"})
        if unknown:
            raise ValueError(
                f"unknown optimizer fields {unknown}: an optimizer has name, learning_rate, schedule, options"
            )
        return cls(**data)


def as_optimizer(value) -> Optimizer | None:
    """An `Optimizer` (or None: plain SGD with per-coordinate step sizes) from a setting; optax objects are refused."""
    if value is None or isinstance(value, Optimizer):
        return value
    if isinstance(value, Mapping):
        return Optimizer.from_data(value)
    if isinstance(value, optax.GradientTransformation) or callable(getattr(value, "update", None)):
        raise ValueError(
            "optimizer must be data, not an optax object (closures cannot be fingerprinted: optax.adam(1e-3) and "
            f"optax.adam(1e-1) look the same); pass {DATA_FORM}"
        )
    raise ValueError(f"optimizer must be None (plain SGD) or {DATA_FORM}, got {value!r}")


def _options(name: str, options) -> tuple[tuple[str, Any], ...]:
    """The factory's further hyper-parameters as sorted (name, scalar) pairs, each a parameter of the factory."""
    pairs = dict(options) if isinstance(options, Mapping) else dict(tuple(pair) for pair in options)
    accepted = set(inspect.signature(OPTIMIZERS[name]).parameters) - {"learning_rate"}
    unknown = sorted(set(pairs) - accepted)
    if unknown:
        raise ValueError(f"optax.{name} has no options {unknown}: choose from {', '.join(sorted(accepted))}")
    return tuple(sorted((key, _scalar(key, value)) for key, value in pairs.items()))


def _scalar(name: str, value):
    """An option's value as plain data: None, a bool, an int, a float or a string."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError(f"optimizer option {name}={value!r} must be a number, a bool, a string or None")


@functools.cache
def _build(optimizer: Optimizer, steps: int) -> optax.GradientTransformation:
    """One transformation per (optimizer, T): equal settings share it, and so share compiled DPVI programs."""
    rate = optimizer.learning_rate
    if optimizer.schedule == "cosine-decay":
        rate = optax.cosine_decay_schedule(rate, steps)
    return OPTIMIZERS[optimizer.name](rate, **dict(optimizer.options))
