"""Posterior summaries as data: a pandas DataFrame with az.summary's columns that prints as a text table.

One row per quantity q (an element of a site on the model's own scale, or a coordinate of the unconstrained
θ), computed from draws (chains, draws, q) unless the posterior knows a number exactly:

    mean, sd              E[q] and sd[q]: exact where known, else of the draws
    mcse_mean             Monte Carlo standard error of the mean: sd/√n for n independent draws, arviz's
                          ESS-based estimate for MCMC chains, 0 where the mean is exact
    eti{L}_lb, eti{L}_ub  the central L % interval, quantiles α/2 and 1 − α/2 (α = 1 − L): exact where known
    hdi{L}_lb, hdi{L}_ub  the highest-density L % interval of the draws: the shortest one holding L % (az.hdi)

(L the level in per cent, named as az.summary names them.) `str(summary)` is a one-line description of the
posterior, the table, and a line saying which numbers are Monte Carlo. `constrained_rows` turns θ draws into
rows of site elements on their own scale; `comparison_table` sets several posteriors' central intervals side
by side (the `fit` command's table).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import xarray as xr

from ..trace.sites import SiteMap, transform_from_name
from ..util.checks import probability
from ..util.keys import as_key
from ..util.tables import text_table

__all__ = [
    "CONSTRAINED",
    "INTERVAL_LEVEL",
    "UNCONSTRAINED",
    "PosteriorSummary",
    "comparison_table",
    "constrain",
    "constrained_rows",
    "interval_columns",
    "summary_frame",
    "tail_probability",
]


INTERVAL_LEVEL = 0.9
"""The credibility level of a posterior's intervals by default (90 %): `interval`, `summary` and the comparison
table of every posterior type, the `fit` command's table, the demo, and the plots' bands."""
CONSTRAINED = "site (constrained)"
"""The index name of rows that are site elements on their own scale."""
UNCONSTRAINED = "θ (unconstrained)"
"""The index name of rows that are coordinates of the unconstrained θ."""


def tail_probability(level: float) -> float:
    """α/2 for a central interval of credibility `level` ∈ (0, 1)."""
    return 0.5 * (1.0 - probability("level", level, hint="the credibility of the interval, e.g. 0.9"))


def interval_columns(level: float) -> tuple[str, str, str, str]:
    """The column names of the central and the highest-density `level` intervals, as az.summary names them:
    ('eti90_lb', 'eti90_ub', 'hdi90_lb', 'hdi90_ub') for level 0.9."""
    percent = f"{100 * level:.10g}"
    return f"eti{percent}_lb", f"eti{percent}_ub", f"hdi{percent}_lb", f"hdi{percent}_ub"


class PosteriorSummary(pd.DataFrame):
    """A posterior's summary table: a DataFrame (rows: quantities, index name: their scale; columns: mean, sd,
    mcse_mean and the interval ends) with `description` (one line: what the posterior is) and `note` (which
    numbers are exact and which Monte Carlo), both printed around the table by `str`."""

    _metadata = ["description", "note"]

    @property
    def _constructor(self):
        return PosteriorSummary

    def __str__(self) -> str:
        header = [str(self.index.name or ""), *(_heading(str(column)) for column in self.columns)]
        rows = [
            [str(name), *(_cell(str(column), value) for column, value in zip(self.columns, values))]
            for name, values in zip(self.index, self.itertuples(index=False))
        ]
        lines = [getattr(self, "description", ""), text_table(header, rows), getattr(self, "note", "")]
        return "\n".join(line for line in lines if line)

    __repr__ = __str__


_INTERVAL = re.compile(r"^(eti|hdi)(.+)_(lb|ub)$")


def _heading(column: str) -> str:
    """A column's heading in the text table: 'eti90_lb' → '90% low', 'hdi90_ub' → 'HDI high'."""
    match = _INTERVAL.match(column)
    if not match:
        return {"mcse_mean": "mcse"}.get(column, column)
    kind, percent, end = match.groups()
    end = "low" if end == "lb" else "high"
    if kind == "eti":
        return f"{percent}% {end}"
    return f"{percent}% HDI {end}" if end == "low" else "HDI high"


def _cell(column: str, value) -> str:
    """A number to 4 significant digits (sd 3, mcse 2; a zero mcse is "exact"); anything else as it prints."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        return str(value)
    if column == "mcse_mean" and value == 0:
        return "exact"
    digits = {"sd": 3, "mcse_mean": 2}.get(column, 4)
    return f"{float(value):.{digits}g}"


def summary_frame(
    values: np.ndarray,
    names: Sequence[str],
    level: float,
    *,
    label: str,
    description: str,
    independent: bool,
    moments: tuple[np.ndarray, np.ndarray] | None = None,
    central: tuple[np.ndarray, np.ndarray] | None = None,
) -> PosteriorSummary:
    """The summary of q quantities from their draws `values` (chains, draws, q).

    names (q,) label the rows, `label` the index (the scale: CONSTRAINED or UNCONSTRAINED).
    independent: the draws are independent (MCSE sd/√n) rather than MCMC chains (arviz's ESS-based MCSE).
    moments: exact (mean, sd), (q,) each, used instead of the draws' (MCSE 0). central: exact interval ends
    (low, high), (q,) each, NaN where unknown (those come from the draws' quantiles).
    """
    alpha = tail_probability(level)
    values = np.asarray(values, np.float64)
    chains, draws, count = values.shape
    flat = values.reshape(chains * draws, count)
    if moments is None:
        mean, sd = flat.mean(axis=0), flat.std(axis=0, ddof=1)
        if independent:
            mcse = sd / math.sqrt(chains * draws)
        else:
            mcse = np.asarray(az.mcse(xr.DataArray(values, dims=("chain", "draw", "row"))).values)
    else:
        mean, sd = (np.asarray(m, np.float64) for m in moments)
        mcse = np.zeros(count)
    low, high = np.quantile(flat, [alpha, 1.0 - alpha], axis=0)
    if central is not None:
        exact_low, exact_high = (np.asarray(c, np.float64) for c in central)
        known = np.isfinite(exact_low) & np.isfinite(exact_high)
        low, high = np.where(known, exact_low, low), np.where(known, exact_high, high)
    hdi = np.asarray(az.hdi(xr.DataArray(values, dims=("chain", "draw", "row")), prob=level).values)
    columns = interval_columns(level)
    frame = PosteriorSummary(
        {
            "mean": mean,
            "sd": sd,
            "mcse_mean": mcse,
            columns[0]: low,
            columns[1]: high,
            columns[2]: hdi[:, 0],
            columns[3]: hdi[:, 1],
        },
        index=pd.Index(list(names), name=label),
    )
    frame.description = description
    frame.note = _note(chains, draws, independent, exact_moments=moments is not None, central=central)
    return frame


def _note(chains: int, draws: int, independent: bool, *, exact_moments: bool, central) -> str:
    """Which numbers are exact and which come from the draws (and so carry Monte Carlo error)."""
    if independent:
        source = f"{chains * draws} independent Monte Carlo draws" + ("" if chains == 1 else f" ({chains} chains)")
    else:
        source = f"{chains} × {draws} MCMC draws (mcse from their effective sample size)"
    known = np.zeros(0, bool) if central is None else np.isfinite(np.asarray(central[0], np.float64))
    exact, from_draws = [], []
    (exact if exact_moments else from_draws).append("mean, sd")
    if known.size and known.all():
        exact.append("central intervals")
    elif known.any():
        exact.append("central intervals of elementwise sites")
        from_draws.append("the other central intervals")
    else:
        from_draws.append("central intervals")
    from_draws.append("HDIs")
    note = f"{_listed(from_draws)} from {source}"
    return note + (f"; {_listed(exact)} exact" if exact else "")


def _listed(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def constrain(site_map: SiteMap, theta: np.ndarray) -> dict[str, np.ndarray]:
    """θ (…, d) → {site: value (…, *shape)} on the model's own scale, computed in float64."""
    with jax.enable_x64(True):
        constrained = site_map.constrain(jnp.asarray(theta, jnp.float64))
        return {name: np.asarray(value, np.float64) for name, value in constrained.items()}


def constrained_rows(
    site_map: SiteMap, theta: np.ndarray, interval: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, tuple[str, ...], tuple[np.ndarray, np.ndarray] | None]:
    """θ draws (…, d) as rows of site elements on their own scale: values (…, q), their names (q,) from the
    site map, and — given θ's central interval (d,) ends — the rows' central ends (q,) each: T of θ's ends
    where T is elementwise (monotone), NaN for the elements of other sites (simplex maps)."""
    batch = theta.shape[:-1]
    values = [value.reshape(batch + (-1,)) for value in constrain(site_map, theta).values()]
    names = tuple(name for site in site_map.sites for name in site.element_names())
    if interval is None:
        return np.concatenate(values, axis=-1), names, None
    ends = [constrain(site_map, np.asarray(end, np.float64)) for end in interval]
    low, high = [], []
    for site in site_map.sites:
        size = math.prod(site.shape)
        if transform_from_name(site.transform).domain.event_dim == 0:
            a, b = (end[site.name].reshape(size) for end in ends)
            low.append(np.minimum(a, b))
            high.append(np.maximum(a, b))
        else:
            low.append(np.full(size, np.nan))
            high.append(np.full(size, np.nan))
    return np.concatenate(values, axis=-1), names, (np.concatenate(low), np.concatenate(high))


def comparison_table(
    posteriors: Mapping[str, Any], level: float = INTERVAL_LEVEL, truth=None, *, key, scale: str = "constrained"
) -> str:
    """Side-by-side central `level` intervals of {label: posterior} (the `Posterior` protocol; one `summary` column
    each), every site on its own scale (scale="unconstrained": θ), labelled so, and the true value when given
    (truth: θ (d,), unconstrained).

    key: the summaries' key, split over the posteriors (required: a mixture's summary draws θ)."""
    keys = jax.random.split(as_key(key), len(posteriors))
    summaries = {label: post.summary(level, key=k, scale=scale) for (label, post), k in zip(posteriors.items(), keys)}
    first = next(iter(summaries.values()))
    low, high = interval_columns(level)[:2]
    header = [str(first.index.name)] + [f"{label} {100 * level:g}%" for label in summaries]
    rows = [
        [name] + [f"[{table[low].iloc[j]:.4g}, {table[high].iloc[j]:.4g}]" for table in summaries.values()]
        for j, name in enumerate(first.index)
    ]
    if truth is not None:
        truth = np.asarray(truth, np.float64)
        site_map = next(iter(posteriors.values())).site_map
        if first.index.name == CONSTRAINED:
            truth = constrained_rows(site_map, truth)[0]
        header.append("truth")
        rows = [row + [f"{value:.4g}"] for row, value in zip(rows, truth)]
    return text_table(header, rows)
