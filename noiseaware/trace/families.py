"""Gaussian variational families q_φ(θ) = N(μ, A Aᵀ) over the unconstrained θ ∈ R^d, and the layout of φ.

    name                            φ              A (d, m)                                     P
    diagonal-normal-softplus        (μ, ρ)         diag(softplus ρ)                             2d
    full-rank-normal-softplus       (μ, ρ, ℓ)      L: diagonal softplus ρ, strictly lower ℓ     2d + d(d−1)/2
    low-rank-normal-softplus(r)     (μ, ρ, b)      [diag(softplus ρ), B], B (d, r) lower        2d + dr − r(r−1)/2
                                                   trapezoidal (B_ij = 0 for j > i), entries b
    point                           (μ)            none (m = 0): q is the point mass at μ = θ   d

θ = μ + A ε with ε ~ N(0, I_m) (m = d, or d + r for low-rank), so Σ = A Aᵀ: L Lᵀ (full-rank) or
diag(softplus(ρ)²) + B Bᵀ (low-rank). ℓ and b list their entries row by row (row-major over (i, j)). Every
Gaussian family starts with the mean-field layout (μ, ρ) (its first 2d coordinates), so with d = 1 full-rank is
mean-field. The point family is a plain DP-SGD run on the negative log joint, a MAP or M-estimate: φ = θ, no scale
rows, its "entropy" 0, so the ELBO's gradient is the log joint's (docs/dp-sgd.md).

The lower-trapezoidal B fixes the rotation B → BQ that leaves Σ unchanged (any B can be rotated
into that form), so the optimum φ* is a point, not an orbit; only column signs remain free.

A family is a frozen `VariationalFamily` subclass with its dimension d, one class per family in the registry
`FAMILIES` (`MeanField`, `FullRank`, `LowRank`); `family_for(name, P)` rebuilds it from a trace,
`variational_family(kind, d, rank)` from a user's choice. Its array functions work on numpy arrays
(float64 stays float64) and inside jax programs alike.

Why this module is long: the four families are one registry of small classes over one shared layout; apart, each
would re-derive the layout it overrides.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "FAMILIES",
    "FAMILY_KINDS",
    "FullRank",
    "LowRank",
    "MeanField",
    "MEAN_FIELD",
    "POINT",
    "Point",
    "FULL_RANK",
    "LOW_RANK",
    "FamilyError",
    "VariationalFamily",
    "family_for",
    "variational_family",
]

MEAN_FIELD = "diagonal-normal-softplus"
FULL_RANK = "full-rank-normal-softplus"
LOW_RANK = "low-rank-normal-softplus"
POINT = "point"
FAMILY_KINDS = {"mean-field": MEAN_FIELD, "full-rank": FULL_RANK, "low-rank": LOW_RANK, "point": POINT}
"""The user's names of the families → their names in a trace."""
_LOW_RANK_NAME = re.compile(r"^low-rank-normal-softplus\((\d+)\)$")


class FamilyError(ValueError):
    """A variational family that does not exist or does not fit the parameter count."""


def _xp(array):
    """numpy for numpy arrays (float64 stays float64), jax.numpy for jax arrays and tracers."""
    return jnp if isinstance(array, jax.Array) else np


def _softplus(x):
    return _xp(x).logaddexp(0.0, x)


@dataclass(frozen=True)
class VariationalFamily:
    """One Gaussian family of dimension d: the layout of φ (P,) and the maps φ ↦ (μ, A). A family is one subclass,
    registered in FAMILIES under its `kind`, that says which entries of A follow (μ, ρ) in φ (`extra_entries`) and
    what they are called; everything else is shared. rank: r for low-rank (1 ≤ r ≤ d), else None."""

    dim: int
    rank: int | None = None

    kind: ClassVar[str]
    """The user's name: "mean-field", "full-rank", "low-rank"."""
    extra_block: ClassVar[str | None] = None
    """The name of the block after (μ, ρ): "offdiag" (L's entries), "factor" (B's), or None."""
    extra_label: ClassVar[str] = ""
    """The prefix of that block's parameter names: "L" or "B"."""
    cross_moments: ClassVar[bool] = False
    """Whether its runs keep the μ rows' cross moments (d × d), read for coupled coordinates: mean-field and point,
    whose μ rows are the whole of what couples them."""

    def __post_init__(self):
        if not isinstance(self.dim, int) or self.dim < 1:
            raise FamilyError(f"a variational family needs a dimension d ≥ 1, got {self.dim!r}")
        if self.rank is not None:
            raise FamilyError(f"rank={self.rank!r} belongs to family='low-rank'; family={self.kind!r} takes no rank")

    def extra_entries(self) -> list[tuple[int, int]]:
        """The entries (i, j) of A that φ holds after ρ, in order (none for mean-field)."""
        return []

    # ------------------------------------------------------------------ layout

    @property
    def name(self) -> str:
        """The name written into traces: 'diagonal-normal-softplus', …, 'low-rank-normal-softplus(r)'."""
        return FAMILY_KINDS[self.kind]

    @property
    def noise_dim(self) -> int:
        """m, the length of ε in θ = μ + A ε."""
        return self.dim + (self.rank or 0)

    @cached_property
    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(row, column) in A of each coordinate after μ, (P − d,) each: ρ_j at (j, j), then ℓ or b row-major."""
        pairs = [(j, j) for j in range(self.dim)] + self.extra_entries()
        return np.asarray([i for i, _ in pairs]), np.asarray([j for _, j in pairs])

    @property
    def n_params(self) -> int:
        """P, the length of φ."""
        return self.dim + len(self.entries[0])

    @property
    def blocks(self) -> tuple[tuple[str, slice], ...]:
        """The blocks of φ in order, (name, slice): μ, ρ, then 'offdiag' (full-rank) or 'factor' (low-rank)."""
        d = self.dim
        blocks = (("mu", slice(0, d)), ("rho", slice(d, 2 * d)))
        return blocks + (((self.extra_block, slice(2 * d, self.n_params)),) if self.extra_block else ())

    @property
    def block_rows(self) -> np.ndarray:
        """The θ coordinate each φ coordinate belongs to, (P,): j for μ_j, ρ_j and for ℓ_ij or b_ij (row i)."""
        return np.concatenate([np.arange(self.dim), self.entries[0]])

    def param_names(self, theta_names) -> tuple[str, ...]:
        """Labels of φ (P,) from θ's (d,): 'mu:x', 'rho:x', then 'L:x,y' for L's entry (x, y) or 'B:x,k'."""
        names = tuple(theta_names)
        head = tuple(f"mu:{n}" for n in names) + tuple(f"rho:{n}" for n in names)
        return head + tuple(
            f"{self.extra_label}:{names[i]},{self._column_label(j, names)}" for i, j in self.extra_entries()
        )

    def _column_label(self, j: int, names) -> str:
        return names[j]

    def layout(self) -> dict:
        """The layout of φ as plain data (written into trace files): d, r and each block's [start, stop)."""
        return {
            "family": self.name,
            "dim": self.dim,
            "rank": self.rank,
            "blocks": {name: [part.start, part.stop] for name, part in self.blocks},
        }

    # ------------------------------------------------------------------ maps of φ

    def mean(self, phi):
        """μ, (…, d) from φ (…, P)."""
        return phi[..., : self.dim]

    def scale_matrix(self, phi):
        """A, (…, d, m): θ = μ + A ε, Σ = A Aᵀ (the diagonal of A's first d columns is softplus(ρ))."""
        xp, d = _xp(phi), self.dim
        values = xp.concatenate([_softplus(phi[..., d : 2 * d]), phi[..., 2 * d :]], axis=-1)
        rows, cols = self.entries
        index = np.zeros((d, self.noise_dim), np.int64)
        index[rows, cols] = np.arange(1, len(rows) + 1)
        padded = xp.concatenate([xp.zeros(values.shape[:-1] + (1,), values.dtype), values], axis=-1)
        return xp.take(padded, index, axis=-1)

    def sample(self, phi, eps):
        """θ = μ + A ε: φ (…, P), ε (…, m) → (…, d)."""
        return self.mean(phi) + _xp(phi).einsum("...ij,...j->...i", self.scale_matrix(phi), eps)

    def covariance(self, phi):
        """Σ = A Aᵀ, (…, d, d)."""
        scale = self.scale_matrix(phi)
        return _xp(phi).einsum("...ij,...kj->...ik", scale, scale)

    def marginal_sd(self, phi):
        """sd[θ_j] = sqrt(Σ_jj) = ‖A_j·‖, (…, d)."""
        return _xp(phi).sqrt(_xp(phi).sum(self.scale_matrix(phi) ** 2, axis=-1))

    def entropy(self, phi):
        """H[q_φ] − (d/2) log(2πe) = ½ log det Σ, (…): Σ_j log softplus(ρ_j) when A is triangular with that
        diagonal (mean-field, full-rank); low-rank adds its determinant-lemma term."""
        return _xp(phi).sum(_xp(phi).log(_softplus(phi[..., self.dim : 2 * self.dim])), axis=-1)

    def scale_gradients(self, phi, eps, grads):
        """Per-example gradients of the data term with respect to the coordinates after μ, (B, P − d).

        ∂/∂A_ij of (1/S) Σ_s f_b(μ + A ε_s) is (1/S) Σ_s ∇f_b(θ_s)_i ε_sj; ρ_j's carries softplus' = sigmoid.
        phi (P,), eps (S, m), grads (S, B, d) = ∇_θ f_b(θ_s). Only the entries of A that φ holds are formed.
        """
        rows, cols = self.entries
        d = self.dim
        per_entry = sum(grads[s][:, rows] * eps[s, cols] for s in range(eps.shape[0])) / eps.shape[0]
        chain = jnp.concatenate([jax.nn.sigmoid(phi[d : 2 * d]), jnp.ones(len(rows) - d, phi.dtype)])
        return per_entry * chain

    def initial_rest(self, rho0) -> np.ndarray:
        """φ₀ after (μ, ρ), (P − 2d,) from ρ₀ (d,): zeros (ℓ = 0: L diagonal; low-rank overrides)."""
        return np.zeros(self.n_params - 2 * self.dim)

    @classmethod
    def dim_for(cls, n_params: int, rank: int | None) -> int:
        """The d whose P is n_params (0 when none is)."""
        raise NotImplementedError

    @classmethod
    def layout_text(cls, rank: int | None) -> str:
        """How P follows from d, for error messages."""
        raise NotImplementedError


@dataclass(frozen=True)
class MeanField(VariationalFamily):
    """q = N(μ, diag(softplus(ρ)²)): φ = (μ, ρ), P = 2d."""

    kind: ClassVar[str] = "mean-field"
    cross_moments: ClassVar[bool] = True

    def sample(self, phi, eps):
        return self.mean(phi) + _softplus(phi[..., self.dim :]) * eps

    def marginal_sd(self, phi):
        return _softplus(phi[..., self.dim :])

    @classmethod
    def dim_for(cls, n_params, rank):
        return n_params // 2 if n_params % 2 == 0 else 0

    @classmethod
    def layout_text(cls, rank):
        return "P = 2d (all μ, then all ρ)"


@dataclass(frozen=True)
class FullRank(VariationalFamily):
    """q = N(μ, L Lᵀ), L lower triangular with diagonal softplus(ρ) and strictly lower entries ℓ: P = 2d + d(d−1)/2."""

    kind: ClassVar[str] = "full-rank"
    extra_block: ClassVar[str | None] = "offdiag"
    extra_label: ClassVar[str] = "L"

    def extra_entries(self):
        return [(i, j) for i in range(self.dim) for j in range(i)]

    @classmethod
    def dim_for(cls, n_params, rank):
        return (math.isqrt(9 + 8 * n_params) - 3) // 2

    @classmethod
    def layout_text(cls, rank):
        return "P = 2d + d(d − 1)/2 (μ, ρ, then L's strictly lower entries)"


@dataclass(frozen=True)
class LowRank(VariationalFamily):
    """q = N(μ, diag(softplus(ρ)²) + B Bᵀ), B (d, r) lower trapezoidal with entries b: P = 2d + dr − r(r−1)/2."""

    kind: ClassVar[str] = "low-rank"
    extra_block: ClassVar[str | None] = "factor"
    extra_label: ClassVar[str] = "B"

    def __post_init__(self):
        if not isinstance(self.dim, int) or self.dim < 1:
            raise FamilyError(f"a variational family needs a dimension d ≥ 1, got {self.dim!r}")
        if self.rank is None:
            raise FamilyError(f"family='low-rank' needs rank=r, the number of columns of B (1 ≤ r ≤ d = {self.dim})")
        if not (isinstance(self.rank, int) and 1 <= self.rank <= self.dim):
            raise FamilyError(f"the low-rank family needs a rank 1 ≤ r ≤ d = {self.dim}, got {self.rank!r}")

    @property
    def name(self) -> str:
        return f"{LOW_RANK}({self.rank})"

    def extra_entries(self):
        return [(i, self.dim + j) for i in range(self.dim) for j in range(min(i + 1, self.rank))]

    def _column_label(self, j, names):
        return str(j - self.dim)

    def entropy(self, phi):
        """Σ_j log softplus(ρ_j) + ½ log det(I_r + Bᵀ D⁻² B), D = diag(softplus ρ) (determinant lemma)."""
        xp, d = _xp(phi), self.dim
        sd = _softplus(phi[..., d : 2 * d])
        factor = self.scale_matrix(phi)[..., d:] / sd[..., None]
        inner = xp.einsum("...ki,...kj->...ij", factor, factor) + xp.eye(self.rank, dtype=factor.dtype)
        return super().entropy(phi) + 0.5 * xp.linalg.slogdet(inner)[1]

    def initial_rest(self, rho0):
        """B with diagonal softplus(ρ₀) and zeros elsewhere (B = 0 is a stationary point of the ELBO, which a run
        started there never leaves)."""
        d = self.dim
        rows, cols = self.entries
        rest = np.zeros(self.n_params - 2 * d)
        diagonal = cols[d:] - d == rows[d:]
        rest[diagonal] = np.logaddexp(0.0, np.broadcast_to(np.asarray(rho0, float), (d,)))[rows[d:][diagonal]]
        return rest

    @classmethod
    def dim_for(cls, n_params, rank):
        return (n_params + rank * (rank - 1) // 2) // (2 + rank)

    @classmethod
    def layout_text(cls, rank):
        return f"P = 2d + {rank}d − {rank * (rank - 1) // 2} (μ, ρ, then B's entries)"


@dataclass(frozen=True)
class Point(VariationalFamily):
    """A point estimate, the limit A → 0: φ = μ = θ, P = d, m = 0. A run of this family is plain DP-SGD on the
    negative log joint L(θ) = −Σ_i log p(x_i | θ) − log p(θ), and the gradient model reads its rows' slopes as the
    Hessian diagonal of L (docs/method.md §6)."""

    kind: ClassVar[str] = "point"
    cross_moments: ClassVar[bool] = True

    @property
    def noise_dim(self) -> int:
        return 0

    @cached_property
    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)

    @property
    def blocks(self) -> tuple[tuple[str, slice], ...]:
        return (("mu", slice(0, self.dim)),)

    def param_names(self, theta_names) -> tuple[str, ...]:
        return tuple(f"mu:{n}" for n in theta_names)

    def sample(self, phi, eps):
        """θ = μ, broadcast to the draws: φ (…, d), ε (…, 0) → (…, d)."""
        shape = np.broadcast_shapes(np.shape(phi)[:-1], np.shape(eps)[:-1]) + (self.dim,)
        return _xp(phi).broadcast_to(self.mean(phi), shape)

    def marginal_sd(self, phi):
        return _xp(phi).zeros_like(self.mean(phi))

    def entropy(self, phi):
        return _xp(phi).zeros(phi.shape[:-1], phi.dtype)

    def scale_gradients(self, phi, eps, grads):
        return jnp.zeros(grads.shape[1:-1] + (0,), grads.dtype)

    def initial_rest(self, rho0) -> np.ndarray:
        return np.zeros(0)

    @classmethod
    def dim_for(cls, n_params, rank):
        return n_params

    @classmethod
    def layout_text(cls, rank):
        return "P = d (θ itself)"


FAMILIES: dict[str, type[VariationalFamily]] = {cls.kind: cls for cls in (MeanField, FullRank, LowRank, Point)}
"""The registry of families by the user's name (one class each, like numpyro's autoguides)."""


def variational_family(kind: str, dim: int, rank: int | None = None) -> VariationalFamily:
    """The family a user chose: kind 'mean-field', 'full-rank' or 'low-rank' (with rank r), for θ of dimension d."""
    if kind not in FAMILIES:
        raise FamilyError(f"unknown variational family {kind!r}: choose one of {sorted(FAMILIES)}")
    return FAMILIES[kind](dim, rank)


def _kind_and_rank(name) -> tuple[str, int | None]:
    if name == MEAN_FIELD:
        return "mean-field", None
    if name == FULL_RANK:
        return "full-rank", None
    if name == POINT:
        return "point", None
    match = _LOW_RANK_NAME.match(name) if isinstance(name, str) else None
    if match:
        return "low-rank", int(match.group(1))
    raise FamilyError(
        f"variational_family is {name!r}; noiseaware reads {MEAN_FIELD!r}, {FULL_RANK!r}, "
        f"'{LOW_RANK}(r)' for a rank r ≥ 1 and {POINT!r} (docs/trace-format.md)"
    )


def family_for(name: str, n_params: int) -> VariationalFamily:
    """The family a trace names, with the d its P implies; FamilyError when P fits no d of that family."""
    kind, rank = _kind_and_rank(name)
    cls = FAMILIES[kind]
    dim = cls.dim_for(n_params, rank)
    if dim >= 1 and (rank is None or rank <= dim):
        family = cls(dim, rank)
        if family.n_params == n_params:
            return family
    raise FamilyError(
        f"P = {n_params} parameters fit no θ dimension d of the family {name!r}: it needs {cls.layout_text(rank)}"
    )
