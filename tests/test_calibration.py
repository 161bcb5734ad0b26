"""Calibration metrics against hand-computed cases, a perfectly calibrated and an overconfident predictor,
the posterior predictive against a plain loop, and the paired comparison of a CalibrationResult."""

import json
import math

import jax
import numpy as np
import pytest
from messages import mentions
from scipy import integrate

import noiseaware as na
from noiseaware.evaluation import CalibrationResult, predictive_probabilities
from noiseaware.evaluation.calibration_result import METRICS
from noiseaware.plots import plot_calibration

Y = np.array([0, 0, 1, 1, 0, 1])
P = np.array([0.1, 0.2, 0.3, 0.6, 0.7, 0.9])


def test_metrics_of_a_small_case_by_hand():
    # two equal-count bins: {0.1, 0.2, 0.3} with labels 0, 0, 1 and {0.6, 0.7, 0.9} with 1, 0, 1
    gaps = np.array([0.2 - 1 / 3, (0.6 + 0.7 + 0.9) / 3 - 2 / 3])  # mean prediction − fraction positive
    metrics = na.calibration_metrics(Y, P, bins=2)
    assert metrics.calibration_rmse == pytest.approx(math.sqrt((gaps**2).mean()))  # = sqrt(1/90)
    assert metrics.calibration_rmse == pytest.approx(math.sqrt(1 / 90))
    assert metrics.ece == pytest.approx(0.5 * abs(gaps[0]) + 0.5 * abs(gaps[1]))  # = 0.1
    assert metrics.ece == pytest.approx(0.1)
    assert metrics.brier == pytest.approx((0.01 + 0.04 + 0.49 + 0.16 + 0.49 + 0.01) / 6)
    assert metrics.log_loss == pytest.approx(
        -(2 * math.log(0.9) + math.log(0.8) + 2 * math.log(0.3) + math.log(0.6)) / 6
    )
    assert metrics.accuracy == pytest.approx(4 / 6)  # predicted 0, 0, 0, 1, 1, 1
    assert set(metrics.as_dict()) == set(METRICS)


def test_equal_count_curve_with_unequal_bins():
    y = np.array([1, 0, 0, 1, 1, 0, 1])
    p = np.array([0.9, 0.1, 0.5, 0.3, 0.8, 0.2, 0.6])
    curve = na.calibration_curve(y, p, bins=3)
    np.testing.assert_array_equal(curve.counts, [3, 2, 2])  # the larger bins first, as numpy.array_split
    np.testing.assert_allclose(curve.mean_predicted, [0.2, 0.55, 0.85])
    np.testing.assert_allclose(curve.fraction_positive, [1 / 3, 0.5, 1.0])
    np.testing.assert_allclose(curve.edges, [0.1, 0.5, 0.8, 0.9])
    np.testing.assert_allclose(curve.gaps, curve.mean_predicted - curve.fraction_positive)


def test_equal_width_curve_leaves_empty_bins_out_of_the_metrics():
    p = np.append(P, 1.0)  # p = 1 falls in the last, closed bin
    y = np.append(Y, 1)
    curve = na.calibration_curve(y, p, bins=5, binning="equal-width")
    np.testing.assert_array_equal(curve.counts, [1, 2, 0, 2, 2])
    np.testing.assert_allclose(curve.edges, [0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert np.isnan(curve.mean_predicted[2]) and np.isnan(curve.fraction_positive[2])
    gaps = np.array([0.1 - 0, 0.25 - 0.5, 0.65 - 0.5, 0.95 - 1.0])
    metrics = na.calibration_metrics(y, p, bins=5, binning="equal-width")
    assert metrics.calibration_rmse == pytest.approx(math.sqrt((gaps**2).mean()))  # over the 4 non-empty bins
    assert metrics.ece == pytest.approx((1 * 0.1 + 2 * 0.25 + 2 * 0.15 + 2 * 0.05) / 7)


def test_log_loss_of_certain_wrong_predictions_is_finite():
    metrics = na.calibration_metrics([1, 0], [0.0, 1.0], bins=1)
    assert metrics.log_loss == pytest.approx(-math.log(1e-15), rel=1e-4)  # p clipped to [1e-15, 1 − 1e-15]
    assert metrics.accuracy == 0.0 and metrics.brier == 1.0


def calibrated_sample(n=200_000):
    """q ~ U(0, 1) and y ~ Bernoulli(q), fixed keys."""
    q = np.asarray(jax.random.uniform(jax.random.key(11), (n,)), np.float64)
    y = (np.asarray(jax.random.uniform(jax.random.key(12), (n,)), np.float64) < q).astype(int)
    return q, y


def test_a_perfectly_calibrated_predictor_scores_near_zero():
    q, y = calibrated_sample()
    for binning in ("equal-count", "equal-width"):
        metrics = na.calibration_metrics(y, q, binning=binning)
        # per bin the fraction of positives has sd ≈ sqrt(0.25 / 20 000) ≈ 0.0035
        assert metrics.calibration_rmse < 0.01 and metrics.ece < 0.01
    assert metrics.brier == pytest.approx(1 / 6, abs=0.003)  # E[q(1 − q)]


def test_an_overconfident_predictor_scores_as_expected():
    q, y = calibrated_sample()
    p = 1 / (1 + ((1 - q) / q) ** 2)  # sigmoid(2 logit q): every prediction pushed away from 1/2
    curve = na.calibration_curve(y, p)
    # p is increasing in q, so the equal-count bins are the deciles of q: q ∈ [b/10, (b+1)/10], whose expected
    # fraction of positives is (b + 0.5)/10 and expected mean prediction 10 ∫ q² / (q² + (1 − q)²) dq
    expected_p = np.array(
        [10 * integrate.quad(lambda t: t**2 / (t**2 + (1 - t) ** 2), b / 10, (b + 1) / 10)[0] for b in range(10)]
    )
    expected_y = (np.arange(10) + 0.5) / 10
    np.testing.assert_allclose(curve.mean_predicted, expected_p, atol=0.008)  # decile sd ≈ 0.0011 × slope ≤ 2
    np.testing.assert_allclose(curve.fraction_positive, expected_y, atol=0.012)
    assert np.all(curve.gaps[:5] < 0) and np.all(curve.gaps[5:] > 0)  # too low below 1/2, too high above
    expected_rmse = math.sqrt(np.mean((expected_p - expected_y) ** 2))
    assert expected_rmse > 0.05
    assert na.calibration_metrics(y, p).calibration_rmse == pytest.approx(expected_rmse, abs=0.005)


@pytest.mark.parametrize("draws, chunk", [(300, 256), (1, 256), (40, 8)])
def test_predictive_probabilities_average_the_sigmoid_over_draws(draws, chunk):
    theta = np.asarray(jax.random.normal(jax.random.key(3), (draws, 4)), np.float64)
    X = np.asarray(jax.random.normal(jax.random.key(4), (50, 4)), np.float64)
    expected = np.array([np.mean([1 / (1 + math.exp(-x @ t)) for t in theta]) for x in X])
    np.testing.assert_allclose(predictive_probabilities(theta, X, chunk=chunk), expected, rtol=1e-12)


@pytest.mark.parametrize(
    "y, p, options, tokens",
    [
        ([0, 1, 2], [0.1, 0.5, 0.9], {}, ("binary", "0", "1")),
        ([0, 1], [0.1, 1.5], {}, ("probabilities", "[0,", "1]")),
        ([0, 1], [0.1, np.nan], {}, ("probabilities", "[0,", "1]")),
        ([0, 1, 1], [0.1, 0.5], {}, ("length",)),
        ([0, 1], [0.1, 0.5], {"bins": 3}, ("2", "3", "bins")),
        ([0, 1], [0.1, 0.5], {"binning": "quantile"}, ("binning", "'quantile'")),
        ([0, 1], [0.1, 0.5], {"bins": 0}, ("bins",)),
    ],
)
def test_bad_inputs_are_refused(y, p, options, tokens):
    with pytest.raises(ValueError) as info:
        na.calibration_metrics(y, p, **options)
    mentions(info, *tokens)


def test_predictive_probabilities_refuse_mismatched_shapes():
    with pytest.raises(ValueError) as info:
        predictive_probabilities(np.zeros((5, 3)), np.zeros((4, 2)))
    mentions(info, "theta", "(K", "d)", "X", "(n")


def result_with(rmse: dict) -> CalibrationResult:
    """A CalibrationResult holding given per-run calibration RMSEs (other metrics copies of them)."""
    methods = list(rmse)
    count = {m: len(v) for m, v in rmse.items()}
    curves = {
        m: {
            "mean_predicted": np.tile([0.2, 0.6], (count[m], 1)),
            "fraction_positive": np.tile([0.3, 0.5], (count[m], 1)),
            "counts": np.full((count[m], 2), 5),
        }
        for m in methods
    }
    return CalibrationResult(
        metrics={m: {k: np.asarray(v, float) for k in METRICS} for m, v in rmse.items()},
        curves=curves,
        histograms={m: np.ones((count[m], 20), int) for m in methods},
        paired_methods=tuple(m for m in methods if m != "nonprivate"),
        failures={m: int(np.isnan(v).sum()) for m, v in rmse.items()},
        seconds={m: 1.0 for m in methods},
        diagnostics={},
        settings={
            "dataset": "toy",
            "runs": 3,
            "bins": 2,
            "binning": "equal-count",
            "epsilon": 1.0,
            "noise_multiplier": 2.0,
        },
    )


def test_paired_differences_use_the_same_repeats_and_skip_failures(tmp_path):
    result = result_with({"exact": [0.02, 0.03, np.nan], "naive": [0.05, 0.07, 0.06], "nonprivate": [0.01]})
    assert result.mean_sd("exact") == pytest.approx((0.025, math.sqrt(0.00005)))
    paired = result.paired()
    assert set(paired) == {"exact"}  # the non-private reference has no traces to pair with
    mean, sd = paired["exact"]
    assert mean == pytest.approx(-0.035) and sd == pytest.approx(math.sqrt(0.00005))  # (−0.03, −0.04)
    assert result.mean_sd("nonprivate") == (0.01, None)
    table = result.table()
    assert "−35" in table.replace("-", "−") and "2/3" in table and "nonprivate" in table
    legend = table.splitlines()[4:]  # issue 26: below the header and the three methods, what the columns mean
    assert [line.split(":")[0] for line in legend] == [
        "each cell",
        "calib. RMSE",
        "− naive",
        "ECE",
        "Brier, log loss, accuracy",
        "fit s",
    ]
    result.to_json(tmp_path / "r.json")
    payload = json.loads((tmp_path / "r.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    summary = payload["summary"]
    assert summary["exact"]["calibration_rmse_minus_naive_mean"] == pytest.approx(-0.035)
    assert summary["nonprivate"]["calibration_rmse_sd"] is None and summary["exact"]["failures"] == 1
    assert payload["per_repeat"]["exact"]["calibration_rmse"] == [0.02, 0.03, None]
    plot_calibration(result, tmp_path / "r.png")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_reliability_interpolates_each_repeat_on_the_grid():
    curves = result_with({"naive": [0.1, 0.2]}).reliability("naive")
    grid = np.linspace(0, 1, 101)
    assert curves.shape == (2, 101)
    inside = (grid >= 0.2) & (grid <= 0.6)
    np.testing.assert_allclose(curves[0, inside], 0.3 + (grid[inside] - 0.2) * 0.5)
    assert np.all(np.isnan(curves[0, ~inside]))


def test_merge_puts_the_reference_beside_the_trace_methods():
    merged = result_with({"exact": [0.02, 0.03], "naive": [0.05, 0.07]}).merge(result_with({"nonprivate": [0.01]}))
    assert merged.methods == ["exact", "naive", "nonprivate"] and merged.paired_methods == ("exact", "naive")
