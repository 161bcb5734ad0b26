"""How the gradient model's empirical-Bayes priors are built from a trace: `Prior`, its presets `PRIORS` and
`resolve_prior` (docs/method.md §2.3, §2.8, §2.9)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .expansion import TERM_SETS

__all__ = ["PRIORS", "Prior", "resolve_prior"]

HESSIAN_CENTRES = ("slope", "matched")
HESSIAN_LINKS = ("softplus", "exp")
EXTRA_NOISE_PRIORS = ("half-normal", "normal", "none")
EXTRA_NOISE_UNITS = ("noise-sd", "gradient")
SCALE_MODELS = ("linear", "variance", "stein")
OPTIMUM_PRIORS = ("model", "trace")


@dataclasses.dataclass(frozen=True)
class Prior:
    """How the empirical-Bayes priors of the gradient model are built from a trace (docs/method.md §2).

    optimum_prior: where μ*'s prior comes from. "model" (the default): where the fit is given the trace's model (every
        study; `fit(trace, model=bm)`; `noiseaware fit --model`), μ*_j ~ N(E θ_j, Var θ_j − 1/E h_j) under the
        model's own prior (`BenchmarkModel.optimum_prior`; docs/method.md §2.3), so a trace that says nothing
        returns the prior; without a model, and for ρ*, as "trace". "trace": φ*_j ~ N(φ̄_j, τ_φ²), centred on the
        trace (the paper's).
    optimum_sd: τ_φ, the prior sd of φ*_j around the post-burn-in mean φ̄_j (the "trace" prior).
    hessian_link: a = softplus(ã) (the paper) or a = exp(ã) (a log-normal prior on the Hessian diagonal).
    hessian_centre: "slope" puts ã_j ~ N(â_j, (w·τ_j)²) on the pre-softplus scale as the research code did
        (softplus link only); "matched" centres at m_j = link⁻¹(max(â_j, τ_j)) with the sd carried over by
        the delta method, τ_j / link′(m_j).
    hessian_width: w, the multiplier of the slope's standard error τ_j.
    extra_noise: the prior of u_j, the extra noise sd: "half-normal" (u ≥ 0), "normal" (the research
        u ~ N(0, σ_u²), sign-symmetric since only u² enters), or "none" (u = 0).
    extra_noise_scale, extra_noise_units: σ_u,j = scale × ν_j for "noise-sd", ν_j the DP noise sd σC/s_j
        (for a non-private trace the residual sd: `noise_reference`), or scale in raw gradient units for
        "gradient" (research: 1).
    terms, coupling_scale, curvature_scale: the extra terms of docs/method.md §2.8 and their prior scales.
    scale_model: how the scale rows ρ are modelled: "linear" in ρ (the paper's), "variance" (linear in
        ψ = softplus(ρ)² with a slope and root of their own, §2.9), or "stein" (a mean-field trace's ρ_j row through
        Stein's identity, E G_ρj = q·ω_j·(Λ_jj ψ_j − 1), with Λ_jj the μ_j row's slope a_j: ρ*_j = softplus⁻¹(a_j^(−½)),
        §2.11).

    The defaults — a log-normal prior on each Hessian diagonal entry centred at the OLS slope with twice
    its standard error, and a weakly informative half-normal on u ten times the DP noise sd — were chosen
    by the coverage of φ* on traces simulated from the model (docs/gradient-model.md); "paper" is the
    research prior.
    """

    optimum_prior: str = "model"
    optimum_sd: float = 1.0
    hessian_link: str = "exp"
    hessian_centre: str = "matched"
    hessian_width: float = 2.0
    extra_noise: str = "half-normal"
    extra_noise_scale: float = 10.0
    extra_noise_units: str = "noise-sd"
    terms: tuple[str, ...] = ("diagonal",)
    coupling_scale: float = 1.0
    curvature_scale: float = 1.0
    scale_model: str = "linear"

    def __post_init__(self):
        if self.scale_model not in SCALE_MODELS:
            raise ValueError(f"Prior.scale_model must be one of {', '.join(SCALE_MODELS)}; got {self.scale_model!r}")
        if self.scale_model != "linear" and self.terms != ("diagonal",):
            raise ValueError(
                f"Prior(scale_model={self.scale_model!r}) models the scale rows in ψ = softplus(ρ)² and does not "
                "combine with extra terms yet: use terms=('diagonal',) with it, or scale_model='linear' with the terms"
            )
        if isinstance(self.terms, str) or not self.terms:
            raise ValueError(f"Prior.terms must be a non-empty tuple of term sets from {TERM_SETS}; got {self.terms!r}")
        unknown = [t for t in self.terms if t not in TERM_SETS]
        if unknown or len(set(self.terms)) != len(self.terms):
            raise ValueError(
                f"Prior.terms must name distinct term sets from {', '.join(TERM_SETS)}; got {self.terms!r}"
            )
        for name, value, options in (
            ("hessian_link", self.hessian_link, HESSIAN_LINKS),
            ("hessian_centre", self.hessian_centre, HESSIAN_CENTRES),
            ("extra_noise", self.extra_noise, EXTRA_NOISE_PRIORS),
            ("extra_noise_units", self.extra_noise_units, EXTRA_NOISE_UNITS),
            ("optimum_prior", self.optimum_prior, OPTIMUM_PRIORS),
        ):
            if value not in options:
                raise ValueError(f"Prior.{name} must be one of {', '.join(options)}; got {value!r}")
        for name in ("optimum_sd", "hessian_width", "extra_noise_scale", "coupling_scale", "curvature_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise ValueError(f"Prior.{name} must be a positive finite number; got {value!r}")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"Prior.{name} must be a positive finite number; got {value!r}")
        if self.hessian_centre == "slope" and self.hessian_link != "softplus":
            raise ValueError(
                "Prior(hessian_centre='slope') centres ã at the slope itself, which is the research choice for the "
                "softplus link only (under exp it would centre a at e^â); use hessian_link='softplus' or "
                "hessian_centre='matched'"
            )


PRIORS = {
    "default": Prior(),
    "paper": Prior(
        optimum_prior="trace",
        optimum_sd=1.0,
        hessian_link="softplus",
        hessian_centre="slope",
        hessian_width=1.0,
        extra_noise="normal",
        extra_noise_scale=1.0,
        extra_noise_units="gradient",
    ),
    "expanded": Prior(terms=TERM_SETS),
    "variance": Prior(scale_model="variance"),
    "stein": Prior(scale_model="stein"),
    "trace": Prior(optimum_prior="trace"),
}


def resolve_prior(prior: str | Prior) -> Prior:
    """A `Prior` from a preset name ("default", "paper", "expanded", "variance", "stein",
    "trace") or a `Prior` itself."""
    if isinstance(prior, Prior):
        return prior
    if prior not in PRIORS:
        raise ValueError(f"unknown prior preset {prior!r}: use one of {', '.join(PRIORS)} or a noiseaware.Prior(...)")
    return PRIORS[prior]
