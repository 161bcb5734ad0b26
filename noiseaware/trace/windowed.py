"""`WindowedTrace`: a DP-SGD run kept as its window sums (`sums`) and a thinned sample of rows, not T × P rows.

The gradient model and the checks read a run only through its moments (docs/method.md §2.1), and sums of released
values are post-processing: a windowed trace holds them over W windows of steps (a burn-in is chosen afterwards at a
window boundary), with `sample`, a `Trace` of R rows at evenly spaced steps (the figures, φ_T and every setting of the
run: σ, C, q, N, s, the convention, the family, the sites) and, for a run that released counts of clipped
examples, their window sums `clipped`. Its memory is O(W·P + R·P) whatever T is
(docs/windowed.md). `windowed(trace)` keeps a recorded trace so; `noiseaware.adapters.windowing` accumulates one
inside a training loop. It is a `Run` (`run`): `rows()` is None.
"""

from __future__ import annotations

import dataclasses
import math
import os
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..util.deprecation import warn_renamed
from .core import Trace, as_spent
from .data import BURN_IN
from .families import VariationalFamily
from .moments import Moments, moments_of_windows
from .report import KeptColumns, description
from .run import ClipCounts, RunLayout, RunSettings, kept_start, scale_rows_of
from .sums import COUPLING_LIMIT, ROW_SUMS, SCALE_SUMS, WindowSums, add_step, empty_sums, window_bounds
from .validation import TraceError
from .windowed_files import WINDOWED_SCHEMA, WINDOWED_VERSION, is_windowed_file, read_windowed, write_windowed

__all__ = [
    "ROWS",
    "WINDOWS",
    "WindowedTrace",
    "accumulate",
    "clipped_window_sums",
    "coupled_dim",
    "load_run",
    "sample_steps",
    "windowed",
]

WINDOWS = 10
"""W, the windows of a windowed trace: burn-ins at multiples of 1/10 of the run (the default 0.2 among them)."""
ROWS = 64
"""R, the rows of a windowed trace's sample (evenly spaced steps, the first and the last among them)."""


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class WindowedTrace(RunLayout):
    """A run of T steps as its window sums and a sample of its rows.

    sums: `WindowSums` of the run's T steps over W windows (numpy arrays); sample: the rows at `sample_steps` (R,)
    as a `Trace` with the run's settings; steps: T. The settings (σ, C, q, N, s, λ, ε, δ, the convention, the
    family, the names and sites) are the sample's `RunSettings`. A run whose σ, C or s vary from step to step is
    refused: the gradient model needs one noise sd per coordinate. clipped (W, 2): per window Σ c̃_t and Σ c̃_t² of
    the released counts of clipped examples, present exactly when the sample holds its rows' counts.
    """

    sums: WindowSums
    sample: Trace
    sample_steps: np.ndarray
    steps: int
    clipped: np.ndarray | None = None

    def __post_init__(self):
        sums = self.sums._replace(**{k: _frozen(v) for k, v in self.sums._asdict().items() if k != "cross"})
        if sums.cross is not None:
            sums = sums._replace(cross=type(sums.cross)(*(_frozen(x) for x in sums.cross)))
        object.__setattr__(self, "sums", sums)
        object.__setattr__(self, "sample_steps", _frozen(np.asarray(self.sample_steps, np.int64)))
        if self.clipped is not None:
            object.__setattr__(self, "clipped", _frozen(np.asarray(self.clipped, np.float64)))
        object.__setattr__(self, "sample", as_spent(self.sample, self.steps))
        _validate(self)

    @property
    def settings(self) -> RunSettings:
        """The run's settings, its sample's."""
        return self.sample.settings

    @property
    def n_params(self) -> int:
        """P, the length of φ."""
        return self.settings.n_params

    @property
    def param_names(self) -> tuple[str, ...]:
        """The names of φ's entries (P,)."""
        return self.settings.param_names

    def moments(self, burn_in: float = BURN_IN, *, cross: bool = False) -> Moments:
        """The moments of the windows after the burn-in, which must start one (`window_from`); the cross moments are
        there when the sums kept them (a mean-field run of d ≤ COUPLING_LIMIT), whatever `cross` says."""
        start = kept_start(self, burn_in)
        return moments_of_windows(self.sums, self.window_from(start), start)

    def clip_counts(self, burn_in: float = BURN_IN) -> ClipCounts | None:
        """The released clipped counts of the windows after the burn-in, which must start one, as sums; None for a
        run that released none."""
        if self.clipped is None:
            return None
        w = self.window_from(kept_start(self, burn_in))
        total, squares = self.clipped[w:].sum(axis=0)
        steps = int(self.bounds[-1] - self.bounds[w])
        return ClipCounts(steps, float(total), float(squares), self.sample.count_noise_multiplier)

    @property
    def batch_sizes(self) -> np.ndarray | None:
        """The released batch sizes B_t at the sample's steps (R,), or None (one size for the run: a windowed trace
        refuses Poisson batch sizes that varied)."""
        return self.sample.batch_sizes

    def iterates(self) -> np.ndarray:
        """The sample's rows φ_t (R, P), thinned."""
        return self.sample.params

    def rows(self) -> None:
        """None: a windowed trace keeps its sums, not its rows (its sample's rows are `sample.rows()`)."""
        return None

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
        """() always: a windowed trace holds runs with one σ, C and s."""
        return ()

    def final_iterate(self) -> np.ndarray:
        """φ_T (P,), the sample's (its last row is step T − 1)."""
        return self.sample.final_iterate()

    def first_kept_window(self, burn_in: float) -> int:
        """The window that starts at step ⌊burn_in·T⌋ (`window_from`)."""
        return self.window_from(math.floor(burn_in * self.steps))

    def window_from(self, step: int) -> int:
        """The window w whose burn-in starts at `step`: its first step ⌊w·T/W⌋, or ⌊(w/W)·T⌋ as a burn-in of w/W
        computes it (one step apart for some T); a ValueError naming the burn-ins it offers when none does."""
        for w in range(self.windows):
            if step in (self.bounds[w], math.floor((w / self.windows) * self.steps)):
                return w
        offered = ", ".join(f"{w / self.windows:g}" for w in range(self.windows))
        raise ValueError(
            f"a windowed trace keeps its sums over {self.windows} windows, so a burn-in must start a window; "
            f"burn_in={step / self.steps:g} (step {step} of {self.steps}) does not: use one of {offered}"
        )

    def offers(self, burn_in: float) -> bool:
        """Whether a burn-in of `burn_in` starts one of the windowed trace's windows."""
        try:
            self.first_kept_window(burn_in)
        except ValueError:
            return False
        return True

    def mean_noise_sd(self, start: int = 0) -> np.ndarray:
        """σ·b·C/s (P,): the DP noise sd of every step (a windowed trace's settings are constant)."""
        return np.broadcast_to(self.settings.noise_sd, (self.n_params,))

    def describe(self) -> str:
        """A readable report, as `Trace.describe`: the settings, then per θ coordinate μ and sd at φ_T (the last
        sample row where φ_T is unknown), the mean of μ and the sd of G over the windows after the default burn-in
        (the first window that starts at or after it), beside the DP noise sd σC/s."""
        first = math.ceil(BURN_IN * self.windows - 1e-9)
        m = moments_of_windows(self.sums, first, int(self.bounds[first]))
        grad_sd = np.sqrt(np.maximum(m.sum_gg / m.count - (m.sum_g / m.count) ** 2, 0.0))
        title = (
            f"noiseaware windowed trace (schema {WINDOWED_SCHEMA} v{WINDOWED_VERSION}: {self.windows} windows, "
            f"{len(self.sample_steps)} sample rows)"
        )
        kept = KeptColumns(
            m.centre[: self.dim], grad_sd, self.sample.params[-1], 1.0 - first / self.windows, self.steps
        )
        return description(self.sample, kept=kept, title=title)

    def summary(self) -> str:
        """Deprecated: `describe()`."""
        warn_renamed("WindowedTrace.summary()", "WindowedTrace.describe()")
        return self.describe()

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> None:
        """Write the windowed trace to `path` (.npz) atomically; an existing file is replaced only with
        `overwrite=True`."""
        write_windowed(self, path, overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike) -> WindowedTrace:
        """Read and validate a windowed trace's file (.npz); nothing is ever unpickled. A TraceError names what is
        wrong."""
        *parts, clipped = read_windowed(path)
        try:
            return cls(*parts, clipped=clipped)
        except TraceError as error:
            raise TraceError(f"{path}: {error}") from None

    def __repr__(self) -> str:
        coupled = "" if self.sums.cross is None else ", cross moments"
        return (
            f"WindowedTrace(T={self.steps}, P={self.n_params}, {self.windows} windows{coupled}, "
            f"{len(self.sample_steps)} sample rows, σ={self.settings.noise_multiplier:g}, ε={self.settings.epsilon})"
        )


def load_run(path: str | os.PathLike) -> Trace | WindowedTrace:
    """The trace or the windowed trace in `path`, told apart by the file's schema (a windowed trace is an .npz whose
    schema is "noiseaware.trace-summary"); each validated, nothing unpickled."""
    return WindowedTrace.load(path) if is_windowed_file(path) else Trace.load(path)


def sample_steps(steps: int, rows: int) -> np.ndarray:
    """R ≤ T evenly spaced steps from 0 to T − 1 (both kept), (R,) int."""
    if rows < 2:
        raise ValueError(f"a windowed trace's sample needs at least 2 rows (the first and the last step), got {rows}")
    return np.unique(np.round(np.linspace(0, steps - 1, min(rows, steps))).astype(np.int64))


def windowed(trace: Trace, *, windows: int = WINDOWS, rows: int = ROWS) -> WindowedTrace:
    """`trace` kept as its sums over `windows` windows (in float64) and `rows` sample rows."""
    if isinstance(trace, WindowedTrace):
        raise TypeError("this run is already a windowed trace (its window sums and sample rows): use it as it is")
    if not isinstance(trace, Trace):
        raise TypeError(f"windowed() takes a Trace (na.Trace.load, record_dpvi), not {type(trace).__name__}")
    if trace.varying_settings:
        raise TraceError(
            f"the trace's {', '.join(trace.varying_settings)} vary from step to step; a windowed trace keeps runs "
            "with one σ, C and s, the only ones the gradient model fits: fit the trace itself"
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
    counts = trace.clipped_counts
    sample = dataclasses.replace(
        trace,
        params=trace.params[kept],
        grads=trace.grads[kept],
        batch_sizes=None if trace.batch_sizes is None else trace.batch_sizes[kept],
        clipped_counts=None if counts is None else counts[kept],
    )
    return WindowedTrace(sums, sample, kept, trace.steps, clipped_window_sums(counts, bounds))


def clipped_window_sums(counts: np.ndarray | None, bounds: np.ndarray) -> np.ndarray | None:
    """Per window (bounds (W + 1,)) Σ c̃_t and Σ c̃_t² of counts c̃ (T,), (W, 2) in float64; None for None."""
    if counts is None:
        return None
    counts = np.asarray(counts, np.float64)
    return np.stack([np.add.reduceat(counts, bounds[:-1]), np.add.reduceat(counts**2, bounds[:-1])], axis=1)


def coupled_dim(family: VariationalFamily) -> int:
    """d for a mean-field or point family of d ≤ COUPLING_LIMIT (the cross moments are kept), else 0."""
    return family.dim if family.cross_moments and family.dim <= COUPLING_LIMIT else 0


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


def _check_sample_rows(run: WindowedTrace, bounds: np.ndarray) -> None:
    """A TraceError unless every sample row at a window's first step is that window's K_w and every one at its last
    step is K_w + its last y (`WindowSums`): the rows the sums pin down, the last step T − 1 always among them."""
    sums, kept, params = run.sums, run.sample_steps, np.asarray(run.sample.params, np.float64)
    reference, last = np.asarray(sums.reference, np.float64), np.asarray(sums.last, np.float64)
    pinned = [(np.flatnonzero(kept == start), reference[w]) for w, start in enumerate(bounds[:-1])]
    pinned += [(np.flatnonzero(kept == end - 1), reference[w] + last[w]) for w, end in enumerate(bounds[1:])]
    scale = max(float(np.max(np.abs(reference))), 1.0)
    for rows, expected in pinned:
        if rows.size and not np.allclose(params[rows[0]], expected, rtol=1e-4, atol=1e-5 * scale):
            raise TraceError(
                f"the windowed trace's sample row at step {int(kept[rows[0]])} is not the row its window sums hold: "
                "the sums and the sample are of different runs"
            )


def _validate(run: WindowedTrace) -> None:
    """A TraceError naming the first inconsistency between the sums, the sample and T."""
    sums, steps, kept = run.sums, run.steps, run.sample_steps
    if run.sample.varying_settings:
        raise TraceError(
            "a windowed trace keeps runs with one σ, C and s; its sample's settings vary from step to step"
        )
    bounds = window_bounds(steps, sums.windows)
    if not np.array_equal(sums.count, np.diff(bounds)):
        raise TraceError(
            f"the window counts {sums.count.tolist()} are not the sizes {np.diff(bounds).tolist()} of {sums.windows} "
            f"windows of {steps} steps: the windowed trace holds a run of another length, or one still in progress"
        )
    if (run.clipped is None) != (run.sample.clipped_counts is None):
        held = "the window sums of clipped counts" if run.clipped is not None else "its sample's clipped counts"
        raise TraceError(f"the windowed trace holds {held} but not the other: they are one released series")
    if run.clipped is not None and (run.clipped.shape != (sums.windows, 2) or not np.all(np.isfinite(run.clipped))):
        raise TraceError(f"the windowed trace's clipped count sums must be finite with shape ({sums.windows}, 2)")
    if kept.ndim != 1 or kept.size != run.sample.steps or kept.size < 2:
        raise TraceError(f"sample_steps must list the sample's {run.sample.steps} steps (at least 2)")
    if np.any(np.diff(kept) <= 0) or kept[0] != 0 or kept[-1] != steps - 1:
        raise TraceError("sample_steps must increase strictly from step 0 to step T − 1")
    p, scale = run.sample.n_params, scale_rows_of(run.sample.family)
    rows = scale.stop - scale.start
    shapes = {"first": (p,), "growth": (p,), "open_reference": (p,), "previous": (p,), "open_psi_reference": (rows,)}
    shapes |= dict.fromkeys(ROW_SUMS, (sums.windows, p)) | dict.fromkeys(SCALE_SUMS, (sums.windows, rows))
    for name, shape in shapes.items():
        value = getattr(sums, name)
        if value.shape != shape or not np.all(np.isfinite(value)):
            raise TraceError(f"the windowed trace's {name} must be finite with shape {shape}; got shape {value.shape}")
    if not np.allclose(sums.first, run.sample.params[0], rtol=1e-5, atol=1e-6 * np.max(np.abs(sums.first))):
        raise TraceError(
            "the windowed trace's first row φ_0 is not its sample's first row: the sums and the sample are of "
            "different runs"
        )
    _check_sample_rows(run, bounds)
    if sums.cross is not None:
        d = run.sample.dim
        for name, value in sums.cross._asdict().items():
            if value.shape != (sums.windows, d, d) or not np.all(np.isfinite(value)):
                raise TraceError(
                    f"the windowed trace's cross moment {name} must be finite with shape {(sums.windows, d, d)}"
                )
