"""The Bayesian linear gradient model: likelihood, empirical-Bayes priors and log density (docs/method.md §2).

Near the VI optimum φ*, the noisy gradient sums of the stationary part t = B..T−1 of a trace follow

    G_tj ~ N( q · a_j · (φ_tj − φ*_j),  v_j ),   v_j = (σC / s_j)² + u_j²,

independently over coordinates j. The log-likelihood of coordinate j is a quadratic form in the trace,
so it depends on the T' = T − B pairs only through six sums. With φ̃_tj = φ_tj − φ̄_j (φ̄ the
post-burn-in mean, so Σ_t φ̃_tj = 0 up to rounding) and δ_j = φ*_j − φ̄_j,

    Σ_t (G_tj − q a_j (φ̃_tj − δ_j))² = S_GG − 2 q a (S_Gφ − δ S_G) + q² a² (S_φφ − 2 δ S_φ + T' δ²).

The sums are the run's `Moments` as `statistics.model_moments` gives them; the slope and noise estimates read off
them are in `statistics`.

Priors (empirical Bayes from the trace, docs/method.md §2), independent over coordinates:

    φ*_j ~ N(φ̄_j, τ_φ²),   ã_j ~ N(m_j, (w·τ̃_j)²) with a_j = link(ã_j),   u_j ~ N⁺(0, σ_u,j²) or N(0, σ_u,j²)

where link is softplus (the paper) or exp. A non-private trace (σ = 0) is the same model without the DP noise
term, v_j = u_j²; its priors are scaled by the noise the trace shows instead (`noise_reference`).

`Prior` says how m_j, τ̃_j and σ_u,j are built; `GradientModel` holds the resulting per-coordinate arrays
with the statistics, and `log_density` / `numpyro_model` / `integrate_optimum` are the one definition
every inference route (exact, laplace, nuts) uses.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from ..models.benchmark import ModelOptimumPrior
from ..trace import BURN_IN
from ..trace.moments import Moments
from ..trace.run import Run, scale_rows_of
from ..util.numerics import sigmoid, softplus_inverse
from .expansion import TermStatistics, set_log_likelihoods, term_statistics
from .model_prior import model_optimum_prior
from .priors import PRIORS, Prior, resolve_prior
from .statistics import (
    ScalePartner,
    centred_phiphi,
    is_non_private,
    model_moments,
    noise_reference,
    ols_fit,
    others_of,
    partial_slopes,
    residual_squares,
    scale_partner,
    slope_estimates,
    solves_partial_rows,
)

__all__ = [
    "PRIORS",
    "GradientModel",
    "Prior",
    "gradient_model",
    "integrate_optimum",
    "is_non_private",
    "log_density",
    "log_likelihood",
    "noise_reference",
    "numpyro_model",
    "ols_fit",
    "resolve_prior",
    "scale_coordinates",
    "select_rows",
    "slope_estimates",
]


def log_likelihood(model: GradientModel, optimum, hessian, extra_var=0.0):
    """Per-coordinate log-likelihood of the trace, (P,) (broadcasting over leading axes of the arguments).

    optimum φ*' (…, P) (φ* itself without extra terms), hessian a (…, P) (the positive Hessian diagonal),
    extra_var u² (…, P) added to the DP noise variance; the model's extra term sets (`expansion`) have their
    coefficients integrated out and their likelihoods averaged by their prior probabilities. Evaluated from the
    sufficient statistics in O(P) (O(P·p) with terms).
    """
    stats = model.stats
    delta = optimum - stats.centre
    qa = model.sampling_rate * hessian
    var = model.noise_var + extra_var
    if model.terms:
        return jax.nn.logsumexp(set_log_likelihoods(stats, model.terms, delta, qa, var, model.sampling_rate), axis=-2)
    own = -0.5 * stats.count * jnp.log(2.0 * jnp.pi * var) - 0.5 * residual_squares(stats, delta, qa) / var
    return own + others_log_factor(model, var)


def others_log_factor(model: GradientModel, var):
    """½·others·log 2πv per column (…, P): a partial row's other coefficients (`statistics.partial_on_others`)
    integrated out of its likelihood under a flat prior (0 on rows that are not partial)."""
    return 0.5 * model.others * jnp.log(2.0 * jnp.pi * var)


PSI_MODELS = ("variance", "stein")
"""The scale models that read the scale rows in ψ = softplus(ρ)² (`in_psi`)."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GradientModel:
    """The gradient model of one trace: its moments as the model reads them (`model_moments`), the DP noise variance
    noise_var (σC/s)² (P,), the sampling rate q, the scale rows read in ψ (P,) bool, and per-coordinate prior
    parameters, all (P,).

    optimum ~ N(optimum_loc, optimum_sd²); hessian_raw ã ~ N(hessian_loc, hessian_sd²), a = `hessian(ã)`
    (softplus or exp by `hessian_link`); extra noise u ~ `extra_noise`(0, extra_sd²) (half-normal or normal;
    extra_sd = 0 with "none"); partner: the scale rows that share the μ rows' slopes (`ScalePartner`, the Stein
    model), or None; others (P,): how many other μ coordinates each row's sums were regressed on (`others_of`).
    A pytree: stacked models (leading axis M) vmap over traces; `extra_noise`
    and `hessian_link` are static.
    """

    stats: Moments
    noise_var: jax.Array
    sampling_rate: jax.Array
    scale_rows: jax.Array
    optimum_loc: jax.Array
    optimum_sd: jax.Array
    hessian_loc: jax.Array
    hessian_sd: jax.Array
    extra_sd: jax.Array
    others: jax.Array
    extra_noise: str = dataclasses.field(metadata={"static": True})
    hessian_link: str = dataclasses.field(metadata={"static": True})
    terms: tuple[TermStatistics, ...] = ()
    term_sets: tuple[str, ...] = dataclasses.field(default=("diagonal",), metadata={"static": True})
    scale_model: str = dataclasses.field(default="linear", metadata={"static": True})
    partner: ScalePartner | None = None

    def hessian(self, hessian_raw):
        """The Hessian diagonal a = link(ã), softplus or exp."""
        return jnp.exp(hessian_raw) if self.hessian_link == "exp" else jax.nn.softplus(hessian_raw)

    @property
    def n_params(self) -> int:
        return self.optimum_loc.shape[-1]


def scale_coordinates(trace: Run) -> np.ndarray:
    """(P,) bool: the trace's scale coordinates ρ, the rows the variance model may take."""
    mask = np.zeros(trace.n_params, bool)
    mask[scale_rows_of(trace.family)] = True
    return mask


def select_rows(model: GradientModel, rows: np.ndarray) -> GradientModel:
    """The model of the coordinates `rows` (an index array) alone: the rows are independent given the trace, so
    its fit is those rows' fit. Only for the diagonal model (extra terms couple the rows)."""
    if model.terms:
        raise ValueError("select_rows takes the diagonal model only: extra terms couple the rows")
    size = model.n_params
    return jax.tree_util.tree_map(lambda x: x[..., rows] if np.ndim(x) and np.shape(x)[-1] == size else x, model)


def gradient_model(
    trace: Run,
    prior: str | Prior = "default",
    burn_in: float = BURN_IN,
    model_prior: ModelOptimumPrior | None = None,
) -> GradientModel:
    """The gradient model of `trace` under `prior` (a preset name or a `Prior`), float64 numpy arrays.

    model_prior: what the trace's model says about the VI optimum (`BenchmarkModel.optimum_prior`), or None. Under
    `Prior(optimum_prior="model")` it sets the priors of μ*, ρ* and the slopes a (`model_optimum_prior`); without
    it, or under "trace", they are centred on the trace (docs/method.md §2.3).

    A non-private trace (σ = 0) is the model without its DP noise term, v_j = u_j²: the extra noise is its
    only noise, so a prior without extra noise is a ValueError, and the priors are scaled by the noise the
    trace shows (`noise_reference`).
    """
    prior = resolve_prior(prior)
    if prior.scale_model == "stein" and trace.family.kind != "mean-field":
        raise ValueError(
            "Prior(scale_model='stein') ties each ρ_j row to the μ_j row's slope by Stein's identity, which holds "
            f"for a mean-field Gaussian q; this trace's family is {trace.family.kind} (a factor's rows vanish at "
            "L Lᵀ = H⁻¹, which needs the whole H): use scale_model='linear' or 'variance' for it"
        )
    scale_rows = scale_coordinates(trace) & (prior.scale_model in PSI_MODELS)
    from_model = model_prior is not None and prior.optimum_prior == "model"
    coupling = model_prior.coupling if from_model and trace.family.kind == "mean-field" else None
    # the wander's curvature from the model: a trace's ρ may still lag far behind ρ* (M3's research preset)
    curvature = None if coupling is None else np.median(model_prior.curvature, axis=0)
    stats = model_moments(
        trace, burn_in, scale_rows, coupling, curvature, partial=solves_partial_rows(prior.scale_model, trace)
    )
    noise_var, q = np.asarray(trace.settings.noise_sd, np.float64) ** 2, float(trace.settings.sampling_rate)
    if prior.extra_noise == "none" and is_non_private(noise_var):
        raise ValueError(
            "the trace is non-private (σ = 0), so the extra noise u (subsampling and Monte Carlo noise) is the "
            "gradient model's only noise, and this prior has extra_noise='none', which leaves it no noise at "
            "all: use a prior with extra noise (the default, or Prior(extra_noise='half-normal'))"
        )
    slope, se = slope_estimates(stats, noise_var, q, scale_rows)
    noise_sd = noise_reference(stats, noise_var)
    if prior.scale_model in PSI_MODELS:
        # in ψ the trace mean ψ̄ is not near the root (E softplus(ρ)² ≠ softplus(E ρ)²): centre the scale rows' slope
        # prior at the least-squares slope with a free intercept, and its standard error
        free, _ = ols_fit(stats)
        slope = np.where(scale_rows, np.abs(free) / q, slope)
        se = np.where(scale_rows, noise_sd / np.sqrt(centred_phiphi(stats)) / q, se)
    if prior.hessian_centre == "slope":
        loc, sd = slope, se
    else:
        # a slope within one standard error of 0 says only that a ≲ τ: centre there, so the delta-method
        # width τ/â stays bounded (≤ w on the log scale) instead of exploding as â → 0
        slope = np.maximum(slope, se)
        if prior.hessian_link == "exp":
            loc, sd = np.log(slope), se / slope
        else:
            loc = softplus_inverse(slope)
            sd = se / sigmoid(loc)
    scale, terms = np.maximum(slope, se), ()
    if prior.terms != ("diagonal",):
        # with other columns in a row its own slope is a partial one: the extra terms' prior scales use the larger
        # of the two, and ã's prior is widened by how far the partial slope lies from the marginal one
        params, grads = (np.asarray(rows[stats.start :], np.float64) for rows in trace.rows())
        partial = partial_slopes(params, grads, q)
        scale = np.maximum(scale, partial)
        terms = term_statistics(
            params,
            grads,
            q,
            scale,
            trace.family.dim,
            prior.terms,
            prior.coupling_scale,
            prior.curvature_scale,
        )
        if prior.hessian_centre != "slope":
            partial = np.maximum(partial, se)
            log_ratio = np.log(partial / slope) if prior.hessian_link == "exp" else softplus_inverse(partial) - loc
            sd = np.hypot(sd, np.abs(log_ratio) / prior.hessian_width)
    extra = prior.extra_noise_scale * (noise_sd if prior.extra_noise_units == "noise-sd" else np.ones_like(noise_sd))
    # ψ* = softplus(ρ*)²: a relative prior, the delta-method image of τ_φ at ψ̄ (dψ = 2ψ dρ for ρ ≪ 0)
    optimum_loc = np.array(stats.centre, np.float64)
    optimum_sd = np.where(scale_rows, 2.0 * stats.centre * prior.optimum_sd, prior.optimum_sd)
    if from_model:
        # sd*_j = h_j^(−1/2) is the mean-field optimum's; a full- or low-rank factor's diagonal is not, so there only
        # the μ rows (μ*'s prior and slope h_j hold for every Gaussian family) take the model's prior
        blocks = ("mu", "rho") if trace.family.kind == "mean-field" else ("mu",)
        rows = np.concatenate([np.arange(trace.n_params)[part] for name, part in trace.family.blocks if name in blocks])
        if prior.scale_model in PSI_MODELS:
            rows = rows[~scale_rows[rows]]  # scale rows in ψ keep their own prior
        moments = model_optimum_prior(model_prior)
        optimum_loc[rows], optimum_sd[rows] = moments.optimum_loc[rows], moments.optimum_sd[rows]
        if prior.hessian_link == "exp":
            loc[rows] = moments.hessian_loc[rows]
            sd[rows] = moments.hessian_sd[rows] / prior.hessian_width
    return GradientModel(
        stats=stats,
        noise_var=noise_var,
        sampling_rate=q,
        scale_rows=scale_rows,
        optimum_loc=optimum_loc,
        optimum_sd=optimum_sd,
        hessian_loc=loc,
        hessian_sd=prior.hessian_width * sd,
        extra_sd=np.zeros_like(extra) if prior.extra_noise == "none" else extra,
        others=others_of(stats, trace.n_params, trace.family.dim),
        extra_noise=prior.extra_noise,
        hessian_link=prior.hessian_link,
        terms=terms,
        term_sets=prior.terms,
        scale_model=prior.scale_model,
        partner=None if prior.scale_model != "stein" else scale_partner(stats, noise_var, extra, q, trace.family.dim),
    )


def prior_distributions(model: GradientModel) -> dict[str, dist.Distribution]:
    """The priors of φ*, ã and u as numpyro distributions with batch shape (…, P)."""
    priors = {
        "optimum": dist.Normal(model.optimum_loc, model.optimum_sd),
        "hessian_raw": dist.Normal(model.hessian_loc, model.hessian_sd),
    }
    if model.extra_noise == "half-normal":
        priors["extra_noise"] = dist.HalfNormal(model.extra_sd)
    elif model.extra_noise == "normal":
        priors["extra_noise"] = dist.Normal(0.0, model.extra_sd)
    return priors


def log_density(model: GradientModel, optimum, hessian_raw, extra_noise=None):
    """Per-coordinate unnormalised log posterior log p(φ*_j, ã_j, u_j | trace), (…, P).

    The joint density factorises over the P coordinates, so its sum is the log posterior of all unknowns.
    `extra_noise` (u) is ignored (and may be None) when the prior has no extra noise.
    """
    priors = prior_distributions(model)
    total = priors["optimum"].log_prob(optimum) + priors["hessian_raw"].log_prob(hessian_raw)
    extra_var = 0.0
    if "extra_noise" in priors:
        total = total + priors["extra_noise"].log_prob(extra_noise)
        extra_var = extra_noise**2
    return total + log_likelihood(model, optimum, model.hessian(hessian_raw), extra_var)


def numpyro_model(model: GradientModel) -> None:
    """The gradient model as a numpyro model over sites "optimum", "hessian_raw" (and "extra_noise"), each (P,)."""
    priors = prior_distributions(model)
    values = {name: numpyro.sample(name, prior.to_event(1)) for name, prior in priors.items()}
    extra_var = values["extra_noise"] ** 2 if "extra_noise" in values else 0.0
    hessian = model.hessian(values["hessian_raw"])
    numpyro.deterministic("hessian", hessian)
    numpyro.factor("trace", jnp.sum(log_likelihood(model, values["optimum"], hessian, extra_var)))


class OptimumGivenHessian(NamedTuple):
    """φ*'_j integrated out given (ã_j, u_j): log p(trace_j | ã_j, u_j) and φ*'_j's conditional N(mean, sd²) (a
    mixture's mean and sd over the term sets when the model has extra terms). by_set: with extra terms, the same
    three per term set, each (…, S, P); None without."""

    log_marginal: jax.Array
    mean: jax.Array
    sd: jax.Array
    by_set: tuple[jax.Array, jax.Array, jax.Array] | None = None


def integrate_optimum(model: GradientModel, hessian_raw, extra_var=0.0) -> OptimumGivenHessian:
    """Integrate φ*_j ~ N(loc_j, τ_j²) out of the likelihood in closed form, per coordinate (…, P).

    With c = q·a, a = link(ã), v = (σC/s)² + u², δ = φ* − φ̄ and δ₀ = loc − φ̄, the log-likelihood is
    −T'/2·log 2πv − (R₀ + 2c(S_G − c S_φ)δ + c²T'δ²)/(2v), R₀ = S_GG − 2c S_Gφ + c² S_φφ, so
    δ | ã, u ~ N(h/Π, 1/Π) with Π = c²T'/v + 1/τ², h = −c(S_G − c S_φ)/v + δ₀/τ², and
    log ∫ = −T'/2·log 2πv − R₀/(2v) − δ₀²/(2τ²) − ½ log(τ²Π) + h²/(2Π).
    With extra terms (`expansion`) the same per term set, with S_GG, S_Gφ, S_φφ reduced by the set's
    corrections and −½ Σ log(1 + λ/v) + log(prior probability) added; the sets are then mixed.
    """
    stats = model.stats
    c = model.sampling_rate * model.hessian(hessian_raw)
    var = model.noise_var + extra_var
    if not model.terms:
        return _integrate(model, c, var, stats.sum_gg, stats.sum_gphi, stats.sum_phiphi, 0.0)
    q2 = model.sampling_rate**2
    parts = []
    for term in model.terms:
        extra_gg, extra_gphi, extra_phiphi, log_det = term.corrections(var)
        parts.append(
            _integrate(
                model,
                c,
                var,
                stats.sum_gg - q2 * extra_gg,
                stats.sum_gphi - q2 * extra_gphi,
                stats.sum_phiphi - q2 * extra_phiphi,
                term.log_prior - 0.5 * log_det,
            )
        )
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for part in parts for x in part[:3]))
    log_marginal, mean, sd = (
        jnp.stack([jnp.broadcast_to(x, shape) for x in values], axis=-2) for values in list(zip(*parts))[:3]
    )
    total = jax.nn.logsumexp(log_marginal, axis=-2)
    weight = jnp.exp(log_marginal - total[..., None, :])
    mixed_mean = jnp.sum(weight * mean, axis=-2)
    second = jnp.sum(weight * (sd**2 + mean**2), axis=-2)
    mixed_sd = jnp.sqrt(jnp.maximum(second - mixed_mean**2, jnp.min(sd, axis=-2) ** 2))
    return OptimumGivenHessian(total, mixed_mean, mixed_sd, (log_marginal, mean, sd))


def _integrate(model: GradientModel, c, var, sum_gg, sum_gphi, sum_phiphi, log_factor) -> OptimumGivenHessian:
    """`integrate_optimum`'s closed form for given (possibly corrected) sums, with log_factor added."""
    stats = model.stats
    tau2 = model.optimum_sd**2
    offset = model.optimum_loc - stats.centre
    residual = sum_gg - 2.0 * c * sum_gphi + c**2 * sum_phiphi
    precision = c**2 * stats.sum_ww / var + 1.0 / tau2
    shift = -c * (stats.sum_g - c * stats.sum_phi) / var + offset / tau2
    log_marginal = (
        log_factor
        + others_log_factor(model, var)
        - 0.5 * stats.count * jnp.log(2.0 * jnp.pi * var)
        - 0.5 * residual / var
        - 0.5 * offset**2 / tau2
        - 0.5 * jnp.log(tau2 * precision)
        + 0.5 * shift * (shift / precision)
    )
    mean, sd = stats.centre + shift / precision, jax.lax.rsqrt(precision)
    if model.scale_model == "variance":
        # ψ* = softplus(ρ*)² > 0: the prior is truncated there (normalised by P(ψ* > 0) under it), so the
        # marginal gains P(ψ* > 0 | ã, u) / P(ψ* > 0)
        truncation = jax.scipy.special.log_ndtr(mean / sd) - jax.scipy.special.log_ndtr(
            model.optimum_loc / model.optimum_sd
        )
        log_marginal = log_marginal + jnp.where(model.scale_rows, truncation, 0.0)
    return OptimumGivenHessian(log_marginal, mean, sd)
