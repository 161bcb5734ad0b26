"""Per-example clipping for a GLM on sparse features, in O(B·k) per chunk instead of O(B·P) (docs/windowed.md).

A model whose θ is one site of d coefficients, and whose example i reads θ only through the linear predictor
η_i = Σ_j θ[w_ij]·x_ij (k feature indices w_i, values x_i), has per-example gradients that are sparse plus one
part shared by every example. For a mean-field family, draws θ_s = μ + σ ⊙ ε_s and r_si = ∂_η log p(y_i | η_si):

    g_i^μ = a_i^μ + b^μ,  a_i^μ[w_ij] += −mean_s r_si·x_ij,             b^μ = −mean_s ∇log p̃(θ_s) / N
    g_i^ρ = a_i^ρ + b^ρ,  a_i^ρ[w_ij] += −mean_s r_si·x_ij·ε_s[w_ij]·σ'_w,  b^ρ = (−mean_s ∇log p̃(θ_s)·ε_s − 1/σ)·σ' / N

with σ' = sigmoid(ρ). Each example's norm ‖s ⊙ (a_i + b)‖² = ‖s ⊙ a_i‖² + 2 (s ⊙ a_i)·(s ⊙ b) + ‖s ⊙ b‖² needs its k
entries only (repeated indices summed through a k × k match), and the clipped sum is a scatter of the B·k entries
plus (Σ_i c_i)·(s ⊙ b). The same numbers as the dense per-example gradients (`dpvi._Program`), up to float
rounding: `check_sparse` compares the two on the data before a run, so a model that does not match what
`SparseFeatures` declares is refused before any work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from .subsampling import clip_weights, clipped_number

__all__ = ["LINKS", "SparseFeatures", "as_sparse", "check_sparse", "sparse_summand"]

LINKS = {
    "bernoulli-logit": lambda y, eta: y - jax.nn.sigmoid(eta),
    "poisson-log": lambda y, eta: y - jnp.exp(eta),
}
"""∂_η log p(y | η) for each likelihood a sparse GLM may declare: Bernoulli with logit link, Poisson with log link."""
_CHECKED_EXAMPLES = 16
"""Examples, drawn at random, on which `check_sparse` compares the sparse sums with the dense per-example gradients."""


@dataclasses.dataclass(frozen=True)
class SparseFeatures:
    """What makes a model's per-example gradients sparse: example i's log-likelihood is log p(y_i | η_i),
    η_i = Σ_j θ[w_ij]·x_ij. indices: the data key of w (N, k) int; values: of x (N, k) float; response: of y (N,);
    likelihood: a key of `LINKS`. θ is the model's only latent site, a real vector (an intercept is a feature present
    in every example)."""

    indices: str
    values: str
    response: str
    likelihood: str = "bernoulli-logit"

    def __post_init__(self):
        for name in ("indices", "values", "response"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"SparseFeatures.{name} must name a data entry, got {getattr(self, name)!r}")
        if self.likelihood not in LINKS:
            raise ValueError(f"unknown sparse likelihood {self.likelihood!r}: choose one of {', '.join(LINKS)}")

    def to_data(self) -> dict:
        """Plain JSON data; `as_sparse` reads it back."""
        return dataclasses.asdict(self)


def as_sparse(value) -> SparseFeatures | None:
    """None, a `SparseFeatures`, or a mapping of its fields (a settings file's JSON) → SparseFeatures or None."""
    if value is None or isinstance(value, SparseFeatures):
        return value
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - {f.name for f in dataclasses.fields(SparseFeatures)})
        if unknown:
            raise ValueError(f"unknown sparse fields {unknown}: sparse has indices, values, response, likelihood")
        return SparseFeatures(**value)
    raise ValueError(
        f"sparse must be a SparseFeatures, e.g. na.SparseFeatures('words', 'weights', 'y'), got {type(value).__name__}"
    )


def sparse_summand(features: SparseFeatures, spec, params, eps, per_example, constants, scale, clip, counts=False):
    """summand(examples, mask) → (Σ_i c_i·s_μ ⊙ g_i^μ, Σ_i c_i·s_ρ ⊙ g_i^ρ), each (d,), for `poisson_sum`: the
    clipped sum over a chunk of B examples (module doc), with the number of examples clipped (`clipped_number`) as a
    third entry when `counts`. params (2d,), eps (S, d), per_example: the data's per-example arrays (one example lets
    the prior's model run), scale s (2d,), clip C. The shared part b is computed once here, not per chunk."""
    d = params.shape[0] // 2
    mu, rho = params[:d], params[d:]
    sd, dsd = jax.nn.softplus(rho), jax.nn.sigmoid(rho)
    thetas = mu + sd * eps  # (S, d)
    scale_mu, scale_rho = scale[:d], scale[d:]
    link = LINKS[features.likelihood]
    draws, n = eps.shape[0], spec.n_examples
    one = {k: v[:1] for k, v in per_example.items()}
    grad_prior = jax.vmap(jax.grad(spec.log_prior), (0, None, None))(thetas, one, constants)
    shared_mu = scale_mu * (-jnp.mean(grad_prior, 0) / n)
    shared_rho = scale_rho * ((-jnp.mean(grad_prior * eps, 0) / n) * dsd - dsd / sd / n)

    def summand(examples, mask):
        raw = examples[features.indices]  # (B, k); a slot outside [0, d) counts for nothing (never wraps around)
        inside = (raw >= 0) & (raw < d)
        words = jnp.where(inside, raw, 0)
        x = jnp.where(inside, examples[features.values], 0).astype(params.dtype)
        eta = jnp.einsum("sbk,bk->sb", thetas[:, words], x)
        r = link(examples[features.response].astype(params.dtype), eta)  # (S, B)
        part_mu = scale_mu[words] * (-jnp.mean(r, 0)[:, None] * x)
        part_rho = scale_rho[words] * dsd[words] * (-jnp.einsum("sb,bk,sbk->bk", r, x, eps[:, words]) / draws)
        same = (words[:, :, None] == words[:, None, :]).astype(params.dtype)  # (B, k, k)

        def norm2(part, shared):
            own = jnp.einsum("bj,bjl,bl->b", part, same, part)
            return own + 2 * jnp.sum(part * shared[words], -1) + jnp.sum(shared**2)

        norms = jnp.sqrt(jnp.maximum(norm2(part_mu, shared_mu) + norm2(part_rho, shared_rho), 0.0))
        factor, keep = clip_weights(norms, mask, clip)
        weight = jnp.where(keep[:, None], factor[:, None], 0.0)
        kept = jnp.sum(factor)

        def total(part, shared):
            spread = jnp.zeros(d, params.dtype).at[words.ravel()].add(jnp.where(weight > 0, weight * part, 0.0).ravel())
            return spread + jnp.where(kept > 0, kept * shared, 0.0)  # none kept: 0, not 0 × a non-finite shared part

        sums = total(part_mu, shared_mu), total(part_rho, shared_rho)
        return sums + (clipped_number(norms, keep, clip),) if counts else sums

    return summand


def check_sparse(program, hyper, data, key, indices=None) -> None:
    """Refuse (ValueError) a `sparse` declaration the model does not match: the model's single real-vector site,
    the data's shapes, indices in [0, d) (`indices`: every data set's, for a batch; default data's), and the sparse
    sums against the dense per-example gradients on `_CHECKED_EXAMPLES` examples chosen at random, at a random φ,
    clipped at C and unclipped (so that a likelihood scaled by a constant is seen even where clipping binds)."""
    features, spec = program.sparse, program.spec
    if program.family.kind != "mean-field":
        raise ValueError(f"sparse features need the mean-field family, got {program.family.kind!r}")
    sites = spec.site_map.sites
    if len(sites) != 1 or sites[0].transform != "identity":
        raise ValueError(
            "sparse features need θ to be the model's one latent site of real coefficients (e.g. "
            "theta ~ Normal(0, 1).expand([d]).to_event(1)); an intercept is a feature present in every example"
        )
    d = spec.site_map.dim
    for name in (features.indices, features.values, features.response):
        if name not in spec.per_example:
            raise ValueError(f"sparse names data entry {name!r}, which is not one of the model's per-example inputs")
    words, values = np.asarray(data[features.indices]), np.asarray(data[features.values])
    if words.ndim != 2 or words.shape != values.shape or not np.issubdtype(words.dtype, np.integer):
        raise ValueError(
            f"sparse features need {features.indices!r} as integer indices (N, k) and {features.values!r} of the "
            f"same shape; got {words.dtype} {words.shape} and {values.shape}"
        )
    every = words if indices is None else np.asarray(indices)
    if every.min() < 0 or every.max() >= d:
        raise ValueError(
            f"{features.indices!r} holds indices outside [0, {d}): they index θ's {d} coefficients (a padded slot "
            "takes any index with value 0)"
        )
    per_example, constants = spec.split_data(data)
    key_rows, key_params, key_eps = jax.random.split(key, 3)
    size = words.shape[0]
    rows = jax.random.choice(key_rows, size, (min(_CHECKED_EXAMPLES, size),), replace=False)
    examples = {k: v[rows] for k, v in per_example.items()}
    mask = jnp.ones(rows.shape[0], bool)
    params = jax.random.normal(key_params, (2 * d,)) * 0.5 - jnp.concatenate([jnp.zeros(d), jnp.ones(d)])
    eps = jax.random.normal(key_eps, (program.mc_draws, d))
    for clip in (hyper.clip, jnp.inf):
        settings = hyper._replace(clip=jnp.asarray(clip, hyper.clip.dtype))
        sparse = sparse_summand(features, spec, params, eps, examples, constants, settings.grad_scale, settings.clip)
        dense = program.dense_summand(settings, params, eps, constants)(examples, mask)
        got, want = (
            np.concatenate([np.asarray(x, np.float64) for x in pair[:2]]) for pair in (sparse(examples, mask), dense)
        )
        if not np.max(np.abs(got - want)) < 1e-4 * max(np.max(np.abs(want)), 1e-30):
            raise ValueError(
                f"the model's gradients are not those of a {features.likelihood} GLM on ({features.indices!r}, "
                f"{features.values!r}): check the likelihood and that η = Σ θ[indices]·values, or record without "
                "sparse="
            )
