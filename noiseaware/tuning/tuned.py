"""TunedSettings: DP-SGD settings found on simulations, with their check and where they came from.

A read-only mapping of `record_dpvi`'s keyword arguments, so `record_dpvi(model, data, epsilon=…, key=…,
**tuned)` and `na.models.from_numpyro(model, n_examples=N, **tuned)` take it as it is. Beside the settings:
the model it was tuned for (name and θ layout: sites, shapes, transforms), the privacy level, the fresh
simulation check (`PreflightReport`), the trials table and the provenance (key, trials, simulations, package
versions). `save` writes JSON atomically with a fingerprint of everything else in it; `load` reads it back and
refuses a file without that fingerprint or whose content no longer matches it (an edited clip, a truncated or
mixed-up file), and, given a model, a file made for another model.

The fingerprint is an unkeyed hash: it detects accidents, not forgery (whoever edits a file can recompute it).
For a file from someone else, `load(path, model, verify=True)` (or `tuned.verify(model)`) re-verifies what is
cheap to recompute from fresh non-private facts (`verify`: σ, the clipped fraction, the predicted clipping shift
and width) and refuses a file whose check does not match its settings; the full check is `preflight`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..models.benchmark import BenchmarkModel
from ..util.files import plain, write_json
from .preflight_report import PreflightReport
from .verify import VERIFY_SIMULATIONS, SettingsVerification, verify_check

__all__ = ["SettingsFileError", "TunedSettings", "model_layout"]

FORMAT = "noiseaware.tuned-settings/1"


class SettingsFileError(ValueError):
    """A settings file that cannot be read, or that was made for another model."""


def site_layout(site_map) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """The θ layout settings depend on: (site, constrained shape, transform) in θ order."""
    return tuple((site.name, tuple(site.shape), site.transform) for site in site_map.sites)


def model_layout(bm: BenchmarkModel) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """`site_layout` of a model's site map."""
    return site_layout(bm.site_map)


@dataclass(frozen=True)
class TunedSettings(Mapping[str, Any]):
    """DP-SGD settings for one model and privacy level, checked on fresh simulations (module doc).

    settings: record_dpvi keyword arguments (steps, sampling_rate, clip, grad_scale (P,), lr_multiplier (P,),
    init (P,), mc_draws, transforms {site: name}, sites); layout: `model_layout` of the model. As a mapping
    (`record_dpvi(..., **tuned)`) it adds `preset_n_examples` = N, so that data far from N are refused, and, where
    its check was made here or re-verified (`verified`, not stored in the file), the check's fingerprint
    `preflight`, which silences record_dpvi's reminder to check the settings.
    """

    model: str
    layout: tuple
    n_examples: int
    epsilon: float
    delta: float
    settings: Mapping[str, Any]
    check: PreflightReport | None = None
    trials: tuple[Mapping[str, Any], ...] = ()
    provenance: Mapping[str, Any] = field(default_factory=dict)
    verified: bool = field(default=True, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))
        object.__setattr__(self, "provenance", MappingProxyType(dict(self.provenance)))

    @property
    def fingerprint(self) -> str:
        """A short hash of everything the settings file holds besides it (model, layout, N, privacy level,
        settings, check, trials, provenance): names these checked settings in a trace's provenance, and
        detects a file edited after tuning."""
        return _digest(self._content())

    def _entries(self) -> dict[str, Any]:
        checked = {"preflight": self.fingerprint} if self.check is not None and self.verified else {}
        return {**self.settings, "preset_n_examples": self.n_examples, **checked}

    def __getitem__(self, name: str) -> Any:
        return self._entries()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())

    def check_model(self, bm: BenchmarkModel) -> None:
        """A SettingsFileError unless `bm` is the model these settings were tuned for (name, θ layout, N)."""
        self.check_layout(bm.name, bm.site_map, bm.n_examples)

    def check_layout(self, name: str, site_map, n_examples: int) -> None:
        """A SettingsFileError unless (model name, θ layout of `site_map`, N) are those tuned for."""
        layout = site_layout(site_map)
        if name != self.model or layout != tuple(self.layout):
            raise SettingsFileError(
                f"these settings were tuned for model {self.model!r} with sites {_layout_text(self.layout)}, "
                f"not for {name!r} with sites {_layout_text(layout)}: tune this model "
                "(na.tune / noiseaware tune) or load the settings made for it"
            )
        if n_examples != self.n_examples:
            raise SettingsFileError(
                f"these settings were tuned for N = {self.n_examples} examples, not N = {n_examples}: "
                "the gradient scales and clip depend on N; tune again at this N"
            )

    def _content(self) -> dict[str, Any]:
        """The JSON-ready fields of the file, all but the fingerprint."""
        return plain(
            {
                "format": FORMAT,
                "model": self.model,
                "layout": self.layout,
                "n_examples": self.n_examples,
                "epsilon": self.epsilon,
                "delta": self.delta,
                "settings": dict(self.settings),
                "check": None if self.check is None else self.check.to_dict(),
                "trials": list(self.trials),
                "provenance": dict(self.provenance),
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with its fingerprint (`from_dict` reads it back)."""
        content = self._content()
        return {**content, "fingerprint": _digest(content)}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> TunedSettings:
        """The settings of `to_dict`'s output; a SettingsFileError for anything else, and for a payload without
        its fingerprint or whose content does not match it."""
        if not isinstance(payload, Mapping) or payload.get("format") != FORMAT:
            raise SettingsFileError(f"not a noiseaware settings file (format {FORMAT!r} expected)")
        _check_fingerprint(payload)
        settings = dict(payload["settings"])
        for name in ("grad_scale", "lr_multiplier", "init"):
            settings[name] = tuple(settings[name])
        if settings.get("sites") is not None:
            settings["sites"] = tuple(settings["sites"])
        check = payload.get("check")
        tuned = cls(
            model=payload["model"],
            layout=tuple((name, tuple(shape), transform) for name, shape, transform in payload["layout"]),
            n_examples=int(payload["n_examples"]),
            epsilon=float(payload["epsilon"]),
            delta=float(payload["delta"]),
            settings=settings,
            check=None if check is None else PreflightReport.from_dict(check),
            trials=tuple(payload.get("trials", ())),
            provenance=payload.get("provenance", {}),
            verified=False,  # read from outside: `load` re-verifies it against its model
        )
        return tuned

    def verify(self, model: BenchmarkModel, *, simulations: int = VERIFY_SIMULATIONS) -> SettingsVerification:
        """Re-verify the recorded check against these settings on fresh simulations of `model` (`verify` module:
        seconds, no privacy); a SettingsFileError for another model, or for settings without a check."""
        self.check_model(model)
        if self.check is None:
            raise SettingsFileError(
                "these settings record no check, so there is nothing to re-verify: check them on fresh simulations "
                "(na.preflight(model, settings, …) / noiseaware preflight --settings FILE)"
            )
        return verify_check(
            model, dict(self.settings), self.check, epsilon=self.epsilon, delta=self.delta, simulations=simulations
        )

    def save(self, path, *, overwrite: bool = False) -> None:
        """Write the settings as JSON (atomically; an existing file only with overwrite=True)."""
        write_json(path, self.to_dict(), overwrite=overwrite)

    @classmethod
    def load(cls, path, model: BenchmarkModel | None = None, *, verify: bool | None = None) -> TunedSettings:
        """Read a settings file; with `model`, refuse one tuned for another model (`check_model`) and one whose
        recorded check does not match its settings on fresh simulations (`verify`, seconds, no privacy), naming
        each recorded and recomputed value. verify=False skips that (a file you tuned yourself); without `model`
        nothing can be re-verified, and the settings then carry no check mark (`verified` is False: record_dpvi
        reminds you to check them)."""
        if verify and model is None:
            raise ValueError("verify=True re-verifies the settings on simulations of their model: pass model=")
        verify = model is not None if verify is None else verify
        path = Path(path)
        try:
            payload = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise SettingsFileError(f"{path} is not a noiseaware settings file: {error}") from None
        try:
            tuned = cls.from_dict(payload)
        except (KeyError, TypeError, ValueError) as error:
            if isinstance(error, SettingsFileError):
                raise SettingsFileError(f"{path}: {error}") from None
            raise SettingsFileError(f"{path} is not a complete noiseaware settings file: {error!r}") from None
        if model is not None:
            tuned.check_model(model)
        if verify and tuned.check is not None:
            found = tuned.verify(model)
            if not found.ok:
                raise SettingsFileError(
                    f"{path}: its recorded check does not match its settings on {found.simulations} fresh "
                    f"simulations ({'; '.join(found.mismatches)}). The check was not made with these settings "
                    "(an edited or forged file, its fingerprint recomputed): do not use it; tune again, or check the "
                    "settings yourself (na.preflight / noiseaware preflight --settings FILE)"
                )
        return replace(tuned, verified=bool(verify))

    def table(self) -> str:
        """The settings, one line each."""
        lines = [f"settings for {self.model} (N = {self.n_examples}) at ε = {self.epsilon:g}, δ = {self.delta:g}"]
        for name, value in self.settings.items():
            if isinstance(value, tuple) and value and isinstance(value[0], float):
                value = "(" + ", ".join(f"{v:.4g}" for v in value) + ")"
            lines.append(f"  {name:<14} {value}")
        return "\n".join(lines)


def _digest(content: Mapping[str, Any]) -> str:
    """The first 16 hex digits of the sha256 of `content` as canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def _check_fingerprint(payload: Mapping[str, Any]) -> None:
    """A SettingsFileError unless the payload's fingerprint is the digest of the rest of it."""
    retune = (
        "tune again (noiseaware tune … --out FILE, or na.tune(…).save(FILE)); settings checked on simulations "
        "cannot be trusted once the file is changed by hand"
    )
    if "fingerprint" not in payload:
        raise SettingsFileError(f"the settings file has no fingerprint, so edits to it cannot be ruled out: {retune}")
    content = {name: value for name, value in payload.items() if name != "fingerprint"}
    if payload["fingerprint"] != _digest(content):
        raise SettingsFileError(
            "the settings file was edited after tuning: its fingerprint does not match its settings, check and "
            f"provenance; {retune}"
        )


def _layout_text(layout) -> str:
    return ", ".join(f"{name}{list(shape) if shape else ''} ({transform})" for name, shape, transform in layout)
