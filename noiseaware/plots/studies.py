"""The figures of a study's results (`plot_coverage`, `plot_coverage_width`, `plot_calibration` in `noiseaware.plots`).

Coverage: TARP's expected coverage probability against the credibility level per method, the mean over the
R reference draws with their min–max band, beside the diagonal; below, each dimension's marginal curves
(chosen with `coordinates=`, by default all up to MAX_PANELS) when d > 1. Calibration: the reliability
diagram (fraction of positives against the mean predicted probability, mean ± band·sd over the repeats)
above the histogram of the predictions p̂.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ..util.checks import choice
from .base import figure_legend, finish, new_figure, select

__all__ = ["calibration_figure", "coverage_figure", "coverage_width_figure"]

PANEL = 2.9
"""Inches per marginal coverage panel (square)."""
MIN_WIDTH = 7.0
"""Inches: wide enough for a study's title and a legend of several methods."""


def coverage_figure(result, *, rule: str = "research", coordinates=None, title: str | None = None) -> Figure:
    """The coverage curves of a CoverageResult under the reference `rule`: the joint TARP curve and, when
    d > 1, the marginal curves of the chosen dimensions (`coordinates`: θ names or indices)."""
    choice("rule", rule, tuple(result.curves), hint="a reference-point rule the study ran")
    levels = np.asarray(result.levels)
    d = len(result.theta_names)
    selection = select(result.theta_names, coordinates, figure="the coverage figure")
    shown = selection.indices if d > 1 else ()
    columns = max(1, min(4, len(shown)))
    rows = math.ceil(len(shown) / columns)
    figure = new_figure(max(MIN_WIDTH, PANEL * columns + 0.8), 4.4 + PANEL * rows)
    grid = figure.add_gridspec(1 + rows, columns, height_ratios=[1.4] + [1.0] * rows)
    joint = figure.add_subplot(grid[0, :])
    rmse = result.rmse_under(rule)
    colours = {method: f"C{i}" for i, method in enumerate(result.methods)}
    for method in result.methods:
        label = f"{method} (RMSE {rmse[method][0]:.3f})"
        _draw_curve(joint, levels, result.curves[rule][method], colours[method], label)
    _diagonal(joint, "joint (TARP)" if d > 1 else f"{result.theta_names[0]} (TARP)")
    for i, j in enumerate(shown):
        axis = figure.add_subplot(grid[1 + i // columns, i % columns])
        for method in result.methods:
            _draw_curve(axis, levels, result.marginal_curves[rule][method][..., j], colours[method], method)
        _diagonal(axis, f"{result.theta_names[j]} (marginal)")
    figure_legend(figure, [joint])
    s = result.settings
    level = _level_text(s)
    default = f"{s.get('model', '')}: TARP coverage, {level}, M = {s.get('simulations')}, {rule} reference rule"
    return finish(figure, title or default, [selection.note("marginal coordinates") if d > 1 else None])


def coverage_width_figure(results, *, title: str | None = None) -> Figure:
    """Coverage against width for CoverageResults (one per privacy level): per method and level the TARP
    coverage RMSE (mean ± sd over the reference draws, research rule) against the median 90 % interval width
    over the non-private posterior's (median over θ's coordinates), one colour per method, the level beside
    each point; calibrated and as narrow as the non-private posterior is the lower left corner near x = 1."""
    figure = new_figure(MIN_WIDTH, 4.6)
    axis = figure.add_subplot()
    methods = list(dict.fromkeys(m for result in results for m in result.methods))
    for i, method in enumerate(methods):
        points = []
        for result in results:
            if method not in result.methods:
                continue
            width = np.nanmedian(result.median_width_ratio().get(method, np.nan))
            rmse, sd = result.rmse[method]
            points.append((width, rmse, sd, _level_text(result.settings)))
        points = [p for p in points if np.isfinite(p[0])]
        if not points:
            continue
        widths, rmses, sds, labels = zip(*points)
        axis.errorbar(widths, rmses, yerr=sds, fmt="o", color=f"C{i}", label=method, capsize=2)
        for k, ((x, y), text) in enumerate(_merged_labels(widths, rmses, labels).items()):
            shift = (5, 3) if k % 2 == 0 else (5, -9)  # neighbouring levels' labels alternate above and below
            axis.annotate(text, (x, y), textcoords="offset points", xytext=shift, fontsize="x-small", color=f"C{i}")
    axis.axvline(1.0, color="black", linestyle=":", linewidth=1, label="non-private width")
    axis.set_xscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    axis.xaxis.set_major_formatter(plain)
    axis.xaxis.set_minor_formatter(plain)
    axis.set_xlabel("90 % interval width / non-private posterior's (median)")
    axis.set_ylabel("TARP coverage RMSE (0 when calibrated)")
    axis.set_ylim(bottom=0)
    figure_legend(figure, [axis])
    model = results[0].settings.get("model", "") if results else ""
    return finish(figure, title or f"{model}: coverage against interval width")


def _merged_labels(widths, rmses, labels) -> dict[tuple[float, float], str]:
    """{point: its levels' labels joined}: levels of one method whose points coincide (within 2 % of the width and
    of the largest RMSE) share one label, "ε = 0.1, 1", instead of printing over each other."""
    scale = max(max(rmses), 1e-12)
    merged: dict[tuple[float, float], list[str]] = {}
    for x, y, text in zip(widths, rmses, labels):
        near = next((p for p in merged if abs(np.log(p[0] / x)) < 0.02 and abs(p[1] - y) < 0.02 * scale), None)
        merged.setdefault(near or (x, y), []).append(text)
    return {point: texts[0] + "".join(", " + t.split(" = ")[-1] for t in texts[1:]) for point, texts in merged.items()}


def _level_text(settings) -> str:
    if settings.get("epsilon") is not None:
        return f"ε = {settings['epsilon']:g}"
    return f"σ = {settings['noise_multiplier']:.4g}"


def _draw_curve(axis: Axes, levels: np.ndarray, curves: np.ndarray, colour: str, label: str) -> None:
    """The mean of the curves (R, L) over R and their min–max band; nothing when a curve is not finite."""
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


def calibration_figure(result, grid: np.ndarray, band: float, *, title: str | None = None) -> Figure:
    """The reliability diagram of a CalibrationResult: per method the mean over the repeats of each repeat's
    curve interpolated on `grid` with mean ± band·sd, the diagonal; below, the mean fraction of test points
    per bin of p̂ over the repeats."""
    figure = new_figure(6.8, 8.0)
    curve_axis, histogram_axis = figure.subplots(2, 1, height_ratios=[3, 1], sharex=True)
    for index, method in enumerate(result.methods):
        mean, sd = result.reliability_band(method)
        if not np.isfinite(mean).any():
            continue
        colour = f"C{index}"
        rmse, _ = result.mean_sd(method)
        curve_axis.plot(grid, mean, color=colour, lw=1.4, label=f"{method} (calib. RMSE {1e3 * rmse:.0f}×10⁻³)")
        if np.isfinite(sd).any():
            curve_axis.fill_between(grid, mean - band * sd, mean + band * sd, color=colour, alpha=0.15, lw=0)
        histograms = result.histograms[method]
        alive = histograms.sum(axis=1) > 0
        fractions = (histograms[alive] / histograms[alive].sum(axis=1, keepdims=True)).mean(axis=0)
        histogram_axis.stairs(fractions, np.linspace(0.0, 1.0, fractions.size + 1), color=colour, lw=1.2)
    curve_axis.plot([0, 1], [0, 1], color="black", linestyle=":", linewidth=1, label="calibrated")
    curve_axis.set_xlim(0, 1)
    curve_axis.set_ylim(0, 1)
    curve_axis.set_ylabel("fraction of positives")
    histogram_axis.set_xlabel("predicted probability p̂ (posterior predictive)")
    histogram_axis.set_ylabel("fraction of test points")
    figure_legend(figure, [curve_axis], columns=2)
    s = result.settings
    level = f"ε = {s['epsilon']:.3g}, σ = {s['noise_multiplier']:.4g}, " if s.get("noise_multiplier") else ""
    default = (
        f"{s.get('dataset', '')}: reliability, {level}R = {s.get('runs')}, {s.get('bins')} {s.get('binning')} "
        f"bins (band: mean ± {band:g} sd)"
    )
    return finish(figure, title or default)
