"""The privacy–utility curve: what a posterior from given settings would look like at each ε, before any data.

For a grid of ε (σ recomputed by the accountant for each, the learning-rate multipliers kept, so the κ
heuristic keeps the per-step noise fixed), the same M simulations and their non-private facts are recorded,
fitted (exact NA-DPVI) and checked (`preflight.check_settings`): the expected posterior sd relative to the
non-private VI posterior and the TARP coverage RMSE against ε, with the clipped fraction and the share of
traces the trace checks flag. The plot a user needs to choose ε.

At the ε that `TunedSettings` were tuned for, the curve shows their own fresh check (more simulations than the
curve's, and the verdict the settings file carries) rather than a second, smaller check that could disagree
with it; the table's `simulations` column says which is which.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jax
import numpy as np

from ..models.benchmark import BenchmarkModel
from ..recording.settings import DEFAULT_DELTA, check_delta
from ..util.checks import positive_float, positive_int
from ..util.files import plain, write_json
from ..util.keys import as_key, key_repr
from ..util.progress import Progress, progress_bar
from ..util.tables import text_table
from .design import TUNING
from .facts import facts_for_settings
from .preflight import REFERENCES, check_settings, record_settings
from .preflight_report import PreflightReport
from .tuned import TunedSettings

__all__ = ["PrivacyUtilityCurve", "privacy_utility"]


@dataclass(frozen=True)
class PrivacyUtilityCurve:
    """One PreflightReport per ε of the grid, on the same simulations (module doc)."""

    model: str
    epsilons: tuple[float, ...]
    reports: tuple[PreflightReport, ...]

    @property
    def sd_ratio(self) -> np.ndarray:
        """Mean posterior sd over the non-private VI sd, per ε (E,)."""
        return np.array([r.mean_sd_ratio for r in self.reports])

    @property
    def coverage_rmse(self) -> np.ndarray:
        """TARP coverage RMSE (mean over reference draws) per ε, (E,)."""
        return np.array([r.coverage_rmse[0] for r in self.reports])

    def table(self) -> str:
        rows = [
            [
                f"{e:g}",
                f"{r.simulations}",
                f"{r.noise_multiplier:.4g}",
                f"{r.mean_sd_ratio:.3f}",
                f"{r.coverage_rmse[0]:.3f} ± {r.coverage_rmse[1]:.3f}",
                f"{100 * r.clipped:.2f}",
                f"{100 * r.flagged:.0f}",
                r.verdict,
            ]
            for e, r in zip(self.epsilons, self.reports)
        ]
        header = ["ε", "simulations", "σ", "sd / VI sd", "coverage RMSE", "clipped %", "flagged %", "check"]
        notes = [
            f"at ε = {e:g}: {kind}: {text}"
            for e, r in zip(self.epsilons, self.reports)
            for kind, text in [("finding", f) for f in r.findings] + [("warning", line) for _, line in r.warnings]
        ]
        legend = (
            "simulations: recorded and fitted at that ε; σ: the noise multiplier for (ε, δ); sd / VI sd: mean noise-"
            "aware posterior sd over the non-private VI sd; coverage RMSE: TARP, ± its Monte Carlo sd; clipped %: "
            "per-example gradients clipped; flagged %: traces the trace checks flag; check: the verdict"
        )
        return "\n".join([f"privacy–utility of {self.model}", text_table(header, rows), legend, *notes])

    def to_dict(self) -> dict:
        return plain({"model": self.model, "epsilons": self.epsilons, "reports": [r.to_dict() for r in self.reports]})

    def to_json(self, path, *, overwrite: bool = False) -> None:
        write_json(path, self.to_dict(), overwrite=overwrite)


def privacy_utility(
    bm: BenchmarkModel,
    settings: Mapping | None = None,
    *,
    epsilons: Sequence[float] = TUNING.curve_epsilons,
    delta: float = DEFAULT_DELTA,
    simulations: int = TUNING.preflight_simulations,
    key,
    references: int = REFERENCES,
    progress: Progress = True,
) -> PrivacyUtilityCurve:
    """The privacy–utility curve of `settings` (TunedSettings, or record_dpvi keywords over bm's preset); at the
    ε and δ TunedSettings were checked at, their check is the curve's point there (module doc)."""
    own = settings.check if isinstance(settings, TunedSettings) and settings.check is not None else None
    settings = record_settings(bm, settings)
    epsilons = tuple(positive_float("epsilon", e) for e in epsilons)
    if not epsilons:
        raise ValueError("epsilons needs at least one privacy level")
    check_delta(delta, bm.n_examples)
    positive_int("simulations", simulations, minimum=2)
    k_sim, k_facts, k_check = jax.random.split(as_key(key), 3)
    facts = facts_for_settings(bm, settings, simulations, simulation_key=k_sim, facts_key=k_facts)
    reports = []
    with progress_bar(len(epsilons), "privacy levels", progress, unit="ε") as advance:
        for epsilon in epsilons:
            if own is not None and math.isclose(epsilon, own.epsilon, rel_tol=1e-9) and own.delta == delta:
                reports.append(own)
                advance(1)
                continue
            reports.append(
                check_settings(
                    bm,
                    settings,
                    facts,
                    epsilon=epsilon,
                    delta=delta,
                    key=k_check,
                    references=references,
                    key_text=key_repr(key),
                )
            )
            advance(1)
    return PrivacyUtilityCurve(bm.name, epsilons, tuple(reports))
