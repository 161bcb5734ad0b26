"""What DP-SGD settings will do, predicted from the simulation facts alone, before any trace (docs/tuning.md §3).

Near the optimum the gradient model of docs/method.md §2.1 is a linear-Gaussian recursion. Per simulation m and
coordinate j, with the facts' φ̂_m, g_i(φ̂_m) and a_mj = (diag H_m)_j, and the settings' C, s, λ, σ, q, T
(λ = v ⊙ s / (√(T·P)·σ·C), method.md §1.5):

    G_t = q·a⊙(φ_t − φ*) + η_t,    Var η_tj = v_mj = (σC/s_j)² + u²_mj        (DP noise + subsampling noise)
    φ_{t+1} − φ* = (1 − κ)⊙(φ_t − φ*) − λ⊙η_t,    κ_mj = λ_j q a_mj               (per-step relaxation)

u²_mj = (N/n)·q(1−q)·Σ_i ḡ²_ij + q²·((N/n)·Σ_i ḡ_ij)² is the Poisson subsampling variance of the clipped sum
(ḡ_i = clip_C(s ⊙ g_i) ⊘ s; the second term carries the Monte Carlo noise shared by a step's examples). Then:

* the iterates' stationary sd: sd_φ = λ·√v / √(κ(2 − κ)) (finite only for 0 < κ < 2);
* the start forgotten by the end of burn-in B = ⌊0.2·T⌋: the offset φ₀ − φ* shrinks by |1 − κ|^B, and
  `memory` = |φ₀ − φ̂ − δφ|·|1 − κ|^B / sd_φ is what is left of it in stationary sds;
* the posterior sd of φ*: the exact route's φ* | a, u is N(·, 1/Π), Π = c²T'/v + 1/τ_φ² (c = q·a, T' = T − B,
  method.md §2.4). a is known to a relative sd r = τ_a/a = ν/(c·√(T'·sd_φ²)) (§2.3's slope standard error,
  ν = σC/s), and mixing over it gives sd[φ*]² ≈ (1 + 3r²)/Π + 2·sd_φ²·r²/(κT')² (E[a⁻²] of a log-normal a, and
  the conditional mean φ̄ − Ḡ/c moving with a; Ḡ = (φ_B − φ_T)/(λT') for plain SGD);
* the clipping shift in those sds, |δφ| / sd[φ*] (δφ of `facts`), and the posterior sd of θ over the VI sd for
  a mean-field family: sd[θ_j]² = Var μ*_j + E softplus(ρ*_j)², with ρ* ~ N(ρ̂ + δρ, sd[ρ*]²) taken to second
  order, E f(ρ*) ≈ f(ρ̄) + ½ f''(ρ̄)·sd[ρ*]²;
* **the ρ rows by the pair model** (mean-field): Gaussian VI ties a coordinate's two rows to one curvature h_j
  (docs/method.md §2.3): the ρ row's full gradient is sigmoid(ρ)·(h·s − 1/s), s = softplus(ρ), zero at
  ρ* = softplus⁻¹(h^(−1/2)), so h = 1/softplus(ρ̂ + δρ)². Its potential is U(ρ) = q·(h·s²/2 − log s), and DP-SGD
  with step λ and noise variance v per step wanders with the stationary density p(ρ) ∝ exp(−2U(ρ)/(λ·v)) (the
  small-step limit; the linear law above is its quadratic case). The stationary mean of the gradient is 0, so a
  gradient model linear in ρ places ρ* near E_p[ρ]: the predicted ζ of a ρ row is `rho_bias` = (E_p[ρ] − ρ*) /
  sd[ρ*], which the search's shift test over the ρ coordinates rejects beyond a few tenths (`constraints`).

Without clipping at the optimum and with κ·T' ≫ 1 these are the laws the recorded trace and its fit follow;
`proposals` orders the candidates the search simulates by them (`constraints.predicted_constraints`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..inference.priors import PRIORS
from ..trace import BURN_IN
from ..trace.families import MEAN_FIELD
from .facts import SimulationFacts

__all__ = ["Prediction", "predict"]


@dataclass(frozen=True)
class Prediction:
    """The predicted laws of a settings' traces on M simulations (module doc); arrays (M, P) unless said.

    clipped_fraction (M,): clipped at φ̂_m; shift: δφ; relaxation: κ; stationary_sd: sd_φ (inf where κ ∉ (0, 2));
    memory: what is left of the start after burn-in, in stationary sds; optimum_sd: sd[φ*]; noise_sd: √v;
    ratio (M, d): posterior sd of θ over the VI sd (NaN for a family other than mean-field); rho_bias (M, d): the
    pair model's ζ of the ρ rows (0 for a family other than mean-field).
    """

    clipped_fraction: np.ndarray
    shift: np.ndarray
    relaxation: np.ndarray
    stationary_sd: np.ndarray
    memory: np.ndarray
    optimum_sd: np.ndarray
    noise_sd: np.ndarray
    ratio: np.ndarray
    rho_bias: np.ndarray

    @property
    def relative_shift(self) -> float:
        """The largest mean |δφ| / sd[φ*] over the coordinates (`Score.shift`'s prediction)."""
        return float(np.max(np.mean(np.abs(self.shift) / self.optimum_sd, axis=0)))

    @property
    def clipped(self) -> float:
        """Mean clipped fraction at the optimum (`Score.clipped`, exact: the same facts)."""
        return float(np.mean(self.clipped_fraction))

    @property
    def unstable(self) -> float:
        """The largest share of simulations over the coordinates whose iterates cannot settle (κ ∉ (0, 2))."""
        return float(np.max(np.mean(~np.isfinite(self.stationary_sd), axis=0)))

    @property
    def remembered(self) -> float:
        """The share of simulations that, in some coordinate, still hold more than 3 stationary sds of the start
        after burn-in."""
        return float(np.mean(np.any(self.memory > 3.0, axis=1)))

    @property
    def bias(self) -> float:
        """The largest |mean ζ| over the ρ coordinates that the pair model predicts (`Score`'s shift test of ζ)."""
        return float(np.max(np.abs(np.mean(self.rho_bias, axis=0)), initial=0.0))

    @property
    def width(self) -> float:
        """The predicted objective: the mean over θ's coordinates of the mean posterior sd over the VI sd."""
        return float(np.mean(np.mean(self.ratio, axis=0)))

    def as_row(self) -> dict:
        """The scalar summary kept with a trial."""
        return {
            "predicted_width": self.width,
            "predicted_shift": self.relative_shift,
            "predicted_bias": self.bias,
            "predicted_clipped": self.clipped,
            "predicted_unstable": self.unstable,
            "predicted_remembered": self.remembered,
        }


def predict(facts: SimulationFacts, settings, noise_multiplier: float) -> Prediction:
    """The module doc's predictions for `settings` (record_dpvi's: clip, grad_scale, lr_multiplier, steps,
    sampling_rate, init; plain SGD with the κ heuristic's step sizes) at noise multiplier σ on `facts`."""
    clip, sigma = float(settings["clip"]), float(noise_multiplier)
    scale = np.asarray(settings["grad_scale"], np.float64)
    q, steps = float(settings["sampling_rate"]), int(settings["steps"])
    P = scale.size
    step = np.asarray(settings["lr_multiplier"], np.float64) * scale / (math.sqrt(steps * P) * sigma * clip)
    burn_in = int(BURN_IN * steps)
    kept = steps - burn_in
    a = np.maximum(facts.hessian, 1e-300)
    norms = np.linalg.norm(facts.gradients * scale, axis=-1, keepdims=True) / clip
    clipped = facts.gradients * np.minimum(1.0, 1.0 / np.maximum(norms, 1e-300))
    per = facts.n_examples / facts.gradients.shape[1]
    extra = per * q * (1 - q) * np.sum(clipped**2, axis=1) + (q * per * np.sum(clipped, axis=1)) ** 2
    dp = (sigma * clip / scale) ** 2
    v = dp + extra
    kappa = step * q * a
    stable = (kappa > 0) & (kappa < 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        stationary = np.where(stable, step * np.sqrt(v / (kappa * (2 - kappa))), np.inf)
        shift = facts.clipping_shift(clip, scale)
        offset = np.abs(np.asarray(settings["init"], np.float64) - facts.optimum - shift)
        memory = np.where(stable, offset * np.abs(1 - kappa) ** burn_in / stationary, np.inf)
        c = q * a
        precision = c**2 * kept / v + 1 / PRIORS["default"].optimum_sd ** 2
        r2 = np.where(stable, dp / (c**2 * kept * stationary**2), np.inf)
        optimum_var = (1 + 3 * r2) / precision + 2 * stationary**2 * r2 / (kappa * kept) ** 2
    optimum_sd = np.sqrt(optimum_var)
    return Prediction(
        clipped_fraction=np.mean(norms[..., 0] > 1.0, axis=1),
        shift=shift,
        relaxation=kappa,
        stationary_sd=stationary,
        memory=memory,
        optimum_sd=optimum_sd,
        noise_sd=np.sqrt(v),
        ratio=_width_ratio(facts, shift, optimum_sd),
        rho_bias=_rho_bias(facts, shift, step, v, q, stationary, optimum_sd),
    )


PAIR_GRID = np.linspace(-1.0, 1.0, 801)
"""Nodes of the ρ rows' stationary density, in units of its half-width (`_rho_bias`)."""


def _rho_bias(facts: SimulationFacts, shift, step, v, q: float, stationary, optimum_sd) -> np.ndarray:
    """The pair model's ζ of each ρ row (module doc), (M, d): (E_p[ρ] − ρ*) / sd[ρ*] under p(ρ) ∝ exp(−2U(ρ)/(λv)),
    U = q·(h·s²/2 − log s), on PAIR_GRID over ρ* ± min(12 linear stationary sds, 20); 0 for a family other than
    mean-field."""
    d = facts.dim
    if facts.family != MEAN_FIELD:
        return np.zeros((len(facts), d))
    centre = facts.optimum[:, d:] + shift[:, d:]
    half = np.minimum(np.nan_to_num(12 * stationary[:, d:], nan=20.0, posinf=20.0), 20.0)
    rho = centre[..., None] + half[..., None] * PAIR_GRID  # (M, d, G)
    s = np.logaddexp(0.0, rho)
    h = 1 / np.logaddexp(0.0, centre) ** 2
    log_p = -2 * q * (h[..., None] * s**2 / 2 - np.log(s)) / (step[d:, None] * v[:, d:, None])
    weight = np.exp(log_p - log_p.max(axis=-1, keepdims=True))
    mean = np.sum(weight * rho, axis=-1) / np.sum(weight, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num((mean - centre) / optimum_sd[:, d:], nan=np.inf)


def _width_ratio(facts: SimulationFacts, shift: np.ndarray, optimum_sd: np.ndarray) -> np.ndarray:
    """sd[θ_j] / softplus(ρ̂_j) per simulation (module doc), (M, d); NaN for a family other than mean-field."""
    d = facts.dim
    if facts.family != MEAN_FIELD:
        return np.full((len(facts), d), np.nan)
    rho = facts.optimum[:, d:] + shift[:, d:]
    sd_rho, sd_mu = optimum_sd[:, d:], optimum_sd[:, :d]
    softplus, sigmoid = np.logaddexp(0.0, rho), 1 / (1 + np.exp(-rho))
    # softplus² has second derivative 2·(sigmoid² + softplus·sigmoid·(1 − sigmoid))
    second_moment = softplus**2 + sd_rho**2 * (sigmoid**2 + softplus * sigmoid * (1 - sigmoid))
    with np.errstate(invalid="ignore", over="ignore"):
        return np.sqrt(sd_mu**2 + second_moment) / facts.vi_sd
