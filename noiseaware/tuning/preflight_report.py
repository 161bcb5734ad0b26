"""PreflightReport: what fresh simulations say about DP-SGD settings, before any privacy is spent."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..checks.clipping import CLIPPED_LIMIT
from ..evaluation.tarp import chance_rmse
from ..util.files import plain
from ..util.tables import text_table

__all__ = ["LIMITS", "PreflightReport", "PreflightWarning", "rmse_limit"]


class PreflightWarning(UserWarning):
    """A finding of the simulation check: settings that would give a confident wrong answer."""


LIMITS = {"clipped": CLIPPED_LIMIT, "shift": 0.5, "flagged": 0.2, "alpha": 0.01, "coverage_rmse": 0.05}
"""Where the check speaks up: the clipped fraction at the optimum, the clipping shift in posterior sds of φ* (a
shift of 0.5 sd of μ* moves θ's interval by less, since θ's posterior adds the VI sd to μ*'s),
the share of traces a trace check fires on, the level of the pooled calibration tests (Bonferroni over
coordinates) and the TARP coverage RMSE (raised to `rmse_limit(M)` where M simulations cannot resolve it)."""


def rmse_limit(simulations: int) -> float:
    """The coverage RMSE the check tolerates on M simulations: 0.05, or 1.5 × `chance_rmse(M)`, the RMSE a
    calibrated method scores by chance."""
    return max(LIMITS["coverage_rmse"], 1.5 * chance_rmse(simulations))


@dataclass(frozen=True)
class PreflightReport:
    """The check of DP-SGD settings on M fresh simulations at one privacy level.

    coverage_rmse: TARP coverage RMSE of exact NA-DPVI (± its sd over reference draws); ecp (L,) at levels (L,);
    theta_names (d,); sd_ratio, z2, theta_p: per θ coordinate, the mean posterior sd over the non-private VI
    sd, the mean squared probit-PIT and its pooled χ² p-value; optimum_p: min p-value of φ* against the
    non-private optimum; clipped: mean clipped fraction at the optimum; shift: clipping shift in sds of φ*;
    flagged: share of traces a trace check fired on, checks {check: count}; findings: what is wrong and what
    to do (empty when nothing is), each "title: details"; warnings: the fits' warnings on the simulated traces,
    (simulations that raised it, its line) per distinct warning.

    `print(report)` shows the readable report (`table`); `repr(report)` one line.
    """

    model: str
    epsilon: float
    delta: float
    noise_multiplier: float
    simulations: int
    key: str
    coverage_rmse: tuple[float, float]
    levels: tuple[float, ...]
    ecp: tuple[float, ...]
    theta_names: tuple[str, ...]
    sd_ratio: tuple[float, ...]
    z2: tuple[float, ...]
    theta_p: tuple[float, ...]
    optimum_p: float
    clipped: float
    shift: float
    flagged: float
    checks: Mapping[str, int]
    failures: int
    findings: tuple[str, ...]
    warnings: tuple[tuple[int, str], ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the check found nothing wrong."""
        return not self.findings

    @property
    def finding_titles(self) -> tuple[str, ...]:
        """The findings named, e.g. ("clipping is active at the optimum", "coverage is off")."""
        return tuple(text.partition(":")[0] for text in self.findings)

    @property
    def warning_counts(self) -> tuple[str, ...]:
        """Each fit warning named and counted, e.g. ("weak identification: 12 of 24 simulations",)."""
        of = f"{{}} of {self.simulations}"
        kinds = [(re.split(rf" \(?in {of.format(count)} ", line)[0], count) for count, line in self.warnings]
        return tuple(f"{kind}: {of.format(count)} simulations" for kind, count in kinds)

    @property
    def verdict(self) -> str:
        """One line: "no findings", or the findings named ("2 findings: clipping is active …; coverage is off")."""
        if self.ok:
            return "no findings"
        count = len(self.findings)
        return f"{count} finding{'s' if count > 1 else ''}: {'; '.join(self.finding_titles)}"

    @property
    def mean_sd_ratio(self) -> float:
        return float(np.mean(self.sd_ratio))

    def table(self) -> str:
        """The readable report: the verdict, the key numbers, per coordinate the posterior sd / VI sd, mean z²
        and calibration p; then each finding and each fit warning in full."""
        head = (
            f"preflight of {self.model} at ε = {self.epsilon:g} (σ = {self.noise_multiplier:.4g}), "
            f"{self.simulations} fresh simulations, key {self.key}: {self.verdict}"
        )
        totals = [
            ("coverage RMSE (TARP, exact)", f"{self.coverage_rmse[0]:.3f} ± {self.coverage_rmse[1]:.3f}"),
            ("clipped at the optimum", f"{100 * self.clipped:.2f} % (shift {self.shift:.2f} sd of φ*)"),
            ("traces a trace check fired on", f"{100 * self.flagged:.0f} %"),
            ("failed fits", f"{self.failures} of {self.simulations}"),
            ("fit warnings", "; ".join(self.warning_counts) or "none"),
        ]
        rows = [
            [name, f"{r:.3f}", f"{z:.2f}", f"{p:.3g}"]
            for name, r, z, p in zip(self.theta_names, self.sd_ratio, self.z2, self.theta_p)
        ]
        parts = [
            head,
            text_table(["check", "value"], totals, numeric=False),
            text_table(["θ", "sd / VI sd", "mean z²", "calibration p"], rows),
        ]
        parts += [f"finding: {text}" for text in self.findings]
        parts += [f"warning: {line}" for _, line in self.warnings]
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return (
            f"PreflightReport({self.model}, ε = {self.epsilon:g}, {self.simulations} simulations, coverage RMSE "
            f"{self.coverage_rmse[0]:.3f}, sd / VI sd {self.mean_sd_ratio:.2f}: {self.verdict})"
        )

    def to_dict(self) -> dict[str, Any]:
        return plain({name: getattr(self, name) for name in self.__dataclass_fields__})

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> PreflightReport:
        values = dict(payload)
        for name in ("coverage_rmse", "levels", "ecp", "theta_names", "sd_ratio", "z2", "theta_p", "findings"):
            values[name] = tuple(values[name])
        values["warnings"] = tuple((int(count), str(line)) for count, line in values.get("warnings", ()))
        return cls(**values)
