"""DPVI settings resolved: the user's `DPVISettings` and privacy level → one `ResolvedSettings` (docs/method.md §1).

σ from the privacy level (exactly one of ε, a noise multiplier, or a non-private run; δ checked by
`check_delta`: refused at δ ≥ 0.5, a warning at δ ≥ 1/N), per-coordinate gradient scales s and step sizes λ
(the κ heuristic λ = v ⊙ s / (sqrt(T·P)·σ·C) unless λ is given), initial values, and the padded size of one
gradient chunk.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..privacy import epsilon_spent, split_noise_multiplier
from ..privacy import noise_multiplier as calibrate_noise
from ..trace.families import VariationalFamily, variational_family
from ..util.checks import positive_float, probability
from .config import DEFAULT_INIT, DPVISettings
from .contract import ModelSpec
from .optimizer import Optimizer

__all__ = [
    "PRESET_SIZE_RATIO",
    "check_preset_size",
    "DEFAULT_DELTA",
    "DEFAULT_INIT",
    "DEFAULT_LR_MULTIPLIER",
    "WEAK_DELTA",
    "UNCHECKED_HINT",
    "ResolvedSettings",
    "SettingsHint",
    "check_delta",
    "default_batch_size",
    "resolve_settings",
]

DEFAULT_LR_MULTIPLIER = math.sqrt(2.0)
"""v of the κ heuristic when neither lr_multiplier nor learning_rate is given."""
DEFAULT_DELTA = 1e-5
"""δ of a private run unless given (record_dpvi, the studies and the CLI)."""
WEAK_DELTA = 0.5
"""δ from which a run is refused unless `allow_weak_privacy=True`: such a guarantee protects next to nothing."""


PRESET_SIZE_RATIO = 20
"""How many times more or fewer examples than tuned settings were made for are refused (`check_preset_size`)."""


def check_preset_size(n_examples: int, preset_n_examples: int, subject: str = "these settings were") -> None:
    """Refuse, before any privacy is spent, settings tuned for N = `preset_n_examples` used on `n_examples` far
    from it (more than PRESET_SIZE_RATIO times either way; `subject` names them, with its verb): their clip,
    gradient scales and learning rates describe another problem there, and no check or coverage was measured."""
    ratio = max(n_examples / preset_n_examples, preset_n_examples / max(n_examples, 1))
    if ratio > PRESET_SIZE_RATIO:
        raise ValueError(
            f"{subject} set for N = {preset_n_examples} examples and these data have N = {n_examples} "
            f"({ratio:.0f}× {'fewer' if n_examples < preset_n_examples else 'more'}): the clip, gradient scales and "
            "learning rates were never checked at this size, and the noise-aware posterior can be confidently "
            f"wrong there; choose settings for your data (na.tune(model, …) at N = {n_examples}, or noiseaware "
            "tune --n-examples N) and record with them"
        )


class SettingsHint(UserWarning):
    """A reminder that a private run's settings were never checked on simulations."""


UNCHECKED_HINT = (
    "these DP-SGD settings were never checked on simulations: run na.preflight(bm, settings, epsilon=…) "
    "(noiseaware preflight) or na.tune before spending privacy on real data"
)


@dataclass(frozen=True)
class ResolvedSettings:
    """A run's `DPVISettings` resolved against its model and privacy level: σ, step sizes, batch padding.

    grad_scale, learning_rate, init: (P,) tuples, P the family's; batch_size: padded size of one gradient chunk
    (sampled examples beyond it are processed in further chunks, never dropped); optimizer: None for SGD with
    the per-coordinate learning_rate; count_noise_multiplier σ_b: the noise sd of each step's count of clipped
    examples (sensitivity 1), 0 in a non-private run, None when the run releases no count. ε accounts the gradient
    and the count together (`privacy.combined_noise_multiplier`).
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
    family: VariationalFamily
    optimizer: Optimizer | None = None
    count_noise_multiplier: float | None = None


def default_batch_size(n_examples: int, sampling_rate: float) -> int:
    """Padded chunk size: Nq + 6·sqrt(Nq(1 − q)) rounded up to a multiple of 8, at most N."""
    mean = n_examples * sampling_rate
    size = math.ceil(mean + 6.0 * math.sqrt(mean * (1.0 - sampling_rate)) + 1.0)
    return max(1, min(n_examples, 8 * math.ceil(size / 8)))


def check_delta(delta, n_examples: int | None = None, *, allow_weak_privacy: bool = False) -> float:
    """δ checked before any work: in (0, 1); a ValueError at δ ≥ 0.5 unless `allow_weak_privacy`; a UserWarning
    at δ ≥ 1/N (when N is known).

    (ε, δ)-DP allows, with probability δ per example, what ε forbids: the mechanism that publishes each example
    in the clear with probability δ is (0, δ)-DP and releases δN examples on average, at least one once δ ≥ 1/N.
    """
    if not isinstance(allow_weak_privacy, bool):
        raise ValueError(f"allow_weak_privacy must be True or False, got {allow_weak_privacy!r}")
    delta = probability("delta", delta, hint="use e.g. delta=1e-5 (below 1/N for N examples)")
    n = 5000 if n_examples is None else n_examples
    suggestion = f"δ well below 1/N, e.g. delta={10.0 ** -(math.ceil(math.log10(n)) + 1):g} for N = {n}"
    if delta >= WEAK_DELTA and not allow_weak_privacy:
        raise ValueError(
            f"delta={delta:g} is no privacy guarantee: an (ε, δ)-DP mechanism may publish each example in the "
            f"clear with probability δ; use {suggestion}, or pass allow_weak_privacy=True "
            "(--allow-weak-privacy) if this is really meant"
        )
    if n_examples is not None and delta * n_examples >= 1:
        warnings.warn(
            f"delta={delta:g} is at least 1/N = {1 / n_examples:.3g} (N = {n_examples} examples): an (ε, δ)-DP "
            "mechanism may then release one example in the clear (publishing each example with probability δ "
            f"is (0, δ)-DP and releases δN ≥ 1 of them on average); use {suggestion}",
            UserWarning,
            stacklevel=2,
        )
    return delta


def _per_coordinate(value, family: VariationalFamily, name: str, rest=None) -> tuple[float, ...]:
    """A scalar, one entry per block of φ (scalars or block-length vectors), a pair (μ block, ρ block), a
    mean-field vector (2d,) (read as that pair), or a full (P,) vector → (P,).

    Given a pair, a family's further block (full-rank ℓ, low-rank b) is `rest(μ part, ρ part)`: by default
    entry (i, j) takes row i's μ value, since its curvature E[ε_j²]·H_ii equals μ_i's.
    """
    blocks, P, d = family.blocks, family.n_params, family.dim
    sizes = [part.stop - part.start for _, part in blocks]
    sequence = isinstance(value, (tuple, list))
    if P > 2 * d and (len(value) == 2 * d != 2 if sequence else np.ndim(value) == 1 and np.size(value) == 2 * d):
        value = (value[:d], value[d:])  # a mean-field vector (μ, ρ): extended as a pair
    entries = len(value) if isinstance(value, (tuple, list)) else 0
    if entries in (2, len(blocks)) and all(np.size(v) in (1, size) for v, size in zip(value, sizes)):
        parts = [np.broadcast_to(np.asarray(v, float).ravel(), (size,)) for v, size in zip(value, sizes)]
        if len(parts) < len(blocks):
            parts.append(parts[0][family.block_rows[2 * family.dim :]] if rest is None else rest(*parts))
        out = np.concatenate(parts)
    elif not entries and np.ndim(value) == 0:
        out = np.full(P, float(value))
    else:
        try:
            out = np.asarray(value, float).ravel()
        except ValueError:
            out = None
        if out is None or out.shape != (P,):
            names = ", ".join(f"{block} ({size})" for (block, _), size in zip(blocks, sizes))
            raise ValueError(
                f"{name} must be a scalar, one entry per block of φ [{names}] (a scalar or a vector of the "
                f"block's length each), a pair (μ block, ρ block), or a length-{P} vector; got {value!r}"
            )
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} must be finite, got {out}")
    return tuple(out.tolist())


def _privacy(epsilon, delta, noise_multiplier, non_private, settings: DPVISettings, explicit_step: bool):
    """(σ, σ_b, ε, δ, accountant) from exactly one of: epsilon, noise_multiplier, non_private=True (which needs an
    explicit step size: a learning_rate or an optimizer). With a clip count (share r) the gradient and the count are
    one mechanism of σ_c: ε calibrates σ_c and splits it (`split_noise_multiplier`); a given noise_multiplier is the
    gradient's σ, kept as given, σ_c = σ·√(1 − r), and ε is σ_c's, accounted once. σ_b is None without a count."""
    share, sampling_rate, steps = settings.clip_count_share, settings.sampling_rate, settings.steps

    def count(combined: float) -> float | None:
        return None if share is None else split_noise_multiplier(combined, share)[1]

    if non_private:
        if epsilon is not None or noise_multiplier not in (None, 0, 0.0):
            raise ValueError("non_private=True records without noise: do not pass epsilon or noise_multiplier")
        if not explicit_step:
            raise ValueError("a non-private run needs an explicit learning_rate (the κ heuristic divides by σ = 0)")
        return 0.0, count(0.0), math.inf, None, None
    if epsilon is not None and noise_multiplier is not None:
        raise ValueError("pass either epsilon (σ is then calibrated) or noise_multiplier, not both")
    if noise_multiplier is not None:
        sigma = positive_float(
            "noise_multiplier",
            noise_multiplier,
            hint="for a non-private reference run pass non_private=True with a learning_rate",
        )
        combined = sigma if share is None else sigma * math.sqrt(1.0 - share)
        epsilon = epsilon_spent(combined, delta, sampling_rate, steps)
        if not math.isfinite(epsilon):
            raise ValueError(f"noise_multiplier={sigma} gives no finite ε at δ={delta}: increase the noise")
        if epsilon == 0:
            raise ValueError(
                f"noise_multiplier={sigma} spends ε = 0 at δ={delta}: δ alone covers the whole privacy loss, so "
                "the run has no (ε, δ) guarantee to report; use a smaller delta"
            )
        return sigma, count(combined), epsilon, delta, "pld"
    if epsilon is None:
        raise ValueError(
            "no privacy level: pass epsilon=… (σ is calibrated by the PLD accountant) or noise_multiplier=…; "
            "a non-private reference run needs non_private=True and a learning_rate"
        )
    combined = calibrate_noise(epsilon, delta, sampling_rate, steps)
    sigma = combined if share is None else split_noise_multiplier(combined, share)[0]
    return sigma, count(combined), float(epsilon), delta, "pld"


def resolve_settings(
    spec: ModelSpec,
    settings: DPVISettings,
    *,
    epsilon: float | None = None,
    delta: float = DEFAULT_DELTA,
    noise_multiplier: float | None = None,
    non_private: bool = False,
    allow_weak_privacy: bool = False,
) -> ResolvedSettings:
    """The settings (already validated by `DPVISettings`) resolved against the model at a privacy level: σ, λ
    (κ heuristic unless given), per-coordinate values of length P, init and batch padding.

    δ is checked by `check_delta` (refused at δ ≥ 0.5 unless allow_weak_privacy, a warning at δ ≥ 1/N)
    unless the run is non-private (no δ).
    """
    if not non_private:
        delta = check_delta(delta, spec.n_examples, allow_weak_privacy=allow_weak_privacy)
    s = settings
    explicit_step = s.learning_rate is not None or s.optimizer is not None
    sigma, count_sigma, spent, dlt, accountant = _privacy(
        epsilon, delta, noise_multiplier, non_private, s, explicit_step
    )
    family = _family(s.family, s.rank, spec.site_map.dim)
    scale = _per_coordinate(s.grad_scale, family, "grad_scale")
    if min(scale) <= 0:
        raise ValueError(f"grad_scale must be positive, got {scale}")
    if s.learning_rate is None and sigma > 0:
        multiplier = DEFAULT_LR_MULTIPLIER if s.lr_multiplier is None else s.lr_multiplier
        v = np.asarray(_per_coordinate(multiplier, family, "lr_multiplier"))
        lr = tuple((v * np.asarray(scale) / (math.sqrt(s.steps * family.n_params) * sigma * s.clip)).tolist())
    else:
        lr = _per_coordinate(1.0 if s.learning_rate is None else s.learning_rate, family, "learning_rate")
    if min(lr) <= 0:
        raise ValueError(f"learning rates must be positive, got {lr}")
    n = spec.n_examples
    batch_size = default_batch_size(n, s.sampling_rate) if s.batch_size is None else s.batch_size
    return ResolvedSettings(
        s.steps,
        s.sampling_rate,
        s.clip,
        sigma,
        scale,
        lr,
        _per_coordinate(s.init, family, "init", lambda mu, rho: family.initial_rest(rho)),
        s.mc_draws,
        int(min(batch_size, n)),
        spent,
        dlt,
        accountant,
        family,
        s.optimizer,
        count_sigma,
    )


def _family(kind, rank, dim: int) -> VariationalFamily:
    """The user's family choice for θ of dimension d, checked before any work (a FamilyError is a ValueError);
    a low-rank family must also identify its diagonal and B, since the recorder would fit a ridge."""
    family = variational_family(kind, dim, rank)
    if kind == "low-rank" and (dim - rank) ** 2 < dim + rank:
        raise ValueError(
            f"family='low-rank' with rank={rank} does not identify its diagonal and B for d = {dim}: "
            f"diag(softplus(ρ)²) + B Bᵀ needs (d − r)² ≥ d + r, or one covariance has a ridge of (ρ, B), which "
            "the per-coordinate gradient model cannot fit; use family='full-rank' (or a smaller rank)"
        )
    return family
