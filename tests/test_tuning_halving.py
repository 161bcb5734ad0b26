"""Successive halving (tuning/halving.py): who goes on, how many runs, and rungs as the full search judges them."""

import numpy as np
import pytest
from scipy import stats

from noiseaware.tuning.halving import Evaluation, halving_runs, rung_sizes, successive_halving
from noiseaware.tuning.score import bias_limit, bias_p_values, pooled_p_values
from noiseaware.tuning.space import Candidate


class Part:
    """A stand-in score: a quality and the simulations it is over (`Score` adds parts the same way)."""

    def __init__(self, quality, simulations):
        self.quality, self.simulations = quality, simulations

    def __add__(self, other):
        return Part(self.quality, self.simulations + other.simulations)


def test_rungs_are_quarters_halves_and_all():
    assert rung_sizes(24) == (6, 12, 24)
    assert rung_sizes(4) == (2, 4)
    assert rung_sizes(200) == (50, 100, 200)


def test_the_better_half_goes_on_and_each_part_is_run_once():
    """Eight candidates of known quality: 8 run the first quarter, the best 4 the second, the best 2 the rest; no
    part of any candidate runs twice, and the runs are 8·6 + 4·6 + 2·12 = 96, not 8·24."""
    quality = [5, 1, 7, 3, 8, 2, 6, 4]
    evaluations = [Evaluation(i, Candidate(1, 1, 0.01, 0.01, 100, 0.1), {}, {}) for i in range(8)]
    runs = []

    def run(todo, part):
        runs.extend((e.number, part.start, part.stop) for e in todo)
        return [Part(quality[e.number], part.stop - part.start) for e in todo]

    successive_halving(evaluations, rung_sizes(24), run, lambda e: e.score.quality)
    seen = {e.number: e.simulations for e in evaluations}
    assert seen == {1: 24, 5: 24, 3: 12, 7: 12, 0: 6, 2: 6, 4: 6, 6: 6}
    assert len(runs) == len(set(runs)) == 8 + 4 + 2
    assert sum(stop - start for _, start, stop in runs) == 96 == halving_runs(8, rung_sizes(24))


def test_projected_tests_give_the_full_searchs_p_values_for_the_same_effects():
    """A rung's ζ tests are projected to the search's M: the same mean ζ² (χ²) and mean ζ (shift) on M."""
    z = np.asarray(np.random.default_rng(0).normal(0.3, 1.2, size=(6, 2)))
    mean, p = pooled_p_values(z, simulations=24)
    np.testing.assert_allclose(p, stats.chi2.sf(mean * 24, 24))
    tiled = np.tile(z, (4, 1))  # 24 simulations with the same effects
    np.testing.assert_allclose(p, pooled_p_values(tiled)[1])
    np.testing.assert_allclose(bias_p_values(z, simulations=24), bias_p_values(tiled))
    limit = bias_limit(24, 4, 0.05)  # the |mean ζ| at which the shift test rejects at α/4 on 24 simulations
    at_limit = np.full((24, 1), limit)
    assert bias_p_values(at_limit)[0] == pytest.approx(0.05 / 4)
