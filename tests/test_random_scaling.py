"""Random-scaling intervals from the iterates: the statistic against its definition, the pivot against its
published quantiles, and nominal coverage of φ* on traces drawn from a known linear (OU) gradient model."""

import numpy as np
import pytest
from messages import mentions
from ou import OPTIMUM, ou_traces

import noiseaware as na
from noiseaware.baselines.random_scaling import GRID, pivot_bank, random_scaling_variance

pytestmark = pytest.mark.full_optimisation  # long DP-SGD runs: unoptimised XLA runs them slower


def test_random_scaling_variance_is_its_definition():
    """V_j = (1/n²) Σ_s s² (φ̄_sj − φ̄_j)², φ̄_s the mean of the first s iterates: a slow loop."""
    rows = np.random.default_rng(0).standard_normal((57, 3)).cumsum(axis=0)
    average, variance = random_scaling_variance(rows)
    n = len(rows)
    slow = sum(s**2 * (rows[:s].mean(axis=0) - rows.mean(axis=0)) ** 2 for s in range(1, n + 1)) / n**2
    np.testing.assert_allclose(average, rows.mean(axis=0))
    np.testing.assert_allclose(variance, slow, rtol=1e-12)


def test_the_pivot_has_the_published_quantiles():
    """|W(1)| / (∫(W(r) − rW(1))² dr)^{1/2}: 90 % and 95 % quantiles 5.374 and 6.747 (Abadir & Paruolo 1997, the
    critical values Lee et al. 2022 use), within the bank's Monte Carlo and grid error."""
    bank = np.abs(np.asarray(pivot_bank(GRID, 40_000)))
    np.testing.assert_allclose(np.quantile(bank, [0.9, 0.95]), [5.374, 6.747], rtol=0.03)


def test_random_scaling_intervals_cover_the_optimum_of_ou_traces_at_the_nominal_rate():
    """200 OU traces with known φ* (each coordinate's relaxation time ≤ 60 steps, 3200 kept iterates): the 90 %
    intervals of φ* cover within 3.5 binomial se of 0.9 per coordinate, and the method needs no gradient model."""
    traces = ou_traces(200, lr=4e-3, seed=1)
    posts = na.fit_batch(traces, "random-scaling", key=0, checks="off")
    draws = np.stack([p.optimum_chains[0] for p in posts])
    low, high = np.quantile(draws, [0.05, 0.95], axis=1)
    coverage = ((np.asarray(OPTIMUM) > low) & (np.asarray(OPTIMUM) < high)).mean(axis=0)
    assert np.all(np.abs(coverage - 0.9) < 3.5 * np.sqrt(0.09 / 200)), coverage
    assert posts[0].describe().startswith("random-scaling posterior")
    mentions(posts[0].describe(), "frequentist", "4000")
    with pytest.raises(ValueError, match="burn_in"):
        na.fit(traces[0], "random-scaling", key=0, burn_in=1.0)
