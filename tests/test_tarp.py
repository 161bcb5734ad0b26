"""TARP on cases with known answers: exact conjugate posteriors are calibrated, narrow ones under-cover."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import noiseaware as na
from noiseaware.evaluation import LEVELS, marginal_ecp, reference_box, tarp_repeats

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


def binomial_band(levels, m=M, z=4.0):
    return z * np.sqrt(levels * (1 - levels) / m) + 1.0 / K


def test_levels_are_the_papers_grid():
    assert LEVELS.shape == (21,) and LEVELS[0] == pytest.approx(0.001) and LEVELS[-1] == pytest.approx(0.999)
    np.testing.assert_allclose(np.diff(LEVELS[1:-1]), 0.05)


def test_exact_posterior_samples_lie_on_the_diagonal():
    samples, theta, references, _, _ = conjugate(jax.random.key(0))
    levels, ecp = na.tarp_ecp(samples, theta, references)
    assert np.all(np.abs(ecp - levels) < binomial_band(levels))
    assert na.coverage_rmse(levels, ecp) < 0.02
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
    assert rmse[1.0] < 0.02


def test_ecp_is_invariant_to_the_order_of_the_draws():
    samples, theta, references, _, _ = conjugate(jax.random.key(2))
    permuted = samples[:, jax.random.permutation(jax.random.key(3), K), :]
    np.testing.assert_array_equal(na.tarp_ecp(samples, theta, references)[1], na.tarp_ecp(permuted, theta, references)[1])


def test_standardised_distances_undo_a_rescaling_of_one_dimension():
    samples, theta, references, _, _ = conjugate(jax.random.key(4))
    stretch = jnp.array([100.0, 1.0])
    _, plain = na.tarp_ecp(samples, theta, references)
    _, standardised = na.tarp_ecp(samples * stretch, theta * stretch, references * stretch, metric="standardised",
                                  scale=stretch)
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
    assert np.all(rmse < 0.03)


def test_bad_shapes_and_settings_raise():
    samples, theta, references, _, _ = conjugate(jax.random.key(7))
    with pytest.raises(ValueError, match=r"samples must be \(M, K, d\)"):
        na.tarp_ecp(samples[0], theta, references)
    with pytest.raises(ValueError, match="truth must be"):
        na.tarp_ecp(samples, theta[:, :1], references)
    with pytest.raises(ValueError, match="needs scale"):
        na.tarp_ecp(samples, theta, references, metric="standardised")
    with pytest.raises(ValueError, match="metric must be"):
        na.tarp_ecp(samples, theta, references, metric="manhattan")
    with pytest.raises(ValueError, match="strictly increasing"):
        na.tarp_ecp(samples, theta, references, levels=[0.5, 0.2])
