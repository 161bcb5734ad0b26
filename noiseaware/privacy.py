"""Privacy accounting for DP-SGD: ε of a noise multiplier, and the noise multiplier of an ε.

The mechanism is the one DP-SGD runs: T-fold composition of a subsampled Gaussian mechanism, each step adding
N(0, σ²) noise to a sum of sensitivity-1 terms, under the sampling scheme the run used (`sampling`):

* "poisson" (the default): each step includes every example independently with probability q, under the
  add/remove-one neighbouring relation (Abadi et al. 2016; Mironov, Talwar & Zhang 2019). ε at a given δ comes from
  the privacy loss distribution (PLD) accountant of Google's ``dp-accounting`` (Koskela, Jälkö & Honkela 2020;
  Doroshenko et al. 2022), whose pessimistic estimate is an upper bound on the exact ε (accountant "pld").
* "fixed": each step draws B = q·N of the N examples uniformly without replacement, afresh every step, under the
  replace-one relation (a batch of fixed size does not change size when one example is replaced). ε comes from
  dp-accounting's Rényi-DP accountant for sampling without replacement (Wang, Balle & Kasiviswanathan 2019;
  accountant "rdp-fixed"), an upper bound, looser than the PLD's by a few per cent. Replacing one example moves the
  clipped sum by up to 2C (the accountant is given σ/2), so at the same σ it spends several times the Poisson run's
  ε. Shuffled epochs (each example
  once per pass) are neither scheme: no accountant here bounds them (Chua et al. 2024 show their ε can be far above
  Poisson's), so record such a run as Poisson only if it sampled that way.

The PLD is discretised on a grid of spacing ≈ 1e-4·ε; the library default of 1e-4 overstates ε by
~1 % at ε = 0.1. With that grid the PLD agrees with an independent PRV accountant (Gopi, Lee &
Wutschitz 2021) to ~4 digits. The Gaussian-DP central limit theorem (Bu, Dong, Long & Su 2020;
Dong, Roth & Su 2022) only sizes the first grid and gives the starting point of the σ search.

A run whose noise multiplier changes from step to step (a noise schedule, Opacus's adaptive clipping) composes
its steps grouped by σ: `epsilon_spent_per_step` self-composes each group and composes the groups. Adaptive
clipping also releases, every step, a noisy count of the examples left unclipped (Andrew, Thakkar, McMahan &
Ramaswamy 2021); released with the gradient on the same subsample, the pair is one Gaussian mechanism of noise
multiplier (σ_t⁻² + σ_b,t⁻²)^(−1/2), σ_b,t the count's noise sd over its sensitivity 1 (`combined_noise_multiplier`).

The scalar functions take and return Python scalars. Cost: ~0.05–0.5 s per ε on one CPU core, more for
σ < 1 with q ≪ 1 (long privacy-loss tails) or T ≳ 10⁶ (the library's self-composition slows down). Each PLD
evaluation is remembered for the process (`_pld_epsilon`), so a run, a study or a tuner that asks again for the
same (σ, δ, q, T) pays nothing.

Why this module is long: ε of σ and σ of ε, for both schemes and for per-step σ, share one set of argument checks,
one grouping of steps and one cache per accountant; apart, each would restate them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import dp_accounting
import numpy as np
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr

from .util.checks import positive_float, positive_int, probability

__all__ = [
    "ACCOUNTANTS",
    "PrivacyWarning",
    "SAMPLINGS",
    "accountant_of",
    "combined_noise_multiplier",
    "epsilon_spent",
    "epsilon_spent_per_step",
    "noise_multiplier",
    "split_noise_multiplier",
]

_RELATIVE_INTERVAL = 1e-4  # PLD grid spacing relative to ε
_COARSE_RELATIVE_INTERVAL = 1e-3  # first pass: grid spacing relative to a rough magnitude of ε
_INTERVAL_SLACK = 1.1  # refine until the grid spacing is within 10 % of 1e-4·ε
_MIN_INTERVAL = 1e-8  # finest grid spacing: keeps the cost bounded when ε is tiny
_MAX_INTERVAL = 100.0  # coarsest grid spacing: the library evaluates expm1(spacing)
_BRACKET_STEP = 1.02  # first bracket factor around the guess; squared at every expansion
_SIGMA_MIN = 1e-2  # the bracket search gives up below this σ ...
_SIGMA_MAX = 1e7  # ... and above this one


class PrivacyWarning(UserWarning):
    """The privacy a trace or a run states was not the privacy its sampling scheme spent, and was corrected."""


SAMPLINGS = ("poisson", "fixed")
"""The sampling schemes the accountant composes (module doc); a trace's `Convention.sampling` names one."""
ACCOUNTANTS = {"poisson": "pld", "fixed": "rdp-fixed"}
"""The name a trace records for the accountant of each sampling scheme (`Trace.accountant`)."""
_FIXED_SIGMA_FACTOR = 2.0  # replace-one doubles the sensitivity: the first guess of σ for a fixed-size run
MAX_GROUPS = 16
"""The most distinct noise multipliers `epsilon_spent_per_step` composes one by one (each costs about a second);
beyond it σ_t is rounded down onto MAX_GROUPS levels, an upper bound on ε."""


def epsilon_spent(
    noise_multiplier: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    *,
    sampling: str = "poisson",
    dataset_size: int | None = None,
) -> float:
    """ε such that ``steps``-fold subsampled Gaussian composition is (ε, δ)-DP under ``sampling`` (module doc).

    Composes T = ``steps`` steps of the Gaussian mechanism with noise multiplier σ =
    ``noise_multiplier`` on a subsample of rate q = ``sampling_rate``. Poisson (add/remove-one): the PLD
    accountant's pessimistic ε at ``delta`` (an upper bound on the exact ε), discretised at ≈ 1e-4·ε: a coarse
    pass at 1e-3 × a closed-form magnitude of ε learns ε roughly, then finer passes (usually one) refine it until
    the grid spacing is within 10 % of 1e-4·ε (clipped to [``_MIN_INTERVAL``, ``_MAX_INTERVAL``]). Fixed
    (B = q·N drawn without replacement each step, replace-one; needs ``dataset_size`` N): the RDP accountant's ε.

    Args: Python floats (``steps`` an integer). σ = 0 (no noise) gives ``math.inf``.
    Returns: ε as a float ≥ 0.
    """
    noise_multiplier = positive_float(
        "noise_multiplier",
        noise_multiplier,
        allow_zero=True,
        hint="pass σ, the noise standard deviation divided by the clipping norm (0 for no noise)",
    )
    delta, sampling_rate, steps = _checked_run(delta, sampling_rate, steps)
    batch = _fixed_batch(sampling, sampling_rate, dataset_size)
    if noise_multiplier == 0:
        return math.inf
    if batch is not None:
        return _fixed_epsilon(((noise_multiplier, steps),), delta, dataset_size, batch)
    return _refined_epsilon(((noise_multiplier, steps),), delta, sampling_rate)


def epsilon_spent_per_step(
    noise_multipliers, delta: float, sampling_rate: float, *, sampling: str = "poisson", dataset_size: int | None = None
) -> float:
    """ε of T subsampled Gaussian steps at rate q with noise multiplier σ_t at step t, under ``sampling`` (Poisson
    and add/remove-one by default; "fixed" with ``dataset_size``, as `epsilon_spent`).

    noise_multipliers (T,): σ_t ≥ 0 (a step with σ_t = 0 gives ∞); for Opacus's adaptive clipping pass
    `combined_noise_multiplier(σ_t, σ_b,t)`, which accounts the clipped-count release too. Steps with equal σ are
    self-composed as one group and the groups composed (PLD, grid ≈ 1e-4·ε as in `epsilon_spent`), so equal σ_t
    give `epsilon_spent(σ, δ, q, T)` exactly. Beyond MAX_GROUPS distinct values each σ_t is rounded down onto
    MAX_GROUPS geometric levels between the smallest and the largest: less noise, so an upper bound on ε.
    """
    values = _checked_sigmas(noise_multipliers)
    delta = probability("delta", delta, hint="use e.g. delta=1e-5 (below 1/N for N examples)")
    sampling_rate = _checked_rate(sampling_rate)
    batch = _fixed_batch(sampling, sampling_rate, dataset_size)
    if values.min() == 0:
        return math.inf
    if batch is not None:
        return _fixed_epsilon(_groups(values), delta, dataset_size, batch)
    return _refined_epsilon(_groups(values), delta, sampling_rate)


def accountant_of(sampling: str) -> str:
    """The accountant's name for a sampling scheme ("pld" for Poisson, "rdp-fixed" for fixed-size batches)."""
    _check_sampling(sampling)
    return ACCOUNTANTS[sampling]


def combined_noise_multiplier(noise_multiplier, count_noise_multiplier):
    """(σ⁻² + σ_b⁻²)^(−1/2): the noise multiplier of one Gaussian mechanism equivalent to releasing, on the same
    subsample, the noisy clipped sum (noise sd σ·C, sensitivity C) and a noisy count (noise sd σ_b, sensitivity 1)
    of the examples left unclipped; scalars or arrays (σ_t, σ_b,t), broadcast."""
    sigma, count = np.asarray(noise_multiplier, np.float64), np.asarray(count_noise_multiplier, np.float64)
    if np.any(~np.isfinite(count) | (count <= 0)):
        raise ValueError(
            f"count_noise_multiplier must be positive and finite, got {count_noise_multiplier!r}: the noise sd of "
            "the unclipped count (AdaClipDPOptimizer's fraction_std)"
        )
    return 1.0 / np.sqrt(sigma**-2.0 + count**-2.0)


def split_noise_multiplier(noise_multiplier: float, clip_count_share: float) -> tuple[float, float]:
    """(σ, σ_b): the gradient's and the clipped count's noise multipliers that spend the share r = `clip_count_share` of
    one Gaussian mechanism of noise multiplier σ_c = `noise_multiplier` on the count: σ⁻² = (1 − r)·σ_c⁻², σ_b⁻² =
    r·σ_c⁻², so that `combined_noise_multiplier(σ, σ_b)` is σ_c again and the pair spends σ_c's ε. Python floats;
    σ_c = 0 (a non-private run) gives (0, 0)."""
    sigma = positive_float("noise_multiplier", noise_multiplier, allow_zero=True, hint="the combined σ of the run")
    share = positive_float(
        "clip_count_share", clip_count_share, maximum=0.5, hint="the share of the privacy spent on the count"
    )
    return sigma / math.sqrt(1.0 - share), sigma / math.sqrt(share)


def _checked_sigmas(noise_multipliers) -> np.ndarray:
    """σ_t (T,) as float64, each finite and ≥ 0, T ≥ 1; a ValueError otherwise."""
    try:
        values = np.asarray(noise_multipliers, np.float64)
    except (TypeError, ValueError):
        values = np.array([math.nan])
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"noise_multipliers must be a 1-D array of σ_t, one per step, got shape {values.shape}")
    bad = np.flatnonzero(~(np.isfinite(values) & (values >= 0)))
    if bad.size:
        raise ValueError(
            f"noise_multipliers must be finite and ≥ 0 at every step, got {values[bad[0]]} at step {bad[0]}; pass "
            "the noise multiplier σ_t each step used"
        )
    return values


def _groups(values: np.ndarray) -> tuple[tuple[float, int], ...]:
    """((σ, number of steps at σ), …) sorted by σ; beyond MAX_GROUPS distinct σ, each rounded down onto MAX_GROUPS
    geometric levels from the smallest to the largest."""
    levels, counts = np.unique(values, return_counts=True)
    if levels.size > MAX_GROUPS:
        grid = np.geomspace(levels[0], levels[-1], MAX_GROUPS)
        index = np.clip(np.searchsorted(grid, values, side="right") - 1, 0, MAX_GROUPS - 1)
        levels, counts = np.unique(grid[index], return_counts=True)
    return tuple((float(sigma), int(count)) for sigma, count in zip(levels, counts))


def _refined_epsilon(groups: tuple[tuple[float, int], ...], delta: float, sampling_rate: float) -> float:
    """The PLD ε of the composed groups ((σ, steps), …), on a grid refined to ≈ 1e-4·ε (`epsilon_spent`)."""
    scale = _epsilon_scale(groups, delta, sampling_rate)
    interval = _interval(_COARSE_RELATIVE_INTERVAL * scale)
    epsilon = _pld_epsilon(groups, delta, sampling_rate, interval)
    while 0 < epsilon < math.inf:
        fine = _interval(_RELATIVE_INTERVAL * epsilon)
        if interval <= _INTERVAL_SLACK * fine:
            return epsilon
        interval = fine
        epsilon = _pld_epsilon(groups, delta, sampling_rate, interval)
    return epsilon


def noise_multiplier(
    epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    *,
    tolerance: float = 0.005,
    sampling: str = "poisson",
    dataset_size: int | None = None,
) -> float:
    """Smallest σ, to relative ``tolerance``, with ``epsilon_spent(σ, delta, q, T, sampling=…) ≤ epsilon``.

    Same composition and accountant as :func:`epsilon_spent` (T-fold subsampled Gaussian at rate q: Poisson,
    add/remove-one, PLD grid ≈ 1e-4·ε by default; ``sampling="fixed"`` with ``dataset_size`` N: B = q·N without
    replacement, replace-one, RDP). Starts from the σ of the Gaussian-DP central-limit approximation (usually
    within a few % for Poisson; doubled for fixed batches), brackets σ by factors 1.02, 1.02², 1.02⁴, …
    away from it, then bisects on log σ down to half the tolerance. The result is always on the
    private side, ``epsilon_spent(σ) ≤ epsilon``, and tight: ``epsilon_spent(σ·(1 − tolerance/2))
    > epsilon``. Costs about 5–10 evaluations of :func:`epsilon_spent` at the default tolerance.

    Args: Python floats (``steps`` an integer); ``tolerance`` in (0, 1).
    Returns: σ as a float > 0.
    Raises: ValueError for invalid arguments, or when σ would leave [1e-2, 1e7].
    """
    epsilon = positive_float("epsilon", epsilon, hint="pass the target privacy budget, e.g. epsilon=1.0")
    delta, sampling_rate, steps = _checked_run(delta, sampling_rate, steps)
    tolerance = probability("tolerance", tolerance, hint="use e.g. tolerance=0.005")
    fixed = _fixed_batch(sampling, sampling_rate, dataset_size) is not None

    def is_private(sigma: float) -> bool:
        spent = epsilon_spent(sigma, delta, sampling_rate, steps, sampling=sampling, dataset_size=dataset_size)
        return spent <= epsilon

    guess = _sigma_guess(epsilon, delta, sampling_rate, steps) * (_FIXED_SIGMA_FACTOR if fixed else 1.0)
    low, high = _bracket(is_private, guess, epsilon)
    while high * (1 - tolerance / 2) > low:  # then high ≤ (smallest σ) / (1 − tolerance/2)
        middle = math.sqrt(low * high)
        if is_private(middle):
            high = middle
        else:
            low = middle
    return high


def _bracket(is_private: Callable[[float], bool], sigma: float, epsilon: float) -> tuple[float, float]:
    """(low, high) with not is_private(low) and is_private(high), by growing steps from ``sigma``."""
    private = is_private(sigma)
    step = _BRACKET_STEP
    while sigma > _SIGMA_MIN if private else sigma < _SIGMA_MAX:
        other = sigma / step if private else sigma * step
        if is_private(other) != private:
            return (other, sigma) if private else (sigma, other)
        sigma, step = other, step * step
    if private:
        raise ValueError(
            f"epsilon={epsilon!r} is met by every noise multiplier ≥ {_SIGMA_MIN:g}, too little noise "
            "to locate the smallest σ reliably; use a smaller epsilon (or delta), or pass the noise "
            "multiplier directly"
        )
    raise ValueError(
        f"epsilon={epsilon!r} is not reached by any noise multiplier ≤ {_SIGMA_MAX:g}; increase "
        "epsilon or delta, or reduce sampling_rate or steps"
    )


def _gdp_mu(sigma: float, q: float, steps: int) -> float:
    """μ of the Gaussian-DP approximation of the composition.

    The central limit theorem of Bu, Dong, Long & Su (2020) gives μ = q·sqrt(T·(exp(1/σ²) − 1));
    at q = 1 the composition is exactly μ-GDP with μ = sqrt(T)/σ, an upper bound for any q.
    """
    return min(q * math.sqrt(steps * math.expm1(min(sigma**-2, 700.0))), math.sqrt(steps) / sigma)


def _gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) of μ-GDP (Dong, Roth & Su 2022, Cor. 2.13)."""
    return ndtr(-epsilon / mu + mu / 2) - math.exp(epsilon + log_ndtr(-epsilon / mu - mu / 2))


def _epsilon_scale(groups: tuple[tuple[float, int], ...], delta: float, q: float) -> float:
    """Closed-form magnitude of ε, used only to size the first PLD grid.

    μ²/2 + μ·sqrt(2·log(1/δ)) with μ = _gdp_mu bounds the ε of μ-GDP from above; unlike the exact
    GDP ε it is never 0, so the first grid is never needlessly fine. Groups ((σ, steps), …) compose as μ² adds.
    """
    if len(groups) == 1:
        mu = _gdp_mu(groups[0][0], q, groups[0][1])
    else:
        mu = math.sqrt(sum(_gdp_mu(sigma, q, steps) ** 2 for sigma, steps in groups))
    return mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta))


def _sigma_guess(epsilon: float, delta: float, q: float, steps: int) -> float:
    """σ whose GDP approximation is exactly (ε, δ)-DP, clipped to [_SIGMA_MIN, _SIGMA_MAX].

    Solves _gdp_delta(μ, ε) = δ for μ (bracketed: at the lower end Φ(−ε/μ + μ/2) ≈ Φ(−100) ≈ 0,
    at the upper end Φ(−ε/μ + μ/2) = 1 and the second term vanishes), then inverts _gdp_mu.
    """
    mu = brentq(
        lambda mu: _gdp_delta(mu, epsilon) - delta,
        0.01 * min(epsilon, 1.0),
        2 * math.sqrt(2 * epsilon) + 40,
    )
    ratio = (mu / q) ** 2 / steps
    sigma = min(math.sqrt(steps) / mu, 1 / math.sqrt(math.log1p(ratio)) if ratio > 0 else math.inf)
    return min(max(sigma, _SIGMA_MIN), _SIGMA_MAX)


@functools.lru_cache(maxsize=4096)
def _pld_epsilon(groups: tuple[tuple[float, int], ...], delta: float, q: float, interval: float) -> float:
    """Pessimistic PLD ε of the Poisson-subsampled Gaussian steps ((σ, number of steps), …) at grid spacing
    ``interval`` (a pure function of its scalars, so remembered: `record_dpvi` at a given σ accounts once per
    process, not once per run)."""
    accountant = PLDAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=interval,
    )
    events = [
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
        )
        for sigma, steps in groups
    ]
    accountant.compose(events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events))
    return float(accountant.get_epsilon(delta))


@functools.lru_cache(maxsize=4096)
def _fixed_epsilon(groups: tuple[tuple[float, int], ...], delta: float, dataset_size: int, batch: int) -> float:
    """RDP ε of the steps ((σ, number of steps), …), each drawing `batch` of `dataset_size` examples without
    replacement (replace-one neighbours); remembered for the process, as `_pld_epsilon`. dp-accounting's Gaussian
    event takes the noise over the sensitivity under the relation: replacing one example moves the sum of clipped
    gradients by up to 2C, so the noise σC is σ/2 of it."""
    accountant = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    events = [
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.SampledWithoutReplacementDpEvent(
                dataset_size, batch, dp_accounting.GaussianDpEvent(sigma / 2)
            ),
            steps,
        )
        for sigma, steps in groups
    ]
    accountant.compose(events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events))
    return float(accountant.get_epsilon(delta))


def _check_sampling(sampling: str) -> None:
    if sampling not in SAMPLINGS:
        raise ValueError(
            f"sampling={sampling!r} is not a scheme the accountant composes: use 'poisson' (each example in a step "
            "with probability q, add/remove-one) or 'fixed' (B = q·N examples drawn without replacement each step, "
            "replace-one, with dataset_size=N)"
        )


def _fixed_batch(sampling: str, sampling_rate: float, dataset_size) -> int | None:
    """B = q·N for sampling="fixed" (None for Poisson); a ValueError for an unknown scheme, a fixed scheme without
    N, or a q·N that is not a whole number of examples."""
    _check_sampling(sampling)
    if sampling == "poisson":
        if dataset_size is not None:
            positive_int("dataset_size", dataset_size, hint="the number of examples N")
        return None
    if dataset_size is None:
        raise ValueError(
            "sampling='fixed' draws B = q·N of the N examples each step: pass dataset_size=N (the number of examples)"
        )
    size = positive_int("dataset_size", dataset_size, hint="pass the number of examples N as an int")
    batch = round(sampling_rate * size)
    if batch < 1 or abs(sampling_rate * size - batch) > 1e-6 * max(batch, 1):
        raise ValueError(
            f"sampling='fixed' draws B = q·N examples each step, and q·N = {sampling_rate * size:g} is not a whole "
            f"number: pass sampling_rate=B/N for the batch size B the run drew (N = {size})"
        )
    return batch


def _interval(spacing: float) -> float:
    return min(max(spacing, _MIN_INTERVAL), _MAX_INTERVAL)


def _checked_run(delta, sampling_rate, steps) -> tuple[float, float, int]:
    """(δ, q, T) checked: δ in (0, 1), q in (0, 1], T a positive integer."""
    return (
        probability("delta", delta, hint="use e.g. delta=1e-5 (below 1/N for N examples)"),
        _checked_rate(sampling_rate),
        positive_int("steps", steps, hint="pass the number of DP-SGD steps as an int, e.g. steps=10_000"),
    )


def _checked_rate(sampling_rate) -> float:
    """q in (0, 1]."""
    return positive_float(
        "sampling_rate",
        sampling_rate,
        maximum=1.0,
        hint="pass the expected batch size divided by the number of examples",
    )
