"""CalibrationResult: the calibration of several methods' predictive probabilities over repeated DPVI runs, with
its table, JSON and ArviZ DataTree (.nc).

The DataTree (`to_datatree`, laid out as coverage's: evaluation/result.py) has one group per method, the runs as
draws, so `arviz.summary(tree, group=METHOD)` gives each metric's mean and sd over the runs:

    /            attrs: schema, each scalar setting (dataset, epsilon, runs, bins, key, …), and `record`, the JSON
                 of what the arrays do not hold (settings, seconds, paired methods, diagnostics)
    /METHOD      each metric of METRICS (chain 1, draw R_m); mean_predicted, fraction_positive, counts
                 (chain, draw, bin B): the reliability curve of each run; histogram (chain, draw, histogram_bin H)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from ..util.deprecation import warn_renamed
from ..util.files import write_json
from ..util.tables import text_table
from .experiment import checks_cell
from .result import result_attrs, result_record, write_tree

__all__ = ["CALIBRATION_SCHEMA", "GRID", "METRICS", "CalibrationResult"]

CALIBRATION_SCHEMA = "noiseaware.calibration-result/1"
"""The `schema` attribute of a calibration result's DataTree."""

METRICS = ("calibration_rmse", "ece", "brier", "log_loss", "accuracy")
"""Per-repeat metrics (calibration.py's module doc defines them)."""
GRID = np.linspace(0.0, 1.0, 101)
"""Common grid of mean predicted probability on which each repeat's reliability curve is interpolated."""
BAND = 1.96
"""The reliability band is mean ± BAND × sd over the runs (the research code's)."""


@dataclasses.dataclass(frozen=True)
class CalibrationResult:
    """Calibration of several methods on the same test set, R runs each (one DPVI trace per run).

    metrics[method][name] (R_m,): each metric of METRICS per run, NaN where the fit failed;
    curves[method]: "mean_predicted", "fraction_positive" (R_m, B) float and "counts" (R_m, B) int, the
    reliability curve per repeat; histograms[method] (R_m, H): counts of p̂ in H equal-width bins of [0, 1];
    paired_methods: the methods run on the same traces (their repeat r shares trace r); failures[method];
    seconds per stage; diagnostics[method]: sampler facts and warnings; settings: what was run.
    """

    metrics: Mapping[str, Mapping[str, np.ndarray]]
    curves: Mapping[str, Mapping[str, np.ndarray]]
    histograms: Mapping[str, np.ndarray]
    paired_methods: tuple[str, ...]
    failures: Mapping[str, int]
    seconds: Mapping[str, float]
    diagnostics: Mapping[str, Mapping[str, Any]]
    settings: Mapping[str, Any]

    @property
    def methods(self) -> list[str]:
        return list(self.metrics)

    def mean_sd(self, method: str, metric: str = "calibration_rmse") -> tuple[float, float | None]:
        """(mean, sd with ddof 1) of a metric over the method's successful runs; sd None below 2 runs."""
        return _mean_sd(self.metrics[method][metric])

    def paired(
        self, baseline: str = "naive", metric: str = "calibration_rmse"
    ) -> dict[str, tuple[float, float | None]]:
        """method → (mean, sd) over runs r of metric_method[r] − metric_baseline[r], on the same traces.

        Only methods in paired_methods (other than the baseline); runs where either fit failed are left out.
        """
        if baseline not in self.paired_methods:
            return {}
        base = self.metrics[baseline][metric]
        return {m: _mean_sd(self.metrics[m][metric] - base) for m in self.paired_methods if m != baseline}

    def reliability(self, method: str) -> np.ndarray:
        """Each repeat's curve (p̄_b, ȳ_b) linearly interpolated on GRID: (R_m, 101), NaN outside its range."""
        curves = self.curves[method]
        out = np.full((curves["counts"].shape[0], GRID.size), np.nan)
        for r, (x, y) in enumerate(zip(curves["mean_predicted"], curves["fraction_positive"])):
            keep = np.isfinite(x) & np.isfinite(y)
            if keep.sum() >= 1:
                out[r] = np.interp(GRID, x[keep], y[keep], left=np.nan, right=np.nan)
        return out

    def reliability_band(self, method: str) -> tuple[np.ndarray, np.ndarray]:
        """Mean and sd (ddof 1) over runs of `reliability(method)`, each (101,) on GRID: NaN where no
        run (mean) or fewer than two runs (sd) reach that predicted probability."""
        curves = self.reliability(method)
        count = np.sum(np.isfinite(curves), axis=0)
        mean = np.where(count > 0, np.nansum(curves, axis=0) / np.maximum(count, 1), np.nan)
        squares = np.nansum((curves - mean) ** 2, axis=0)
        sd = np.sqrt(np.where(count > 1, squares / np.maximum(count - 1, 1), np.nan))
        return mean, sd

    def merge(self, other: CalibrationResult) -> CalibrationResult:
        """This result with `other`'s methods beside its own (e.g. the non-private reference, run once)."""
        return dataclasses.replace(
            self,
            metrics={**self.metrics, **other.metrics},
            curves={**self.curves, **other.curves},
            histograms={**self.histograms, **other.histograms},
            failures={**self.failures, **other.failures},
            seconds={**self.seconds, **other.seconds},
            diagnostics={**self.diagnostics, **other.diagnostics},
        )

    def table(self) -> str:
        """Methods × metrics: mean ± sd over the runs; calibration RMSE and ECE in units of 10⁻³; the runs whose
        traces the trace checks flagged; below it, what each column means."""
        paired = self.paired()
        rows = []
        for method in self.methods:
            ok = int(np.sum(np.isfinite(self.metrics[method]["calibration_rmse"])))
            rows.append(
                [
                    method,
                    f"{ok}/{len(self.metrics[method]['calibration_rmse'])}",
                    _text(*self.mean_sd(method), 1e3),
                    _text(*paired[method], 1e3) if method in paired else "",
                    _text(*self.mean_sd(method, "ece"), 1e3),
                    _text(*self.mean_sd(method, "brier")),
                    _text(*self.mean_sd(method, "log_loss")),
                    _text(*self.mean_sd(method, "accuracy")),
                    f"{self.seconds.get(method, math.nan):.1f}",
                    checks_cell(self.diagnostics.get(method, {})),
                ]
            )
        header = [
            "method",
            "runs",
            "calib. RMSE ×10⁻³",
            "− naive ×10⁻³",
            "ECE ×10⁻³",
            "Brier",
            "log loss",
            "accuracy",
            "fit s",
            "trace checks",
        ]
        legend = [
            "each cell: mean ± sd over the successful runs; runs: successful / all runs",
            "calib. RMSE: sqrt(mean over the reliability bins of (mean predicted p − fraction positive)²)",
            "− naive: the calibration RMSE minus naive's, run by run on the same traces (below 0: better than naive)",
            "ECE: the bins' |mean predicted p − fraction positive|, weighted by their share of the test points",
            "Brier, log loss, accuracy: of the predictive probabilities on the test set (docs/calibration.md)",
            "fit s: seconds of fitting; trace checks: runs whose trace the checks flagged / all runs",
        ]
        return "\n".join([text_table(header, rows), *legend])

    def headline(self) -> dict[str, Any]:
        """The headline numbers per method, plain JSON: each metric's mean and sd, the paired difference to naive,
        failures (None where undefined: no successful repeat, or an sd of fewer than 2)."""
        paired = {metric: self.paired(metric=metric) for metric in METRICS}
        out = {}
        for method in self.methods:
            entry: dict[str, Any] = {}
            for metric in METRICS:
                entry[f"{metric}_mean"], entry[f"{metric}_sd"] = _json_pair(self.mean_sd(method, metric))
                if method in paired[metric]:
                    entry[f"{metric}_minus_naive_mean"], entry[f"{metric}_minus_naive_sd"] = _json_pair(
                        paired[metric][method]
                    )
            entry["runs"] = len(self.metrics[method]["calibration_rmse"])
            entry["failures"] = int(self.failures[method])
            entry["diagnostics"] = dict(self.diagnostics.get(method, {}))
            out[method] = entry
        return out

    def summary(self) -> dict[str, Any]:
        """Deprecated alias of `headline`."""
        warn_renamed(f"{type(self).__name__}.summary()", f"{type(self).__name__}.headline()")
        return self.headline()

    def to_json(self, path, *, overwrite: bool = False) -> None:
        """Settings, seconds, the headline numbers (under the key "summary", as files already written have them),
        per-repeat metrics and the mean reliability curves, written atomically; an existing file is replaced only
        with `overwrite=True`."""
        payload = {
            "settings": dict(self.settings),
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "summary": self.headline(),
            "per_repeat": {m: {k: _list(v) for k, v in ms.items()} for m, ms in self.metrics.items()},
            "reliability_grid": GRID.tolist(),
            "reliability_mean": {m: _list(self.reliability_band(m)[0]) for m in self.methods},
        }
        write_json(path, payload, overwrite=overwrite)

    def to_datatree(self) -> xr.DataTree:
        """The result as an ArviZ DataTree (module doc): one group per method, its runs as draws."""
        record = {
            "settings": self.settings,
            "seconds": self.seconds,
            "paired_methods": self.paired_methods,
            "diagnostics": self.diagnostics,
        }
        groups = {"/": xr.Dataset(attrs=result_attrs(CALIBRATION_SCHEMA, self.settings, record))}
        for method in self.methods:
            variables = {
                name: (("chain", "draw"), np.asarray(v, np.float64)[None]) for name, v in self.metrics[method].items()
            }
            variables |= {
                name: (("chain", "draw", "bin"), np.asarray(v)[None]) for name, v in self.curves[method].items()
            }
            variables["histogram"] = (("chain", "draw", "histogram_bin"), np.asarray(self.histograms[method])[None])
            runs = len(self.metrics[method]["calibration_rmse"])
            group = xr.Dataset(variables, coords={"chain": [0], "draw": np.arange(runs)})
            group.attrs = {"failures": int(self.failures[method]), "sample_dims": ["chain", "draw"]}
            groups[method] = group
        return xr.DataTree.from_dict(groups)

    def to_netcdf(self, path, *, overwrite: bool = False) -> None:
        """`to_datatree()` as a netCDF file (h5netcdf), written atomically; an existing file is replaced only with
        `overwrite=True`. `CalibrationResult.from_datatree(xr.open_datatree(path))` reads it back."""
        write_tree(self.to_datatree(), path, overwrite=overwrite)

    @classmethod
    def from_datatree(cls, tree: xr.DataTree) -> CalibrationResult:
        """The result that `to_datatree` wrote, from its arrays and its `record` (never unpickled)."""
        record = result_record(tree, CALIBRATION_SCHEMA)
        data = {method: tree[method].dataset for method in tree.children}
        curves = ("mean_predicted", "fraction_positive", "counts")
        return cls(
            metrics={
                m: {name: d[name].values[0] for name in d.data_vars if d[name].dims == ("chain", "draw")}
                for m, d in data.items()
            },
            curves={m: {name: d[name].values[0] for name in curves} for m, d in data.items()},
            histograms={m: d["histogram"].values[0] for m, d in data.items()},
            paired_methods=tuple(record["paired_methods"]),
            failures={m: int(d.attrs["failures"]) for m, d in data.items()},
            seconds=record["seconds"],
            diagnostics=record["diagnostics"],
            settings=record["settings"],
        )


def _mean_sd(values: np.ndarray) -> tuple[float, float | None]:
    finite = np.asarray(values, np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return math.nan, None
    return float(finite.mean()), float(finite.std(ddof=1)) if finite.size > 1 else None


def _json_pair(pair: tuple[float, float | None]) -> tuple[float | None, float | None]:
    mean, sd = pair
    return (None if math.isnan(mean) else mean), sd


def _text(mean: float, sd: float | None, scale: float = 1.0) -> str:
    if math.isnan(mean):
        return "failed"
    digits = 0 if scale > 1 else 4
    return f"{scale * mean:.{digits}f}" + ("" if sd is None else f" ± {scale * sd:.{digits}f}")


def _list(values: np.ndarray) -> list:
    """A float array as a JSON list, NaN → None."""
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(values, np.float64)]
