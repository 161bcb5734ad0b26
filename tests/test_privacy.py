"""Tests for noiseaware.privacy: the PLD accountant's ε(σ) and its inverse σ(ε)."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant
from hypothesis import example, given, settings
from hypothesis import strategies as st
from messages import mentions
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr

from noiseaware.privacy import combined_noise_multiplier, epsilon_spent, epsilon_spent_per_step, noise_multiplier

DELTA, Q, T = 1e-5, 0.1, 10_000  # the paper's setting (experiments.md)

# (ε, σ): the smallest σ with ε(σ) ≤ target, from a fine PLD (the smallest lies a hair above σ).
TIGHT = [(1.0, 37.33), (0.3, 112.4), (0.1, 307.5)]
# (ε target, σ used by the research code, ε at that σ from an independent PRV accountant:
# prv_accountant 0.2.0, PRVAccountant(eps_error=1e-4, delta_error=1e-10).compute_epsilon's estimate).
RESEARCH = [(1.0, 37.81, 0.98600), (0.3, 117.5, 0.28583), (0.1, 360.0, 0.084134)]


@pytest.fixture(scope="module")
def tight_sigmas() -> dict[float, float]:
    return {eps: noise_multiplier(eps, DELTA, Q, T) for eps, _ in TIGHT}


@pytest.mark.parametrize(("epsilon", "quoted"), TIGHT)
def test_noise_multiplier_matches_known_values(tight_sigmas, epsilon, quoted):
    sigma = tight_sigmas[epsilon]
    assert sigma == pytest.approx(quoted, rel=0.005)
    assert epsilon_spent(quoted, DELTA, Q, T) > epsilon  # so the smallest σ lies above `quoted`
    assert sigma > quoted


@pytest.mark.parametrize(("epsilon", "quoted"), TIGHT)
def test_noise_multiplier_is_private_and_tight(tight_sigmas, epsilon, quoted):
    sigma = tight_sigmas[epsilon]
    assert epsilon_spent(sigma, DELTA, Q, T) <= epsilon
    assert epsilon_spent(sigma * (1 - 0.005), DELTA, Q, T) > epsilon


@pytest.mark.parametrize(("epsilon", "sigma", "prv_epsilon"), RESEARCH)
def test_research_sigmas_are_private_and_match_prv(epsilon, sigma, prv_epsilon):
    spent = epsilon_spent(sigma, DELTA, Q, T)
    assert spent < epsilon
    assert spent == pytest.approx(prv_epsilon, rel=5e-4)


@pytest.mark.parametrize(
    ("epsilon", "delta", "q", "steps", "tolerance"),
    [(1.0, 1e-5, 0.01, 1000, 0.005), (1.0, 1e-5, 1.0, 1, 0.005), (2.0, 1e-6, 0.05, 500, 0.001)],
)
def test_round_trip(epsilon, delta, q, steps, tolerance):
    sigma = noise_multiplier(epsilon, delta, q, steps, tolerance=tolerance)
    spent = epsilon_spent(sigma, delta, q, steps)
    assert spent <= epsilon
    assert spent >= epsilon * (1 - 0.01)
    assert epsilon_spent(sigma * (1 - tolerance / 2), delta, q, steps) > epsilon  # documented: half the tolerance


@pytest.mark.parametrize(
    ("q", "steps", "sigmas"),
    [(Q, T, [10.0, 20.0, 37.33, 60.0, 112.4, 200.0, 307.5, 500.0]), (1.0, 1, [0.5, 1.0, 2.0, 5.0, 20.0])],
)
def test_epsilon_decreases_in_sigma(q, steps, sigmas):
    epsilons = [epsilon_spent(sigma, DELTA, q, steps) for sigma in sigmas]
    assert all(a > b for a, b in zip(epsilons, epsilons[1:])), epsilons


@pytest.mark.parametrize("sigma", [sigma for _, sigma in TIGHT])
def test_rdp_upper_bounds_pld(sigma):
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(Q, dp_accounting.GaussianDpEvent(sigma)), T
    )
    rdp = RdpAccountant().compose(event).get_epsilon(DELTA)
    pld = epsilon_spent(sigma, DELTA, Q, T)
    assert pld <= rdp <= 1.5 * pld


def _exact_gaussian_epsilon(sigma: float, delta: float) -> float:
    """ε of the Gaussian mechanism (sensitivity 1) at δ, solving Balle & Wang (2018), Thm 8:
    δ(ε) = Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ)."""

    def excess(eps: float) -> float:
        a, b = 1 / (2 * sigma) - eps * sigma, -1 / (2 * sigma) - eps * sigma
        return ndtr(a) - math.exp(eps + log_ndtr(b)) - delta

    return brentq(excess, 0.0, 100.0, xtol=1e-14, rtol=1e-12)


@settings(max_examples=10, deadline=None)
@given(sigma=st.floats(0.5, 30.0), delta=st.floats(1e-8, 1e-3))
@example(sigma=1.0, delta=1e-5)
@example(sigma=37.33, delta=1e-5)
def test_single_gaussian_matches_closed_form(sigma, delta):
    exact = _exact_gaussian_epsilon(sigma, delta)
    spent = epsilon_spent(sigma, delta, 1.0, 1)
    assert spent == pytest.approx(exact, rel=1e-3)
    assert spent >= exact * (1 - 1e-4)  # pessimistic: not below the exact ε beyond the grid


def test_no_noise_spends_infinite_epsilon():
    assert epsilon_spent(0.0, DELTA, Q, T) == math.inf
    assert epsilon_spent(0, DELTA, 1.0, 1) == math.inf


def test_unreachable_epsilon_raises():
    with pytest.raises(ValueError) as info:
        noise_multiplier(1e-7, DELTA, 1.0, 100_000)
    mentions(info, "epsilon=1e-07")
    with pytest.raises(ValueError) as info:
        noise_multiplier(1e4, DELTA, 1.0, 1)
    mentions(info, "epsilon=10000.0")


GOOD = {"delta": DELTA, "sampling_rate": Q, "steps": T}
BAD_COMMON = [
    ("delta", 0.0), ("delta", 1.0), ("delta", -1e-5), ("delta", math.nan),
    ("sampling_rate", 0.0), ("sampling_rate", 1.5), ("sampling_rate", math.nan),
    ("steps", 0), ("steps", -3), ("steps", 100.0), ("steps", 2.5), ("steps", True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value"),
    [("epsilon", 0.0), ("epsilon", -1.0), ("epsilon", math.inf), ("epsilon", math.nan), ("tolerance", 0.0),
     ("tolerance", 1.0), *BAD_COMMON],
)  # fmt: skip
def test_noise_multiplier_rejects_bad_input(name, value):
    kwargs = {"epsilon": 1.0, **GOOD, name: value}
    with pytest.raises(ValueError) as info:
        noise_multiplier(**kwargs)
    mentions(info, name, f"{name}=")


@pytest.mark.parametrize(
    ("name", "value"),
    [("noise_multiplier", -1.0), ("noise_multiplier", math.inf), ("noise_multiplier", math.nan), *BAD_COMMON],
)
def test_epsilon_spent_rejects_bad_input(name, value):
    kwargs = {"noise_multiplier": 1.0, **GOOD, name: value}
    with pytest.raises(ValueError) as info:
        epsilon_spent(**kwargs)
    mentions(info, name, f"{name}=")


Q_STEPS, T_STEPS = 0.05, 200  # short runs: each distinct σ costs one PLD composition


def test_equal_noise_multipliers_per_step_give_the_constant_epsilon_exactly():
    assert epsilon_spent_per_step([1.2] * T_STEPS, DELTA, Q_STEPS) == epsilon_spent(1.2, DELTA, Q_STEPS, T_STEPS)


def test_per_step_epsilon_composes_groups_and_falls_as_any_sigma_rises():
    """Two groups: between the constant runs at either σ, independent of the order of the steps, below the RDP bound
    of the same composition, and lower when the smaller σ is raised."""
    sigmas = np.r_[np.full(T_STEPS // 2, 1.0), np.full(T_STEPS // 2, 1.5)]
    mixed = epsilon_spent_per_step(sigmas, DELTA, Q_STEPS)
    assert epsilon_spent(1.5, DELTA, Q_STEPS, T_STEPS) < mixed < epsilon_spent(1.0, DELTA, Q_STEPS, T_STEPS)
    assert epsilon_spent_per_step(np.random.default_rng(0).permutation(sigmas), DELTA, Q_STEPS) == mixed
    assert epsilon_spent_per_step(np.maximum(sigmas, 1.2), DELTA, Q_STEPS) < mixed
    events = [
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(Q_STEPS, dp_accounting.GaussianDpEvent(s)), T_STEPS // 2
        )
        for s in (1.0, 1.5)
    ]
    rdp = RdpAccountant().compose(dp_accounting.ComposedDpEvent(events)).get_epsilon(DELTA)
    assert mixed <= rdp <= 1.5 * mixed


@pytest.mark.slow
def test_many_distinct_sigmas_are_rounded_down_to_an_upper_bound():
    """40 distinct σ_t in [1, 1.3]: rounded down onto MAX_GROUPS levels, ε lies above the exact ε of the same steps
    rounded up onto two levels (more noise) and below the run at the smallest σ throughout."""
    sigmas = np.linspace(1.0, 1.3, 40).repeat(5)
    bound = epsilon_spent_per_step(sigmas, DELTA, Q_STEPS)
    rounded_up = np.where(sigmas <= 1.15, 1.15, 1.3)
    assert epsilon_spent_per_step(rounded_up, DELTA, Q_STEPS) < bound < epsilon_spent(1.0, DELTA, Q_STEPS, T_STEPS)


def test_the_clipped_count_combines_with_the_gradient_as_one_gaussian():
    """(σ⁻² + σ_b⁻²)^(−1/2); with Andrew et al.'s recentred count (noise 2σ_b) Opacus's lowered σ recovers the σ it
    started from, which our sensitivity-1 count does not assume."""
    assert combined_noise_multiplier(2.0, 4.0) == pytest.approx((0.25 + 1 / 16) ** -0.5, rel=1e-14)
    lowered = (2.0**-2 - (2 * 4.0) ** -2) ** -0.5
    assert combined_noise_multiplier(lowered, 2 * 4.0) == pytest.approx(2.0, rel=1e-14)
    with pytest.raises(ValueError) as info:
        combined_noise_multiplier(1.0, 0.0)
    mentions(info, "count_noise_multiplier")


@pytest.mark.parametrize(
    ("sigmas", "tokens"),
    [([], ("1-D", "σ_t", "(0,)")), ([[1.0]], ("σ_t", "(1,", "1)")),
     ([1.0, math.nan], ("finite", "0", "nan", "1")), ([1.0, -2.0], ("-2.0", "1"))],
)  # fmt: skip
def test_per_step_epsilon_rejects_bad_noise_multipliers(sigmas, tokens):
    with pytest.raises(ValueError) as info:
        epsilon_spent_per_step(sigmas, DELTA, Q_STEPS)
    mentions(info, *tokens)


def test_a_step_without_noise_spends_infinite_epsilon():
    assert epsilon_spent_per_step([1.0, 0.0], DELTA, Q_STEPS) == math.inf


def test_fixed_size_batches_of_the_whole_data_set_are_the_gaussian_mechanism_with_twice_the_sensitivity():
    """B = N: no sampling, so T steps under replace-one are exactly μ-GDP with μ = 2√T/σ (the clipped sum moves by up
    to 2C when one example is replaced). The RDP accountant is an upper bound on that exact ε, and not far above."""
    for sigma, steps in ((4.0, 1), (20.0, 100), (50.0, 1000)):
        mu = 2 * math.sqrt(steps) / sigma
        exact = brentq(
            lambda e, mu=mu: ndtr(-e / mu + mu / 2) - math.exp(e + log_ndtr(-e / mu - mu / 2)) - DELTA, 0, 1e3
        )
        spent = epsilon_spent(sigma, DELTA, 1.0, steps, sampling="fixed", dataset_size=50)
        assert exact <= spent <= 1.15 * exact, (sigma, steps, exact, spent)


def test_fixed_size_batches_spend_more_than_poisson_and_sigma_round_trips():
    """A run of B = 100 of N = 2 000 without replacement at the Poisson σ for ε = 1 spends several times ε; the σ
    calibrated for the fixed scheme spends at most ε, and 0.5 % less noise would not."""
    q, steps, n = 0.05, 4000, 2000
    poisson = noise_multiplier(1.0, DELTA, q, steps)
    assert 4.0 < epsilon_spent(poisson, DELTA, q, steps, sampling="fixed", dataset_size=n) < 6.0
    fixed = noise_multiplier(1.0, DELTA, q, steps, sampling="fixed", dataset_size=n)
    assert epsilon_spent(fixed, DELTA, q, steps, sampling="fixed", dataset_size=n) <= 1.0
    assert epsilon_spent(fixed * (1 - 0.0025), DELTA, q, steps, sampling="fixed", dataset_size=n) > 1.0
    per_step = epsilon_spent_per_step(np.full(steps, fixed), DELTA, q, sampling="fixed", dataset_size=n)
    assert per_step == epsilon_spent(fixed, DELTA, q, steps, sampling="fixed", dataset_size=n)


@pytest.mark.parametrize(
    ("options", "tokens"),
    [
        ({"sampling": "fixed"}, ("dataset_size",)),
        ({"sampling": "shuffled", "dataset_size": 2000}, ("poisson", "fixed")),
        ({"sampling": "fixed", "dataset_size": 2010}, ("whole", "sampling_rate=B/N")),
    ],
)
def test_a_sampling_scheme_the_accountant_cannot_compose_is_one_clear_error(options, tokens):
    with pytest.raises(ValueError) as caught:
        epsilon_spent(10.0, DELTA, 0.05, 100, **options)
    mentions(str(caught.value), *tokens)
