"""Figures of tuning: the check's coverage curve and the privacy–utility curve."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .base import finish, new_figure

__all__ = ["check_figure", "privacy_utility_figure"]


def check_figure(report) -> Figure:
    """A PreflightReport's TARP coverage curve (ECP against credibility level, exact NA-DPVI) beside the diagonal."""
    figure = new_figure(5.2, 4.6)
    axis = figure.add_subplot()
    levels = np.asarray(report.levels)
    axis.plot([0, 1], [0, 1], color="0.5", ls=":", lw=1)
    axis.plot(levels, report.ecp, "o-", color="C0", ms=3, label=f"exact (RMSE {report.coverage_rmse[0]:.3f})")
    axis.set(xlabel="credibility level", ylabel="expected coverage (TARP)", xlim=(0, 1), ylim=(0, 1))
    axis.legend(loc="upper left")
    return finish(
        figure,
        f"{report.model} at ε = {report.epsilon:g}: {report.simulations} fresh simulations",
        [f"sd / VI sd {report.mean_sd_ratio:.2f}; clipped {100 * report.clipped:.2f} %; {report.verdict}"],
    )


def privacy_utility_figure(curve) -> Figure:
    """Posterior sd over the non-private VI sd (left) and TARP coverage RMSE (right) against ε, log axes."""
    figure = new_figure(8.4, 3.8)
    width, coverage = figure.subplots(1, 2)
    eps = np.asarray(curve.epsilons)
    width.plot(eps, curve.sd_ratio, "o-", color="C0")
    width.axhline(1.0, color="0.5", ls=":", lw=1)
    width.set(xscale="log", xlabel="ε", ylabel="posterior sd / non-private VI sd")
    rmse = np.array([r.coverage_rmse for r in curve.reports])
    coverage.errorbar(eps, rmse[:, 0], yerr=rmse[:, 1], fmt="o-", color="C1", capsize=3)
    coverage.set(xscale="log", xlabel="ε", ylabel="coverage RMSE (TARP, exact)", ylim=(0, None))
    for e, report in zip(eps, curve.reports):
        if not report.ok:
            coverage.annotate("!", (e, report.coverage_rmse[0]), color="C3", ha="center", va="bottom")
    return finish(
        figure,
        f"privacy–utility of {curve.model}: {_simulations(curve.reports, eps)}",
        ["! marks a privacy level whose check has findings"],
    )


def _simulations(reports, eps) -> str:
    """How many simulations each ε was checked on: one number when they agree, else the most common one and the
    ε that differ (the tuned ε shows its own, larger check)."""
    counts = [report.simulations for report in reports]
    common = max(set(counts), key=counts.count)
    others = [f"{count} at ε = {e:g}" for count, e in zip(counts, eps) if count != common]
    return f"{common} simulations per ε" + (f" ({', '.join(others)})" if others else "")
