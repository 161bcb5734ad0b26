"""One posterior sample (OPS) on M1–M3: its privacy bound in closed form, its exact truncated sampler, the method."""

import jax
import numpy as np
import pytest
from messages import mentions
from scipy import stats

import noiseaware as na
from noiseaware.baselines.expfam import family
from noiseaware.baselines.ops import OPSSettings, ops_batch, region, temperature


def _truncated_beta_logpdf(p, a, b, low, high):
    """log density of Beta(a, b) truncated to [low, high] at p."""
    law = stats.beta(a, b)
    return law.logpdf(p) - np.log(law.cdf(high) - law.cdf(low))


@pytest.mark.parametrize("n, counts", [(3, (0, 1, 3)), (40, (0, 13, 40)), (5000, (1500, 2500))])
def test_ops_on_m2_is_epsilon_dp_by_its_log_density_ratio(n, counts):
    """For every neighbour x ∪ {z} of a data set x (z = 0 or 1, add/remove), the tempered truncated posteriors'
    log-density ratio, in closed form on a fine grid of the region, stays within t·R = ε/k per draw, and comes
    close to it (the bound is tight, not loose by a factor); substitution doubles it."""
    fam = family("M2", n)
    reg = region(fam, 1e-4)
    epsilon, draws = 1.0, 4
    t = temperature(epsilon, draws, reg, "add-remove")
    grid = np.linspace(reg.low, reg.high, 4001)
    worst = 0.0
    for ones in counts:  # all zeros, a mix, all ones (at N = 5000 only mixes: the others leave no finite mass)
        a, b = 10 + t * ones, 10 + t * (n - ones)
        base = _truncated_beta_logpdf(grid, a, b, reg.low, reg.high)
        for z in (0, 1):
            neighbour = _truncated_beta_logpdf(grid, a + t * z, b + t * (1 - z), reg.low, reg.high)
            assert np.all(np.isfinite(neighbour - base))
            worst = max(worst, np.max(np.abs(neighbour - base)))
    assert worst <= t * reg.log_likelihood_range * (1 + 1e-9) == pytest.approx(epsilon / draws)
    assert worst > 0.5 * epsilon / draws
    assert temperature(epsilon, draws, reg, "substitute") == pytest.approx(t / 2)


def test_ops_draws_are_the_truncated_tempered_posterior():
    """At N = 3 the truncation binds; 4000 draws (ε large enough for t = 0.5) match Beta(10 + t·k, 10 + t·(N − k))
    truncated to the region, on the logit scale the posteriors use (KS test)."""
    x = np.array([[1, 1, 1]])
    fam, settings = family("M2", 3), OPSSettings(draws=4000)
    reg = region(fam, settings.tail)
    epsilon = 0.5 * settings.draws * reg.log_likelihood_range  # t = 0.5
    (post,) = ops_batch("M2", x, keys=jax.random.split(jax.random.key(0), 1), epsilon=epsilon, settings=settings)
    assert post.diagnostics.release["temperature"] == pytest.approx(0.5)
    p = 1.0 / (1.0 + np.exp(-post.chains[0, :, 0]))
    assert p.min() >= reg.low and p.max() <= reg.high
    law = stats.beta(10 + 1.5, 10)
    lo, hi = law.cdf(reg.low), law.cdf(reg.high)
    statistic = stats.kstest(p, lambda q: (law.cdf(q) - lo) / (hi - lo))
    assert statistic.pvalue > 0.01, statistic


def test_ops_is_a_registered_data_method_scored_like_any_posterior():
    """`ops` runs in a coverage study on M1–M3 (here M3): its k released draws are the posterior, wider than
    the non-private posterior by the tempering (width × > 1), at pure ε-DP (δ spent 0); other models are
    refused before any work."""
    assert na.DEFAULT_REGISTRY["ops"].transforms == "research" and na.DEFAULT_REGISTRY["ops"].needs_epsilon
    result = na.coverage(
        na.models.get("M3"), epsilon=1.0, methods=("ops",), simulations=6, references=2, samples=200, steps=300,
        key=0, method_options={"ops": {"draws": 20}},
    )  # fmt: skip
    assert result.failures == {"ops": 0} and result.median_width_ratio()["ops"].min() > 1.5
    assert result.diagnostics["ops"]["release"]["delta"] == 0.0
    with pytest.raises(ValueError) as info:
        na.coverage(na.models.get("logistic-3d"), epsilon=1.0, methods=("ops",), simulations=2, key=0)
    mentions(info, "'ops'", "'logistic-3d'")
    with pytest.raises(ValueError) as info:
        OPSSettings(draws=0)
    mentions(info, "draws", "draws=0")


def test_a_baselines_saved_draws_load_back_as_draws(tmp_path):
    """A data baseline's file (its released draws, its release facts) reads back as a `DrawsPosterior` with the
    same draws and the model's sites."""
    x = np.array([[1, 0, 1, 1, 0, 1]])
    (post,) = ops_batch("M2", x, keys=jax.random.split(jax.random.key(1), 1), epsilon=1.0, settings=OPSSettings())
    post.save(tmp_path / "ops.nc")
    loaded = na.load_posterior(tmp_path / "ops.nc")
    np.testing.assert_array_equal(loaded.chains, post.chains)
    assert loaded.method == post.method and loaded.sites == post.sites and loaded.describe() == post.describe()
    assert loaded.diagnostics["release"]["epsilon"] == 1.0
