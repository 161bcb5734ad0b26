"""Figures of traces, posteriors and studies, written as PNG, PDF or SVG files by the path's suffix.

    posteriors = {"noise-aware": na.fit(trace, "exact", key=0), "naive": na.naive_posterior(trace)}
    plot_trace(trace, "trace.png")                                              # μ_t, burn-in, checks' marks
    plot_trace(trace, "fit.png", posteriors=posteriors, truth=theta, key=1)     # μ_t, μ*, densities
    plot_posteriors(posteriors, "posterior.pdf", truth=theta, key=1)           # the densities alone
    plot_coverage(result, "coverage.svg"); plot_calibration(result, "reliability.png")
    plot_coverage_width(results, "width.png")      # coverage RMSE against interval width, per method and ε

`plot_trace` returns the matplotlib Figure and saves it when given a path; the other functions write the file
and return its path. The same figures, returned as Figures (and saved when given a path), are
`post.plot(key=…)`, `CoverageResult.plot()` and `CalibrationResult.plot()`. The trace's μ_t panels are drawn
here (`trace_panels`), the posteriors' by `posteriors.figure` and the results' by `evaluation.figures`;
shared pieces live in `util.figures`.

Densities show each site on its own (constrained) scale, labelled so (scale="unconstrained": θ itself);
μ_t is the variational mean of the unconstrained θ and is labelled unconstrained. A figure shows every
coordinate up to MAX_PANELS (per column); `coordinates=` (names, site names or indices) chooses others,
and a figure that leaves some out says so in its title (with a UserWarning when left out by default).
Files are checked before any drawing and written atomically; an existing file is replaced only with
`overwrite=True`. Figures use matplotlib's Agg canvas: nothing touches pyplot or needs a display.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.figure import Figure

from ..evaluation.calibration_result import CalibrationResult
from ..evaluation.figures import coverage_width_figure
from ..evaluation.result import CoverageResult
from ..posteriors.base import Posterior
from ..posteriors.figure import coordinate_sites, density_figure, draw_density_panels, posterior_densities
from ..trace import BURN_IN, Trace
from ..util.figures import (
    MAX_PANELS,
    PLOT_SUFFIXES,
    checked_truth,
    draw_and_save,
    figure_legend,
    finish,
    new_figure,
    select_columns,
)
from .trace_panels import ROW_HEIGHT, coordinate_names, draw_mu_panels, trace_figure, trace_title

__all__ = [
    "MAX_PANELS",
    "PLOT_SUFFIXES",
    "plot_calibration",
    "plot_coverage",
    "plot_coverage_width",
    "plot_posteriors",
    "plot_trace",
]


def plot_trace(
    trace: Trace,
    path: str | os.PathLike | None = None,
    *,
    posteriors: Mapping[str, Posterior] | None = None,
    truth=None,
    burn_in: float = BURN_IN,
    level: float = 0.9,
    key=None,
    scale: str | None = None,
    coordinates=None,
    title: str | None = None,
    overwrite: bool = False,
) -> Figure:
    """A figure of the trace's μ_t per θ coordinate, annotated with what was inferred from it; saved to `path`
    (.png, .pdf or .svg) when one is given.

    Left column, one row per coordinate: μ_t (unconstrained) over the steps with the burn-in shaded. Without
    `posteriors` it is the whole figure, marked with the trace checks (`na.diagnose` at `burn_in`, when the
    trace is long enough for them: each window's optimum μ̂*_j and the checks that fired; the verdict below).
    With `posteriors` ({label: posterior}; key required), each posterior holding more than one draw of the VI
    optimum adds the mean of μ* and its central `level` band, and a right column shows their densities as
    `plot_posteriors` does, on `scale`. truth: the true θ (d,), unconstrained. coordinates: names, site
    names or indices, matched in each column on its own scale (default: all, up to MAX_PANELS).
    """
    posteriors = dict(posteriors or {})
    if posteriors and key is None:
        raise TypeError("plot_trace draws θ from the posteriors for their densities: pass key=… (a seed or PRNG key)")
    checked_truth(truth, trace.dim)
    build = (
        (lambda: _trace_and_densities(trace, posteriors, truth, burn_in, level, key, scale, coordinates, title))
        if posteriors
        else (lambda: trace_figure(trace, truth=truth, burn_in=burn_in, coordinates=coordinates, title=title))
    )
    return draw_and_save(build, path, overwrite=overwrite)


def _trace_and_densities(trace, posteriors, truth, burn_in, level, key, scale, coordinates, title) -> Figure:
    """The μ_t panels (left) beside the posteriors' densities (right), each column with its own rows."""
    densities = posterior_densities(posteriors, key=key, truth=truth, scale=scale)
    mu_rows, density_rows = select_columns(
        [(coordinate_names(trace), coordinate_sites(trace.site_map)), (densities.names, densities.sites)],
        coordinates,
        figure="plot_trace",
    )
    rows = max(len(mu_rows.indices), len(density_rows.indices))
    figure = new_figure(11.0, 1.9 + ROW_HEIGHT * rows)
    left, right = figure.subfigures(1, 2, width_ratios=[3, 2])
    mu_axes = draw_mu_panels(
        left,
        trace,
        mu_rows.indices,
        posteriors=posteriors,
        truth=checked_truth(truth, trace.dim),
        burn_in=burn_in,
        level=level,
    )
    density_axes = draw_density_panels(right, densities, densities.draws(key), density_rows.indices)
    left.suptitle("μ_t: the DPVI variational mean of θ (unconstrained)", fontsize="medium")
    right.suptitle(densities.description, fontsize="medium")
    figure_legend(figure, [*mu_axes[:1], *density_axes[:1]])
    notes = [densities.note, *_column_notes(mu_rows.note(), density_rows.note())]
    return finish(figure, title or trace_title(trace), notes)


def _column_notes(mu: str | None, densities: str | None) -> list[str | None]:
    """What each column left out: one note when they say the same, else each named by its column."""
    if mu == densities:
        return [mu]
    return [None if mu is None else f"μ_t: {mu}", None if densities is None else f"densities: {densities}"]


def plot_posteriors(
    posteriors: Mapping[str, Posterior],
    path: str | os.PathLike,
    *,
    truth=None,
    key,
    scale: str | None = None,
    coordinates=None,
    title: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a figure of the posteriors' densities, one panel per quantity; return the path.

    posteriors: {label: posterior} (e.g. the noise-aware mixture and the naive Gaussian), all over the same
    θ. scale: "constrained" (each site on its own scale; the default when every posterior has a site map)
    or "unconstrained" (θ). Each curve is a Gaussian kernel density estimate from 20000 draws. truth: the
    true θ (d,), unconstrained, drawn on the shown scale. coordinates: names, site names or indices.
    """
    if not posteriors:
        raise ValueError("plot_posteriors needs at least one posterior: pass {label: posterior}")
    draw_and_save(
        lambda: density_figure(
            posteriors,
            key=key,
            truth=truth,
            scale=scale,
            coordinates=coordinates,
            title=title,
            figure="plot_posteriors",
        ),
        path,
        overwrite=overwrite,
    )
    return Path(path)


def plot_coverage(
    result: CoverageResult,
    path: str | os.PathLike,
    *,
    rule: str = "research",
    coordinates=None,
    overwrite: bool = False,
) -> Path:
    """Write `result.plot`'s figure: TARP coverage curves per method (mean over the R reference draws,
    min–max band) with the diagonal, and the marginal curves of the chosen dimensions when d > 1."""
    result.plot(path, rule=rule, coordinates=coordinates, overwrite=overwrite)
    return Path(path)


def plot_coverage_width(
    results: CoverageResult | Sequence[CoverageResult], path: str | os.PathLike, *, overwrite: bool = False
) -> Path:
    """Write the coverage-against-width scatter (`evaluation.figures.coverage_width_figure`) of one or several
    CoverageResults (e.g. one per ε of a study): the price of honesty, interval width, beside coverage."""
    results = [results] if isinstance(results, CoverageResult) else list(results)
    draw_and_save(lambda: coverage_width_figure(results), path, overwrite=overwrite)
    return Path(path)


def plot_calibration(result: CalibrationResult, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write `result.plot`'s figure: the reliability diagram per method (mean and mean ± 1.96 sd over the
    repeats) with the diagonal, above the histogram of the predictions p̂."""
    result.plot(path, overwrite=overwrite)
    return Path(path)
