"""Figures of traces and posteriors, written as PNG files (matplotlib's Agg canvas; nothing is shown).

    posteriors = {"noise-aware": na.fit(trace, "exact", key=0), "naive": na.naive_posterior(trace)}
    plot_trace(trace, "trace.png", posteriors=posteriors, truth=theta, key=1)   # μ_t, μ*, densities of θ
    plot_posteriors(posteriors, "posterior.png", truth=theta, key=1)           # the densities of θ alone

Figures show θ in the unconstrained space of the trace, one row per coordinate (the first
`MAX_COORDINATES`). Files are written atomically: a PNG is complete or absent. The figures are built
on `matplotlib.figure.Figure` with an Agg canvas, so plotting never touches pyplot's global state or
needs a display.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy.ndimage import gaussian_filter1d

from .evaluation.calibration_result import BAND, GRID, CalibrationResult
from .evaluation.result import CoverageResult
from .posteriors.base import Posterior
from .trace import BURN_IN, Trace
from .util.files import atomic_write
from .util.keys import as_key

__all__ = ["plot_calibration", "plot_coverage", "plot_posteriors", "plot_trace"]

MAX_COORDINATES = 8
"""Rows drawn at most: the first θ coordinates of a large model."""
DENSITY_DRAWS = 20_000
"""Draws of θ per posterior behind each density curve."""
DENSITY_POINTS = 400
DENSITY_TAIL = 5e-4
"""The density panel spans the posteriors' DENSITY_TAIL … 1 − DENSITY_TAIL quantiles (and the truth)."""
DPI = 120
ROW_HEIGHT = 2.6
TRUTH_STYLE = {"color": "k", "ls": "--", "lw": 1.2}


def plot_trace(
    trace: Trace,
    path: str | os.PathLike,
    *,
    posteriors: Mapping[str, Posterior] | None = None,
    truth=None,
    burn_in: float = BURN_IN,
    level: float = 0.9,
    key=None,
    title: str | None = None,
) -> Path:
    """Write a PNG of the trace's μ_t per θ coordinate, annotated with what was inferred from it; return the path.

    Left column, one row per coordinate: μ_t over the steps t with the burn-in shaded (the fit uses the
    steps after it), and for each posterior holding more than one draw of the VI optimum (the noise-aware
    ones; the naive posterior is the trace's own last iterate) the mean of μ* and its central `level`
    band. The vertical range follows the post-burn-in part, so the burn-in transient may leave the
    panel. truth: the true θ (d,), unconstrained, as a dashed line. With `posteriors` ({label:
    posterior}), a right column shows their densities of θ as in `plot_posteriors`.
    """
    shown = _shown(trace.dim)
    names = [name.removeprefix("mu:") for name in trace.param_names[: trace.dim]]
    truth = _truth(truth, trace.dim)
    posteriors = dict(posteriors or {})
    if posteriors and key is None:
        raise TypeError("plot_trace draws θ from the posteriors for their densities: pass key=… (a seed or PRNG key)")
    samples = _samples(posteriors, key) if posteriors else {}
    columns = 2 if posteriors else 1
    figure = _figure(len(shown), columns, width=11.0 if posteriors else 8.0)
    axes = figure.subplots(len(shown), columns, squeeze=False, width_ratios=[3, 2] if posteriors else None)
    for row, j in enumerate(shown):
        _draw_mu_trace(axes[row, 0], trace, j, names[j], posteriors, truth, burn_in, level)
        if posteriors:
            _draw_densities(
                axes[row, 1],
                {label: s[:, j] for label, s in samples.items()},
                names[j],
                None if truth is None else truth[j],
            )
    axes[-1, 0].set_xlabel("step t")
    for axis in axes[:-1, 0]:  # one step axis for the trace column; each density keeps its own θ axis
        axis.sharex(axes[-1, 0])
        axis.tick_params(labelbottom=False)
    _figure_legend(figure, axes[0])
    figure.suptitle(_title(title or _trace_title(trace), len(shown), trace.dim))
    return _save(figure, path)


def plot_posteriors(
    posteriors: Mapping[str, Posterior],
    path: str | os.PathLike,
    *,
    truth=None,
    key,
    title: str | None = None,
) -> Path:
    """Write a PNG of the posteriors' densities of θ, one panel per coordinate; return the path.

    posteriors: {label: posterior} (e.g. the noise-aware mixture and the naive Gaussian), all over the
    same θ. Each curve is a Gaussian kernel density estimate from `post.sample(key, 20000)`. truth: the
    true θ (d,), unconstrained, as a dashed vertical line.
    """
    if not posteriors:
        raise ValueError("plot_posteriors needs at least one posterior: pass {label: posterior}")
    first = next(iter(posteriors.values()))
    shown = _shown(first.dim)
    truth = _truth(truth, first.dim)
    samples = _samples(posteriors, key)
    figure = _figure(len(shown), 1, width=6.0)
    axes = figure.subplots(len(shown), 1, squeeze=False)
    for row, j in enumerate(shown):
        _draw_densities(
            axes[row, 0],
            {label: s[:, j] for label, s in samples.items()},
            first.theta_names[j],
            None if truth is None else truth[j],
        )
    axes[0, 0].legend(loc="best", fontsize="small")
    figure.suptitle(_title(title or "posterior densities of θ", len(shown), first.dim))
    return _save(figure, path)


# ---------------------------------------------------------------- panels


def _draw_mu_trace(
    axis: Axes, trace: Trace, j: int, name: str, posteriors, truth, burn_in: float, level: float
) -> None:
    """μ_j over the steps, the burn-in shaded, the posteriors' μ*_j (mean and band) and the true θ_j."""
    steps = np.arange(trace.steps)
    start = int(np.floor(burn_in * trace.steps))
    mu = np.asarray(trace.params[:, j], np.float64)
    if start > 0:
        axis.axvspan(0, start, color="0.9", label=f"burn-in ({burn_in:.0%}, not used by the fit)")
    axis.plot(steps, mu, lw=0.6, color="0.35", label="μ_t (DPVI iterates)")
    span = [mu[start:]]
    for index, (label, post) in enumerate(posteriors.items()):
        draws = post.optimum_draws[:, j]
        if draws.size < 2:
            continue
        low, high = post.optimum_interval(level)
        color = f"C{index}"
        axis.axhspan(low[j], high[j], color=color, alpha=0.25, lw=0, label=f"μ* {label}: mean, {100 * level:g}% band")
        axis.axhline(draws.mean(), color=color, lw=1.2)
        span.append(np.array([low[j], high[j]]))
    if truth is not None:
        axis.axhline(truth[j], **TRUTH_STYLE, label="true θ")
        span.append(np.array([truth[j]]))
    axis.set_ylim(*_padded(np.concatenate(span), 0.15))
    axis.set_xlim(0, max(trace.steps - 1, 1))
    axis.set_ylabel(f"μ ({name})")


def _draw_densities(axis: Axes, samples: Mapping[str, np.ndarray], name: str, truth: float | None) -> None:
    """Kernel density estimates of one θ coordinate, one curve per posterior, and the true value."""
    ends = [np.quantile(values, [DENSITY_TAIL, 1.0 - DENSITY_TAIL]) for values in samples.values()]
    if truth is not None:
        ends.append(np.array([truth]))
    grid = np.linspace(*_padded(np.concatenate(ends), 0.05), DENSITY_POINTS)
    for index, (label, values) in enumerate(samples.items()):
        density = _density(values, grid)
        axis.plot(grid, density, color=f"C{index}", lw=1.4, label=label)
        axis.fill_between(grid, density, color=f"C{index}", alpha=0.15, lw=0)
    if truth is not None:
        axis.axvline(truth, **TRUTH_STYLE, label="true θ")
    axis.set_ylim(bottom=0.0)
    axis.set_xlabel(f"θ ({name}, unconstrained)")
    axis.set_ylabel("posterior density")


def _figure_legend(figure: Figure, axes) -> None:
    """One legend below the panels for the entries of `axes` (a label shared by several panels once)."""
    entries = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    figure.legend(
        list(entries.values()),
        list(entries),
        loc="outside lower center",
        ncols=min(len(entries), 3),
        fontsize="small",
        frameon=False,
    )


def _density(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """A Gaussian kernel density estimate of `values` on the equally spaced `grid` (Scott's bandwidth), by
    binning onto the grid and smoothing: O(n + grid) rather than O(n · grid). Values that do not vary give a
    spike of unit mass."""
    step = grid[1] - grid[0]
    counts, _ = np.histogram(values, bins=grid.size, range=(grid[0] - step / 2, grid[-1] + step / 2))
    bandwidth = np.std(values) * values.size ** (-1 / 5)
    return gaussian_filter1d(counts.astype(np.float64), bandwidth / step, mode="constant") / (values.size * step)


def plot_coverage(result: CoverageResult, path: str | os.PathLike, *, rule: str = "research") -> Path:
    """TARP coverage curves of a CoverageResult: ECP against credibility level per method (mean over the
    R reference draws, min–max band), with the diagonal; a second row of panels shows each dimension's
    marginal curves (first MAX_COORDINATES) when d > 1."""
    levels = np.asarray(result.levels)
    d = len(result.theta_names)
    shown = _shown(d) if d > 1 else []
    columns = max(1, min(4, len(shown)))
    rows = 1 + (-(-len(shown) // columns) if shown else 0)
    figure = _figure(rows, columns, width=3.2 * columns + 1.0)
    grid = figure.add_gridspec(rows, columns)
    joint = figure.add_subplot(grid[0, :])
    rmse = result.rmse_under(rule)
    colours = {m: f"C{i}" for i, m in enumerate(result.methods)}
    for method in result.methods:
        curves = result.curves[rule][method]
        _draw_curve(joint, levels, curves, colours[method], f"{method} (RMSE {rmse[method][0]:.3f})")
    _diagonal(joint, "joint (TARP)")
    axes = [joint]
    for i, j in enumerate(shown):
        axis = figure.add_subplot(grid[1 + i // columns, i % columns])
        for method in result.methods:
            _draw_curve(axis, levels, result.marginal_curves[rule][method][..., j], colours[method], method)
        _diagonal(axis, result.theta_names[j])
        axes.append(axis)
    s = result.settings
    level = f"ε = {s['epsilon']:g}" if s.get("epsilon") is not None else f"σ = {s['noise_multiplier']:.4g}"
    figure.suptitle(
        _title(
            f"{s.get('model', '')}: coverage, {level}, M = {s.get('simulations')}, {rule} reference rule", len(shown), d
        )
        if shown
        else f"{s.get('model', '')}: coverage, {level}, M = {s.get('simulations')}, {rule} reference rule"
    )
    _figure_legend(figure, [joint])
    return _save(figure, path)


def _draw_curve(axis: Axes, levels: np.ndarray, curves: np.ndarray, colour: str, label: str) -> None:
    if not np.all(np.isfinite(curves)):
        return
    axis.fill_between(levels, curves.min(0), curves.max(0), color=colour, alpha=0.2, linewidth=0)
    axis.plot(levels, curves.mean(0), color=colour, label=label)


def _diagonal(axis: Axes, title: str) -> None:
    axis.plot([0, 1], [0, 1], color="black", linestyle=":", linewidth=1, label="calibrated")
    axis.set_xlim(0, 1)
    axis.set_ylim(0, 1)
    axis.set_aspect("equal")
    axis.set_title(title, fontsize="small")
    axis.set_xlabel("credibility level")
    axis.set_ylabel("expected coverage")


# ---------------------------------------------------------------- helpers


def _samples(posteriors: Mapping[str, Posterior], key) -> dict[str, np.ndarray]:
    """DENSITY_DRAWS draws of θ (n, d) per posterior, from one key (the same stream for each)."""
    key = as_key(key)
    return {label: np.asarray(post.sample(key, DENSITY_DRAWS)) for label, post in posteriors.items()}


def _shown(dim: int) -> list[int]:
    return list(range(min(dim, MAX_COORDINATES)))


def _truth(truth, dim: int) -> np.ndarray | None:
    if truth is None:
        return None
    truth = np.asarray(truth, np.float64).reshape(-1)
    if truth.shape != (dim,):
        raise ValueError(f"truth must hold the d = {dim} coordinates of θ (unconstrained); got {truth.size} values")
    return truth


def _padded(values: np.ndarray, fraction: float) -> tuple[float, float]:
    """(low, high) around `values`, widened by `fraction` of their range on each side (never empty)."""
    low, high = float(np.min(values)), float(np.max(values))
    pad = fraction * (high - low) or 0.05 * max(1.0, abs(low))
    return low - pad, high + pad


def _figure(rows: int, columns: int, width: float) -> Figure:
    figure = Figure(figsize=(width, 0.9 + ROW_HEIGHT * rows), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _trace_title(trace: Trace) -> str:
    epsilon = "ε unknown" if trace.epsilon is None else f"ε = {trace.epsilon:g}"
    return f"DPVI trace, {epsilon}, σ = {trace.noise_multiplier:.4g}, T = {trace.steps}"


def _title(title: str, shown: int, dim: int) -> str:
    return title if shown == dim else f"{title} (first {shown} of {dim} coordinates)"


def _save(figure: Figure, path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"cannot save {path}: the directory {path.parent} does not exist; create it first")
    atomic_write(path, lambda temporary: figure.savefig(temporary, format="png", dpi=DPI))
    return path


def plot_calibration(result: CalibrationResult, path: str | os.PathLike) -> Path:
    """Reliability diagram of a CalibrationResult: per method the fraction of positives against the mean
    predicted probability (each repeat's binned curve interpolated on a common grid; mean and
    mean ± 1.96 sd over the repeats), the diagonal; below, the histogram of the predictions p̂ (mean
    fraction of test points per bin over the repeats)."""
    figure = Figure(figsize=(6.4, 7.4), layout="constrained")
    FigureCanvasAgg(figure)
    curve_axis, histogram_axis = figure.subplots(2, 1, height_ratios=[3, 1], sharex=True)
    for index, method in enumerate(result.methods):
        mean, sd = result.reliability_band(method)
        if not np.isfinite(mean).any():
            continue
        colour = f"C{index}"
        rmse, _ = result.mean_sd(method)
        curve_axis.plot(GRID, mean, color=colour, lw=1.4, label=f"{method} (calib. RMSE {1e3 * rmse:.0f}×10⁻³)")
        if np.isfinite(sd).any():
            curve_axis.fill_between(GRID, mean - BAND * sd, mean + BAND * sd, color=colour, alpha=0.15, lw=0)
        histograms = result.histograms[method]
        alive = histograms.sum(axis=1) > 0
        fractions = (histograms[alive] / histograms[alive].sum(axis=1, keepdims=True)).mean(axis=0)
        edges = np.linspace(0.0, 1.0, fractions.size + 1)
        histogram_axis.stairs(fractions, edges, color=colour, lw=1.2)
    curve_axis.plot([0, 1], [0, 1], color="black", linestyle=":", linewidth=1, label="calibrated")
    curve_axis.set_xlim(0, 1)
    curve_axis.set_ylim(0, 1)
    curve_axis.set_ylabel("fraction of positives")
    curve_axis.legend(loc="upper left", fontsize="small")
    histogram_axis.set_xlabel("predicted probability p̂ (posterior predictive)")
    histogram_axis.set_ylabel("fraction of test points")
    s = result.settings
    level = f"ε = {s['epsilon']:.3g}, σ = {s['noise_multiplier']:.4g}, " if s.get("noise_multiplier") else ""
    curve_axis.set_title(
        f"{s.get('dataset', '')}: reliability, {level}R = {s.get('runs')}, "
        f"{s.get('bins')} {s.get('binning')} bins (band: mean ± {BAND:g} sd)",
        fontsize="small",
    )
    return _save(figure, path)
