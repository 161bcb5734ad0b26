"""The trace's data: the released fields, validated, and what follows from them alone (T, P, its `RunSettings`, its
moments after a burn-in, φ_T): a `Run` (`run`) that keeps its rows. `Trace` (`core`) adds the behaviour (the text
report, files) on top of it, so the modules that implement that behaviour take a `TraceData` and never import
`core`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np

from .convention import Convention
from .moments import Moments, moments_of_rows
from .run import ClipCounts, RunLayout, RunSettings, kept_start, scale_rows_of
from .sites import SiteSpec
from .validation import VARIATIONAL_FAMILIES, TraceError, validate

__all__ = ["BURN_IN", "TraceData"]

BURN_IN = 0.2
"""Fraction of the steps treated as burn-in by default (`Trace.describe`, `na.diagnose`, the fits)."""


@dataclass(frozen=True, eq=False, repr=False)
class TraceData(RunLayout):
    """The released output of DPVI: T aligned pairs (φ_t, G_t) and the DP-SGD settings.

    params (T, P) φ_t before step t: all μ, then all ρ (softplus(ρ) is the sd, or L's diagonal), then for a
    full-rank or low-rank `variational_family` the entries of L or B (`noiseaware.trace.families`); P = 2d
    for the default mean-field family.
    grads (T, P) G_t: noisy sum of clipped per-example gradients of the negative ELBO, un-preconditioned.
    grad_scale (P,) s and learning_rate (P,) λ accept a scalar, which is broadcast.
    param_names (P,) default to the site map's labels, else 'mu:theta[j]' / 'rho:theta[j]'.
    convention: how the producer normalised what it released (`convention`; grads here are always the noisy
    sums), with batch_sizes (T,) B_t when its divisor is the batch size.
    step_noise_multipliers (T,) σ_t, step_clips (T,) C_t and step_grad_scales (T, P) s_t: the settings of each step,
    present only when they vary from step to step (Opacus's adaptive clipping, a noise schedule, jax-privacy's
    scale_then_privatize); noise_multiplier, clip and grad_scale then hold the first step's values.
    clipped_counts (T,) c̃_t and count_noise_multiplier σ_b: a run that released, each step, the number of examples
    clipped plus N(0, σ_b²) noise (Andrew et al. 2021's query; docs/diagnostics.md), both or neither. Every array is
    stored as a read-only copy,
    float32 or float64 as given (other dtypes are refused;
    Python numbers become float64);
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
    convention: Convention = Convention()
    batch_sizes: np.ndarray | None = None
    step_noise_multipliers: np.ndarray | None = None
    step_clips: np.ndarray | None = None
    step_grad_scales: np.ndarray | None = None
    clipped_counts: np.ndarray | None = None
    count_noise_multiplier: float | None = None

    def __post_init__(self):
        given = {field.name: getattr(self, field.name) for field in fields(self)}
        for name, value in validate(given).items():  # the checked, read-only copies (the dataclass is frozen)
            object.__setattr__(self, name, value)

    @property
    def steps(self) -> int:
        """T, the number of recorded steps."""
        return self.params.shape[0]

    @property
    def n_params(self) -> int:
        """P, the length of φ (2d for mean-field)."""
        return self.params.shape[1]

    @cached_property
    def settings(self) -> RunSettings:
        """The run's settings as one record (the fields other than the rows)."""
        return RunSettings(
            noise_multiplier=self.noise_multiplier,
            clip=self.clip,
            sampling_rate=self.sampling_rate,
            n_examples=self.n_examples,
            grad_scale=self.grad_scale,
            learning_rate=self.learning_rate,
            epsilon=self.epsilon,
            delta=self.delta,
            accountant=self.accountant,
            mc_draws=self.mc_draws,
            optimizer=self.optimizer,
            variational_family=self.variational_family,
            param_names=self.param_names,
            sites=self.sites,
            convention=self.convention,
            n_params=self.n_params,
            varying_settings=self.varying_settings,
        )

    def moments(self, burn_in: float = BURN_IN, *, cross: bool = False) -> Moments:
        """The moments of the rows t ≥ B = ⌊burn_in·T⌋ (`moments_of_rows`); with cross, the μ rows' cross moments of
        a mean-field or point trace. A ValueError for a burn-in outside [0, 1) or fewer than 2 kept steps."""
        start = kept_start(self, burn_in)
        if self.steps - start < 2:
            raise ValueError(
                f"the trace has {self.steps} steps, leaving {self.steps - start} after a burn-in of {burn_in:g}: "
                "the gradient model needs at least 2 (and many more for a useful posterior)"
            )
        coupled = self.dim if cross and self.family.cross_moments else 0
        return moments_of_rows(self.params, self.grads, start, scale_rows_of(self.family), coupled)

    def clip_counts(self, burn_in: float = BURN_IN) -> ClipCounts | None:
        """The released clipped counts of the steps t ≥ ⌊burn_in·T⌋ as their sums (`ClipCounts`), or None for a run
        that released none."""
        if self.clipped_counts is None:
            return None
        kept = np.asarray(self.clipped_counts[kept_start(self, burn_in) :], np.float64)
        return ClipCounts(kept.size, float(kept.sum()), float(np.square(kept).sum()), self.count_noise_multiplier)

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(φ_t, G_t), (T, P) each: a trace keeps every row."""
        return self.params, self.grads

    def iterates(self) -> np.ndarray:
        """φ_t (T, P): every row."""
        return self.params

    def offers(self, burn_in: float) -> bool:
        """True: a trace gives its moments after any burn-in (the steps left are checked by `moments`)."""
        return True

    @property
    def varying_settings(self) -> tuple[str, ...]:
        """The settings that change from step to step, by their trace names ("noise_multiplier", "clip",
        "grad_scale"); empty for a run with one σ, C and s."""
        steps = {
            "noise_multiplier": self.step_noise_multipliers,
            "clip": self.step_clips,
            "grad_scale": self.step_grad_scales,
        }
        return tuple(name for name, values in steps.items() if values is not None)

    @property
    def noise_sd(self) -> np.ndarray:
        """σ·b·C/s, shape (P,): the standard deviation of the DP noise in G_t per coordinate (`RunSettings.noise_sd`);
        a TraceError when σ, C or s vary from step to step: the per-step values are `step_noise_sd`."""
        return self.settings.noise_sd

    @property
    def step_noise_sd(self) -> np.ndarray:
        """σ_t·b·C_t/s_t, shape (T, P): the DP noise sd of G_t at each step (every row equal for constant settings)."""
        sigma = self.noise_multiplier if self.step_noise_multipliers is None else self.step_noise_multipliers[:, None]
        clip = self.clip if self.step_clips is None else self.step_clips[:, None]
        scale = self.grad_scale if self.step_grad_scales is None else self.step_grad_scales
        return np.broadcast_to(sigma * self.convention.clip_factor * clip / scale, self.params.shape)

    def mean_noise_sd(self, start: int = 0) -> np.ndarray:
        """√(mean over steps t ≥ start of (σ_t·b·C_t/s_t)²), shape (P,): the DP noise sd a residual of G over those
        steps shows on average (independent noise); `noise_sd` itself for constant settings."""
        if not self.varying_settings:
            return np.broadcast_to(self.noise_sd, (self.n_params,))
        return np.sqrt(np.mean(np.square(self.step_noise_sd[start:], dtype=np.float64), axis=0))

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
