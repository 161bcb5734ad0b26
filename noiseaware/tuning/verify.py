"""Re-verifying a settings file's check: what its settings imply, recomputed from fresh non-private facts.

A settings file's fingerprint finds accidental edits and mismatched files, not forgery: anyone can recompute it.
What a file from someone else claims about its settings is re-verified here in seconds, spending no privacy and
running no DP-SGD, from the facts (`facts`) of M' fresh simulations drawn with the check's recorded key:

* σ = noise_multiplier(ε, δ, q, T), the accountant's, exactly (relative 1e-9);
* the clipped fraction at the optimum, f = mean_m #{i : ‖s ⊙ g_i(φ̂_m)‖ > C} / n, the statistic the check
  recorded, so the two agree to within max(LIMITS["clipped"], 4·se), se the standard error of the M' fractions;
* the clipping shift |δφ| / sd[φ*] and the width sd[θ] / VI sd that `predict` gives from the facts. These are
  approximations (on the nine shipped presets the predicted shift is at most 0.24 sd and the recorded one at
  most 0.13 sd, and the recorded width is 1–2× the prediction), so only a claim far on the optimistic side is a
  mismatch: a recorded shift below ¼ of a predicted one above 2·LIMITS["shift"], or a
  recorded width below half the predicted one;
* the check's model, ε and δ are the file's.

What this cannot re-verify — the coverage RMSE, the calibration tests, the share of traces the checks flag — needs
the DP-SGD runs and fits of a full check: `preflight(bm, tuned, …)` (`noiseaware preflight --settings FILE`)
reruns it on fresh simulations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import numpy as np

from ..models.benchmark import BenchmarkModel
from ..privacy import noise_multiplier
from ..util.keys import as_key
from .facts import facts_for_settings
from .predict import predict
from .preflight_report import LIMITS, PreflightReport

__all__ = ["VERIFY_SIMULATIONS", "SettingsVerification", "verify_check"]

VERIFY_SIMULATIONS = 8
"""Fresh simulations whose facts re-verify a settings file's check (seconds for the built-in models)."""


@dataclass(frozen=True)
class SettingsVerification:
    """A check re-verified (module doc): rows (what, recorded, recomputed, agrees) on `simulations` fresh ones."""

    simulations: int
    rows: tuple[tuple[str, str, str, bool], ...]

    @property
    def ok(self) -> bool:
        return all(agrees for *_, agrees in self.rows)

    @property
    def mismatches(self) -> tuple[str, ...]:
        """Each row that does not agree: "what: recorded …, recomputed …"."""
        return tuple(f"{what}: recorded {old}, recomputed {new}" for what, old, new, agrees in self.rows if not agrees)


def verify_check(
    bm: BenchmarkModel,
    settings,
    check: PreflightReport,
    *,
    epsilon: float,
    delta: float,
    simulations: int = VERIFY_SIMULATIONS,
) -> SettingsVerification:
    """Re-verify `check`, the recorded check of record_dpvi `settings` for `bm` at (ε, δ) (module doc)."""
    rows = [
        ("the check's model", check.model, bm.name, check.model == bm.name),
        ("the check's ε", f"{check.epsilon:g}", f"{epsilon:g}", math.isclose(check.epsilon, epsilon, rel_tol=1e-12)),
        ("the check's δ", f"{check.delta:g}", f"{delta:g}", math.isclose(check.delta, delta, rel_tol=1e-12)),
    ]
    sigma = noise_multiplier(epsilon, delta, settings["sampling_rate"], settings["steps"])
    agrees = math.isclose(check.noise_multiplier, sigma, rel_tol=1e-9)
    rows.append(("noise multiplier σ", f"{check.noise_multiplier:.6g}", f"{sigma:.6g}", agrees))
    k_sim, k_facts, _ = jax.random.split(_recorded_key(check.key), 3)
    facts = facts_for_settings(bm, settings, simulations, simulation_key=k_sim, facts_key=k_facts)
    scale = np.asarray(settings["grad_scale"], np.float64)
    fractions = facts.clipped_fraction(float(settings["clip"]), scale)
    clipped = float(np.mean(fractions))
    tolerance = max(LIMITS["clipped"], 4 * float(np.std(fractions, ddof=1)) / math.sqrt(simulations))
    rows.append(
        (
            "clipped at the optimum",
            f"{100 * check.clipped:.2f} %",
            f"{100 * clipped:.2f} % (agreement within ± {100 * tolerance:.2f} %)",
            abs(clipped - check.clipped) <= tolerance,
        )
    )
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # settings that cannot settle: inf
        prediction = predict(facts, settings, sigma)
    shift = prediction.relative_shift
    rows.append(
        (
            "clipping shift in sd of φ*",
            f"{check.shift:.3g}",
            f"{shift:.3g} (predicted)",
            not (shift > 2 * LIMITS["shift"] and check.shift < shift / 4),
        )
    )
    width, recorded_width = prediction.width, float(np.mean(check.sd_ratio))
    if np.isfinite(width):
        rows.append(
            ("posterior sd / VI sd", f"{recorded_width:.3g}", f"{width:.3g} (predicted)", recorded_width >= width / 2)
        )
    return SettingsVerification(simulations, tuple(rows))


def _recorded_key(key) -> jax.Array:
    """The check's key from its record: an int seed or a key's raw uint32 words."""
    return as_key(key if isinstance(key, int) else np.asarray(key, np.uint32))
