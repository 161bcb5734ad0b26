"""Closed forms of M1 (gamma-exponential) for `noiseaware demo`: the exact non-private Gamma posterior of the
rate λ, and the estimate (mean, sd, central interval) of a distribution or of draws.

Pure functions of their arguments; the demo formats their results.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.stats import gamma


class IntervalEstimate(NamedTuple):
    """Mean, standard deviation and central interval [low, high] of a scalar posterior."""

    mean: float
    sd: float
    low: float
    high: float


def exact_posterior(x: np.ndarray, prior: tuple[float, float]):
    """Gamma(a + N, b + Σx) (shape, rate): the exact posterior of λ given exponential data x (N values) under the
    Gamma(a, b) prior `prior`, as a frozen scipy distribution."""
    prior_shape, prior_rate = prior
    return gamma(prior_shape + x.size, scale=1.0 / (prior_rate + float(x.sum())))


def distribution_estimate(distribution, level: float) -> IntervalEstimate:
    """Mean, sd and central `level` interval of a frozen scipy distribution."""
    tail = 0.5 * (1.0 - level)
    return IntervalEstimate(
        distribution.mean(), distribution.std(), distribution.ppf(tail), distribution.ppf(1.0 - tail)
    )


def draws_estimate(draws, level: float) -> IntervalEstimate:
    """Mean, sd and central `level` interval (empirical quantiles) of draws."""
    tail = 0.5 * (1.0 - level)
    return IntervalEstimate(draws.mean(), draws.std(), *np.quantile(draws, [tail, 1.0 - tail]))
