"""The DPVIm baseline (docs/baselines.md §3.4): the convergence detector (D1), the degenerate-noise limit
(D2), the spread of an AR(1) trace (D3), the centres, and the argument errors."""

import jax
import numpy as np
import pytest
from messages import mentions
from ou import CLIP, SIGMA, N, Q

import noiseaware as na
from noiseaware.baselines.dpvim import DPVImDiagnostics, convergence_start, dpvim_posterior
from noiseaware.baselines.naive import naive_posterior
from noiseaware.methods import DPVImOptions
from noiseaware.posteriors.mixture import DPVIM, NAIVE
from noiseaware.trace import Trace

STEPS, RAMP_END = 10_000, 2000


def trace_of(rows: np.ndarray) -> Trace:
    """A trace whose iterates φ_0..φ_T are `rows` (T+1, P): T rows of params, φ_T as final_params."""
    rows = np.asarray(rows, np.float64)
    return Trace.from_arrays(
        rows[:-1],
        np.zeros_like(rows[:-1]),
        noise_multiplier=SIGMA,
        clip=CLIP,
        sampling_rate=Q,
        n_examples=N,
        final_params=rows[-1],
    )


def ar1(length, a, sd_e, mean, seed):
    """`length` rows of stationary AR(1) x_t = a x_{t−1} + e_t, e_t ~ N(0, sd_e²) per column, plus `mean`;
    x_0 is drawn from the stationary law N(0, sd_e²/(1 − a²))."""
    rng = np.random.default_rng(seed)
    a, sd_e = np.asarray(a, np.float64), np.asarray(sd_e, np.float64)
    x = np.empty((length, a.size))
    x[0] = sd_e / np.sqrt(1 - a**2) * rng.standard_normal(a.size)
    e = sd_e * rng.standard_normal((length, a.size))
    for t in range(1, length):
        x[t] = a * x[t - 1] + e[t]
    return np.asarray(mean) + x


# D1: an exponential ramp over the first 2000 steps, then a stationary AR(1) with known mean and variance.
RAMP_A, RAMP_SD, RAMP_MEAN, RAMP_HEIGHT, RAMP_TAU = (0.3, 0.5), (0.1, 0.05), (1.0, -3.0), (10.0, -5.0), 400.0


def ramp_rows(seed=0):
    """(T+1, 2) iterates: mean + A (e^{−t/τ} − e^{−2000/τ}) / (1 − e^{−2000/τ}) for t < 2000 (falling to the
    mean exactly at t = 2000), plus stationary AR(1) noise throughout."""
    t = np.arange(STEPS + 1)[:, None]
    end = np.exp(-RAMP_END / RAMP_TAU)
    ramp = np.where(t < RAMP_END, np.asarray(RAMP_HEIGHT) * (np.exp(-t / RAMP_TAU) - end) / (1 - end), 0.0)
    return ar1(STEPS + 1, RAMP_A, RAMP_SD, RAMP_MEAN, seed) + ramp


def stationary_variance(a, sd_e):
    a, sd_e = np.asarray(a), np.asarray(sd_e)
    return sd_e**2 / (1 - a**2)


def test_d1_detector_finds_the_end_of_the_ramp_and_the_stationary_moments():
    rows = ramp_rows()
    post = dpvim_posterior(trace_of(rows), key=0)
    t0 = post.diagnostics["converged_from"]
    window = (STEPS + 1) // 10
    assert t0.shape == (2,) and np.all(np.abs(t0 - RAMP_END) <= window)
    assert not post.diagnostics["not_converged"].any() and not post.diagnostics["any_not_converged"]
    np.testing.assert_array_equal(t0, convergence_start(rows)[0])
    np.testing.assert_allclose(post.diagnostics["tail_mean"], RAMP_MEAN, rtol=0.05)
    np.testing.assert_allclose(post.diagnostics["tail_variance"], stationary_variance(RAMP_A, RAMP_SD), rtol=0.05)
    # brute force: the tail's own mean and population variance
    for j in range(2):
        tail = rows[t0[j] :, j]
        np.testing.assert_allclose(post.diagnostics["tail_mean"][j], tail.mean(), rtol=1e-12)
        np.testing.assert_allclose(post.diagnostics["tail_variance"][j], tail.var(), rtol=1e-10)


def test_d1_linear_drift_is_flagged_not_converged_with_the_half_trace_fallback():
    """Column 0 drifts by 2 over the trace (≥ 0.2 over any tail of ≥ T/10 rows: no window passes κ = 0.05);
    column 1 is stationary and converges at s = 0, so the flags are per coordinate."""
    t = np.arange(STEPS + 1)
    noise = ar1(STEPS + 1, (0.5, 0.5), (0.01, 0.05), (0.0, 0.0), seed=1)
    rows = np.column_stack([2.0 * t / STEPS, np.zeros(STEPS + 1)]) + noise
    post = dpvim_posterior(trace_of(rows), key=0)
    np.testing.assert_array_equal(post.diagnostics["not_converged"], [True, False])
    assert post.diagnostics["any_not_converged"] is True
    np.testing.assert_array_equal(post.diagnostics["converged_from"], [STEPS // 2, 0])
    np.testing.assert_allclose(post.diagnostics["tail_mean"][0], rows[STEPS // 2 :, 0].mean(), rtol=1e-12)


def test_slope_is_the_fitted_total_drift_over_each_tail():
    """A line of total drift D over the T+1 rows has drift D·(L−1)/T over a tail of L rows; the first start whose
    tail drift is below κ is t0 (here D = 0.2: the tail from s = 8Δw has drift 0.04 < 0.05, s = 7Δw 0.06)."""
    rows = np.column_stack([0.2 * np.arange(1001) / 1000, np.zeros(1001)])
    t0, not_converged = convergence_start(rows)
    np.testing.assert_array_equal(t0, [800, 0])
    assert not not_converged.any()
    # just above and below κ at the last start s = 900 (a tail of 101 rows, drift D·100/1000): D = 0.51, 0.49
    t0, not_converged = convergence_start(np.column_stack([rows[:, 0] * 2.55, rows[:, 0] * 2.45]))
    np.testing.assert_array_equal(not_converged, [True, False])
    np.testing.assert_array_equal(t0, [500, 900])


def test_d2_constant_trace_has_zero_variance_and_draws_exactly_the_naive_last_iterate():
    rows = np.tile([0.3, -1.7, -2.0, 0.1], (2001, 1))
    trace = trace_of(rows)
    post = dpvim_posterior(trace, key=3, draws=500)
    np.testing.assert_array_equal(post.diagnostics["tail_variance"], 0.0)
    np.testing.assert_array_equal(post.diagnostics["converged_from"], 0)
    np.testing.assert_array_equal(post.optimum_draws, np.broadcast_to(trace.final_iterate(), (500, 4)))
    # the component index differs (K = 500 vs 1) but every component is φ_T and the η draws share the key
    naive = naive_posterior(trace)
    assert naive.kind == NAIVE and str(naive.summary(key=0)).startswith(NAIVE)
    for key in (0, jax.random.key(7)):
        np.testing.assert_array_equal(post.sample(key, 1000), naive.sample(key, 1000))


# D3: AR(1) traces without a ramp; spreads chosen so the slope's noise sd sqrt(12 V τ_int / L) is ≤ 0.002.
AR_A, AR_SD, AR_MEAN = (0.0, 0.5, 0.7, 0.9), (0.2, 0.1, 0.05, 0.02), (0.5, -1.0, -3.0, -2.0)


def test_d3_tail_variance_is_the_stationary_variance_and_the_draws_have_it():
    rows = ar1(STEPS + 1, AR_A, AR_SD, AR_MEAN, seed=2)
    post = dpvim_posterior(trace_of(rows), key=1, draws=20_000)
    t0, v = post.diagnostics["converged_from"], post.diagnostics["tail_variance"]
    target, a = stationary_variance(AR_A, AR_SD), np.asarray(AR_A)
    # sd of a sample variance of an AR(1) over L rows: V sqrt(2 (1 + a²) / ((1 − a²) L)); allow 4 sd
    length = STEPS + 1 - t0
    np.testing.assert_array_less(np.abs(v / target - 1), 4 * np.sqrt(2 * (1 + a**2) / ((1 - a**2) * length)))
    # the default ("last") posterior: φ draws centred at φ_T with variance v, within Monte Carlo error
    phi = post.optimum_draws
    draws = phi.shape[0]
    np.testing.assert_array_less(np.abs(phi.mean(axis=0) - rows[-1]), 4 * np.sqrt(v / draws))
    np.testing.assert_array_less(np.abs(phi.var(axis=0) / v - 1), 4 * np.sqrt(2 / draws))
    assert post.method == "dpvim" and post.hessian_draws is None and post.diagnostics["centre"] == "last"
    assert post.optimum_chains.shape == (1, draws, 4) and post.optimum_chains.dtype == np.float64
    # typed: a DPVIm posterior with DPVImDiagnostics, read as attributes or as a mapping alike
    assert post.kind == DPVIM and isinstance(post.diagnostics, DPVImDiagnostics)
    np.testing.assert_array_equal(post.diagnostics.tail_variance, post.diagnostics["tail_variance"])
    assert str(post.summary(key=0)).startswith(DPVIM)


def test_average_centre_shifts_the_same_draws_to_the_tail_mean():
    trace = trace_of(ramp_rows())
    last = dpvim_posterior(trace, key=5, draws=300)
    average = dpvim_posterior(trace, key=5, draws=300, centre="average")
    mean = average.diagnostics["tail_mean"]
    np.testing.assert_allclose(average.optimum_draws - mean, last.optimum_draws - trace.final_iterate(), atol=1e-12)
    assert average.diagnostics["centre"] == "average"


def test_empirical_centre_draws_only_tail_rows_uniformly_per_coordinate():
    rows = ramp_rows()
    post = dpvim_posterior(trace_of(rows), key=4, draws=20_000, centre="empirical")
    t0, phi = post.diagnostics["converged_from"], post.optimum_draws
    for j in range(rows.shape[1]):
        where = {value: t for t, value in enumerate(rows[:, j])}  # continuous values: one row each
        assert len(where) == rows.shape[0]
        index = np.array([where[value] for value in phi[:, j]])  # KeyError if a draw is not a row
        assert index.min() >= t0[j] and index.max() <= STEPS
        length = STEPS + 1 - t0[j]
        # uniform on the L tail rows: mean index (t0 + T)/2, sd (L²−1)/12 per draw
        assert abs(index.mean() - 0.5 * (t0[j] + STEPS)) < 4 * np.sqrt((length**2 - 1) / 12 / phi.shape[0])
    np.testing.assert_allclose(phi.mean(axis=0), post.diagnostics["tail_mean"], atol=4 * 0.15 / np.sqrt(2e4))


def test_the_registered_method_is_dpvim_posterior_with_its_typed_options():
    """na.fit(trace, "dpvim") passes its DPVImOptions (keywords or an options object) and its key through."""
    trace = trace_of(ramp_rows())
    direct = dpvim_posterior(trace, key=5, draws=300, centre="average", threshold=0.1, windows=8)
    by_keywords = na.fit(trace, "dpvim", key=5, draws=300, centre="average", threshold=0.1, windows=8)
    by_options = na.fit(
        trace, "dpvim", key=5, options=DPVImOptions(draws=300, centre="average", threshold=0.1, windows=8)
    )
    for post in (by_keywords, by_options):
        assert post.kind == DPVIM
        np.testing.assert_array_equal(post.optimum_draws, direct.optimum_draws)
        np.testing.assert_array_equal(post.diagnostics.converged_from, direct.diagnostics.converged_from)
    assert DPVImOptions() == DPVImOptions(draws=4000, centre="last", threshold=0.05, windows=10)
    with pytest.raises(ValueError) as info:
        na.fit(trace, "dpvim", key=5, center="average")
    mentions(info, "'center'")


def test_keys_int_seeds_and_reproducibility():
    trace = trace_of(ar1(201, (0.5, 0.5), (0.01, 0.01), (0.0, -1.0), seed=3))
    same = dpvim_posterior(trace, key=11, draws=50).optimum_draws
    np.testing.assert_array_equal(same, dpvim_posterior(trace, key=jax.random.key(11), draws=50).optimum_draws)
    assert not np.array_equal(same, dpvim_posterior(trace, key=12, draws=50).optimum_draws)


def test_errors_name_the_problem():
    trace = trace_of(ar1(201, (0.5, 0.5), (0.01, 0.01), (0.0, -1.0), seed=3))
    with pytest.raises(TypeError, match="key"):  # the draws depend on the key: there is no default
        dpvim_posterior(trace)
    with pytest.raises(TypeError, match="center"):  # the option is spelt centre
        dpvim_posterior(trace, key=0, center="last")
    with pytest.raises(ValueError) as info:
        dpvim_posterior(trace, key=0, centre="median")
    mentions(info, "'median'", "'last'", "'average'", "'empirical'")
    for threshold in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError) as info:
            dpvim_posterior(trace, key=0, threshold=threshold)
        mentions(info, "threshold", "0")
    for windows in (1, 0, 2.5, True):
        with pytest.raises(ValueError) as info:
            dpvim_posterior(trace, key=0, windows=windows)
        mentions(info, "windows", "2")
    with pytest.raises(ValueError) as info:
        dpvim_posterior(trace, key=0, draws=0)
    mentions(info, "draws", "0")
    with pytest.raises(ValueError) as info:
        dpvim_posterior(trace_of(np.zeros((19, 2))), key=0)
    mentions(info, "10", "18", "19")
    dpvim_posterior(trace_of(np.zeros((20, 2))), key=0)  # T = 19 is enough
    rows = np.zeros((100, 2))
    rows[40, 1] = np.nan
    with pytest.raises(ValueError) as info:
        convergence_start(rows)
    mentions(info, "params", "nan", "40", "1")
    with pytest.raises(ValueError) as info:
        convergence_start(np.zeros(100))
    mentions(info, "(100,)", "(T+1", "P)")
