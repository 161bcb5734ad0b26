"""CoverageResult: the ECP curves of several methods on the same simulations, and their reports (table, JSON,
CSV, and an ArviZ DataTree written as .nc).

The DataTree (`to_datatree`, the layout ArviZ gives a sampler's draws and simuk its SBC ranks) has one group per
method; TARP's R reference draws play the role of draws, so `arviz.summary(tree, group=METHOD)` gives the mean
and sd of each credibility level's ECP over them:

    /            attrs: schema, each scalar setting (model, epsilon, noise_multiplier, key, …), and `record`,
                 the JSON of what the arrays do not hold (settings, seconds, failures, diagnostics)
    /METHOD      ecp (chain 1, draw R, rule, credibility L); marginal_ecp (chain, draw, rule, credibility, theta d);
                 width_ratio (fit M_ok, theta): each successful simulation's 90 % width over the non-private one;
                 pit (fit M_ok, theta): each successful simulation's marginal PIT of the truth

`pit_tree()` is the PIT in the layout ArviZ's `plot_ecdf_pit` reads (its SBC group, one variable per method).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ..util.deprecation import warn_renamed
from ..util.files import atomic_write, plain, write_json
from ..util.tables import text_table
from .experiment import checks_cell
from .tarp import chance_rmse, coverage_rmse

__all__ = ["COVERAGE_SCHEMA", "REFERENCE_RULES", "CoverageResult", "result_attrs", "result_record", "write_tree"]

COVERAGE_SCHEMA = "noiseaware.coverage-result/1"
"""The `schema` attribute of a coverage result's DataTree."""

REFERENCE_RULES = {
    "research": "post-burn-in mean of the μ trace ± 4 × the evaluated posterior's sd per dimension (the "
    "paper's rule; the box depends on the method)",
    "trace": "post-burn-in mean of the μ trace ± 4 × the DPVI sd sqrt(Σ_jj(φ_T)) (softplus(ρ_T) for mean-field; "
    "one box for every method)",
}
"""Reference-point rules: θ_ref = centre + U ⊙ half-width, U ~ U(−1, 1)^d, never looking at the truth."""


@dataclasses.dataclass(frozen=True)
class CoverageResult:
    """TARP coverage of several methods on the same simulations.

    levels (L,); curves[rule][method] (R, L): ECP over R reference draws; marginal_curves[rule][method]
    (R, L, d): per dimension; failures[method]: simulations whose fit failed (left out of its ECP);
    seconds per stage (dpvi, each method's fit, tarp_<method>); diagnostics[method]: sampler facts and
    warnings; theta_names (d,); settings (model, ε, σ, M, R, K, T, prior, key, …) for the results file;
    width_ratio[method] (M_ok, d): each simulation's central 90 % interval width over the non-private
    posterior's (`reference_sd`), the price of honesty beside the coverage; pit[method] (M_ok, d): each
    simulation's marginal PIT of the truth, u_mj = the fraction of its K draws of θ_j below θ_true,j, uniform
    on (0, 1) for a calibrated method (2|u − ½| is then the level of the central interval that just reaches it).
    """

    levels: np.ndarray
    curves: Mapping[str, Mapping[str, np.ndarray]]
    marginal_curves: Mapping[str, Mapping[str, np.ndarray]]
    failures: Mapping[str, int]
    seconds: Mapping[str, float]
    diagnostics: Mapping[str, Mapping[str, Any]]
    theta_names: tuple[str, ...]
    settings: Mapping[str, Any]
    width_ratio: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)
    pit: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        return list(next(iter(self.curves.values())))

    @property
    def ecp(self) -> Mapping[str, np.ndarray]:
        """method → ECP curves (R, L) under the research reference rule."""
        return self.curves["research"]

    @property
    def rmse(self) -> dict[str, tuple[float, float]]:
        """method → (mean, sd) over the R reference draws of the coverage RMSE, under the research rule."""
        return self.rmse_under("research")

    def rmse_under(self, rule: str) -> dict[str, tuple[float, float]]:
        """method → (mean, sd over R) of sqrt(mean over the levels of (ECP − level)²) under `rule`."""
        out = {}
        for method, curves in self.curves[rule].items():
            values = np.atleast_1d(coverage_rmse(self.levels, curves.T))
            out[method] = (float(np.mean(values)), float(np.std(values, ddof=1)) if values.size > 1 else 0.0)
        return out

    def marginal_rmse(self, rule: str = "research") -> dict[str, np.ndarray]:
        """method → (d,) coverage RMSE of each dimension's own curve, averaged over the R reference draws."""
        return {
            m: np.mean([coverage_rmse(self.levels, c) for c in curves], axis=0)
            for m, curves in self.marginal_curves[rule].items()
        }

    def median_width_ratio(self) -> dict[str, np.ndarray]:
        """method → (d,) median over the simulations of the 90 % interval width over the non-private posterior's
        (NaN where no simulation has one)."""
        out = {}
        for method, ratios in self.width_ratio.items():
            finite = np.where(np.isfinite(ratios), ratios, np.nan)
            out[method] = (
                np.nanmedian(finite, axis=0) if np.isfinite(finite).any() else np.full(len(self.theta_names), np.nan)
            )
        return out

    def table(self) -> str:
        """Methods × reference rules: RMSE mean ± sd, the interval width relative to the non-private posterior's,
        failures, fit seconds, and the traces the trace checks flagged (of all traces, with the checks that
        fired); below it, what each column means."""
        rules = list(self.curves)
        widths = self.median_width_ratio()
        rows = []
        for method in self.methods:
            cells = [f"{m:.3f} ± {s:.3f}" for m, s in (self.rmse_under(rule)[method] for rule in rules)]
            width = _width_cell(widths.get(method))
            seconds = f"{self.seconds.get(method, float('nan')):.1f}"
            checks = checks_cell(self.diagnostics.get(method, {}))
            rows.append([method, *cells, width, str(self.failures[method]), seconds, checks])
        header = ["method", *(f"RMSE ({rule} ref.)" for rule in rules), "width ×", "failures", "fit s", "trace checks"]
        simulations = self.settings.get("simulations")
        chance = (
            ""
            if simulations is None
            else f"; a calibrated method scores about sqrt(1/(6M)) by chance, {chance_rmse(simulations):.3f} for these "
            f"M = {simulations} simulations"
        )
        legend = [
            f"RMSE: sqrt(mean over the {len(self.levels)} levels of (ECP − level)²), 0 when calibrated; mean ± sd "
            f"over the reference draws{chance}",
            "ref.: the rule that draws TARP's reference points θ_ref = centre + U ⊙ half-width, U ~ U(−1, 1)^d:",
            *(f"  {rule}: {REFERENCE_RULES[rule]}" for rule in rules),
            "width ×: the central 90 % interval's width over the non-private posterior's (Laplace at the MAP of "
            "the simulated data), median over simulations; with d > 1 the median over θ's coordinates [their range]",
            "failures: simulations whose fit failed (left out of the ECP); fit s: seconds of fitting",
            "trace checks: traces flagged / all traces (how many each check fired on)",
        ]
        return "\n".join([text_table(header, rows), *legend])

    def headline(self) -> dict[str, Any]:
        """The headline numbers, plain JSON: per method and rule the RMSE (mean, sd), marginal RMSEs, the width
        ratio, failures, diagnostics."""
        return {
            method: {
                "rmse": {rule: dict(zip(("mean", "sd"), self.rmse_under(rule)[method])) for rule in self.curves},
                "marginal_rmse": {
                    rule: dict(zip(self.theta_names, map(float, self.marginal_rmse(rule)[method])))
                    for rule in self.curves
                },
                "width_ratio": dict(
                    zip(self.theta_names, map(float, self.median_width_ratio().get(method, [np.nan] * self.dim)))
                ),
                "failures": int(self.failures[method]),
                "diagnostics": dict(self.diagnostics.get(method, {})),
            }
            for method in self.methods
        }

    def summary(self) -> dict[str, Any]:
        """Deprecated alias of `headline`."""
        warn_renamed(f"{type(self).__name__}.summary()", f"{type(self).__name__}.headline()")
        return self.headline()

    @property
    def dim(self) -> int:
        """d, the dimension of θ."""
        return len(self.theta_names)

    def to_json(self, path, *, overwrite: bool = False) -> None:
        """Settings, the headline numbers (under the key "summary", as files already written have them), per-stage
        seconds and the mean/sd ECP curves, written atomically; an existing file is replaced only with
        `overwrite=True`."""
        payload = {
            "settings": dict(self.settings),
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "summary": self.headline(),
            "levels": self.levels.tolist(),
            "ecp_mean": {r: {m: curve_band(c)[0].tolist() for m, c in cs.items()} for r, cs in self.curves.items()},
            "ecp_sd": {r: {m: curve_band(c)[1].tolist() for m, c in cs.items()} for r, cs in self.curves.items()},
        }
        write_json(path, payload, overwrite=overwrite)

    def to_csv(self, path, *, overwrite: bool = False) -> None:
        """Long table: method, reference_rule, dimension ("joint" or a θ name), level, ecp_mean, ecp_sd, written
        atomically; an existing file is replaced only with `overwrite=True`."""
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["method", "reference_rule", "dimension", "level", "ecp_mean", "ecp_sd"])
        for rule in self.curves:
            for method in self.methods:
                blocks = [("joint", self.curves[rule][method])]
                blocks += [
                    (name, self.marginal_curves[rule][method][..., j]) for j, name in enumerate(self.theta_names)
                ]
                for dimension, curves in blocks:
                    for level, mean, sd in zip(self.levels, *curve_band(curves)):
                        writer.writerow([method, rule, dimension, f"{level:.3f}", f"{mean:.5f}", f"{sd:.5f}"])
        atomic_write(Path(path), lambda temporary: temporary.write_text(buffer.getvalue()), overwrite=overwrite)

    def to_datatree(self) -> xr.DataTree:
        """The result as an ArviZ DataTree (module doc): one group per method, its ECP curves over TARP's
        reference draws (chain, draw), reference rules, credibility levels and θ's coordinates."""
        rules = list(self.curves)
        coords = {"rule": rules, "credibility": self.levels, "theta": list(self.theta_names)}
        groups = {"/": xr.Dataset(attrs=result_attrs(COVERAGE_SCHEMA, self.settings, self._record()))}
        for method in self.methods:
            joint = np.stack([self.curves[rule][method] for rule in rules], axis=1)[None]
            marginal = np.stack([self.marginal_curves[rule][method] for rule in rules], axis=1)[None]
            variables = {
                "ecp": (("chain", "draw", "rule", "credibility"), joint),
                "marginal_ecp": (("chain", "draw", "rule", "credibility", "theta"), marginal),
            }
            for name, per_fit in (("width_ratio", self.width_ratio), ("pit", self.pit)):
                if method in per_fit:
                    variables[name] = (("fit", "theta"), np.asarray(per_fit[method], np.float64))
            group = xr.Dataset(variables, coords=coords | {"chain": [0], "draw": np.arange(joint.shape[1])})
            group.attrs = {"failures": int(self.failures[method]), "sample_dims": ["chain", "draw"]}
            groups[method] = group
        return xr.DataTree.from_dict(groups)

    def to_netcdf(self, path, *, overwrite: bool = False) -> None:
        """`to_datatree()` as a netCDF file (h5netcdf), written atomically; an existing file is replaced only with
        `overwrite=True`. `CoverageResult.from_datatree(xr.open_datatree(path))` reads it back."""
        write_tree(self.to_datatree(), path, overwrite=overwrite)

    @classmethod
    def from_datatree(cls, tree: xr.DataTree) -> CoverageResult:
        """The result that `to_datatree` wrote, from its arrays and its `record` (never unpickled)."""
        record = result_record(tree, COVERAGE_SCHEMA)
        methods = list(tree.children)
        first = tree[methods[0]].dataset
        rules = [str(rule) for rule in first["rule"].values]
        curves = {r: {m: tree[m].dataset["ecp"].values[0, :, i] for m in methods} for i, r in enumerate(rules)}
        marginal = {
            r: {m: tree[m].dataset["marginal_ecp"].values[0, :, i] for m in methods} for i, r in enumerate(rules)
        }
        widths, pit = (
            {m: tree[m].dataset[v].values for m in methods if v in tree[m].dataset} for v in ("width_ratio", "pit")
        )
        return cls(
            levels=first["credibility"].values,
            curves=curves,
            marginal_curves=marginal,
            failures={m: int(tree[m].attrs["failures"]) for m in methods},
            seconds=record["seconds"],
            diagnostics=record["diagnostics"],
            theta_names=tuple(str(name) for name in first["theta"].values),
            settings=record["settings"],
            width_ratio=widths,
            pit=pit,
        )

    def pit_tree(self, methods: Sequence[str] | None = None) -> xr.DataTree:
        """The marginal PIT of the truth as ArviZ's simulation-based-calibration input: group "prior_sbc", one
        variable per method (chain 1, draw M_ok, theta d), the simulations as draws. `az.plot_ecdf_pit(tree)`
        draws each coordinate's Δ-ECDF of u with a uniformity test; `coverage=True` draws the coverage of the
        central intervals (ECDF of 2|u − ½|) against their level."""
        chosen = [m for m in (self.methods if methods is None else methods) if len(self.pit.get(m, ())) > 0]
        if not chosen:
            raise ValueError(
                "no PIT to export: this result holds none for these methods (every fit failed, or the result was "
                "written by a noiseaware that did not record it); rerun the study to have it"
            )
        coords = {"chain": [0], "theta": list(self.theta_names)}
        variables = {m: (("chain", "draw", "theta"), np.asarray(self.pit[m], np.float64)[None]) for m in chosen}
        return xr.DataTree.from_dict({"prior_sbc": xr.Dataset(variables, coords=coords)})

    def _record(self) -> dict[str, Any]:
        return {"settings": self.settings, "seconds": self.seconds, "diagnostics": self.diagnostics}


def result_attrs(schema: str, settings: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """A result DataTree's root attributes: its schema, each setting under its own name (a number or text as
    itself, a bool as 0/1, a list or mapping such as a key or the method options as JSON, None left out), and
    `record`, the JSON of what its arrays do not hold."""
    named = {}
    for name, value in plain(settings).items():
        if isinstance(value, bool):
            named[name] = int(value)
        elif isinstance(value, (str, int, float)):
            named[name] = value
        elif value is not None:
            named[name] = json.dumps(value)
    return named | {"schema": schema, "record": json.dumps(plain(record))}


def result_record(tree: xr.DataTree, schema: str) -> dict[str, Any]:
    """The root's JSON record, once the tree is known to be of `schema`; a ValueError names what it is instead."""
    found = tree.attrs.get("schema")
    if found != schema:
        raise ValueError(f"this DataTree is not a {schema} (its schema: {found!r})")
    return json.loads(tree.attrs["record"])


def write_tree(tree: xr.DataTree, path, *, overwrite: bool) -> None:
    """`tree` as a netCDF file (h5netcdf) at `path`, written atomically; replaced only with `overwrite`."""
    path = Path(path)
    if path.suffix != ".nc":
        raise ValueError(f"a result's DataTree is written as netCDF: use a .nc path, not {path.name!r}")
    atomic_write(path, lambda temporary: tree.to_netcdf(temporary, engine="h5netcdf"), overwrite=overwrite)


def _width_cell(ratios) -> str:
    """The table's width cell: the ratio for d = 1; else the median over coordinates and their range."""
    if ratios is None or not np.isfinite(ratios).any():
        return "–"
    if len(ratios) == 1:
        return f"{ratios[0]:.2f}"
    return f"{np.nanmedian(ratios):.2f} [{np.nanmin(ratios):.2f}–{np.nanmax(ratios):.2f}]"


def curve_band(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd (ddof 0) over axis 0 of ECP curves (R, L, …), ignoring NaN; NaN, quietly, where every curve is
    NaN (a method whose every fit failed), instead of numpy's RuntimeWarnings about empty slices."""
    count = np.sum(np.isfinite(curves), axis=0)
    mean = np.where(count > 0, np.nansum(curves, axis=0) / np.maximum(count, 1), np.nan)
    squares = np.nansum((curves - mean) ** 2, axis=0)
    return mean, np.sqrt(np.where(count > 0, squares / np.maximum(count, 1), np.nan))
