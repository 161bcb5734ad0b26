"""The trace's data: the released fields, validated, and what follows from them alone (T, P, d, the family, the
site map, the noise sd, φ_T). `Trace` (`core`) adds the behaviour (summary, files) on top of it, so the modules
that implement that behaviour take a `TraceData` and never import `core`."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from .convention import Convention
from .families import VariationalFamily, family_for
from .sites import SiteMap, SiteSpec
from .validation import VARIATIONAL_FAMILIES, TraceError, validate

__all__ = ["BURN_IN", "TraceData", "kept_steps", "varying_settings_reason"]

BURN_IN = 0.2
"""Fraction of the steps treated as burn-in by default (`Trace.summary`, `na.diagnose`, the fits)."""


@dataclass(frozen=True, eq=False, repr=False)
class TraceData:
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
    scale_then_privatize); noise_multiplier, clip and grad_scale then hold the first step's values. Every array is
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

    @property
    def family(self) -> VariationalFamily:
        """The variational family q_φ with its layout of φ (`noiseaware.trace.families`)."""
        return family_for(self.variational_family, self.n_params)

    @property
    def dim(self) -> int:
        """d, the dimension of θ (P/2 for mean-field)."""
        return self.family.dim

    @property
    def site_map(self) -> SiteMap | None:
        """The map from θ (d,) to the model's named sites, or None when the trace has none."""
        return None if self.sites is None else SiteMap(self.sites)

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
        """σ·b·C/s, shape (P,): the standard deviation of the DP noise in G_t per coordinate (b = 1 unless
        microbatches of b examples were clipped as one). A TraceError when σ, C or s vary from step to step
        (`varying_settings`): the per-step values are `step_noise_sd`."""
        if self.varying_settings:
            raise TraceError(varying_settings_reason(self, "one noise sd per coordinate needs one σ, C and s"))
        return self.noise_multiplier * self.convention.clip_factor * self.clip / self.grad_scale

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


def varying_settings_reason(trace: TraceData, needs: str) -> str:
    """Why a computation refuses `trace`, whose σ, C or s vary from step to step, and what to do instead; `needs`
    says what it needs, e.g. "the gradient model needs one noise sd σC/s per coordinate"."""
    names = {"noise_multiplier": "the noise multiplier σ_t", "clip": "the clip norm C_t", "grad_scale": "the scale s_t"}
    varying = " and ".join(names[name] for name in trace.varying_settings)
    verb = "vary" if len(trace.varying_settings) > 1 else "varies"
    return (
        f"{varying} of this trace {verb} from step to step (adaptive clipping, a noise schedule, or a per-step scale "
        f"before clipping), and {needs} for the whole run; fit it with a method that does not model the noise "
        "(naive, dpvim, random-scaling), or re-run with a fixed clip norm, noise multiplier and scale"
    )


def kept_steps(trace: TraceData, burn_in: float) -> int:
    """T − ⌊burn_in·T⌋, the steps after the burn-in that the checks and the fits use."""
    return trace.steps - math.floor(burn_in * trace.steps)
