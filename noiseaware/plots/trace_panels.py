"""The trace's figure: μ_t per θ coordinate over the steps (`plot_trace` without posteriors; the left column
of `plot_trace` with them).

μ_t (d,) is the variational mean of θ read before step t. It lives on the unconstrained scale of θ, and the
panels are labelled so: it is not transformed, since T(μ_t) is not the mean of a constrained site (nor,
for a simplex site, an element of it). The burn-in is shaded; the vertical range follows the steps after
it, so the burn-in transient may leave the panel. Given posteriors over the VI optimum φ* (those with
`optimum_draws`), a panel also shows the mean of their μ*_j and its central band. Given the trace checks'
report (`na.diagnose`), a panel shows each window's optimum μ̂*_j (dashed, red where the windows disagree)
and names, in red, the checks that fired on μ_j or ρ_j; the figure's note gives the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from ..checks import TraceDiagnosis, diagnose
from ..posteriors.summary import INTERVAL_LEVEL
from ..trace import BURN_IN
from ..util.checks import fraction, probability
from .base import TRUTH_STYLE, checked_truth, figure_legend, finish, new_figure, padded, select
from .densities import coordinate_sites

if TYPE_CHECKING:
    from ..trace.data import TraceData

FLAG_COLOR = "C3"

__all__ = ["ROW_HEIGHT", "coordinate_names", "draw_mu_panels", "trace_figure", "trace_title"]

ROW_HEIGHT = 2.1
"""Inches per row of panels."""


def trace_figure(
    trace: TraceData, *, truth=None, burn_in: float = BURN_IN, coordinates=None, title: str | None = None
) -> Figure:
    """μ_t over the steps, one panel per chosen coordinate (`coordinates`: names, site names or indices; by
    default all, up to MAX_PANELS), with the burn-in and the true θ (d,), unconstrained, when given."""
    truth = checked_truth(truth, trace.dim)
    selection = select(
        coordinate_names(trace), coordinates, sites=coordinate_sites(trace.site_map), figure="plot_trace"
    )
    figure = new_figure(8.0, 1.3 + ROW_HEIGHT * len(selection.indices))
    try:
        diagnosis = diagnose(trace, burn_in=burn_in)
    except ValueError:  # too short for the checks: the figure shows the iterates alone
        diagnosis = None
    axes = draw_mu_panels(figure, trace, selection.indices, truth=truth, burn_in=burn_in, diagnosis=diagnosis)
    figure_legend(figure, axes)
    verdict = None if diagnosis is None else diagnosis.verdict
    return finish(figure, title or trace_title(trace), [selection.note(), verdict])


def draw_mu_panels(
    container: Figure | SubFigure,
    trace: TraceData,
    rows: Sequence[int],
    *,
    posteriors: Mapping | None = None,
    truth: np.ndarray | None = None,
    burn_in: float = BURN_IN,
    level: float = INTERVAL_LEVEL,
    diagnosis: TraceDiagnosis | None = None,
) -> list[Axes]:
    """One panel of μ_j over the steps per coordinate j in `rows`, sharing the step axis, with the trace checks'
    marks when `diagnosis` is given; returns the axes."""
    burn_in = fraction("burn_in", burn_in, hint="the share of the steps before the fit's window, e.g. 0.2")
    level = probability("level", level, hint="the credibility of the μ* band, e.g. 0.9")
    axes = list(container.subplots(len(rows), 1, squeeze=False, sharex=True)[:, 0])
    names = coordinate_names(trace)
    for axis, j in zip(axes, rows):
        _draw_mu(axis, trace, j, names[j], posteriors or {}, truth, burn_in, level)
        if diagnosis is not None:
            _mark_checks(axis, trace, j, diagnosis)
    axes[-1].set_xlabel("step t")
    return axes


def _draw_mu(axis: Axes, trace: TraceData, j: int, name: str, posteriors: Mapping, truth, burn_in, level) -> None:
    """μ_j over the steps, the burn-in shaded, the posteriors' μ*_j (mean and band) and the true θ_j."""
    steps = np.arange(trace.steps)
    start = math.floor(burn_in * trace.steps)
    mu = np.asarray(trace.params[:, j], np.float64)
    if start > 0:
        axis.axvspan(0, start, color="0.9", label=f"burn-in ({burn_in:.0%}, not used by the fit)")
    axis.plot(steps, mu, lw=0.6, color="0.35", label="μ_t (DPVI iterates, unconstrained)")
    span = [mu[start:]]
    alpha = 0.5 * (1.0 - level)
    for index, (label, post) in enumerate(posteriors.items()):
        draws = getattr(post, "optimum_draws", None)
        if draws is None or draws.shape[0] < 2:  # the naive posterior is the last iterate itself
            continue
        low, high = np.quantile(draws[:, j], [alpha, 1.0 - alpha])
        color = f"C{index}"
        axis.axhspan(low, high, color=color, alpha=0.25, lw=0, label=f"μ* {label}: mean, {100 * level:g}% band")
        axis.axhline(draws[:, j].mean(), color=color, lw=1.2)
        span.append(np.array([low, high]))
    if truth is not None:
        axis.axhline(truth[j], **TRUTH_STYLE, label="true value")
        span.append(truth[j : j + 1])
    axis.set_ylim(*padded(np.concatenate(span), 0.15))
    axis.set_xlim(0, max(trace.steps - 1, 1))
    axis.set_ylabel(f"{name}\nμ_t (unconstrained)")


def _mark_checks(axis: Axes, trace: TraceData, j: int, diagnosis: TraceDiagnosis) -> None:
    """The windows' optima μ̂*_j as dashed segments over their windows, and the checks that fired on μ_j, ρ_j."""
    optima = np.asarray(diagnosis.window_optima)[:, j]
    start = math.floor(diagnosis.burn_in * trace.steps)
    bounds = np.linspace(start, trace.steps, optima.size + 1)
    disagree = bool(diagnosis.flags["windows"][j])
    low, high = axis.get_ylim()
    for left, right, value in zip(bounds[:-1], bounds[1:], optima):
        if np.isfinite(value) and low <= value <= high:
            axis.hlines(
                value,
                left,
                right,
                colors=FLAG_COLOR if disagree else "C2",
                linestyles="--",
                lw=1.0,
                label="μ̂* per window (trace checks)",
            )
    d = trace.dim
    fired = [
        f"{part}: " + ", ".join(name for name, flags in diagnosis.flags.items() if flags[index])
        for part, index in (("μ", j), ("ρ", d + j))
        if any(flags[index] for flags in diagnosis.flags.values())
    ]
    if fired:
        axis.text(
            0.01,
            0.95,
            "checks fired — " + "; ".join(fired),
            transform=axis.transAxes,
            va="top",
            color=FLAG_COLOR,
            fontsize=8,
        )


def coordinate_names(trace: TraceData) -> tuple[str, ...]:
    """The names of θ's coordinates (d,), from the μ half of the trace's param_names."""
    return tuple(name.removeprefix("mu:") for name in trace.param_names[: trace.dim])


def trace_title(trace: TraceData) -> str:
    """'DPVI trace, ε = 1, σ = 1.2, T = 10000'."""
    if trace.epsilon is None:
        privacy = "ε unknown"
    elif math.isinf(trace.epsilon):
        privacy = "non-private"
    else:
        privacy = f"ε = {trace.epsilon:g}"
    return f"DPVI trace, {privacy}, σ = {trace.noise_multiplier:.4g}, T = {trace.steps}"
