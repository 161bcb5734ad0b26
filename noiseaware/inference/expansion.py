"""Terms of the gradient's expansion beyond the paper's own-coordinate slope (docs/method.md §2.8).

Around the post-burn-in mean φ̄, with φ̃_t = φ_t − φ̄, coordinate j of the noisy gradient sum is modelled as

    G_tj = q·[ a_j (φ̃_tj − δ'_j) + Σ_{k≠j} H_jk φ̃_tk + Σ_{(k,l)} c_jkl (φ̃_tk φ̃_tl − p̄_kl) ] + ε_tj,

ε_tj ~ N(0, v_j), every extra column centred over the trace (p̄_kl the trace mean of φ̃_k φ̃_l). Without the extra
terms it is the paper's model, δ'_j = φ*_j − φ̄_j. A *term set* says which extra columns x_t (p of them) row j
has; their coefficients γ_j have the prior N(0, diag(d_j)²), independent of (a_j, δ'_j, u_j):

    diagonal      none (the paper's model)
    curved        φ̃_tj²: the curvature of the coordinate's own gradient (softplus ρ at a large step size)
    coupled       φ̃_tk for every k ≠ j: the off-diagonal Hessian row
    second-order  coupled + curved + the products of the mean block's coordinates (d ≤ MAX_PRODUCT_BLOCK)

Since the columns are centred, 1ᵀx = 0 and γ_j integrates out in closed form: with X̃ = X diag(d), the
eigendecomposition q²X̃ᵀX̃ = U Λ Uᵀ and ĝ = UᵀX̃ᵀG_j, ĥ = UᵀX̃ᵀφ̃_j (all independent of T once formed),

    Σ_t (…)²  →  [S_GG − q²Σ ĝ²/(v+λ)] − 2qa[S_Gφ − q²Σ ĝĥ/(v+λ)] + q²a²[S_φφ − q²Σ ĥ²/(v+λ)] + (δ' terms)
    log det       →  T' log v + Σ log(1 + λ/v),

and γ_j | a_j, v_j ~ N(diag(d) U η̄, …) with η_i = q(ĝ_i − q a ĥ_i)/(v + λ_i) + sqrt(v/(v + λ_i))·z_i. Each row
averages the candidate sets by their evidence (a mixture likelihood, so every route samples the same model).
φ* then solves the expansion at first order in δ = φ* − φ̄ (the wander's second moments p̄ enter in full):

    (diag(a) + H_off) δ = a ⊙ δ' + s,   s_j = Σ c_jkl p̄_kl.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "MAX_PRODUCT_BLOCK",
    "TERM_SETS",
    "TermStatistics",
    "set_log_likelihoods",
    "solve_optimum",
    "term_statistics",
]

TERM_SETS = ("diagonal", "curved", "coupled", "second-order")
MAX_PRODUCT_BLOCK = 16
"""The largest mean block (d) whose pairwise products enter the second-order set: d(d+1)/2 columns."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TermStatistics:
    """One candidate term set's statistics per row j, after integrating its coefficients out.

    eigenvalues λ (P, p) of q²X̃ᵀX̃; g_hat ĝ, h_hat ĥ (P, p); readout (P, P + 1, p): row j's coefficients in
    the eigenbasis η → (its Hessian row H_j· with H_jj = 0, then s_j); log_prior: log of the set's prior
    probability. p = 0 for the diagonal set.
    """

    eigenvalues: jax.Array
    g_hat: jax.Array
    h_hat: jax.Array
    readout: jax.Array
    log_prior: jax.Array

    def corrections(self, var):
        """(A, B, C, L) (…, P): q²Σĝ²/(v+λ), q²Σĝĥ/(v+λ), q²Σĥ²/(v+λ) and Σ log(1 + λ/v) at variance v (…, P)."""
        denominator = var[..., None] + self.eigenvalues
        return (
            jnp.sum(self.g_hat**2 / denominator, axis=-1),
            jnp.sum(self.g_hat * self.h_hat / denominator, axis=-1),
            jnp.sum(self.h_hat**2 / denominator, axis=-1),
            jnp.sum(jnp.log1p(self.eigenvalues / var[..., None]), axis=-1),
        )


def _columns(n_params: int, n_mean: int, term_set: str, j: int, n_squares: int) -> list[int]:
    """The columns of the design [φ̃ (P), φ̃² (P), mean-block cross products] that row j uses under `term_set`."""
    own_square = [n_params + j]
    if term_set == "curved":
        return own_square
    linear = [k for k in range(n_params) if k != j]
    if term_set == "coupled":
        return linear
    block = [n_params + k for k in range(min(n_mean, n_squares)) if k != j]
    crosses = list(range(2 * n_params, 2 * n_params + (n_squares * (n_squares - 1)) // 2))
    return linear + own_square + block + crosses


def term_statistics(
    params: np.ndarray,
    grads: np.ndarray,
    sampling_rate: float,
    slope: np.ndarray,
    n_mean: int,
    term_sets: tuple[str, ...],
    coupling_scale: float,
    curvature_scale: float,
) -> tuple[TermStatistics, ...]:
    """The statistics of each term set in `term_sets` from the post-burn-in trace: params, grads (T', P) float64.

    slope â (P,): the positive scale of each coordinate's own slope (the empirical-Bayes Hessian estimate);
    n_mean: d, the size of the mean block (its products enter "second-order" when d ≤ MAX_PRODUCT_BLOCK).
    Prior sds: H_jk ~ N(0, (coupling_scale·sqrt(â_j â_k))²) (|H_jk| ≤ sqrt(H_jj H_kk) for a positive
    definite Hessian); c_jkl ~ N(0, (curvature_scale·â_j s_j / (s_k s_l))²), s the trace sds, so that a product
    term's swing over the trace is a priori the size of the own slope term's.
    """
    n_params = params.shape[1]
    phi = params - params.mean(axis=0)
    spread = np.sqrt(np.mean(phi**2, axis=0))
    n_block = n_mean if n_mean <= MAX_PRODUCT_BLOCK else 0
    pairs = [(k, k) for k in range(n_params)] + [(k, m) for k in range(n_block) for m in range(k + 1, n_block)]
    products = np.stack([phi[:, k] * phi[:, m] for k, m in pairs], axis=1)
    product_mean = products.mean(axis=0)
    design = np.concatenate([phi, products - product_mean], axis=1)
    gram, cross = design.T @ design, design.T @ grads
    q2 = sampling_rate**2
    out = []
    for term_set in term_sets:
        rows = [
            [] if term_set == "diagonal" else _columns(n_params, n_mean, term_set, j, n_block) for j in range(n_params)
        ]
        width = max(len(r) for r in rows)
        eigenvalues = np.zeros((n_params, width))
        g_hat, h_hat = np.zeros((n_params, width)), np.zeros((n_params, width))
        readout = np.zeros((n_params, n_params + 1, width))
        for j, columns in enumerate(rows):
            if not columns:
                continue
            columns = np.asarray(columns)
            prior_sd = np.where(
                columns < n_params,
                coupling_scale * np.sqrt(slope[j] * slope[np.minimum(columns, n_params - 1)]),
                0.0,
            )
            product = columns >= n_params
            first, second = np.array([pairs[c - n_params] if c >= n_params else (0, 0) for c in columns]).T
            prior_sd = np.where(
                product, curvature_scale * slope[j] * spread[j] / (spread[first] * spread[second]), prior_sd
            )
            scaled = gram[np.ix_(columns, columns)] * np.outer(prior_sd, prior_sd)
            lam, basis = np.linalg.eigh(q2 * scaled)
            lam = np.maximum(lam, 0.0)
            weighted = basis.T * prior_sd  # Uᵀ diag(d): (p, p)
            size = len(columns)
            eigenvalues[j, :size] = lam
            g_hat[j, :size] = weighted @ cross[columns, j]
            h_hat[j, :size] = weighted @ gram[columns, j]
            coefficient_map = weighted.T  # diag(d) U: γ = diag(d) U η
            linear = columns < n_params
            readout[j, columns[linear], :size] = coefficient_map[linear]
            means = np.where(product, product_mean[np.maximum(columns - n_params, 0)], 0.0)
            readout[j, n_params, :size] = means @ coefficient_map
        out.append(TermStatistics(eigenvalues, g_hat, h_hat, readout, np.asarray(-np.log(len(term_sets)))))
    return tuple(out)


def set_log_likelihoods(stats, terms: tuple[TermStatistics, ...], offset, c, var, sampling_rate):
    """log p(trace_j | δ'_j, a_j, v_j, set) for each set, (…, S, P), γ integrated out.

    stats: the gradient model's `Moments`; offset δ' (…, P); c = q·a (…, P); var v (…, P); sampling_rate q.
    """
    var = jnp.asarray(var)
    out = []
    for term in terms:
        extra_gg, extra_gphi, extra_phiphi, log_det = term.corrections(var)
        q2 = sampling_rate**2
        squares = (
            stats.sum_gg
            - q2 * extra_gg
            - 2.0 * c * (stats.sum_gphi - q2 * extra_gphi - offset * stats.sum_g)
            + c**2 * (stats.sum_phiphi - q2 * extra_phiphi - 2.0 * offset * stats.sum_phi + stats.sum_ww * offset**2)
        )
        out.append(
            term.log_prior - 0.5 * stats.count * jnp.log(2.0 * jnp.pi * var) - 0.5 * log_det - 0.5 * squares / var
        )
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in out))
    return jnp.stack([jnp.broadcast_to(x, shape) for x in out], axis=-2)


def solve_optimum(stats, terms: tuple[TermStatistics, ...], offset, hessian, var, key, sampling_rate):
    """φ* draws from draws of (δ'_j, a_j, v_j), each (K, P): per row a term set ∝ its likelihood, γ_j | a_j, v_j,
    then (diag(a) + H_off) δ = a ⊙ δ' + s. Returns φ* (K, P)."""
    q = sampling_rate
    c = q * hessian
    log_like = set_log_likelihoods(stats, terms, offset, c, var, q)  # (K, S, P)
    set_key, noise_key = jax.random.split(key)
    chosen = jax.random.categorical(set_key, jnp.moveaxis(log_like, -2, -1), axis=-1)  # (K, P)
    rows = jnp.zeros(offset.shape + (offset.shape[-1] + 1,), offset.dtype)
    for index, (term, term_key) in enumerate(zip(terms, jax.random.split(noise_key, len(terms)))):
        if term.eigenvalues.shape[-1] == 0:
            continue
        denominator = var[..., None] + term.eigenvalues
        mean = q * (term.g_hat - c[..., None] * term.h_hat) / denominator
        eta = mean + jnp.sqrt(var[..., None] / denominator) * jax.random.normal(term_key, mean.shape, mean.dtype)
        coefficients = jnp.swapaxes(jnp.matmul(jnp.swapaxes(eta, 0, 1), jnp.swapaxes(term.readout, 1, 2)), 0, 1)
        rows = jnp.where((chosen == index)[..., None], coefficients, rows)
    n_params = offset.shape[-1]
    matrix = rows[..., :n_params] + jax.vmap(jnp.diag)(hessian)
    delta = jnp.linalg.solve(matrix, (hessian * offset + rows[..., n_params])[..., None])[..., 0]
    return stats.centre + delta
