"""How well DP-SGD settings serve NA-DPVI on simulations whose truth is known (docs/tuning.md §2).

For simulation m with truth θ_m and non-private VI optimum φ̂_m, the exact noise-aware posterior of its
trace gives, per coordinate,

    u_mj = P(θ_j ≤ θ_mj | trace_m) (the mixture's CDF),  z_mj = Φ⁻¹(u_mj)  ~ N(0, 1) if calibrated,
    ζ_mj = (E[φ*_j | trace_m] − φ̂_mj) / sd[φ*_j | trace_m]   ≈ N(0, 1) if DP-SGD reached φ̂ and the model holds.

Pooled over the M simulations, Σ_m z²_mj ~ χ²_M under calibration: its upper tail (intervals too narrow or
off centre) is the calibration test, Bonferroni over coordinates. ζ tests the trace part alone (clipping
bias, non-convergence, a gradient model that does not hold): the same χ² test over the μ coordinates, and over
the ρ coordinates a test of a shift of ζ cut at ±3 (the exact route's ρ* posterior is overconfident on a few
traces without harming θ's intervals). ζ is free of the variational family's own error and of where the truths
happened to fall: φ̂_m is a function of the data, and the moment-matched Newton steps of
`facts` make it exact to Monte Carlo error. The width: the posterior sd of θ_j over the non-private VI sd,
averaged over simulations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from ..evaluation.experiment import check_counts
from ..methods.base import Batch, failure_reasons, split_keys
from ..methods.fit_loop import fit_each
from ..methods.registry import DEFAULT_REGISTRY
from ..recording.dpvi import record_dpvi_batch
from ..trace import BURN_IN
from ..util.chunks import padded_chunks
from ..util.errors import FitFailure
from ..util.notes import Note, notes_from_json, notes_json, notes_of, tally
from .design import TUNING
from .facts import SimulationFacts

__all__ = ["Score", "bias_limit", "pooled_p_values", "score_settings"]


@dataclass(frozen=True)
class Score:
    """A settings candidate's numbers on M simulations, kept per simulation so that parts combine exactly.

    z (M, d), zeta (M, P): the module doc's z and ζ (NaN rows: failed fits); ratio (M, d): posterior sd over
    the VI sd; clipped_fraction (M,): clipped at φ̂_m; relative_shift (M, P): |clipping shift| / sd[φ*];
    counts: the trace checks' `check_counts` (traces checked, any, and per check); notes: the fits' `Note`s,
    one per simulation and kind at most (`fit_warnings` counts them); failure_reasons:
    {reason: fits that failed for it}.
    """

    z: np.ndarray
    zeta: np.ndarray
    ratio: np.ndarray
    clipped_fraction: np.ndarray
    relative_shift: np.ndarray
    counts: dict
    notes: tuple[Note, ...] = ()
    failure_reasons: dict = dataclasses.field(default_factory=dict)

    def __add__(self, other: Score) -> Score:
        """The score over both sets of simulations."""
        join = lambda a, b: np.concatenate([a, b])  # noqa: E731
        return Score(
            join(self.z, other.z),
            join(self.zeta, other.zeta),
            join(self.ratio, other.ratio),
            join(self.clipped_fraction, other.clipped_fraction),
            join(self.relative_shift, other.relative_shift),
            _added(self.counts, other.counts),
            self.notes + other.notes,
            _added(self.failure_reasons, other.failure_reasons),
        )

    @property
    def simulations(self) -> int:
        return self.z.shape[0]

    ARRAYS = ("z", "zeta", "ratio", "clipped_fraction", "relative_shift")

    def to_record(self) -> dict:
        """The score as JSON values (arrays as nested lists, NaN and inf kept as JSON's NaN and Infinity; notes by
        `notes_json`): what a search's journal keeps of a finished part. `from_record` reads it back."""
        return {
            **{name: np.asarray(getattr(self, name)).tolist() for name in self.ARRAYS},
            "counts": dict(self.counts),
            "notes": notes_json(self.notes),
            "failure_reasons": dict(self.failure_reasons),
        }

    @classmethod
    def from_record(cls, record: dict) -> Score:
        """The score `to_record` wrote (plain JSON values only: nothing is unpickled)."""
        arrays = {name: np.asarray(record[name], np.float64) for name in cls.ARRAYS}
        return cls(
            **arrays,
            counts={str(k): int(v) for k, v in record["counts"].items()},
            notes=notes_from_json(record["notes"]),
            failure_reasons={str(k): int(v) for k, v in record["failure_reasons"].items()},
        )

    @property
    def failures(self) -> int:
        """Fits that failed."""
        return int(np.isnan(self.z).any(axis=1).sum())

    @property
    def fit_warnings(self) -> tuple[tuple[int, str], ...]:
        """(simulations, line) per distinct fit warning, e.g. (12, "weak identification in 12 of 24 simulations
        (…): …")."""
        return tally(self.notes, self.simulations, unit="simulations")

    @property
    def z2(self) -> np.ndarray:
        """Mean z² per θ coordinate, (d,)."""
        return pooled_p_values(self.z)[0]

    @property
    def theta_p(self) -> np.ndarray:
        """The χ²_M upper-tail p-value of Σ z² per θ coordinate, (d,)."""
        return pooled_p_values(self.z)[1]

    @property
    def zeta2(self) -> np.ndarray:
        """Mean ζ² per φ coordinate, (P,)."""
        return pooled_p_values(self.zeta)[0]

    @property
    def optimum_p(self) -> np.ndarray:
        """ζ's p-values, (P,): χ² over the μ coordinates (`location_p`), a shift of ζ cut at ±3 over the ρ ones."""
        return self.optimum_p_at(None)

    def optimum_p_at(self, simulations: int | None) -> np.ndarray:
        """`optimum_p` as the tests would give it on `simulations` with the same mean ζ² and shift (None: as is)."""
        d = self.z.shape[1]
        return np.concatenate(
            [pooled_p_values(self.zeta[:, :d], simulations)[1], bias_p_values(self.zeta[:, d:], simulations)]
        )

    @property
    def location_p(self) -> np.ndarray:
        """The χ² p-values of ζ over the μ coordinates, (d,): does the posterior of μ* cover the optimum μ̂?"""
        return pooled_p_values(self.zeta[:, : self.z.shape[1]])[1]

    @property
    def sd_ratio(self) -> np.ndarray:
        """Mean posterior sd over the VI sd per θ coordinate, (d,)."""
        return np.nanmean(self.ratio, axis=0)

    @property
    def clipped(self) -> float:
        """Mean clipped fraction at the optimum."""
        return float(np.mean(self.clipped_fraction))

    @property
    def shift(self) -> float:
        """The largest mean |clipping shift| / sd[φ*] over the coordinates."""
        return float(np.nanmax(np.nanmean(self.relative_shift, axis=0)))

    @property
    def flagged(self) -> float:
        """The fraction of traces a trace check fired on."""
        return self.counts["any"] / max(self.counts["traces"], 1)

    @property
    def checks(self) -> dict[str, int]:
        """{check: traces it fired on}, the checks that fired."""
        return {k: v for k, v in self.counts.items() if k not in ("any", "traces") and v}

    @property
    def width(self) -> float:
        """The objective: the mean over θ's coordinates of the posterior sd relative to the VI sd."""
        return float(np.mean(self.sd_ratio))

    def as_row(self) -> dict:
        """The scalar summary of a trials table."""
        return {
            "sd_ratio": self.width,
            "max_z2": float(self.z2.max()),
            "theta_p": float(self.theta_p.min()),
            "optimum_p": float(self.optimum_p.min()),
            "max_zeta2": float(np.nanmax(self.zeta2)),
            "clipped": self.clipped,
            "shift": self.shift,
            "flagged": self.flagged,
            "failures": self.failures,
        }


def _added(a: dict, b: dict) -> dict:
    """Counts by key over both."""
    return {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}}


def pooled_p_values(z: np.ndarray, simulations: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(mean z², upper-tail p of Σ z² under χ²_M) per column of z (M, k), NaN rows (failed fits) left out.
    simulations: the p-value the test would give on that many simulations with the same mean z² (the projection
    successive halving ranks by), instead of on the M at hand."""
    ok = ~np.isnan(z).any(axis=1)
    z = z[ok]
    mean = np.sum(z**2, axis=0) / max(z.shape[0], 1)
    df = max(z.shape[0] if simulations is None else simulations, 1)
    return mean, stats.chi2.sf(mean * df, df=df)


WINSOR = 3.0
"""Where ζ of a ρ coordinate is cut for the bias test (Var of a standard normal cut at ±3: WINSOR_VARIANCE)."""
WINSOR_VARIANCE = float(
    1 - 2 * (WINSOR * stats.norm.pdf(WINSOR) + stats.norm.sf(WINSOR)) + 2 * WINSOR**2 * stats.norm.sf(WINSOR)
)


def bias_p_values(z: np.ndarray, simulations: int | None = None) -> np.ndarray:
    """Two-sided p-value of a shift in each column of z (M, k) by its mean cut at ±WINSOR (NaN rows left out):
    robust to the few traces whose ρ* posterior is overconfident, sensitive to a bias shared by the traces.
    simulations: as `pooled_p_values`."""
    z = z[~np.isnan(z).any(axis=1)]
    mean = np.mean(np.clip(z, -WINSOR, WINSOR), axis=0)
    size = z.shape[0] if simulations is None else simulations
    return 2 * stats.norm.sf(np.abs(mean) * np.sqrt(max(size, 1) / WINSOR_VARIANCE))


def bias_limit(simulations: int, coordinates: int, alpha: float) -> float:
    """The |mean ζ| of the ρ rows beyond which `bias_p_values` on `simulations` rejects at α (Bonferroni over
    `coordinates`), ignoring the cut: z_{1 − α/(2·coordinates)}·√(WINSOR_VARIANCE / simulations)."""
    return float(stats.norm.isf(alpha / (2 * coordinates)) * np.sqrt(WINSOR_VARIANCE / simulations))


def score_settings(
    facts: SimulationFacts, bm, settings: dict, *, noise_multiplier: float, delta: float, keys, fit_key
) -> Score:
    """Record DPVI on the simulations of `facts` with `settings` at σ (keys: (M,) DPVI keys), then `score_traces`."""
    traces = record_batches(bm, facts.data, keys, noise_multiplier=noise_multiplier, delta=delta, **settings)
    return score_traces(facts, traces, settings, fit_key=fit_key, model=bm)


def record_batches(bm, data: dict, keys, *, batch: int = TUNING.batch, advance=None, **kwargs) -> list:
    """`record_dpvi_batch` of bm's model on the data sets (leading axis M) with keys (M,), in padded chunks of
    `batch` (`padded_chunks`: one compiled program whatever M), by the model's batch strategy; advance(n) after
    each chunk of n data sets, when given."""
    traces = []
    for index, kept in padded_chunks(len(keys), batch):
        chunk = {k: np.asarray(v)[index] for k, v in data.items()}
        traces += record_dpvi_batch(bm.model, chunk, keys=keys[index], batch=bm.batch, **kwargs)[:kept]
        if advance is not None:
            advance(kept)
    return traces


def score_traces(facts: SimulationFacts, traces, settings, *, fit_key, model, batch: int = TUNING.batch) -> Score:
    """Fit the exact route to the traces of the simulations of `facts` (recorded with `settings`) by the one fit
    loop (`fit_each`, checks off; in padded chunks of `batch`, as `record_batches`) and score it, keeping the fits'
    notes. model: the BenchmarkModel the traces were recorded with, whose prior on the VI optimum the fits take, as
    a user's `fit(trace, model=bm)` and every study do (docs/method.md §2.3)."""
    exact = DEFAULT_REGISTRY["exact"]
    keys, options, outcomes = split_keys(fit_key, len(traces)), exact.make_options(), []
    for index, kept in padded_chunks(len(traces), batch):
        outcomes += fit_each(exact, Batch(tuple(traces[i] for i in index), model), keys[index], options)[0][:kept]
    posteriors = [None if isinstance(o, FitFailure) else o for o in outcomes]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a degenerate fit scores inf, not a warning
        score = _score(facts, traces, posteriors, settings)
    notes = tuple(note for outcome in outcomes for note in notes_of(outcome))
    return dataclasses.replace(score, notes=notes, failure_reasons=failure_reasons(outcomes))


def _score(facts: SimulationFacts, traces, posteriors, settings) -> Score:
    """The scores of one fit per simulation; the traces' own (resolved) C and s price the clipping, and φ's layout
    is the traces' variational family (the marginal of θ_j under φ* is N(μ*_j, Σ_jj(φ*)))."""
    d, M, P = facts.dim, len(facts), facts.optimum.shape[1]
    z = np.full((M, d), np.nan)
    zeta = np.full((M, P), np.nan)
    ratio = np.full((M, d), np.nan)
    sd_optimum = np.full((M, P), np.nan)
    family = facts.variational_family
    for m, post in enumerate(posteriors):
        if post is None:
            continue
        draws = np.asarray(post.optimum_draws, np.float64)
        means, sds = family.mean(draws), family.marginal_sd(draws)
        cdf = np.mean(special.ndtr((facts.truth[m] - means) / sds), axis=0)
        z[m] = special.ndtri(np.clip(cdf, 1e-12, 1 - 1e-12))
        sd_optimum[m] = draws.std(axis=0)
        zeta[m] = (draws.mean(axis=0) - facts.optimum[m]) / sd_optimum[m]
        ratio[m] = post.theta_sd / facts.vi_sd[m]
    clip, scale = (traces[0].clip, traces[0].grad_scale) if traces else (settings["clip"], settings["grad_scale"])
    return Score(
        z=z,
        zeta=zeta,
        ratio=ratio,
        clipped_fraction=facts.clipped_fraction(float(clip), np.asarray(scale, np.float64)),
        relative_shift=np.abs(facts.clipping_shift(float(clip), np.asarray(scale, np.float64))) / sd_optimum,
        counts=check_counts(traces, BURN_IN),
    )
