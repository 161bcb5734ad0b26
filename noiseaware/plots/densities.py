"""Posterior densities, one panel per quantity (`post.plot`, `noiseaware.plots.plot_posteriors`, the right
column of `noiseaware.plots.plot_trace`).

scale="constrained" shows each site on its own scale: the draws are x = T(θ) (`constrained_sample`), one
panel per element of each site, named by the site map ('rate', 'theta[age]', 'p[2]'; a simplex site of K
elements has K panels). scale="unconstrained" shows θ itself, one panel per coordinate. The default is the
constrained scale when every posterior knows the model's site map, else θ, and the figure says which on
every axis and in its title. Each curve is a Gaussian kernel density estimate (Scott's bandwidth) from
DENSITY_DRAWS draws, binned onto the grid and smoothed: O(n + grid) rather than O(n · grid).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure
from scipy.ndimage import gaussian_filter1d

from ..posteriors.base import SUMMARY_DRAWS
from ..trace.sites import SiteMap
from ..util.checks import choice
from ..util.keys import as_key
from .base import TRUTH_STYLE, checked_truth, figure_legend, finish, new_figure, padded, select

__all__ = [
    "DENSITY_DRAWS",
    "Densities",
    "coordinate_sites",
    "density_figure",
    "draw_density_panels",
    "posterior_densities",
    "site_elements",
]

DENSITY_DRAWS = SUMMARY_DRAWS
"""Draws per posterior behind each density curve: a summary's (`posteriors.base.SUMMARY_DRAWS`)."""
DENSITY_POINTS = 400
DENSITY_TAIL = 5e-4
"""A density panel spans the posteriors' DENSITY_TAIL … 1 − DENSITY_TAIL quantiles (and the truth)."""
PANEL_SIZE = (3.3, 2.5)
"""Inches per density panel (width, height) in a grid of panels."""
SCALE_WORDS = {
    "constrained": "each site on its own (constrained) scale",
    "unconstrained": "θ on the unconstrained scale",
}


@dataclass(frozen=True)
class Densities:
    """What the density panels show, known before anything is drawn: the posteriors {label: posterior}, q
    quantities `names` (q,) on `scale`, the site of each (`sites`, or None), their true values (q,) or None,
    and a note on the scale (or None)."""

    posteriors: Mapping[str, object]
    names: tuple[str, ...]
    sites: tuple[str, ...] | None
    truth: np.ndarray | None
    scale: str
    note: str | None
    site_map: SiteMap | None

    @property
    def description(self) -> str:
        """'posterior densities, each site on its own (constrained) scale' (or of θ, unconstrained)."""
        return f"posterior densities, {SCALE_WORDS[self.scale]}"

    def draws(self, key) -> dict[str, np.ndarray]:
        """DENSITY_DRAWS draws (n, q) of the quantities per posterior, all from the one `key`."""
        key = as_key(key)
        if self.scale == "unconstrained":
            return {
                label: np.asarray(post.sample(key, DENSITY_DRAWS), np.float64)
                for label, post in self.posteriors.items()
            }
        sites = self.site_map.sites
        return {
            label: _flat(sites, post.constrained_sample(key, DENSITY_DRAWS)) for label, post in self.posteriors.items()
        }


def density_figure(
    posteriors: Mapping[str, object],
    *,
    key,
    truth=None,
    scale: str | None = None,
    coordinates=None,
    title: str | None = None,
    subject: str | None = None,
    figure: str = "the density figure",
) -> Figure:
    """The densities of {label: posterior} (all over the same θ), one panel per chosen quantity
    (`coordinates`: names, site names or indices; by default all, up to MAX_PANELS), in a grid; truth: the
    true θ (d,), unconstrained, drawn on the shown scale. The default title is 'SUBJECT: posterior densities,
    SCALE'; `figure` names the figure in the warning about panels left out."""
    densities = posterior_densities(posteriors, key=key, truth=truth, scale=scale)
    selection = select(densities.names, coordinates, sites=densities.sites, figure=figure)
    count = len(selection.indices)
    columns = min(4, math.ceil(math.sqrt(count)))
    rows = math.ceil(count / columns)
    result = new_figure(PANEL_SIZE[0] * columns + 0.6, PANEL_SIZE[1] * rows + 1.4)
    axes = draw_density_panels(result, densities, densities.draws(key), selection.indices, columns=columns)
    figure_legend(result, axes[:1], columns=4)
    default = densities.description if subject is None else f"{subject}: {densities.description}"
    return finish(result, title or default, [densities.note, selection.note()])


def posterior_densities(posteriors: Mapping[str, object], *, key, truth=None, scale: str | None = None) -> Densities:
    """What the density panels of {label: posterior} show on `scale` (None: constrained when every posterior
    has a site map, else θ), every argument checked (key: that one is given) and nothing drawn yet."""
    if not posteriors:
        raise ValueError("a density figure needs at least one posterior: pass {label: posterior}")
    if key is None:
        raise TypeError("the densities are drawn from the posteriors: pass key=… (an int seed or a jax PRNG key)")
    as_key(key)
    first = next(iter(posteriors.values()))
    dims = {label: len(post.theta_names) for label, post in posteriors.items()}
    if len(set(dims.values())) > 1:
        raise ValueError(f"the posteriors are over θ of different dimensions {dims}: plot them one model at a time")
    truth = checked_truth(truth, len(first.theta_names))
    maps = {label: getattr(post, "site_map", None) for label, post in posteriors.items()}
    without = [label for label, site_map in maps.items() if site_map is None]
    if scale is not None:
        choice(
            "scale",
            scale,
            tuple(SCALE_WORDS),
            hint="'constrained' shows each site on its own scale, 'unconstrained' shows θ",
        )
    if scale == "constrained" and without:
        raise ValueError(
            f"scale='constrained' needs the model's site map, which {', '.join(map(repr, without))} lacks (its "
            "trace recorded none): pass scale='unconstrained', or record the trace with its sites"
        )
    site_map = next(iter(maps.values()))
    if scale == "unconstrained" or without:
        return Densities(
            posteriors=posteriors,
            names=tuple(first.theta_names),
            sites=coordinate_sites(site_map),
            truth=truth,
            scale="unconstrained",
            note=None if scale == "unconstrained" else "θ unconstrained: no site map to map it to the model's sites",
            site_map=site_map,
        )
    if any(other.sites != site_map.sites for other in maps.values()):
        raise ValueError("the posteriors have different site maps: plot posteriors of one model together")
    sites = site_map.sites
    names, element_sites = site_elements(site_map)
    return Densities(
        posteriors=posteriors,
        names=names,
        sites=element_sites,
        truth=None if truth is None else _flat(sites, site_map.constrain(jnp.asarray(truth)))[0],
        scale="constrained",
        note=None,
        site_map=site_map,
    )


def coordinate_sites(site_map: SiteMap | None) -> tuple[str, ...] | None:
    """The panels on θ's (unconstrained) scale: the site of each coordinate of θ (d,), or None without a site map."""
    return None if site_map is None else tuple(site.name for site in site_map.sites for _ in range(site.size))


def site_elements(site_map) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The density panels on the sites' own scale: (element names, the site of each), in the site map's order."""
    names = tuple(name for site in site_map.sites for name in site.element_names())
    return names, tuple(site.name for site in site_map.sites for _ in range(math.prod(site.shape)))


def _flat(sites: Sequence, values: Mapping) -> np.ndarray:
    """{site: (n, *shape)} (or one value (*shape) each) → (n, q): the sites' elements side by side, row-major."""
    return np.concatenate(
        [np.asarray(values[site.name], np.float64).reshape(-1, math.prod(site.shape)) for site in sites], axis=1
    )


def draw_density_panels(
    container: Figure | SubFigure,
    densities: Densities,
    draws: Mapping[str, np.ndarray],
    rows: Sequence[int],
    *,
    columns: int = 1,
) -> list[Axes]:
    """One panel per quantity in `rows`, in a grid of `columns`, from `densities.draws(key)`; returns the axes
    used."""
    count = len(rows)
    grid = container.subplots(math.ceil(count / columns), columns, squeeze=False)
    axes = list(grid.flat)
    for axis in axes[count:]:
        axis.remove()
    for axis, j in zip(axes, rows):
        _draw_density(
            axis,
            {label: values[:, j] for label, values in draws.items()},
            f"{densities.names[j]} ({densities.scale})",
            None if densities.truth is None else float(densities.truth[j]),
        )
    return axes[:count]


def _draw_density(axis: Axes, samples: Mapping[str, np.ndarray], label: str, truth: float | None) -> None:
    """Kernel density estimates of one quantity, one curve per posterior, and the true value."""
    ends = [np.quantile(values, [DENSITY_TAIL, 1.0 - DENSITY_TAIL]) for values in samples.values()]
    if truth is not None:
        ends.append(np.array([truth]))
    grid = np.linspace(*padded(np.concatenate(ends), 0.05), DENSITY_POINTS)
    densities = {name: _density(values, grid) for name, values in samples.items()}
    peaks = {name: float(density.max()) for name, density in densities.items()}
    lowest = min(peaks.values())
    seen = [peak for peak in peaks.values() if peak <= SPIKE_RATIO * lowest]
    top = 1.5 * max(seen) if len(seen) < len(peaks) else None  # a spike would flatten the wider curves: cut it
    for index, (name, density) in enumerate(densities.items()):
        cut = top is not None and peaks[name] > top
        legend = f"{name} (peak {peaks[name] / top:.0f}× above the top)" if cut else name
        axis.plot(grid, density, color=f"C{index}", lw=1.4, label=legend)
        axis.fill_between(grid, density, color=f"C{index}", alpha=0.15, lw=0)
    if truth is not None:
        axis.axvline(truth, **TRUTH_STYLE, label="true value")
    axis.set_ylim(bottom=0.0, top=top)
    axis.set_xlabel(label)
    axis.set_ylabel("posterior density")


SPIKE_RATIO = 8.0
"""A density whose peak is more than this many times the lowest peak of a panel is cut at 1.5 × the highest of the
others (and its label says by how much), so that it does not flatten them (the naive posterior at small ε)."""


def _density(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """A Gaussian kernel density estimate of `values` on the equally spaced `grid` (Scott's bandwidth); values
    that do not vary give a spike of unit mass."""
    step = grid[1] - grid[0]
    counts, _ = np.histogram(values, bins=grid.size, range=(grid[0] - step / 2, grid[-1] + step / 2))
    bandwidth = np.std(values) * values.size ** (-1 / 5)
    return gaussian_filter1d(counts.astype(np.float64), bandwidth / step, mode="constant") / (values.size * step)
