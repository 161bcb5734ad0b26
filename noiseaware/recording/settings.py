"""DPVI settings: the user's choices validated and resolved into one `DPVISettings` (docs/method.md §1).

σ from the privacy level (exactly one of ε, a noise multiplier, or a non-private run), per-coordinate
gradient scales s and step sizes λ (the κ heuristic λ = v ⊙ s / (sqrt(T·P)·σ·C) unless λ is given),
initial values, and the padded size of one gradient chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..privacy import epsilon_spent
from ..privacy import noise_multiplier as calibrate_noise
from ..util.checks import positive_float, positive_int
from .contract import ModelSpec

__all__ = ["DEFAULT_INIT", "DEFAULT_LR_MULTIPLIER", "DPVISettings", "default_batch_size", "resolve_settings"]

DEFAULT_LR_MULTIPLIER = math.sqrt(2.0)
DEFAULT_INIT = (0.0, -4.0)


@dataclass(frozen=True)
class DPVISettings:
    """Everything that defines a DPVI run, resolved: privacy level, step sizes, batch padding.

    grad_scale, learning_rate, init: (P,) tuples; batch_size: padded size of one gradient chunk
    (sampled examples beyond it are processed in further chunks, never dropped).
    """

    steps: int
    sampling_rate: float
    clip: float
    noise_multiplier: float
    grad_scale: tuple[float, ...]
    learning_rate: tuple[float, ...]
    init: tuple[float, ...]
    mc_draws: int
    batch_size: int
    epsilon: float | None
    delta: float | None
    accountant: str | None


def default_batch_size(n_examples: int, sampling_rate: float) -> int:
    """Padded chunk size: Nq + 6·sqrt(Nq(1 − q)) rounded up to a multiple of 8, at most N."""
    mean = n_examples * sampling_rate
    size = math.ceil(mean + 6.0 * math.sqrt(mean * (1.0 - sampling_rate)) + 1.0)
    return max(1, min(n_examples, 8 * math.ceil(size / 8)))


def _per_coordinate(value, d: int, name: str) -> tuple[float, ...]:
    """A scalar, a pair (μ block, ρ block) of scalars or (d,) vectors, or a full (2d,) vector → (2d,)."""
    P = 2 * d
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(np.size(v) in (1, d) for v in value):
        out = np.concatenate([np.broadcast_to(np.asarray(v, float).ravel(), (d,)) for v in value])
    elif np.ndim(value) == 0:
        out = np.full(P, float(value))
    else:
        out = np.asarray(value, float).ravel()
        if out.shape != (P,):
            raise ValueError(
                f"{name} must be a scalar, a pair (μ block, ρ block) of scalars or length-{d} vectors, "
                f"or a length-{P} vector; got shape {np.shape(value)}"
            )
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} must be finite, got {out}")
    return tuple(out.tolist())


def _privacy(epsilon, delta, noise_multiplier, non_private, sampling_rate, steps, learning_rate, optimizer):
    """(σ, ε, δ, accountant) from exactly one of: epsilon, noise_multiplier, non_private=True."""
    if non_private:
        if epsilon is not None or noise_multiplier not in (None, 0, 0.0):
            raise ValueError("non_private=True records without noise: do not pass epsilon or noise_multiplier")
        if learning_rate is None and optimizer is None:
            raise ValueError("a non-private run needs an explicit learning_rate (the κ heuristic divides by σ = 0)")
        return 0.0, math.inf, None, None
    if epsilon is not None and noise_multiplier is not None:
        raise ValueError("pass either epsilon (σ is then calibrated) or noise_multiplier, not both")
    if noise_multiplier is not None:
        sigma = positive_float(
            "noise_multiplier",
            noise_multiplier,
            hint="for a non-private reference run pass non_private=True with a learning_rate",
        )
        epsilon = epsilon_spent(sigma, delta, sampling_rate, steps)
        if not math.isfinite(epsilon):
            raise ValueError(f"noise_multiplier={sigma} gives no finite ε at δ={delta}: increase the noise")
        return sigma, epsilon, delta, "pld"
    if epsilon is None:
        raise ValueError(
            "no privacy level: pass epsilon=… (σ is calibrated by the PLD accountant) or noise_multiplier=…; "
            "a non-private reference run needs non_private=True and a learning_rate"
        )
    return calibrate_noise(epsilon, delta, sampling_rate, steps), float(epsilon), delta, "pld"


def resolve_settings(
    spec: ModelSpec,
    *,
    steps: int,
    sampling_rate: float,
    clip: float,
    epsilon: float | None = None,
    delta: float = 1e-5,
    noise_multiplier: float | None = None,
    non_private: bool = False,
    grad_scale=1.0,
    lr_multiplier=None,
    learning_rate=None,
    init=None,
    mc_draws: int = 10,
    batch_size: int | None = None,
    optimizer=None,
) -> DPVISettings:
    """Validate the user's settings and resolve σ, λ (κ heuristic unless given), init and batch padding."""
    steps = positive_int("steps", steps)
    sampling_rate = positive_float("sampling_rate", sampling_rate, maximum=1.0)
    clip = positive_float("clip", clip)
    mc_draws = positive_int("mc_draws", mc_draws)
    if learning_rate is not None and lr_multiplier is not None:
        raise ValueError("pass either learning_rate (explicit λ) or lr_multiplier (v of the κ heuristic), not both")
    if optimizer is not None and (learning_rate is not None or lr_multiplier is not None):
        raise ValueError(
            "learning_rate and lr_multiplier have no effect with an optax optimizer: set its step size there"
        )
    sigma, spent, dlt, accountant = _privacy(
        epsilon, delta, noise_multiplier, non_private, sampling_rate, steps, learning_rate, optimizer
    )
    d = spec.site_map.dim
    scale = _per_coordinate(grad_scale, d, "grad_scale")
    if min(scale) <= 0:
        raise ValueError(f"grad_scale must be positive, got {scale}")
    if learning_rate is None and sigma > 0:
        v = np.asarray(
            _per_coordinate(DEFAULT_LR_MULTIPLIER if lr_multiplier is None else lr_multiplier, d, "lr_multiplier")
        )
        lr = tuple((v * np.asarray(scale) / (math.sqrt(steps * 2 * d) * sigma * clip)).tolist())
    else:
        lr = _per_coordinate(1.0 if learning_rate is None else learning_rate, d, "learning_rate")
    if min(lr) <= 0:
        raise ValueError(f"learning rates must be positive, got {lr}")
    n = spec.n_examples
    if batch_size is None:
        batch_size = default_batch_size(n, sampling_rate)
    else:
        batch_size = positive_int("batch_size", batch_size)
    return DPVISettings(
        steps,
        sampling_rate,
        clip,
        sigma,
        scale,
        lr,
        _per_coordinate(DEFAULT_INIT if init is None else init, d, "init"),
        mc_draws,
        int(min(batch_size, n)),
        spent,
        dlt,
        accountant,
    )
