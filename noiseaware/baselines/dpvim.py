"""The DPVIm baseline: a noise-aware posterior from the spread of the converged DP-SGD trace.

Source: docs/baselines.md §3 (DPVIm, Jälkö, Prediger, Honkela & Kaski, TMLR 2023), applied as
post-processing of the same trace that the noise-aware fit uses (§3.3). With the T+1 iterates
φ_0..φ_T (the trace's T rows and φ_T appended, §4), per coordinate j:

    t0_j  = the first window start s = 0, Δw, 2Δw, … (Δw = ⌊(T+1)/windows⌋) at which the OLS slope of
            φ_{t,j}, t ≥ s, on a time axis rescaled to [0, 1] (the fitted total drift over the tail) has
            |slope| < κ;   if none passes, t0_j = ⌊T/2⌋ and the coordinate is flagged not converged,
    φ̄_j   = mean_{t ≥ t0_j} φ_{t,j},     v_j = population variance of φ_{t,j} over t ≥ t0_j,
    φ^(k) = c + sqrt(v) ⊙ ξ_k,  ξ_k ~ N(0, I_P),   c = φ_T ("last") or φ̄ ("average"),
    θ^(k) = μ^(k) + softplus(ρ^(k)) ⊙ η_k,  η_k ~ N(0, I_d)  (done by MixturePosterior.sample).

The convergence test, the tail mean and the tail variance mirror DPVIm's released code [C]; the formula
that turns (c, v) into a posterior is an inference of the spec, marked [I] there: DPVIm documents none.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..posteriors.mixture import DPVIM, MixturePosterior
from ..trace import Trace
from ..util.defaults import DRAWS
from ..util.diagnostics import Diagnostics
from ..util.errors import DIVERGED, FitFailure
from ..util.keys import as_key, standard_normal

__all__ = ["CENTRES", "convergence_start", "dpvim_posterior"]

_CENTRES = {
    "last": "the last iterate φ_T spread by the variance of the converged trace tail",
    "average": "the tail average φ̄ spread by the variance of the converged trace tail",
    "empirical": "iterates drawn from the converged trace tail",
}
CENTRES = tuple(_CENTRES)
"""The choices of the centre c: φ_T, the tail mean φ̄, or rows drawn from the converged tail."""


@dataclasses.dataclass(frozen=True)
class DPVImDiagnostics(Diagnostics):
    """DPVIm's convergence facts: converged_from t0 (P,) int, not_converged (P,) bool, the tail mean φ̄ and
    variance v (P,), and the settings (centre, threshold κ, windows)."""

    converged_from: np.ndarray
    not_converged: np.ndarray
    any_not_converged: bool
    tail_mean: np.ndarray
    tail_variance: np.ndarray
    centre: str
    threshold: float
    windows: int

    @classmethod
    def aggregate(cls, records) -> dict:
        """How many fits had a coordinate whose trace never passed the convergence test."""
        return {"simulations_not_converged": int(sum(bool(r.any_not_converged) for r in records))} if records else {}

    def describe(self, posterior) -> list[str]:
        draws = len(posterior.optimum_draws)
        parts = [f"{draws} draws of φ: " + _CENTRES.get(self.centre, f"centre {self.centre}")]
        not_converged = np.asarray(self.not_converged, bool)
        if not_converged.any():
            parts.append(f"{int(not_converged.sum())} of {not_converged.size} coordinates not converged")
        return parts


def dpvim_posterior(
    trace: Trace,
    *,
    key,
    draws: int = DRAWS,
    centre: str = "last",
    threshold: float = 0.05,
    windows: int = 10,
) -> MixturePosterior:
    """The DPVIm posterior of a trace: `draws` draws of φ (1, draws, P) around the centre, diagonal spread v.

    trace: T steps of φ (T, P), with φ_T from `trace.final_iterate()`; the trace needs
    T ≥ 2·windows − 1 steps. key: int seed or jax PRNG key. centre:
      "last"      φ^(k) = φ_T + sqrt(v) ⊙ ξ_k (the default, docs/baselines.md §3.2 [I]);
      "average"   φ^(k) = φ̄ + sqrt(v) ⊙ ξ_k (DPVIm's iterate-averaged point estimate);
      "empirical" φ^(k)_j = φ_{t,j} with t uniform on coordinate j's converged tail, drawn independently
                  per coordinate and with no Gaussian noise added: the tail's own spread is the spread.
    threshold κ > 0 bounds |fitted total drift| over a converged tail; windows ≥ 2 sets Δw = ⌊(T+1)/windows⌋.

    Returns a MixturePosterior of kind DPVIM with method "dpvim", no Hessian, and diagnostics converged_from (P,)
    int t0, not_converged (P,) bool, any_not_converged, tail_mean φ̄ (P,), tail_variance v (P,), centre,
    threshold, windows. Its `sample` draws θ from the mixture (1/K) Σ_k N(μ^(k), diag softplus(ρ^(k))²).
    """
    if centre not in CENTRES:
        raise ValueError(f"unknown centre {centre!r}: choose one of {', '.join(map(repr, CENTRES))}")
    draws = _count("draws", draws, minimum=1)
    rows = np.vstack([np.asarray(trace.params, np.float64), np.asarray(trace.final_iterate(), np.float64)[None]])
    t0, not_converged = convergence_start(rows, threshold=threshold, windows=windows)
    tail_mean, tail_variance = _tail_moments(rows, t0)
    key = as_key(key)
    if centre == "empirical":
        with jax.enable_x64(True):
            index = np.asarray(jax.random.randint(key, (draws, rows.shape[1]), t0, rows.shape[0], jnp.int64))
        phi = np.take_along_axis(rows, index, axis=0)
    else:
        centre_point = rows[-1] if centre == "last" else tail_mean
        phi = centre_point + np.sqrt(tail_variance) * standard_normal(key, (draws, rows.shape[1]))
    return MixturePosterior.from_trace(
        trace,
        phi[None],
        method="dpvim",
        kind=DPVIM,
        diagnostics=DPVImDiagnostics(
            converged_from=t0,
            not_converged=not_converged,
            any_not_converged=bool(not_converged.any()),
            tail_mean=tail_mean,
            tail_variance=tail_variance,
            centre=centre,
            threshold=float(threshold),
            windows=windows,
        ),
    )


def convergence_start(
    params: np.ndarray, *, threshold: float = 0.05, windows: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """DPVIm's per-coordinate convergence test on the iterates φ_0..φ_T.

    params (T+1, P): the trace's params with φ_T appended (n = T+1 rows, n ≥ 2·windows). The candidate
    starts are s = kΔw, k = 0..windows−1, Δw = ⌊n/windows⌋: exactly those whose tail keeps
    n − s ≥ n/windows rows. For each, the OLS slope of φ_{t,j}, t ≥ s, on the time axis rescaled to
    [0, 1] (slope per step × (L−1) for a tail of L rows) is compared with the threshold.

    Returns t0 (P,) int64, the first start with |slope| < threshold, and not_converged (P,) bool; where
    no start passes, t0 = ⌊T/2⌋ = ⌊(n−1)/2⌋ (the spec's fallback) and not_converged is True.
    """
    rows = np.asarray(params, np.float64)
    if rows.ndim != 2:
        raise ValueError(f"params has shape {rows.shape}; it must be (T+1, P): the iterates φ_0..φ_T, one row each")
    if not np.all(np.isfinite(rows)):
        first = tuple(int(i) for i in np.argwhere(~np.isfinite(rows))[0])
        raise FitFailure(
            DIVERGED,
            f"params holds {rows[first]} at row {first[0]}, parameter {first[1]}: the iterates must be finite "
            "(a diverged run must be re-recorded)",
        )
    if not threshold > 0:  # also rejects NaN
        raise ValueError(f"threshold is {threshold}; the slope threshold κ must be > 0 (DPVIm uses 0.05)")
    windows = _count("windows", windows, minimum=2)
    n = rows.shape[0]
    if n < 2 * windows:
        raise ValueError(
            f"the trace is too short for {windows} windows: it has T = {n - 1} steps, and the test needs at "
            f"least T = {2 * windows - 1} (T+1 = {2 * windows} iterates, two per window); record more steps "
            "or use fewer windows"
        )
    width = n // windows
    reference = rows[-1]  # shifting by φ_T keeps sums exact for a constant coordinate
    t0 = np.full(rows.shape[1], (n - 1) // 2, np.int64)
    not_converged = np.ones(rows.shape[1], bool)
    for start in range(0, width * windows, width):
        tail = rows[start:] - reference
        length = tail.shape[0]
        time = np.arange(length, dtype=np.float64) - 0.5 * (length - 1)
        # Σ(x − x̄)² = L(L²−1)/12 for x = 0..L−1, so the drift (L−1)·slope is 12 Σ(x − x̄)(y − ȳ) / (L(L+1))
        drift = 12.0 * (time @ (tail - tail.mean(axis=0))) / (length * (length + 1.0))
        passed = not_converged & (np.abs(drift) < threshold)
        t0[passed] = start
        not_converged &= ~passed
    return t0, not_converged


def _tail_moments(rows: np.ndarray, t0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population variance of each column j over rows t ≥ t0_j, (P,) each, two-pass and shifted
    by the last row (so a constant column gives its value and variance 0 exactly)."""
    inside = np.arange(rows.shape[0])[:, None] >= t0[None, :]
    count = rows.shape[0] - t0
    shifted = np.where(inside, rows - rows[-1], 0.0)
    offset = shifted.sum(axis=0) / count
    variance = np.where(inside, (shifted - offset) ** 2, 0.0).sum(axis=0) / count
    return rows[-1] + offset, variance


def _count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} is {value!r}; it must be an integer ≥ {minimum}")
    return int(value)
