"""The privacy–utility curve as a study: one task per ε, on the same simulations, resumable and parallel.

    noiseaware study privacy-utility --model M1 --epsilons 0.1 0.3 1 3 --out pu/ --workers 2
    run_study(PRIVACY_UTILITY.plan(PrivacyUtilityDesign("M1", epsilons=(0.3, 1.0))), "pu/")

`na.tuning.privacy_utility` computes the simulations' non-private facts once and checks the settings at each ε
(`preflight.check_settings`: expected posterior sd over the VI sd, TARP coverage RMSE, clipping, trace checks).
Here each ε is a task that computes the same facts from the same key and checks its own ε, so no task needs
another's result and the study's curve is `privacy_utility`'s, report for report. The settings are a built-in
model's research preset, or its tuned preset shipped at ε = tuned_at, held fixed along the curve (σ follows ε,
the learning-rate multipliers stay, so the per-step noise of the κ heuristic stays). The study prints the curve's
table and writes DIR/privacy-utility-MODEL.json and .png.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ... import models
from ...models.benchmark import BenchmarkModel
from ...plots import plot_privacy_utility
from ...recording.settings import DEFAULT_DELTA
from ...tuning.curve import PrivacyUtilityCurve, privacy_utility
from ...tuning.design import TUNING
from ...tuning.preflight import REFERENCES, record_settings
from ...tuning.preflight_report import PreflightReport
from ...tuning.presets import tuned_model
from ...util.checks import positive_float, positive_int
from ...util.codec import data_type
from ..kind import StudyKind, register_kind
from ..plan import Plan, kind_plan

__all__ = ["PRIVACY_UTILITY", "PrivacyUtilityDesign", "PrivacyUtilitySpec"]

data_type(PreflightReport)  # a task's result: one report per ε of its part


@dataclasses.dataclass(frozen=True)
class PrivacyUtilityDesign:
    """What a privacy–utility study is asked for: a built-in model, the ε grid, the preset held fixed, the
    simulations and reference draws of each check, δ and the seed."""

    model: str = dataclasses.field(metadata={"help": "a built-in model (M1, M2, M3, linreg-10d, logistic-3d, …)"})
    epsilons: tuple[float, ...] = dataclasses.field(
        default=TUNING.curve_epsilons, metadata={"help": "the privacy levels of the curve"}
    )
    tuned_at: float | None = dataclasses.field(
        default=None,
        metadata={"help": "hold the tuned preset shipped at this ε fixed along the curve (omit: the research preset)"},
    )
    simulations: int = dataclasses.field(
        default=TUNING.curve_simulations, metadata={"help": "prior-predictive simulations of every check"}
    )
    references: int = dataclasses.field(default=REFERENCES, metadata={"help": "TARP reference draws per check"})
    delta: float = dataclasses.field(default=DEFAULT_DELTA, metadata={"help": "δ of every privacy level"})
    seed: int = dataclasses.field(default=0, metadata={"help": "the seed of the simulations and the fits"})

    def __post_init__(self):
        try:
            models.get(self.model)
        except KeyError as unknown:
            raise ValueError(unknown.args[0]) from None
        object.__setattr__(self, "epsilons", tuple(positive_float("epsilon", e) for e in self.epsilons))
        if not self.epsilons:
            raise ValueError("epsilons needs at least one privacy level")
        if self.tuned_at is not None:
            positive_float("tuned_at", self.tuned_at)
        positive_int("simulations", self.simulations, minimum=2)
        positive_int("references", self.references)


@dataclasses.dataclass(frozen=True)
class PrivacyUtilitySpec:
    """The study resolved: the model with its preset, the record_dpvi settings checked, the grid and the sizes."""

    model: BenchmarkModel
    settings: Mapping[str, Any]
    epsilons: tuple[float, ...]
    delta: float
    simulations: int
    references: int
    seed: int

    @property
    def parts(self) -> list[slice]:
        """One part per ε."""
        return [slice(i, i + 1) for i in range(len(self.epsilons))]


def _spec(design: PrivacyUtilityDesign) -> PrivacyUtilitySpec:
    bm = models.get(design.model) if design.tuned_at is None else tuned_model(design.model, design.tuned_at)
    settings = record_settings(bm, None)  # a ValueError before any work where the preset is incomplete
    return PrivacyUtilitySpec(
        bm, settings, design.epsilons, design.delta, design.simulations, design.references, design.seed
    )


def _plan(design: PrivacyUtilityDesign) -> Plan:
    spec = _spec(design)
    return kind_plan(PRIVACY_UTILITY.name, [spec], {"model": design.model, "epsilons": list(design.epsilons)})


def _run_part(spec: PrivacyUtilitySpec, part: slice) -> tuple[PreflightReport, ...]:
    """The checks at the part's ε, on the simulations every part shares (the same key)."""
    curve = privacy_utility(
        spec.model,
        spec.settings,
        epsilons=spec.epsilons[part],
        delta=spec.delta,
        simulations=spec.simulations,
        key=spec.seed,
        references=spec.references,
        progress=False,  # a study's task: the study shows its own progress across tasks
    )
    return curve.reports


def _record(spec: PrivacyUtilitySpec) -> dict[str, Any]:
    return {"model": spec.model.name, "epsilons": list(spec.epsilons), "simulations": spec.simulations}


def _merge(record: Mapping[str, Any], parts: Sequence[tuple[PreflightReport, ...]]) -> PrivacyUtilityCurve:
    reports = tuple(report for part in parts for report in part)
    return PrivacyUtilityCurve(record["model"], tuple(record["epsilons"]), reports)


def _stem(record: Mapping[str, Any]) -> str:
    return f"privacy-utility-{record['model']}"


PRIVACY_UTILITY = register_kind(
    StudyKind(
        name="privacy-utility",
        unit="privacy levels",
        run_part=_run_part,
        record=_record,
        merge=_merge,
        label=lambda record: f"{record['model']} privacy–utility",
        render=lambda record, curve: (curve.table(), []),
        stem=_stem,
        outputs={".json": PrivacyUtilityCurve.to_json, ".png": plot_privacy_utility},
        design=PrivacyUtilityDesign,
        plan=_plan,
        description="the privacy–utility curve of a built-in model's settings: posterior width and coverage "
        "against ε, one task per ε",
    )
)
