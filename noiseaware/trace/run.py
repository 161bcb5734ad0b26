"""The run contract: what a fit and the trace checks read of a DP-SGD run, whether it kept its rows or its sums.

A `Run` is a `Trace` (T rows of (φ_t, G_t)) or a `WindowedTrace` (the same run as window sums and a sample of rows).
Both give their settings as one `RunSettings` record, their moments over a chosen burn-in (`moments`, the one
`Moments` type) and their rows (`rows`, None for a run kept as windows): a method that reads rows asks `rows()`,
every other reader asks `moments(burn_in)`, and nothing asks which class it has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from .convention import Convention
from .families import VariationalFamily, family_for
from .moments import Moments
from .sites import SiteMap, SiteSpec
from .validation import TraceError

__all__ = [
    "ClipCounts",
    "Run",
    "RunLayout",
    "RunSettings",
    "kept_start",
    "kept_steps",
    "scale_rows_of",
    "varying_settings_reason",
]


@dataclass(frozen=True, eq=False)
class RunSettings:
    """The settings of a run and what follows from them alone: σ, C, q, N, s (P,) or a scalar, λ, ε, δ, the
    accountant, S, the optimizer, the family's trace name, the parameter names (P,), the sites, the producer's
    convention, P, and the names of the settings that varied from step to step (`varying_settings`; σ, C and s then
    hold the first step's values)."""

    noise_multiplier: float
    clip: float
    sampling_rate: float
    n_examples: int
    grad_scale: np.ndarray | float
    learning_rate: np.ndarray | float | None
    epsilon: float | None
    delta: float | None
    accountant: str | None
    mc_draws: int | None
    optimizer: str | None
    variational_family: str
    param_names: tuple[str, ...]
    sites: tuple[SiteSpec, ...] | None
    convention: Convention
    n_params: int
    varying_settings: tuple[str, ...] = ()

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
        """The map from θ (d,) to the model's named sites, or None when the run has none."""
        return None if self.sites is None else SiteMap(self.sites)

    @property
    def noise_sd(self) -> np.ndarray:
        """σ·b·C/s, shape (P,) or a scalar: the DP noise sd in G_t per coordinate (b = 1 unless microbatches of b
        examples were clipped as one). A TraceError when σ, C or s vary from step to step."""
        if self.varying_settings:
            raise TraceError(varying_settings_reason(self, "one noise sd per coordinate needs one σ, C and s"))
        return self.noise_multiplier * self.convention.clip_factor * self.clip / self.grad_scale

    @property
    def plain_sgd_rate(self) -> np.ndarray | None:
        """λ (P,) of a plain-SGD run with known step sizes, else None."""
        if self.optimizer != "sgd" or self.learning_rate is None:
            return None
        return np.broadcast_to(self.learning_rate, (self.n_params,))


class ClipCounts(NamedTuple):
    """A run's released counts of clipped examples c̃_t = Σ_i 1[‖h_i‖ > C] + N(0, σ_b²) over its kept steps, as sums:
    steps n, total Σ c̃_t, squares Σ c̃_t², noise_multiplier σ_b."""

    steps: int
    total: float
    squares: float
    noise_multiplier: float


class RunLayout:
    """The layout of φ that a run reads off its `settings`: the family, d and the site map (for `Trace` and
    `WindowedTrace` alike)."""

    @property
    def family(self) -> VariationalFamily:
        """The variational family q_φ with its layout of φ (`noiseaware.trace.families`)."""
        return self.settings.family

    @property
    def dim(self) -> int:
        """d, the dimension of θ (P/2 for mean-field)."""
        return self.settings.dim

    @property
    def site_map(self) -> SiteMap | None:
        """The map from θ (d,) to the model's named sites, or None when the run has none."""
        return self.settings.site_map


@runtime_checkable
class Run(Protocol):
    """A DP-SGD run as the fits and the checks read it: its settings, T, the layout of φ, the moments after a
    burn-in, and its rows where it kept them."""

    @property
    def settings(self) -> RunSettings: ...

    @property
    def steps(self) -> int: ...

    @property
    def n_params(self) -> int: ...

    @property
    def dim(self) -> int: ...

    @property
    def family(self) -> VariationalFamily: ...

    @property
    def param_names(self) -> tuple[str, ...]: ...

    @property
    def site_map(self) -> SiteMap | None: ...

    @property
    def batch_sizes(self) -> np.ndarray | None: ...

    def moments(self, burn_in: float, *, cross: bool = False) -> Moments:
        """The moments of the steps t ≥ ⌊burn_in·T⌋; with cross, the μ rows' cross moments too."""

    def clip_counts(self, burn_in: float) -> ClipCounts | None:
        """The released clipped counts after the burn-in as sums, or None for a run that released none."""

    def rows(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(φ_t, G_t) for every step, (T, P) each, or None for a run kept as windows."""

    def iterates(self) -> np.ndarray:
        """The iterates φ_t a figure or a posterior keeps, (T, P) for a trace, the sample's (R, P) when windowed."""

    def offers(self, burn_in: float) -> bool:
        """Whether the run can give its moments after a burn-in of `burn_in`."""

    def mean_noise_sd(self, start: int = 0) -> np.ndarray:
        """The DP noise sd (P,) that a residual of G over the steps t ≥ start shows on average."""

    def final_iterate(self) -> np.ndarray:
        """φ_T (P,)."""


def scale_rows_of(family: VariationalFamily) -> slice:
    """The family's ρ block (the scale rows), a slice of φ; empty (d:d) for a point estimate, which has none."""
    return dict(family.blocks).get("rho", slice(family.dim, family.dim))


def kept_start(run, burn_in: float) -> int:
    """B = ⌊burn_in·T⌋, the first kept step; a ValueError for a burn-in outside [0, 1)."""
    if not 0.0 <= burn_in < 1.0:
        raise ValueError(f"burn_in must be a fraction in [0, 1), got {burn_in}")
    return math.floor(burn_in * run.steps)


def kept_steps(run, burn_in: float) -> int:
    """T − ⌊burn_in·T⌋, the steps after the burn-in that the checks and the fits use."""
    return run.steps - math.floor(burn_in * run.steps)


def varying_settings_reason(run, needs: str) -> str:
    """Why a computation refuses `run`, whose σ, C or s vary from step to step, and what to do instead; `needs`
    says what it needs, e.g. "the gradient model needs one noise sd σC/s per coordinate"."""
    names = {"noise_multiplier": "the noise multiplier σ_t", "clip": "the clip norm C_t", "grad_scale": "the scale s_t"}
    varying = " and ".join(names[name] for name in run.varying_settings)
    verb = "vary" if len(run.varying_settings) > 1 else "varies"
    return (
        f"{varying} of this trace {verb} from step to step (adaptive clipping, a noise schedule, or a per-step scale "
        f"before clipping), and {needs} for the whole run; fit it with a method that does not model the noise "
        "(naive, dpvim, random-scaling), or re-run with a fixed clip norm, noise multiplier and scale"
    )
