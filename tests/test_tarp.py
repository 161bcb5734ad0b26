"""TARP on cases with known answers: exact conjugate posteriors are calibrated, narrow ones under-cover."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.evaluation import LEVELS, ecp_from_fractions, marginal_ecp, reference_box, tarp_fractions, tarp_repeats

M, K, D = 2000, 400, 2


def conjugate(key, sd_factor=1.0):
    """θ ~ N(0, I_d); 10 observations x ~ N(θ, 2² I): posterior N(Σx/(10 + 4)·…); samples with sd × sd_factor."""
    k_theta, k_x, k_post, k_ref = jax.random.split(key, 4)
    theta = jax.random.normal(k_theta, (M, D))
    x = theta[:, None, :] + 2.0 * jax.random.normal(k_x, (M, 10, D))
    precision = 1.0 + 10 / 4.0
    mean, sd = x.sum(axis=1) / 4.0 / precision, (1.0 / precision) ** 0.5
    samples = mean[:, None, :] + sd_factor * sd * jax.random.normal(k_post, (M, K, D))
    references = reference_box(k_ref, mean, 4 * sd * jnp.ones_like(mean), 1)[0]
    return samples, theta, references, mean, sd


# A calibrated posterior's ECP at level l is a mean of M Bernoulli(l) indicators: sd sqrt(l(1 − l)/M), so
# its coverage RMSE is about sqrt(mean over LEVELS of l(1 − l) / M) = sqrt(0.158 / 2000) ≈ 0.009 (plus
# 1/K from K draws); the bound 0.02 is over twice that.
CALIBRATED_RMSE = 0.02


def binomial_band(levels, m=M, z=4.0):
    return z * np.sqrt(levels * (1 - levels) / m) + 1.0 / K


def slow_fractions(samples, truth, references):
    """TARP fractions by plain loops: per reference set g and simulation m, the share of draws strictly closer
    (Euclidean) to θ_ref than the truth, jointly (G, M) and per dimension with |θ_j − θ_ref,j| (G, M, d)."""
    samples, truth, references = (np.asarray(x, np.float64) for x in (samples, truth, references))
    sets, count, draws, dim = references.shape[0], samples.shape[0], samples.shape[1], samples.shape[2]
    joint, marginal = np.zeros((sets, count)), np.zeros((sets, count, dim))
    for g in range(sets):
        for m in range(count):
            ref = references[g, m]
            radius = sum((truth[m, j] - ref[j]) ** 2 for j in range(dim))
            closer = 0
            closer_j = [0] * dim
            for k in range(draws):
                if sum((samples[m, k, j] - ref[j]) ** 2 for j in range(dim)) < radius:
                    closer += 1
                for j in range(dim):
                    if abs(samples[m, k, j] - ref[j]) < abs(truth[m, j] - ref[j]):
                        closer_j[j] += 1
            joint[g, m] = closer / draws
            marginal[g, m] = np.array(closer_j) / draws
    return joint, marginal


def slow_ecp(fractions, levels):
    """ECP[i] = (1/M) Σ_m 1[f_m < levels[i]] by a loop over the levels, for f (M,) or (M, d)."""
    fractions = np.asarray(fractions)
    return np.array([np.mean(fractions < level, axis=0) for level in levels])


def test_levels_are_the_papers_grid():
    assert LEVELS.shape == (21,) and LEVELS[0] == pytest.approx(0.001) and LEVELS[-1] == pytest.approx(0.999)
    np.testing.assert_allclose(np.diff(LEVELS[1:-1]), 0.05)


def test_exact_posterior_samples_lie_on_the_diagonal():
    samples, theta, references, _, _ = conjugate(jax.random.key(0))
    levels, ecp = na.tarp_ecp(samples, theta, references)
    assert np.all(np.abs(ecp - levels) < binomial_band(levels))
    assert na.coverage_rmse(levels, ecp) < CALIBRATED_RMSE
    _, marginal = marginal_ecp(samples, theta, references)
    assert marginal.shape == (21, D)
    assert np.all(np.abs(marginal - levels[:, None]) < binomial_band(levels)[:, None])


def test_too_narrow_posterior_under_covers_and_too_wide_over_covers():
    """Overconfidence bends the curve below the diagonal at high credibility (and above at low), as in
    Lemos et al.'s figures; underconfidence the other way; the RMSE grows with the sd's error."""
    rmse = {}
    for factor in (0.5, 0.8, 1.0, 1.25, 2.0):
        levels, ecp = na.tarp_ecp(*conjugate(jax.random.key(1), sd_factor=factor)[:3])
        rmse[factor] = na.coverage_rmse(levels, ecp)
        if factor == 0.5:
            assert np.all(ecp[(levels >= 0.7) & (levels <= 0.95)] < levels[(levels >= 0.7) & (levels <= 0.95)] - 0.1)
            assert np.all(ecp[(levels >= 0.05) & (levels <= 0.15)] > levels[(levels >= 0.05) & (levels <= 0.15)] + 0.05)
        if factor == 2.0:
            assert np.all(ecp[(levels >= 0.4) & (levels <= 0.8)] > levels[(levels >= 0.4) & (levels <= 0.8)] + 0.1)
    assert rmse[0.5] > rmse[0.8] > rmse[1.0] < rmse[1.25] < rmse[2.0]
    assert rmse[1.0] < CALIBRATED_RMSE


def test_tarp_fractions_equal_a_plain_loop():
    """tarp_fractions for G = 3 reference sets against the definition, evaluated draw by draw in Python (small
    M, K so the loop is quick). Inputs on a grid of quarters in [−2, 2] make every distance exact in float32,
    so ties (draws exactly as far as the truth, which count as not closer) are decided the same way in both.
    The fractions k/K come back in float32, so the counts k are compared exactly."""
    rng = np.random.default_rng(0)
    count, draws, dim, sets = 7, 40, 3, 3
    samples = rng.integers(-8, 9, (count, draws, dim)) / 4.0
    truth = rng.integers(-8, 9, (count, dim)) / 4.0
    references = rng.integers(-8, 9, (sets, count, dim)) / 4.0
    samples[0, :5] = truth[0]  # draws at the truth itself: never strictly closer
    joint, marginal = tarp_fractions(samples, truth, references)
    expected_joint, expected_marginal = slow_fractions(samples, truth, references)
    assert joint.shape == (sets, count) and marginal.shape == (sets, count, dim)
    np.testing.assert_array_equal(np.rint(joint * draws), np.rint(expected_joint * draws))
    np.testing.assert_array_equal(np.rint(marginal * draws), np.rint(expected_marginal * draws))
    assert 0 < expected_joint.min() and expected_joint.max() < 1  # neither all nor none closer: a real check
    # continuous draws in float32 (no ties): the same fractions, and each set is tarp_ecp's single set
    samples, theta, _, mean, sd = conjugate(jax.random.key(8))
    samples, theta = samples[:20, :50], theta[:20]
    references = reference_box(jax.random.key(9), mean[:20], 4 * sd * jnp.ones_like(mean[:20]), 2)
    joint, marginal = tarp_fractions(samples, theta, references)
    expected_joint, expected_marginal = slow_fractions(samples, theta, references)
    # fractions k/K held in float32: compare the counts k exactly
    np.testing.assert_array_equal(np.rint(joint * 50), np.rint(expected_joint * 50))
    np.testing.assert_array_equal(np.rint(marginal * 50), np.rint(expected_marginal * 50))
    np.testing.assert_allclose(joint, expected_joint, rtol=1e-6)


def test_ecp_from_fractions_agrees_with_tarp_ecp_and_marginal_ecp():
    """ECP from fractions (R sets at once) is the loop over levels of the definition, and for one reference set
    it is what tarp_ecp and marginal_ecp return from the samples themselves."""
    samples, theta, _, mean, sd = conjugate(jax.random.key(10))
    references = reference_box(jax.random.key(11), mean, 4 * sd * jnp.ones_like(mean), 3)
    joint, marginal = tarp_fractions(samples, theta, references)
    curves, marginal_curves = ecp_from_fractions(joint), ecp_from_fractions(marginal)
    assert curves.shape == (3, 21) and marginal_curves.shape == (3, 21, D)
    for r in range(3):
        np.testing.assert_array_equal(curves[r], slow_ecp(joint[r], LEVELS))
        np.testing.assert_array_equal(marginal_curves[r], slow_ecp(marginal[r], LEVELS))
        levels, ecp = na.tarp_ecp(samples, theta, references[r])
        np.testing.assert_array_equal(levels, LEVELS)
        np.testing.assert_array_equal(curves[r], ecp)
        np.testing.assert_array_equal(marginal_curves[r], marginal_ecp(samples, theta, references[r])[1])
    custom = np.array([0.2, 0.5, 0.8])
    np.testing.assert_array_equal(
        ecp_from_fractions(joint, custom)[0], na.tarp_ecp(samples, theta, references[0], levels=custom)[1]
    )
    # no simulations (every fit failed): NaN curves of the right shape, not an error
    assert np.all(np.isnan(ecp_from_fractions(np.zeros((2, 0))))) and ecp_from_fractions(np.zeros((2, 0, D))).shape == (
        2,
        21,
        D,
    )


def test_a_fraction_equal_to_a_level_is_not_below_it():
    """ECP(l) = mean of 1[f < l] with f = k/K: a tie k = l·K is not below l. K = 20 draws on a grid of quarters
    make ties at every level that is a multiple of 1/20; the exact answer compares the integer counts k < l·K."""
    rng = np.random.default_rng(1)
    count, draws = 400, 20
    samples = rng.integers(-8, 9, (count, draws, 1)) / 4.0
    truth = rng.integers(-8, 9, (count, 1)) / 4.0
    references = rng.integers(-8, 9, (1, count, 1)) / 4.0
    closer = np.rint(slow_fractions(samples, truth, references)[0][0] * draws)  # the counts k, exactly
    exact = np.array([np.mean(closer < np.rint(level * draws)) for level in LEVELS[1:-1]])
    joint, _ = tarp_fractions(samples, truth, references)
    np.testing.assert_array_equal(ecp_from_fractions(joint)[0, 1:-1], exact)
    np.testing.assert_array_equal(na.tarp_ecp(samples, truth, references[0])[1][1:-1], exact)


def test_ecp_is_invariant_to_the_order_of_the_draws():
    samples, theta, references, _, _ = conjugate(jax.random.key(2))
    permuted = samples[:, jax.random.permutation(jax.random.key(3), K), :]
    np.testing.assert_array_equal(
        na.tarp_ecp(samples, theta, references)[1], na.tarp_ecp(permuted, theta, references)[1]
    )


def test_standardised_distances_undo_a_rescaling_of_one_dimension():
    samples, theta, references, _, _ = conjugate(jax.random.key(4))
    stretch = jnp.array([100.0, 1.0])
    _, plain = na.tarp_ecp(samples, theta, references)
    _, standardised = na.tarp_ecp(
        samples * stretch, theta * stretch, references * stretch, metric="standardised", scale=stretch
    )
    np.testing.assert_array_equal(plain, standardised)


def test_coverage_rmse_is_the_root_mean_square_deviation():
    levels = LEVELS
    assert na.coverage_rmse(levels, levels) == 0.0
    assert na.coverage_rmse(levels, levels + 0.03) == pytest.approx(0.03)
    assert na.coverage_rmse(levels, np.stack([levels, levels - 0.1], axis=1)) == pytest.approx([0.0, 0.1])


def test_repeats_redraw_the_references_and_keep_the_samples():
    samples, theta, _, mean, sd = conjugate(jax.random.key(5))
    levels, curves = tarp_repeats(jax.random.key(6), samples, theta, mean, 4 * sd * jnp.ones_like(mean), repeats=5)
    assert curves.shape == (5, 21)
    assert not np.array_equal(curves[0], curves[1])
    rmse = na.coverage_rmse(levels, curves.T)
    assert np.all(rmse < 1.5 * CALIBRATED_RMSE)  # 5 reference draws for one set of samples: the largest of 5


def test_bad_shapes_and_settings_raise():
    samples, theta, references, _, _ = conjugate(jax.random.key(7))
    with pytest.raises(ValueError) as info:
        na.tarp_ecp(samples[0], theta, references)
    mentions(info, "samples", "(M", "K", "d)")
    with pytest.raises(ValueError) as info:
        na.tarp_ecp(samples, theta[:, :1], references)
    mentions(info, "truth")
    with pytest.raises(ValueError) as info:
        na.tarp_ecp(samples, theta, references, metric="standardised")
    mentions(info, "scale")
    with pytest.raises(ValueError) as info:
        na.tarp_ecp(samples, theta, references, metric="manhattan")
    mentions(info, "metric", "'manhattan'")
    with pytest.raises(ValueError) as info:
        na.tarp_ecp(samples, theta, references, levels=[0.5, 0.2])
    mentions(info, "levels")
