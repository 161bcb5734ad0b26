"""`TraceSummary`: a DP-SGD run kept as its window sums (`sums`) and a thinned sample of rows, not T × P rows.

The gradient model depends on a trace only through a few sums per coordinate (docs/method.md §2.1), and sums of
released values are post-processing: a summary holds them over W windows of steps (a burn-in is chosen afterwards at
a window boundary), with `sample`, a `Trace` of R rows at evenly spaced steps (the figures, and every setting of the
run: σ, C, q, N, s, the convention, the family, the sites, φ_T). Its memory is O(W·P + R·P) whatever T is
(docs/summaries.md). `summarize(trace)` summarises a recorded trace; `noiseaware.adapters.summarizing` accumulates one
inside a training loop.
"""

from __future__ import annotations

import dataclasses
import math
import os
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .core import Trace
from .data import BURN_IN
from .families import VariationalFamily
from .summary import KeptColumns, summary_text
from .summary_files import SUMMARY_SCHEMA, SUMMARY_VERSION, is_summary_file, read_summary, write_summary
from .sums import COUPLING_LIMIT, ROW_SUMS, SCALE_SUMS, WindowSums, add_step, empty_sums, pooled, window_bounds
from .validation import TraceError

__all__ = [
    "ROWS",
    "WINDOWS",
    "TraceSummary",
    "accumulate",
    "coupled_dim",
    "load_run",
    "sample_steps",
    "scale_rows_of",
    "summarize",
]

WINDOWS = 10
"""W, the windows of a summary: burn-ins at multiples of 1/10 of the run (the default 0.2 among them)."""
ROWS = 64
"""R, the rows of a summary's sample (evenly spaced steps, the first and the last among them)."""
SETTINGS = (
    "noise_multiplier",
    "clip",
    "sampling_rate",
    "n_examples",
    "grad_scale",
    "learning_rate",
    "epsilon",
    "delta",
    "accountant",
    "mc_draws",
    "optimizer",
    "variational_family",
    "param_names",
    "sites",
    "convention",
    "batch_sizes",
    "n_params",
    "family",
    "dim",
    "site_map",
    "noise_sd",
    "step_noise_multipliers",
    "step_clips",
    "step_grad_scales",
)
"""The run's settings and what follows from them, read from the sample (a `Trace`) under their trace names."""


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class TraceSummary:
    """A run of T steps as its window sums and a sample of its rows.

    sums: `WindowSums` of the run's T steps over W windows (numpy arrays); sample: the rows at `sample_steps` (R,)
    as a `Trace` with the run's settings; steps: T. The settings (σ, C, q, N, s, λ, ε, δ, the convention, the
    family, the names and sites, noise_sd …) are the sample's, under the names a `Trace` gives them. A run whose σ, C
    or s vary from step to step is refused: the gradient model needs one noise sd per coordinate.
    """

    sums: WindowSums
    sample: Trace
    sample_steps: np.ndarray
    steps: int

    def __post_init__(self):
        sums = self.sums._replace(**{k: _frozen(v) for k, v in self.sums._asdict().items() if k != "cross"})
        if sums.cross is not None:
            sums = sums._replace(cross=type(sums.cross)(*(_frozen(x) for x in sums.cross)))
        object.__setattr__(self, "sums", sums)
        object.__setattr__(self, "sample_steps", _frozen(np.asarray(self.sample_steps, np.int64)))
        _validate(self)

    def __getattr__(self, name):
        if name in SETTINGS:
            return getattr(self.sample, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def windows(self) -> int:
        """W, the windows of steps the sums are kept over."""
        return self.sums.windows

    @property
    def bounds(self) -> np.ndarray:
        """The windows' boundaries ⌊w·T/W⌋, w = 0..W (W + 1,)."""
        return window_bounds(self.steps, self.windows)

    @property
    def varying_settings(self) -> tuple[str, ...]:
        """() always: a summary holds runs with one σ, C and s."""
        return ()

    def final_iterate(self) -> np.ndarray:
        """φ_T (P,), the sample's (its last row is step T − 1)."""
        return self.sample.final_iterate()

    def first_kept_window(self, burn_in: float) -> int:
        """The window that starts at step ⌊burn_in·T⌋ (`window_from`)."""
        return self.window_from(math.floor(burn_in * self.steps))

    def window_from(self, step: int) -> int:
        """The window w whose burn-in starts at `step`: its first step ⌊w·T/W⌋, or ⌊(w/W)·T⌋ as a burn-in of w/W
        computes it (one step apart for some T); a ValueError naming the burn-ins the summary offers when none does."""
        for w in range(self.windows):
            if step in (self.bounds[w], math.floor((w / self.windows) * self.steps)):
                return w
        offered = ", ".join(f"{w / self.windows:g}" for w in range(self.windows))
        raise ValueError(
            f"a summary keeps its sums over {self.windows} windows, so a burn-in must start a window; "
            f"burn_in={step / self.steps:g} (step {step} of {self.steps}) does not: use one of {offered}"
        )

    def offers(self, burn_in: float) -> bool:
        """Whether a burn-in of `burn_in` starts one of the summary's windows."""
        try:
            self.first_kept_window(burn_in)
        except ValueError:
            return False
        return True

    def mean_noise_sd(self, start: int = 0) -> np.ndarray:
        """σ·b·C/s (P,): the DP noise sd of every step (a summary's settings are constant)."""
        return np.broadcast_to(self.noise_sd, (self.n_params,))

    def summary(self) -> str:
        """A readable table, as `Trace.summary`: the settings, then per θ coordinate μ and sd at φ_T (the last sample
        row where φ_T is unknown), the mean of μ and the sd of G over the windows after the default burn-in (the first
        window that starts at or after it), beside the DP noise sd σC/s."""
        first = math.ceil(BURN_IN * self.windows - 1e-9)
        pool = pooled(self.sums, first)
        grad_sd = np.sqrt(np.maximum(pool.sum_gg / pool.count - (pool.sum_g / pool.count) ** 2, 0.0))
        title = (
            f"noiseaware trace summary (schema {SUMMARY_SCHEMA} v{SUMMARY_VERSION}: {self.windows} windows, "
            f"{len(self.sample_steps)} sample rows)"
        )
        kept = KeptColumns(pool.centre[: self.dim], grad_sd, self.sample.params[-1], 1.0 - first / self.windows)
        return summary_text(self, kept=kept, title=title)

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> None:
        """Write the summary to `path` (.npz) atomically; an existing file is replaced only with `overwrite=True`."""
        write_summary(self, path, overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike) -> TraceSummary:
        """Read and validate a summary file (.npz); nothing is ever unpickled. A TraceError names what is wrong."""
        parts = read_summary(path)
        try:
            return cls(*parts)
        except TraceError as error:
            raise TraceError(f"{path}: {error}") from None

    def __repr__(self) -> str:
        coupled = "" if self.sums.cross is None else ", cross moments"
        return (
            f"TraceSummary(T={self.steps}, P={self.n_params}, {self.windows} windows{coupled}, "
            f"{len(self.sample_steps)} sample rows, σ={self.noise_multiplier:g}, ε={self.epsilon})"
        )


def load_run(path: str | os.PathLike) -> Trace | TraceSummary:
    """The trace or the trace summary in `path`, told apart by the file's schema (a summary is an .npz whose
    schema is "noiseaware.trace-summary"); each validated, nothing unpickled."""
    return TraceSummary.load(path) if is_summary_file(path) else Trace.load(path)


def sample_steps(steps: int, rows: int) -> np.ndarray:
    """R ≤ T evenly spaced steps from 0 to T − 1 (both kept), (R,) int."""
    if rows < 2:
        raise ValueError(f"a summary's sample needs at least 2 rows (the first and the last step), got {rows}")
    return np.unique(np.round(np.linspace(0, steps - 1, min(rows, steps))).astype(np.int64))


def summarize(trace: Trace, *, windows: int = WINDOWS, rows: int = ROWS) -> TraceSummary:
    """The summary of a recorded `trace`: its sums over `windows` windows (in float64) and `rows` sample rows."""
    if trace.varying_settings:
        raise TraceError(
            f"the trace's {', '.join(trace.varying_settings)} vary from step to step; a summary keeps runs with one "
            "σ, C and s, the only ones the gradient model fits: fit the trace itself"
        )
    bounds = window_bounds(trace.steps, windows)
    with jax.enable_x64(True):
        sums = accumulate(
            jnp.asarray(trace.params, jnp.float64),
            jnp.asarray(trace.grads, jnp.float64),
            starts=tuple(bounds[:-1].tolist()),
            scale_rows=scale_rows_of(trace.family),
            coupled=coupled_dim(trace.family),
        )
        sums = jax.tree.map(np.asarray, sums)
    kept = sample_steps(trace.steps, rows)
    sample = dataclasses.replace(
        trace,
        params=trace.params[kept],
        grads=trace.grads[kept],
        batch_sizes=None if trace.batch_sizes is None else trace.batch_sizes[kept],
    )
    return TraceSummary(sums, sample, kept, trace.steps)


def scale_rows_of(family: VariationalFamily) -> slice:
    """The family's ρ block (the scale rows), a slice of φ."""
    return dict(family.blocks)["rho"]


def coupled_dim(family: VariationalFamily) -> int:
    """d for a mean-field family of d ≤ COUPLING_LIMIT (the cross moments are kept), else 0."""
    return family.dim if family.kind == "mean-field" and family.dim <= COUPLING_LIMIT else 0


@partial(jax.jit, static_argnames=("starts", "scale_rows", "coupled"))
def accumulate(params, grads, *, starts: tuple, scale_rows: slice, coupled: int) -> WindowSums:
    """The window sums of the rows params, grads (T, P) in their dtype, by `add_step` over the steps in order."""
    steps, n_params = params.shape
    initial = empty_sums(n_params, len(starts), scale_rows, coupled, params.dtype)

    def step(sums, row):
        t, phi, grad = row
        return add_step(sums, t, phi, grad, starts=starts, scale_rows=scale_rows), None

    return jax.lax.scan(step, initial, (jnp.arange(steps), params, grads))[0]


def _frozen(array) -> np.ndarray:
    out = np.array(array, copy=True)
    out.setflags(write=False)
    return out


def _validate(summary: TraceSummary) -> None:
    """A TraceError naming the first inconsistency between the sums, the sample and T."""
    sums, steps, kept = summary.sums, summary.steps, summary.sample_steps
    if summary.sample.varying_settings:
        raise TraceError("a summary keeps runs with one σ, C and s; its sample's settings vary from step to step")
    bounds = window_bounds(steps, sums.windows)
    if not np.array_equal(sums.count, np.diff(bounds)):
        raise TraceError(
            f"the window counts {sums.count.tolist()} are not the sizes {np.diff(bounds).tolist()} of {sums.windows} "
            f"windows of {steps} steps: the summary holds a run of another length, or one still in progress"
        )
    if kept.ndim != 1 or kept.size != summary.sample.steps or kept.size < 2:
        raise TraceError(f"sample_steps must list the sample's {summary.sample.steps} steps (at least 2)")
    if np.any(np.diff(kept) <= 0) or kept[0] != 0 or kept[-1] != steps - 1:
        raise TraceError("sample_steps must increase strictly from step 0 to step T − 1")
    p, scale = summary.sample.n_params, scale_rows_of(summary.sample.family)
    rows = scale.stop - scale.start
    shapes = {"first": (p,), "growth": (p,), "open_reference": (p,), "previous": (p,), "open_psi_reference": (rows,)}
    shapes |= dict.fromkeys(ROW_SUMS, (sums.windows, p)) | dict.fromkeys(SCALE_SUMS, (sums.windows, rows))
    for name, shape in shapes.items():
        value = getattr(sums, name)
        if value.shape != shape or not np.all(np.isfinite(value)):
            raise TraceError(f"the summary's {name} must be finite with shape {shape}; got shape {value.shape}")
    if not np.allclose(sums.first, summary.sample.params[0], rtol=1e-5, atol=1e-6 * np.max(np.abs(sums.first))):
        raise TraceError(
            "the summary's first row φ_0 is not its sample's first row: the sums and the sample are of different runs"
        )
    if sums.cross is not None:
        d = summary.sample.dim
        for name, value in sums.cross._asdict().items():
            if value.shape != (sums.windows, d, d) or not np.all(np.isfinite(value)):
                raise TraceError(f"the summary's cross moment {name} must be finite with shape {(sums.windows, d, d)}")
