"""Random-scaling intervals from the iterates: the frequentist peer of NA-DPVI, at no privacy cost.

Lee, Liao, Seo & Shin (AAAI 2022) for SGD, and Xia, Zhang & Cai (2025) for DP-SGD: over the n stationary
iterates φ_1..φ_n of the trace (after the burn-in), with partial means φ̄_s = (1/s) Σ_{t≤s} φ_t and φ̄ = φ̄_n,
per coordinate j

    V_j = (1/n²) Σ_{s=1}^{n} s² (φ̄_sj − φ̄_j)²,      √n (φ̄_j − φ*_j) / √V_j  →  W(1) / (∫₀¹ (W(r) − rW(1))² dr)^{1/2},

W a standard Brownian motion: a pivot free of the long-run variance that the DP noise, the subsampling and the
iterates' autocorrelation set (its 95 % quantile of |·| is 5.37, the 90 % interval's; 97.5 %: 6.75). φ*'s draws
follow it coordinate by coordinate, φ*_j^(k) = φ̄_j − (V_j/n)^{1/2} Z_jk, the Z_jk independent draws of the
pivot: exact marginal intervals, coordinates independent (as DPVIm's; the joint pivot with chol(V) spreads a
slowly mixing coordinate's excess into the others at realistic n). The pivot's law is universal: a bank of
BANK × draws of it is simulated once per process on a grid of GRID steps, and each trace takes its draws from it
with its own key (random rows, each with a random sign: the law is symmetric). θ then from q(θ | φ*^(k)) as for
every trace posterior, so the intervals are scored like NA-DPVI's. Unlike NA-DPVI it has no model of the
gradient and no prior: it assumes the kept trace is stationary around φ* and long against its autocorrelation
time (measured: tests/test_random_scaling.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from ..posteriors.mixture import RANDOM_SCALING, MixturePosterior
from ..trace import BURN_IN, Trace, kept_steps
from ..util.defaults import DRAWS
from ..util.diagnostics import Diagnostics
from ..util.keys import as_key

__all__ = [
    "GRID",
    "RandomScalingDiagnostics",
    "pivot_bank",
    "random_scaling_posterior",
    "random_scaling_variance",
]

GRID = 1000
"""Steps of the simulated Brownian paths (the pivot's quantiles within 1 % of their limits)."""
CHUNK = 1000
"""Pivots simulated at once (bounds the memory of the paths, CHUNK × GRID)."""
BANK = 4
"""The bank holds BANK × draws pivots, so that traces share few draws."""


@dataclasses.dataclass(frozen=True)
class RandomScalingDiagnostics(Diagnostics):
    """The iterate average φ̄ (P,), the random-scaling variances V (P,) and the iterates used n."""

    average: np.ndarray
    scaling: np.ndarray
    iterates: int

    def describe(self, posterior) -> list[str]:
        draws = len(posterior.optimum_draws)
        return [f"{draws} draws of φ* from the pivot of {self.iterates} iterates"]


def random_scaling_variance(params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """φ̄ (P,) and V (P,) of iterates params (n, P) (module doc)."""
    rows = np.asarray(params, np.float64)
    n = rows.shape[0]
    average = rows.mean(axis=0)
    deviations = np.cumsum(rows - average, axis=0)  # s (φ̄_s − φ̄), s = 1..n
    return average, np.sum(deviations**2, axis=0) / n**2


def random_scaling_posterior(trace: Trace, *, key, draws: int = DRAWS, burn_in: float = BURN_IN) -> MixturePosterior:
    """The random-scaling posterior of a trace: `draws` draws of φ* (1, draws, P) from the pivot (module doc),
    over the iterates after the first ⌊burn_in·T⌋ steps."""
    start = trace.steps - kept_steps(trace, burn_in)
    rows = np.asarray(trace.params, np.float64)[start:]
    average, variance = random_scaling_variance(rows)
    n, size = rows.shape
    with jax.enable_x64(True):
        bank = pivot_bank(GRID, BANK * draws)
        k_pick, k_sign = jax.random.split(as_key(key))
        pick = jax.random.randint(k_pick, (draws, size), 0, bank.shape[0])
        signs = jax.random.rademacher(k_sign, (draws, size), jnp.float64)
        phi = np.asarray(jnp.asarray(average) - signs * bank[pick] * jnp.sqrt(jnp.asarray(variance) / n), np.float64)
    return MixturePosterior.from_trace(
        trace,
        phi[None],
        method="random-scaling",
        kind=RANDOM_SCALING,
        diagnostics=RandomScalingDiagnostics(average=average, scaling=variance, iterates=n),
        info={"burn_in": burn_in},
    )


@functools.cache
def pivot_bank(grid: int, count: int) -> jax.Array:
    """`count` draws (count,) of the pivot W(1) / (∫(W(r) − rW(1))² dr)^{1/2} on Brownian paths of `grid` steps
    (fixed key: the same bank in every process)."""
    with jax.enable_x64(True):
        return _pivots(jax.random.key(0), count, grid)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _pivots(key, count: int, grid: int):
    chunks = -(-count // CHUNK)

    def chunk(k):
        path = jnp.cumsum(jax.random.normal(k, (CHUNK, grid), jnp.float64), axis=1) / math.sqrt(grid)
        end = path[:, -1]
        bridge = path - (jnp.arange(1, grid + 1) / grid) * end[:, None]
        return end / jnp.sqrt(jnp.mean(bridge**2, axis=1))

    return jax.lax.map(chunk, jax.random.split(key, chunks)).reshape(-1)[:count]
