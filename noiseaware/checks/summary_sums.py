"""What the trace checks read of a `TraceSummary`: its windows after the burn-in as `KeptSums` (docs/summaries.md).

Exact for the sums over the kept steps (φ̄, Ḡ, Σ x², Σ (G − Ḡ)², Σ x G, Σ x³, Σ x⁴, Σ x² G, φ_0, the growth); at the
summary's window grain for the rest: the K check windows are the kept summary windows in K groups as equal as
`np.array_split` makes them (the trace's own windows where their count divides by K), the lag-1 products leave out
the steps that open a window (W of T), and the "first tenth" of the kept trace is its first summary window. The rows
are not kept, so the residuals' autocorrelation (Ljung–Box) is not tested.
"""

from __future__ import annotations

import numpy as np

from ..trace.summaries import TraceSummary
from ..trace.sums import pooled
from .statistics import WINDOWS, KeptSums

__all__ = ["summary_kept_sums"]


def summary_kept_sums(summary: TraceSummary, start: int) -> KeptSums:
    """The `KeptSums` of the summary's steps t ≥ start, which must start one of its windows."""
    first_window = summary.window_from(start)
    pool = pooled(summary.sums, first_window)
    sums = summary.sums
    count = np.asarray(sums.count[first_window:], np.float64)
    means = (count[:, None] * np.asarray(sums.reference[first_window:]) + np.asarray(sums.y[first_window:])) / count[
        :, None
    ]
    grads = np.asarray(sums.g[first_window:], np.float64)
    groups = np.array_split(np.arange(count.size), min(WINDOWS, count.size))
    windows = np.stack(
        [
            [
                np.full(summary.n_params, count[g].sum()),
                np.sum(count[g, None] * means[g], axis=0) / count[g].sum(),
                np.sum(grads[g], axis=0) / count[g].sum(),
            ]
            for g in groups
        ]
    )
    return KeptSums(
        n=pool.count,
        mean=pool.centre,
        grad_mean=pool.sum_g / pool.count,
        sxx=pool.sum_phiphi,
        sgg=pool.sum_gg - pool.sum_g**2 / pool.count,
        sxg=pool.sum_gphi,
        x3=pool.x3,
        x4=pool.x4,
        x2g=pool.x2g,
        lag=pool.lag,
        windows=windows,
        early=means[0],
        first=np.asarray(sums.first, np.float64),
        growth=np.asarray(sums.growth, np.float64),
        start=start,
        rows=None,
    )
