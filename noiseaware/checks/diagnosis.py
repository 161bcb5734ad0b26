"""`diagnose`: does a trace meet what the gradient model assumes? A typed report of findings (docs/diagnostics.md).

A released trace is DP output, so every check is free. Each statistical check is a test at level α/m over
the P coordinates (Bonferroni: α/(mP) per coordinate), m = 7 tests, so a trace that meets every assumption
raises any finding with probability ≤ α (default 5 %). The rules (constant coordinates, the start not yet
forgotten, κ ≥ 2, iterates that ran away, clipping active at the optimum) fire only on facts no such trace shows. The
statistics are in `statistics`; the clipping check, which reads the run's released counts of clipped examples (a run
without them leaves it unchecked, and says so), is in `clipping`.

Why this module is long: the seven tests, the rules and the typed report that words their findings are read
together; the report's advice names each test's threshold, kept beside it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import stats

from ..trace import BURN_IN, kept_steps
from ..trace.convention import normaliser_advice
from ..trace.moments import CHECK_WINDOWS
from ..trace.run import kept_start
from ..util.notes import named
from ..util.tables import text_table
from .clipping import CLIPPED_LIMIT, ClippedFraction, clipped_fraction
from .statistics import EXCESS, CheckStatistics, checks_of_moments

if TYPE_CHECKING:
    from ..trace.run import Run

__all__ = [
    "CHECKS",
    "LEVEL",
    "MIN_STEPS",
    "Finding",
    "TraceCheckError",
    "TraceDiagnosis",
    "diagnose",
    "diagnose_if_long_enough",
]

FLAGGED_LINES = 50
"""The most θ coordinates a printed report lists one per line (`TraceDiagnosis.theta_verdicts` has them all)."""
MIN_STEPS = 50
"""The fewest kept steps the checks need."""
LEVEL = 0.05
"""α: the chance that a trace meeting every assumption raises any finding."""
TESTS = 7
"""m: the statistical checks that share α."""
LEFTOVER = 1.0
"""The transient rule fires when the initial offset, decayed at the fastest plausible rate κ⁺ over the burn-in,
still exceeds this many stationary sds at B,"""
START_OFFSET = 4.0
"""or when the mean of the kept trace's first tenth sits this many stationary sds (beyond 2 standard errors of φ̂*)
from φ̂*: a stationary trace's mean over it has sd below one."""
RUNAWAY = 100.0
"""The runaway rule fires when the iterates went further than this many times (1 + |φ_0|) from their start φ_0:
healthy traces of the built-in models stay within 20 (docs/diagnostics.md), SGD at 1000× their learning rate goes
past 100 and on to 10¹² at larger ones, where the sites' transforms overflow."""
BURN_INS = (0.3, 0.4, 0.5, 0.6, 0.7)
"""Burn-ins tried, in order, when the default leaves a transient: the first whose windows agree is proposed."""

LONGER = "record a longer trace (more steps) or a larger learning rate"
METADATA = "check σ (noise_multiplier), C (clip), s (grad_scale) and the convention in the metadata"


@dataclasses.dataclass(frozen=True)
class Check:
    """One check: its name, what a finding means, and what to do."""

    name: str
    title: str
    meaning: str
    advice: str


CHECKS = {
    check.name: check
    for check in (
        Check(
            "constant", "constant coordinate", "φ never moves after burn-in", "check the trace and the learning rate"
        ),
        Check(
            "noise",
            "gradient noise below the DP noise",
            "G varies less than its own recorded DP noise sd σC/s, which cannot happen",
            METADATA + " (grads recorded as a mean but described as a sum show up here)",
        ),
        Check(
            "excess_noise",
            f"gradient noise over {EXCESS:g}× the DP noise",
            "G varies far more than the recorded DP noise; if σ, C or s in the metadata are too small the recorded "
            "ε is not the privacy spent",
            METADATA + "; if they are right, the noise is subsampling noise, which the model learns (extra noise u)",
        ),
        Check(
            "windows",
            "windows disagree on φ*",
            "the gradient model fitted on separate windows of the kept trace gives different optima",
            "fit with a larger burn_in, or " + LONGER,
        ),
        Check(
            "curvature",
            "curved gradient",
            "G depends on φ − φ* nonlinearly over the region the trace visits (the linear model lacks a quadratic "
            "term); often a learning rate so large that the iterates roam far, or clipping active near the optimum",
            "record with a smaller learning rate (or a larger clip C)",
        ),
        Check(
            "autocorrelation",
            "autocorrelated residuals",
            "the residuals of G on φ are correlated across steps, but the DP noise is independent",
            "record with a smaller learning rate; check that every step's G is recorded, in order",
        ),
        Check(
            "drift",
            "drift",
            "the first and last windows' means of φ differ by more than stationary fluctuation allows",
            "fit with a larger burn_in, or " + LONGER,
        ),
        Check(
            "transient",
            "start not forgotten",
            "at the end of the burn-in the iterates are still on their way from the initial value φ_0 "
            "(or the kept trace spans less than one relaxation time)",
            "fit with a larger burn_in, or " + LONGER,
        ),
        Check(
            "divergence",
            "divergence",
            "the gradient pushes φ away from where it is (a negative slope), or each SGD step overshoots the optimum "
            "by more than the distance (λ·ĉ ≥ 2)",
            "record with a smaller learning rate",
        ),
        Check(
            "runaway",
            "iterates ran away",
            f"the iterates went over {RUNAWAY:g}× (1 + |φ_0|) away from their start φ_0: the run diverged (a learning "
            "rate far too large), so the trace holds no estimate of the optimum and no fit is made",
            "record again with a smaller learning rate (e.g. its research or tuned preset)",
        ),
        Check(
            "clipping",
            "clipping at the optimum",
            f"the run's released counts show more than {CLIPPED_LIMIT:.0%} of examples clipped after the burn-in: the "
            "gradient's slope is then below the curvature and its zero is the clipped objective's, so the fitted "
            "optimum and scales (μ*, ρ*) are biased, and nothing else in the trace shows it",
            "record again with a larger clip C (at or above the per-example gradient norms at the optimum), so that "
            f"under {CLIPPED_LIMIT:.0%} of examples are clipped",
        ),
    )
}
"""Every check by name."""


class TraceCheckError(ValueError):
    """A trace failed the checks of `diagnose` and `fit(..., checks="raise")` was asked for."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """A check that fired: its name, the parameters concerned, the statistic (as text) and what to do."""

    check: str
    parameters: tuple[str, ...]
    statistic: str
    advice: str

    @property
    def title(self) -> str:
        return CHECKS[self.check].title

    def __str__(self) -> str:
        return f"{self.title} ({named(self.parameters)}; {self.statistic}): {self.advice}"


@dataclasses.dataclass(frozen=True)
class TraceDiagnosis:
    """The report of `diagnose`: the findings, per-coordinate flags and statistics, and a proposed burn-in:
    flags {check: (P,) bool}; statistics {name: (P,) float64} (p-values, noise ratio r²/ν², optimum φ̂*,
    relaxations n·κ⁺, leftover, …); window_optima (K, P); proposed_burn_in: a burn-in after which the windows
    agree, when the default leaves a transient (None when it does not, or when no tried burn-in does);
    rows (P,): the θ coordinate each parameter belongs to (`VariationalFamily.block_rows`; None: mean-field);
    unchecked: the checks that could not run (a `WindowedTrace` keeps no rows for the residuals' autocorrelation, a
    run without released counts of clipped examples gives no clipping check); clipping: the fraction of examples
    clipped after the burn-in (`ClippedFraction`), or None.
    """

    param_names: tuple[str, ...]
    level: float
    burn_in: float
    findings: tuple[Finding, ...]
    flags: Mapping[str, np.ndarray]
    statistics: Mapping[str, np.ndarray]
    window_optima: np.ndarray
    proposed_burn_in: float | None = None
    rows: tuple[int, ...] | None = None
    unchecked: tuple[str, ...] = ()
    clipping: ClippedFraction | None = None

    @property
    def ok(self) -> bool:
        """Whether no check fired."""
        return not self.findings

    @property
    def fired(self) -> tuple[str, ...]:
        """The names of the checks that fired."""
        return tuple(f.check for f in self.findings)

    @property
    def verdict(self) -> str:
        """One line: all checks passed, or which fired and on how many parameters."""
        ran = len(CHECKS) - len(self.unchecked)
        skipped = "" if not self.unchecked else "; not checked: " + ", ".join(CHECKS[c].title for c in self.unchecked)
        if self.ok:
            return f"trace checks: all {ran} passed (α = {self.level:g}){skipped}"
        flagged = np.any(np.stack([self.flags[c] for c in self.fired]), axis=0)
        titles = ", ".join(f.title for f in self.findings)
        where = f"{int(flagged.sum())} of {flagged.size} parameters"
        return f"trace checks: {len(self.findings)} of {ran} fired on {where} ({titles}){skipped}"

    def theta_verdicts(self) -> tuple[str, ...]:
        """One verdict per θ coordinate (d,): "ok", or the checks that fired on its μ, ρ or its row of the factor
        ("drift, transient")."""
        rows = np.tile(np.arange(len(self.param_names) // 2), 2) if self.rows is None else np.asarray(self.rows)
        flags = {name: np.asarray(value) for name, value in self.flags.items()}
        return tuple(
            ", ".join(c for c in CHECKS if c in flags and flags[c][rows == j].any()) or "ok"
            for j in range(rows.max() + 1)
        )

    def element_verdicts(self, sites) -> tuple[str, ...]:
        """One verdict per element of the model's sites on their own scale (the rows of a constrained summary):
        an element-wise site's element takes its θ coordinate's verdict, a site whose transform mixes
        coordinates (a simplex) takes every check that fired on any of its coordinates. sites: SiteSpecs."""
        theta = self.theta_verdicts()
        verdicts, start = [], 0
        for site in sites:
            own = theta[start : start + site.size]
            start += site.size
            if site.size == math.prod(site.shape):
                verdicts += own
                continue
            fired = list(dict.fromkeys(name for v in own if v != "ok" for name in v.split(", ")))
            verdicts += [", ".join(fired) or "ok"] * math.prod(site.shape)
        return tuple(verdicts)

    def table(self) -> str:
        """Per parameter: noise ratio, p-values of the tests, relaxations kept, leftover, and the verdict."""
        header = (
            "parameter",
            "r²/ν²",
            "p noise",
            "p windows",
            "p curv.",
            "p autocorr.",
            "p drift",
            "relax.",
            "verdict",
        )
        s = self.statistics
        rows = []
        for j, name in enumerate(self.param_names):
            fired = [c for c in CHECKS if c in self.flags and self.flags[c][j]]
            values = (s["noise_ratio"][j], s["p_noise"][j], s["p_windows"][j], s["p_curvature"][j])
            values += (s["p_autocorrelation"][j], s["p_drift"][j], s["relaxations"][j])
            rows.append((name, *(f"{float(v):.3g}" for v in values), ", ".join(fired) or "ok"))
        return text_table(header, rows)

    def __str__(self) -> str:
        """The verdict, one line per finding, then the verdict of each θ coordinate a check fired on (the rest are
        ok); a passing trace is its verdict alone, and the measured clipped fraction where the run released its counts.
        param_names begin with θ's d μ's ('mu:theta[0]')."""
        lines = [self.verdict] + [f"  {finding}" for finding in self.findings]
        if self.clipping is not None and "clipping" not in self.fired:
            lines.append(f"  clipping: {self.clipping}")
        names = (name.removeprefix("mu:") for name in self.param_names)
        flagged = [(name, verdict) for name, verdict in zip(names, self.theta_verdicts()) if verdict != "ok"]
        if flagged:
            lines += ["  per θ coordinate (the others ok):"] + [f"    {n}: {v}" for n, v in flagged[:FLAGGED_LINES]]
        if len(flagged) > FLAGGED_LINES:
            lines.append(f"    … and {len(flagged) - FLAGGED_LINES} more (all of them: report.theta_verdicts())")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain lists and numbers (JSON), the inverse of `from_dict`."""
        return {
            "param_names": list(self.param_names),
            "level": self.level,
            "burn_in": self.burn_in,
            "findings": [dataclasses.asdict(f) | {"parameters": list(f.parameters)} for f in self.findings],
            "flags": {k: np.asarray(v).tolist() for k, v in self.flags.items()},
            "statistics": {k: np.asarray(v).tolist() for k, v in self.statistics.items()},
            "window_optima": np.asarray(self.window_optima).tolist(),
            "proposed_burn_in": self.proposed_burn_in,
            "rows": None if self.rows is None else list(self.rows),
            "unchecked": list(self.unchecked),
            "clipping": None if self.clipping is None else dataclasses.asdict(self.clipping),
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TraceDiagnosis:
        """The report from `to_dict`'s output."""
        return cls(
            param_names=tuple(values["param_names"]),
            level=float(values["level"]),
            burn_in=float(values["burn_in"]),
            findings=tuple(
                Finding(f["check"], tuple(f["parameters"]), f["statistic"], f["advice"]) for f in values["findings"]
            ),
            flags={k: np.asarray(v, bool) for k, v in values["flags"].items()},
            statistics={k: np.asarray(v, np.float64) for k, v in values["statistics"].items()},
            window_optima=np.asarray(values["window_optima"], np.float64),
            proposed_burn_in=values["proposed_burn_in"],
            rows=None if values.get("rows") is None else tuple(int(j) for j in values["rows"]),
            unchecked=tuple(values.get("unchecked", ())),
            clipping=None if values.get("clipping") is None else ClippedFraction(**values["clipping"]),
        )


def diagnose(trace: Run, *, burn_in: float = BURN_IN, level: float = LEVEL) -> TraceDiagnosis:
    """Check `trace` (a `Run`) against the gradient model's assumptions over the steps after ⌊burn_in·T⌋, from its
    moments; a run kept as windows gives no rows for the residuals' autocorrelation (`unchecked`).

    level α: the chance that a trace meeting every assumption raises any finding (each of the 7 tests gets
    α/7, split over the P coordinates). Needs at least 50 kept steps.
    """
    start = kept_start(trace, burn_in)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be a probability in (0, 1), got {level}")
    if kept_steps(trace, burn_in) < MIN_STEPS:
        raise ValueError(
            f"the trace has {trace.steps} steps, {trace.steps - start} after a burn-in of {burn_in:g}: the checks "
            f"need at least {MIN_STEPS}; record a longer trace"
        )
    alpha = level / (TESTS * trace.n_params)
    moments = trace.moments(burn_in, cross=True)
    statistics = _statistics(trace, moments)
    counts = trace.clip_counts(burn_in)
    expected_batch = trace.settings.n_examples * trace.settings.sampling_rate
    clipping = None if counts is None else clipped_fraction(counts, expected_batch, level)
    flags = _flags(statistics, alpha) | {"clipping": np.full(trace.n_params, clipping is not None and clipping.active)}
    proposed = None
    if any(flags[name].any() for name in ("windows", "drift", "transient")):
        proposed = next((b for b in BURN_INS if b > burn_in and _settled(trace, b, alpha)), None)
    names = tuple(trace.param_names)
    findings = tuple(
        Finding(
            name,
            tuple(names[j] for j in np.flatnonzero(flags[name])),
            str(clipping) if name == "clipping" else _statistic(name, statistics, flags[name]),
            _advice(name, statistics, flags, proposed, trace),
        )
        for name in CHECKS
        if flags[name].any()
    )
    return TraceDiagnosis(
        param_names=names,
        level=level,
        burn_in=burn_in,
        findings=findings,
        flags=flags,
        statistics={k: v for k, v in statistics._asdict().items() if k not in ("moves", "window_optima")},
        window_optima=statistics.window_optima,
        proposed_burn_in=proposed,
        rows=tuple(int(j) for j in trace.family.block_rows),
        unchecked=_unchecked(trace, moments) + (("clipping",) if clipping is None else ()),
        clipping=clipping,
    )


def diagnose_if_long_enough(trace: Run, burn_in: float = BURN_IN) -> TraceDiagnosis | None:
    """`diagnose` at the default level, or None for a trace with fewer than MIN_STEPS steps after the burn-in
    (whoever fits it decides whether it can)."""
    return diagnose(trace, burn_in=burn_in) if kept_steps(trace, burn_in) >= MIN_STEPS else None


def _statistics(trace: Run, moments) -> CheckStatistics:
    noise_sd = trace.mean_noise_sd(moments.start)
    return checks_of_moments(moments, trace.rows(), noise_sd=noise_sd, learning_rate=trace.settings.plain_sgd_rate)


def _unchecked(trace: Run, moments) -> tuple[str, ...]:
    """The checks a run kept as windows cannot run: the residuals' autocorrelation (no rows), and with one kept
    window the windows' agreement and the drift (nothing to compare)."""
    if trace.rows() is not None:
        return ()
    return ("autocorrelation",) + (("windows", "drift") if len(moments.windows) < 2 else ())


def _flags(s: CheckStatistics, alpha: float) -> dict[str, np.ndarray]:
    """{check: (P,) bool}: a test fires below α per coordinate, a NaN statistic never fires. (κ̂ ≥ 2 needs SGD's
    step sizes: read off φ's autocorrelation, κ̂ = 1 − ρ₁ < 2.)"""
    critical = stats.norm.isf(alpha)
    return {
        "constant": ~s.moves,
        "noise": s.p_noise < alpha,
        "excess_noise": s.p_excess < alpha,
        "windows": s.p_windows < alpha,
        "curvature": s.p_curvature < alpha,
        "autocorrelation": s.p_autocorrelation < alpha,
        "drift": s.p_drift < alpha,
        "transient": (s.leftover > LEFTOVER) | (s.start_offset > START_OFFSET) | (s.relaxations < 1.0),
        "divergence": (s.slope_z < -critical) | (s.relaxation >= 2.0),
        "runaway": s.growth > RUNAWAY,
    }


def _settled(trace: Run, burn_in: float, alpha: float) -> bool:
    """Whether, after ⌊burn_in·T⌋ steps, the windows agree, nothing drifts and the start is forgotten."""
    if kept_steps(trace, burn_in) < MIN_STEPS or not trace.offers(burn_in):
        return False
    flags = _flags(_statistics(trace, trace.moments(burn_in, cross=True)), alpha)
    return not any(flags[name].any() for name in ("windows", "drift", "transient"))


def _statistic(name: str, s: CheckStatistics, flagged: np.ndarray) -> str:
    """The statistic of the worst flagged coordinate, as text."""
    j = np.flatnonzero(flagged)
    pick = {
        "noise": (s.noise_ratio, "min", "r²/ν² = {:.3g}"),
        "excess_noise": (s.noise_ratio, "max", "r²/ν² = {:.3g}"),
        "windows": (s.p_windows, "min", f"{CHECK_WINDOWS} windows, p = " + "{:.2g}"),
        "curvature": (s.p_curvature, "min", "quadratic term p = {:.2g}"),
        "autocorrelation": (s.p_autocorrelation, "min", "Ljung–Box p = {:.2g}"),
        "drift": (s.p_drift, "min", "first vs last window p = {:.2g}"),
        "transient": (s.leftover, "max", "start offset left at burn-in {:.3g} stationary sds"),
        "divergence": (s.slope_z, "min", "slope z = {:.3g}"),
    }
    if name == "constant":
        return f"{j.size} never move"
    if name == "runaway":
        return f"{np.max(s.growth[j]):.3g}× (1 + |φ_0|) from the start"
    if name == "transient" and np.any(s.start_offset[j] > START_OFFSET):
        return f"kept trace starts {np.nanmax(s.start_offset[j]):.3g} stationary sds from φ̂*"
    if name == "transient" and not np.any(s.leftover[j] > LEFTOVER):
        return f"kept trace spans {np.nanmin(s.relaxations[j]):.2g} relaxation times"
    if name == "divergence" and not np.any(s.slope_z[j] < 0):
        return f"λ·ĉ = {np.nanmax(s.relaxation[j]):.3g} ≥ 2"
    values, how, text = pick[name]
    chosen = values[j][np.isfinite(values[j])]
    return text.format(chosen.min() if how == "min" else chosen.max())


def _advice(name: str, s: CheckStatistics, flags, proposed: float | None, trace: Run) -> str:
    advice = CHECKS[name].advice
    if name in ("windows", "drift", "transient") and proposed is not None:
        advice = f"fit with burn_in={proposed:g} (the checks pass from there), or " + LONGER
    elif name in ("windows", "drift", "transient"):
        advice = f"no burn-in up to {BURN_INS[-1]:g} settles it: " + LONGER
    if name == "runaway" and trace.settings.learning_rate is not None:
        largest = float(np.max(trace.settings.learning_rate))
        advice = f"record again with a learning rate well below this trace's λ = {largest:.3g} (e.g. its preset's)"
    if name in ("noise", "excess_noise"):
        named = normaliser_advice(
            float(np.nanmedian(s.noise_ratio[flags[name]])), trace.settings, trace.batch_sizes, small=name == "noise"
        )
        advice = advice if named is None else f"{named} ({METADATA})"
    return advice
