"""Every figure of the package: traces, posteriors, studies and tuning, as matplotlib Figures, saved as PNG, PDF or
SVG files by the path's suffix when given one. No other layer imports matplotlib (an import-linter contract).

    posteriors = {"noise-aware": na.fit(trace, "exact", key=0), "naive": na.naive_posterior(trace)}
    plot_trace(trace, "trace.png")                                              # μ_t, burn-in, checks' marks
    plot_trace(trace, "fit.png", posteriors=posteriors, truth=theta, key=1)     # μ_t, μ*, densities
    plot_posteriors(posteriors, "posterior.pdf", truth=theta, key=1)           # the densities alone
    plot_posteriors(post, "post.png", key=1)                                    # one posterior's
    plot_coverage(result, "coverage.svg"); plot_calibration(result, "reliability.png")
    plot_coverage_width(results, "width.png")      # coverage RMSE against interval width, per method and ε
    plot_check(report, "check.png"); plot_privacy_utility(curve, "curve.png")   # the tuner's

Each function returns the Figure (it shows itself in a notebook) and writes it when given a path. The trace's
μ_t panels are drawn in `trace_panels`, the posteriors' densities in `densities`, the studies' curves in
`studies`, the tuner's in `tuning`; what they share (an Agg canvas, the choice of panels, safe saving) in `base`.

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

from matplotlib.figure import Figure

from ..evaluation.calibration_result import BAND, GRID, CalibrationResult
from ..evaluation.result import CoverageResult
from ..posteriors.base import Posterior
from ..posteriors.summary import INTERVAL_LEVEL
from ..trace import BURN_IN, Trace
from ..tuning.curve import PrivacyUtilityCurve
from ..tuning.preflight_report import PreflightReport
from .base import (
    MAX_PANELS,
    PLOT_SUFFIXES,
    checked_truth,
    draw_and_save,
    figure_legend,
    finish,
    new_figure,
    select_columns,
)
from .densities import coordinate_sites, density_figure, draw_density_panels, posterior_densities
from .studies import calibration_figure, coverage_figure, coverage_width_figure
from .trace_panels import ROW_HEIGHT, coordinate_names, draw_mu_panels, trace_figure, trace_title
from .tuning import check_figure, privacy_utility_figure

__all__ = [
    "MAX_PANELS",
    "PLOT_SUFFIXES",
    "plot_calibration",
    "plot_check",
    "plot_coverage",
    "plot_coverage_width",
    "plot_posteriors",
    "plot_privacy_utility",
    "plot_trace",
]


def plot_trace(
    trace: Trace,
    path: str | os.PathLike | None = None,
    *,
    posteriors: Mapping[str, Posterior] | None = None,
    truth=None,
    burn_in: float = BURN_IN,
    level: float = INTERVAL_LEVEL,
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
    posteriors: Posterior | Mapping[str, Posterior],
    path: str | os.PathLike | None = None,
    *,
    key,
    truth=None,
    scale: str | None = None,
    coordinates=None,
    title: str | None = None,
    overwrite: bool = False,
) -> Figure:
    """The posteriors' densities, one panel per quantity; saved to `path` when given.

    posteriors: {label: posterior} (e.g. the noise-aware mixture and the naive Gaussian), all over the same
    θ, or one posterior (labelled by its method). scale: "constrained" (each site on its own scale; the default
    when every posterior has a site map) or "unconstrained" (θ). Each curve is a Gaussian kernel density
    estimate from `densities.DENSITY_DRAWS` draws (key required). truth: the true θ (d,), unconstrained, drawn on
    the shown scale. coordinates: names, site names or indices (default: all, up to MAX_PANELS; the title says
    what is left out).
    """
    single = isinstance(posteriors, Posterior)
    subject = f"{posteriors.kind}, method {posteriors.method}" if single else None
    posteriors = {posteriors.method: posteriors} if single else dict(posteriors)
    if not posteriors:
        raise ValueError("plot_posteriors needs at least one posterior: pass {label: posterior}")
    return draw_and_save(
        lambda: density_figure(
            posteriors,
            key=key,
            truth=truth,
            scale=scale,
            coordinates=coordinates,
            title=title,
            subject=subject,
            figure="plot_posteriors",
        ),
        path,
        overwrite=overwrite,
    )


def plot_coverage(
    result: CoverageResult,
    path: str | os.PathLike | None = None,
    *,
    rule: str = "research",
    coordinates=None,
    title: str | None = None,
    overwrite: bool = False,
) -> Figure:
    """The ECP curves of a coverage study under `rule`: per method the mean over the R reference draws and the
    min–max band, with the diagonal, and each chosen dimension's marginal curves when d > 1 (coordinates: θ
    names or indices; default all, up to MAX_PANELS, the title saying what is left out)."""
    return draw_and_save(
        lambda: coverage_figure(result, rule=rule, coordinates=coordinates, title=title), path, overwrite=overwrite
    )


def plot_coverage_width(
    results: CoverageResult | Sequence[CoverageResult],
    path: str | os.PathLike | None = None,
    *,
    overwrite: bool = False,
) -> Figure:
    """Coverage against width of one or several CoverageResults (e.g. one per ε of a study): per method and
    level the coverage RMSE against the median 90 % interval width over the non-private posterior's."""
    results = [results] if isinstance(results, CoverageResult) else list(results)
    return draw_and_save(lambda: coverage_width_figure(results), path, overwrite=overwrite)


def plot_calibration(
    result: CalibrationResult,
    path: str | os.PathLike | None = None,
    *,
    title: str | None = None,
    overwrite: bool = False,
) -> Figure:
    """The reliability diagram of a calibration study: per method the mean over the repeats and mean ± 1.96 sd,
    with the diagonal, above the mean histogram of the predictions p̂."""
    return draw_and_save(lambda: calibration_figure(result, GRID, BAND, title=title), path, overwrite=overwrite)


def plot_check(report: PreflightReport, path: str | os.PathLike | None = None, *, overwrite: bool = False) -> Figure:
    """A settings check's TARP coverage curve (`na.preflight`, the tuner's check)."""
    return draw_and_save(lambda: check_figure(report), path, overwrite=overwrite)


def plot_privacy_utility(
    curve: PrivacyUtilityCurve, path: str | os.PathLike | None = None, *, overwrite: bool = False
) -> Figure:
    """Posterior sd over the VI sd and coverage RMSE against ε (`na.tuning.privacy_utility`)."""
    return draw_and_save(lambda: privacy_utility_figure(curve), path, overwrite=overwrite)
