"""What a run used, and who chose it: the model's priors, the DPVI settings, the transforms and the gradient
model's prior, each marked "yours" (your model, or a value you gave), by the preset it came from ("research
preset", "tuned preset at ε = 1"), or "default" (the value `record_dpvi` or the fit takes when none is given).

    report = settings_report(bm, used, preset="research preset", gradient_prior="default")
    print(report.brief())           # a few lines, for stderr
    print(report)                   # one line per setting
    report.to_json(path)            # kept beside the results

It takes the model as resolved (`bm.dpvi_settings`: the preset's settings) and the settings the run actually
passed to `record_dpvi` (`used`): a setting in `used` that differs from the preset's, or that the preset lacks,
is yours; else a value equal to `DPVISettings`' own default is the default (you would have it without the
preset); else it is the preset's. A site's transform is the default where it is numpyro's `biject_to` map. The
priors are read from the numpyro model's latent sites, one run of it on simulated inputs (or `data`), so they
are the model's own, not a copy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from numpyro import distributions as dist

from ..methods.routes import GradientModelOptions
from ..models.benchmark import BenchmarkModel
from ..recording.config import DPVISettings
from ..recording.contract import inspect_model, run_model
from ..trace.sites import SiteMap, default_transform_name
from ..util.defaults import field_default
from ..util.files import write_json
from ..util.tables import text_table

__all__ = ["DEFAULT", "YOURS", "Setting", "SettingsReport", "settings_path", "settings_report"]

DEFAULT = "default"
"""The source of a value nobody chose: record_dpvi's or the fit's own default."""
YOURS = "yours"
"""The source of a value you chose: your model, or an option or argument you gave."""
NOT_REPORTED = ("preflight", "preset_n_examples", "labels", "sites")
"""Entries of a settings mapping that are not choices: the tuner's check fingerprint and the N it tuned for, the
site labels and order."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One thing a run used: its kind ("model prior", "DPVI", "transform", "gradient-model prior"), its name,
    its value as text and its source (YOURS, DEFAULT or a preset's name)."""

    kind: str
    name: str
    value: str
    source: str

    def short(self) -> str:
        """name=value; a prior as name ~ value, a transform as transform[name]=value."""
        if self.kind == "model prior":
            return f"{self.name} ~ {self.value}"
        if self.kind == "transform":
            return f"transform[{self.name}]={self.value}"
        return f"{self.name}={self.value}"


@dataclasses.dataclass(frozen=True)
class SettingsReport:
    """What a run of `model` used (module doc); `preset`: where the model's DPVI settings came from."""

    model: str
    preset: str
    settings: tuple[Setting, ...]

    def brief(self) -> str:
        """A few lines for stderr: the preset, then per source what it set (the priors by site, last; defaults
        that are None, i.e. unused, left out)."""
        lines = [f"settings of {self.model} (DPVI settings: {self.preset})"]
        shown = [
            s for s in self.settings if s.kind != "model prior" and not (s.source == DEFAULT and s.value == "None")
        ]
        for source in dict.fromkeys(s.source for s in shown):
            lines.append(f"  [{source}] {', '.join(s.short() for s in shown if s.source == source)}")
        priors = [s for s in self.settings if s.kind == "model prior"]
        if priors:
            lines.append(f"  [model priors, {priors[0].source}] {'; '.join(s.short() for s in priors)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        rows = [[s.kind, s.name, s.value, s.source] for s in self.settings]
        heading = f"what this run of {self.model} used (DPVI settings: {self.preset})"
        return f"{heading}\n{text_table(['kind', 'name', 'value', 'source'], rows, numeric=False)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "preset": self.preset,
            "settings": [dataclasses.asdict(setting) for setting in self.settings],
        }

    def to_json(self, path, *, overwrite: bool = False) -> None:
        """The report as JSON, written atomically; an existing file is replaced only with `overwrite=True`."""
        write_json(path, self.to_dict(), overwrite=overwrite)


def settings_path(result: Path) -> Path:
    """Where the report of the run that wrote `result` is kept: beside it, `NAME.used.json` (m1.nc: m1.used.json;
    not NAME-settings.json, the name the docs give `noiseaware tune`'s settings file)."""
    return result.with_name(f"{result.stem}.used.json")


def settings_report(
    model: BenchmarkModel | Callable,
    used: Mapping[str, Any],
    *,
    preset: str,
    preset_settings: Mapping[str, Any] | None = None,
    site_map: SiteMap | None = None,
    data: Mapping[str, Any] | None = None,
    gradient_prior: str | None = None,
    name: str | None = None,
) -> SettingsReport:
    """The report of a run of `model` with the record_dpvi settings `used` (module doc).

    model: a BenchmarkModel as resolved, or a numpyro model function (then `site_map` and `data` are needed);
    preset: where the model's settings came from ("research preset", "tuned preset at ε = 1"; YOURS for settings
    of yours); preset_settings: those settings (default: the BenchmarkModel's `dpvi_settings`, else none);
    site_map: the trace's, when there is one (default: the BenchmarkModel's); data: the inputs to run the model on
    for its priors (default: the BenchmarkModel's simulated inputs); gradient_prior: the fits' `prior` preset
    name, None when nothing is fitted; name: the model's name as the user gave it (default: the model's own).
    """
    bm = model if isinstance(model, BenchmarkModel) else None
    if bm is None and (site_map is None or data is None):
        raise ValueError("the report of a numpyro model function needs its site_map and data")
    function = model.model if bm is not None else model
    if preset_settings is None:
        preset_settings = {} if bm is None else bm.dpvi_settings
    if data is None:
        inputs = bm.model_inputs(jax.random.key(0), bm.n_examples)
    else:
        spec = inspect_model(function, data)  # the data as the model takes them, n_examples included
        inputs = spec.model_kwargs(*spec.split_data(data), spec.n_examples)
    latent = _latent_sites(function, inputs, () if bm is None else bm.observed)
    dpvi = _dpvi(preset_settings, used, preset)
    transforms = next(row.source for row in dpvi if row.name == "transforms")
    source = "built-in model" if getattr(function, "__module__", "").startswith("noiseaware.") else YOURS
    rows = [Setting("model prior", name, describe(fn), source) for name, fn in latent.items()]
    rows += [row for row in dpvi if row.name != "transforms"]
    for site in (site_map or bm.site_map).sites:
        default = site.name in latent and site.transform == default_transform_name(latent[site.name].support)
        rows.append(Setting("transform", site.name, site.transform, DEFAULT if default else transforms))
    if gradient_prior is not None:
        default = field_default(GradientModelOptions, "prior")
        rows.append(
            Setting("gradient-model prior", "prior", gradient_prior, DEFAULT if gradient_prior == default else YOURS)
        )
    name = name or (bm.name if bm is not None else getattr(function, "__name__", "model"))
    return SettingsReport(name, preset, tuple(rows))


def _latent_sites(model: Callable, inputs: Mapping[str, Any], observed: tuple[str, ...]) -> dict[str, Any]:
    """The model's latent sites and their prior distributions, from one seeded run of the model on `inputs` (a
    site that `inputs` or `observed` names, or that the model observes, is data, not a latent)."""
    trace = run_model(model, dict(inputs), seed=0)
    return {
        name: site["fn"]
        for name, site in trace.items()
        if site["type"] == "sample" and not site["is_observed"] and name not in inputs and name not in observed
    }


def _dpvi(preset_settings: Mapping[str, Any], used: Mapping[str, Any], preset: str) -> list[Setting]:
    """One row per DPVISettings field: the value used and its source. A value that differs from the preset's (or
    that the preset lacks) is yours; else one equal to the field's default is the default (you would have it
    without the preset); else it is the preset's."""
    rows = []
    for field in dataclasses.fields(DPVISettings):
        name = field.name
        default = None if field.default is dataclasses.MISSING else _text(field.default)
        if name in NOT_REPORTED or (name not in used and name not in preset_settings and default is None):
            continue
        value = _text(used[name] if name in used else preset_settings.get(name, field.default))
        if name in used and (name not in preset_settings or _text(preset_settings[name]) != value):
            source = YOURS
        else:
            source = DEFAULT if value == default else preset
        rows.append(Setting("DPVI", name, value, source))
    return rows


def describe(fn) -> str:
    """A numpyro distribution as text: its class and parameters, e.g. 'Gamma(concentration=8, rate=2)', with the
    batch shape of an expanded or independent distribution, e.g. 'Normal(loc=0, scale=2) × (3,)'."""
    shape = tuple(fn.batch_shape) + tuple(fn.event_shape)
    while isinstance(fn, (dist.Independent, dist.ExpandedDistribution)):
        fn = fn.base_dist
    given = vars(fn)  # the parameters it was built with (not the ones it would derive, e.g. logits from probs)
    parameters = [f"{name}={_text(given[name])}" for name in fn.arg_constraints if name in given]
    text = f"{type(fn).__name__}({', '.join(parameters)})"
    return text if shape == tuple(fn.batch_shape) + tuple(fn.event_shape) else f"{text} × {shape}"


def _text(value: Any) -> str:
    """A setting's value as short text: numbers with :g, a constant array as its value, others by shape."""
    if isinstance(value, (str, type(None), bool)):
        return str(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_text(v) for v in value) + ")"
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return repr(value)
    if array.size == 1:
        return f"{array.item():g}"
    if np.all(array == array.flat[0]):
        return f"{array.flat[0]:g} (each of {array.size})"
    return f"array of shape {array.shape}" if array.size > 4 else "(" + ", ".join(f"{v:g}" for v in array.flat) + ")"
