"""What every figure of the package shares: a display-free canvas, the choice of panels, and safe saving.

Figures are `matplotlib.figure.Figure` objects with an Agg canvas and constrained layout: nothing touches
pyplot's global state or needs a display, and a returned figure shows itself in a notebook. A figure never
crops its own title or legend (`finish` widens it until they fit) and never hides panels silently: where
it shows fewer panels than there are, its title says "showing k of n coordinates" and how to choose them
(`Selection.note`), and leaving some out by default also warns. Files are PNG, PDF or SVG by the path's
suffix, checked before any drawing and written atomically; an existing file is replaced only with
`overwrite=True`.
"""

from __future__ import annotations

import os
import textwrap
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure, SubFigure

from ..util.files import atomic_write, check_output

__all__ = [
    "DPI",
    "MAX_PANELS",
    "PLOT_SUFFIXES",
    "TRUTH_STYLE",
    "Selection",
    "checked_truth",
    "draw_and_save",
    "figure_legend",
    "finish",
    "new_figure",
    "padded",
    "plot_path",
    "save_figure",
    "select",
    "select_columns",
]

DPI = 120
PLOT_SUFFIXES = (".png", ".pdf", ".svg")
"""The file formats of a plot, chosen by the path's suffix."""
MAX_PANELS = 16
"""Panels shown at most by default (per column of panels); `coordinates=` chooses others, or more."""
TRUTH_STYLE = {"color": "k", "ls": "--", "lw": 1.2}
"""How a true value is drawn: a dashed black line."""
MARGIN = 0.08
"""Inches kept free around the figure's outermost artist."""
_PACKAGE = str(Path(__file__).parents[1])


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of width × height inches with constrained layout and its own Agg canvas."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _title_text(text: str, width: float) -> str:
    """`text` wrapped to about the characters a line of `width` inches holds at the title's size."""
    return "\n".join(textwrap.fill(line, max(30, int(10 * width))) for line in text.splitlines())


def finish(figure: Figure, title: str, notes: Sequence[str | None] = ()) -> Figure:
    """Give `figure` its title (with the notes that are not None, e.g. what was left out) and make it hold
    every artist (`_fit_inside`); returns it."""
    text = "\n".join([title, *(note for note in notes if note)])
    figure.suptitle(_title_text(text, figure.get_size_inches()[0]))
    _fit_inside(figure)
    return figure


def _fit_inside(figure: Figure, rounds: int = 3) -> None:
    """Widen (or heighten) `figure` until every artist — titles, legends, tick labels — lies inside it.

    Constrained layout places the panels inside the figure, but a centred title or legend wider than the
    figure overflows both edges; the figure grows by twice the overflow and is laid out again.
    """
    for _ in range(rounds):
        figure.draw_without_rendering()
        box = figure.get_tightbbox(figure.canvas.get_renderer())
        width, height = figure.get_size_inches()
        spill_x = max(-box.x0, box.x1 - width, 0.0)
        spill_y = max(-box.y0, box.y1 - height, 0.0)
        if spill_x == 0.0 and spill_y == 0.0:
            return
        figure.set_size_inches(width + 2 * spill_x + MARGIN, height + 2 * spill_y + MARGIN)


def figure_legend(figure: Figure | SubFigure, axes, columns: int = 3) -> None:
    """One legend below the panels of `figure` for the entries of `axes` (a label shared by panels once)."""
    entries = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if entries:
        figure.legend(
            list(entries.values()),
            list(entries),
            loc="outside lower center",
            ncols=min(len(entries), columns),
            fontsize="small",
            frameon=False,
        )


def checked_truth(truth, dim: int) -> np.ndarray | None:
    """The true θ as a float64 (d,) array (None stays None); ValueError unless it holds d numbers."""
    if truth is None:
        return None
    truth = np.asarray(truth, np.float64).reshape(-1)
    if truth.shape != (dim,):
        raise ValueError(f"truth must hold the d = {dim} coordinates of θ (unconstrained); got {truth.size} values")
    return truth


def padded(values: np.ndarray, fraction: float) -> tuple[float, float]:
    """(low, high) around `values`, widened by `fraction` of their range on each side (never empty)."""
    low, high = float(np.min(values)), float(np.max(values))
    pad = fraction * (high - low) or 0.05 * max(1.0, abs(low))
    return low - pad, high + pad


# ---------------------------------------------------------------- choosing the panels


@dataclass(frozen=True)
class Selection:
    """The panels a figure shows: indices into its `total` quantities, and whether the caller chose them."""

    indices: tuple[int, ...]
    total: int
    chosen: bool

    def note(self, what: str = "coordinates") -> str | None:
        """'showing k of n coordinates; …' when some are left out, else None."""
        if len(self.indices) == self.total:
            return None
        how = ", as chosen with coordinates=[…]" if self.chosen else "; choose with coordinates=[names or indices]"
        return f"showing {len(self.indices)} of {self.total} {what}{how}"


def _resolve(names: Sequence[str], coordinates, sites: Sequence[str] | None = None) -> tuple[list[int], list]:
    """The indices into `names` that `coordinates` picks, in its order without repeats, and its entries that
    pick none. An entry is a name, a site name (all of `names` whose site it is; sites[i] is the site of
    names[i]) or an integer index (negative counts from the end); one entry may be given alone."""
    try:
        entries = [coordinates] if isinstance(coordinates, (str, int, np.integer)) else list(coordinates)
    except TypeError:
        entries = [coordinates]
    picked, unmatched = [], []
    for entry in entries:
        if isinstance(entry, (int, np.integer)) and not isinstance(entry, bool):
            found = [int(entry) % len(names)] if -len(names) <= entry < len(names) else []
        elif isinstance(entry, str):
            found = [i for i, name in enumerate(names) if name == entry]
            found = found or [i for i, site in enumerate(sites or ()) if site == entry]
        else:
            raise TypeError(
                f"coordinates holds {entry!r}: give names (e.g. {names[0]!r}), site names or integer indices"
            )
        picked.extend(i for i in found if i not in picked)
        if not found:
            unmatched.append(entry)
    return picked, unmatched


def select(
    names: Sequence[str],
    coordinates=None,
    *,
    sites: Sequence[str] | None = None,
    figure: str = "the figure",
    limit: int = MAX_PANELS,
) -> Selection:
    """The panels to draw of the quantities `names` (sites[i]: the site of names[i]): see `select_columns`."""
    return select_columns([(names, sites)], coordinates, figure=figure, limit=limit)[0]


def select_columns(
    columns: Sequence[tuple[Sequence[str], Sequence[str] | None]],
    coordinates=None,
    *,
    figure: str = "the figure",
    limit: int = MAX_PANELS,
) -> list[Selection]:
    """The panels to draw in each column of panels, a column being (names, sites of the names or None).

    coordinates None: all of each column up to `limit` — the first `limit`, with one UserWarning that says
    how to choose, where a column holds more. Otherwise what `coordinates` picks in each column (see
    `_resolve`); ValueError when an entry picks nothing in any column, or a column is left empty.
    """
    if coordinates is None:
        longest = max(columns, key=lambda column: len(column[0]))[0]
        if len(longest) > limit:
            _warn_left_out(figure, limit, len(longest), longest)
        return [Selection(tuple(range(min(len(names), limit))), len(names), chosen=False) for names, _ in columns]
    resolved = [_resolve(names, coordinates, sites) for names, sites in columns]
    unmatched = [entry for entry in resolved[0][1] if all(entry in missing for _, missing in resolved)]
    if unmatched or not any(picked for picked, _ in resolved):
        names, sites = columns[0]
        raise _unknown_coordinates(unmatched or coordinates, names, sites)
    if not all(picked for picked, _ in resolved):
        raise ValueError(
            f"coordinates={coordinates!r} leaves a column of panels empty: the μ_t panels are unconstrained and "
            "the densities on their own scale; name whole sites, or coordinates both columns show"
        )
    return [Selection(tuple(picked), len(names), chosen=True) for (picked, _), (names, _) in zip(resolved, columns)]


def _warn_left_out(figure: str, shown: int, total: int, names: Sequence[str]) -> None:
    """The UserWarning of a figure that shows only the first `shown` of `total` panels by default."""
    warnings.warn(
        f"{figure} shows the first {shown} of {total} coordinates; choose which with coordinates=[names or "
        f"indices] (command line: fit --coordinates), e.g. coordinates={list(names[shown : shown + 2])!r}",
        UserWarning,
        skip_file_prefixes=(_PACKAGE,),
    )


def _unknown_coordinates(entries, names: Sequence[str], sites: Sequence[str] | None) -> ValueError:
    """The error for `coordinates` entries that name nothing, listing what may be named."""
    entries = [entries] if isinstance(entries, (str, int, np.integer)) else list(entries)
    choices = list(dict.fromkeys([*(sites or ()), *names]))
    shown = ", ".join(map(repr, choices[:24])) + (", …" if len(choices) > 24 else "")
    return ValueError(
        f"coordinates={entries!r} names nothing to plot: give names, site names or indices "
        f"0…{len(names) - 1}; the names are {shown}"
    )


# ---------------------------------------------------------------- files


def plot_path(path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """`path` checked before any drawing: a .png, .pdf or .svg file in an existing, writable directory, and
    not an existing file unless `overwrite`."""
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise ValueError(f"cannot save {path}: a plot file ends in {', '.join(PLOT_SUFFIXES)}")
    if not path.parent.is_dir():
        raise ValueError(f"cannot save {path}: the directory {path.parent} does not exist; create it first")
    return check_output(path, overwrite=overwrite)


def save_figure(figure: Figure, path: Path, *, overwrite: bool = False) -> Path:
    """Write `figure` to `path` (checked by `plot_path`) atomically, in the format of its suffix."""
    file_format = path.suffix.lower().lstrip(".")
    atomic_write(path, lambda temporary: figure.savefig(temporary, format=file_format, dpi=DPI), overwrite=overwrite)
    return path


def draw_and_save(build: Callable[[], Figure], path: str | os.PathLike | None, *, overwrite: bool = False) -> Figure:
    """`build()`'s figure, also written to `path` when one is given (checked by `plot_path` before `build`
    runs, so a bad path costs no drawing)."""
    target = None if path is None else plot_path(path, overwrite=overwrite)
    figure = build()
    if target is not None:
        save_figure(figure, target, overwrite=overwrite)
    return figure
