"""How well DP-SGD settings serve NA-DPVI on simulations whose truth is known (docs/tuning.md §2).

For simulation m with truth θ_m and non-private VI optimum φ̂_m, the exact noise-aware posterior of its
trace gives, per coordinate,

    u_mj = P(θ_j ≤ θ_mj | trace_m) (the mixture's CDF),  z_mj = Φ⁻¹(u_mj)  ~ N(0, 1) if calibrated,
    ζ_mj = (E[φ*_j | trace_m] − φ̂_mj) / sd[φ*_j | trace_m]   ≈ N(0, 1) if DP-SGD reached φ̂ and the model holds.

Pooled over the M simulations, Σ_m z²_mj ~ χ²_M under calibration: its upper tail (intervals too narrow or
off centre) is the calibration test, Bonferroni over coordinates. ζ over the μ coordinates tests the trace
part alone (clipping bias, non-convergence), free of the variational family's own error; ρ* reaches θ only
through its width, which the θ test sees. The width: the posterior sd of θ_j over the non-private VI sd,
averaged over simulations.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from ..evaluation.experiment import check_counts
from ..methods.fit import fit_batch
from ..recording.dpvi import record_dpvi_batch
from ..trace import BURN_IN
from .facts import SimulationFacts

__all__ = ["Score", "pooled_p_values", "score_settings"]


@dataclass(frozen=True)
class Score:
    """A settings candidate's numbers on M simulations (module doc).

    z2, theta_p: mean z² and the χ²_M upper-tail p-value per θ coordinate, (d,); zeta2, optimum_p: the same
    for ζ over μ*, (d,); sd_ratio: mean posterior sd over VI sd, (d,); clipped: mean clipped fraction at φ̂;
    shift: max over coordinates of mean |clipping shift| / sd[φ*]; flagged: the fraction of traces a trace
    check fired on, checks: {check: traces it fired on}; failures: fits that failed.
    """

    simulations: int
    z2: np.ndarray
    theta_p: np.ndarray
    zeta2: np.ndarray
    optimum_p: np.ndarray
    sd_ratio: np.ndarray
    clipped: float
    shift: float
    flagged: float
    failures: int
    checks: dict

    @property
    def width(self) -> float:
        """The objective: the mean over θ's coordinates of the posterior sd relative to the VI sd."""
        return float(np.mean(self.sd_ratio))

    def calibrated(self, alpha: float) -> bool:
        """Whether no coordinate of θ or φ* fails its pooled test at level α (Bonferroni over coordinates)."""
        return bool(
            self.theta_p.min() >= alpha / self.theta_p.size and self.optimum_p.min() >= alpha / self.optimum_p.size
        )

    def as_row(self) -> dict:
        """The scalar summary of a trials table."""
        return {
            "sd_ratio": self.width,
            "max_z2": float(self.z2.max()),
            "theta_p": float(self.theta_p.min()),
            "optimum_p": float(self.optimum_p.min()),
            "clipped": self.clipped,
            "shift": self.shift,
            "flagged": self.flagged,
            "failures": self.failures,
        }


def pooled_p_values(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean z², upper-tail p of Σ z² under χ²_M) per column of z (M, k), NaN rows (failed fits) left out."""
    ok = ~np.isnan(z).any(axis=1)
    z = z[ok]
    total = np.sum(z**2, axis=0)
    return total / max(z.shape[0], 1), stats.chi2.sf(total, df=max(z.shape[0], 1))


def score_settings(
    facts: SimulationFacts, bm, settings: dict, *, noise_multiplier: float, delta: float, keys, fit_key
) -> Score:
    """Record DPVI on the simulations of `facts` with `settings` at σ (keys: (M,) DPVI keys), then `score_traces`."""
    traces = record_dpvi_batch(
        bm.model, facts.data, keys=keys, noise_multiplier=noise_multiplier, delta=delta, **settings
    )
    return score_traces(facts, traces, settings, fit_key=fit_key)


def score_traces(facts: SimulationFacts, traces, settings, *, fit_key) -> Score:
    """Fit the exact route to the traces of the simulations of `facts` (recorded with `settings`) and score it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        posteriors = fit_batch(traces, "exact", key=fit_key, on_error="skip", diagnostics="off")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a degenerate fit scores inf, not a warning
        return _score(facts, traces, posteriors, settings)


def _score(facts: SimulationFacts, traces, posteriors, settings) -> Score:
    d, M = facts.dim, len(facts)
    z = np.full((M, d), np.nan)
    zeta = np.full((M, 2 * d), np.nan)  # the μ half is tested: ρ* reaches θ only through the width
    ratio = np.full((M, d), np.nan)
    sd_optimum = np.full((M, 2 * d), np.nan)
    for m, post in enumerate(posteriors):
        if post is None:
            continue
        draws = np.asarray(post.optimum_draws, np.float64)
        means, sds = draws[:, :d], np.logaddexp(0.0, draws[:, d:])
        cdf = np.mean(special.ndtr((facts.truth[m] - means) / sds), axis=0)
        z[m] = special.ndtri(np.clip(cdf, 1e-12, 1 - 1e-12))
        sd_optimum[m] = draws.std(axis=0)
        zeta[m] = (draws.mean(axis=0) - facts.optimum[m]) / sd_optimum[m]
        ratio[m] = post.theta_sd / facts.vi_sd[m]
    z2, theta_p = pooled_p_values(z)
    zeta2, optimum_p = pooled_p_values(zeta[:, :d])
    clip, scale = float(settings["clip"]), np.asarray(settings["grad_scale"])
    shift = np.abs(facts.clipping_shift(clip, scale)) / sd_optimum
    counts = check_counts(traces, BURN_IN)
    return Score(
        simulations=M,
        z2=z2,
        theta_p=theta_p,
        zeta2=zeta2,
        optimum_p=optimum_p,
        sd_ratio=np.nanmean(ratio, axis=0),
        clipped=float(facts.clipped_fraction(clip, scale).mean()),
        shift=float(np.nanmax(np.nanmean(shift, axis=0))),
        flagged=counts["any"] / max(counts["traces"], 1),
        failures=sum(post is None for post in posteriors),
        checks={k: v for k, v in counts.items() if k not in ("any", "traces") and v},
    )
