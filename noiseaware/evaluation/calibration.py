"""Calibration of predictive probabilities for binary labels (docs/method.md §5).

Posterior predictive of a logistic regression from K posterior draws θ_k (d,) at test inputs x_i (d,):

    p̂_i = (1/K) Σ_k sigmoid(x_i · θ_k).

Binning (B bins): "equal-count" sorts the n test points by p̂ (a stable sort, so ties keep their input
order) and cuts the order into B contiguous groups of ⌊n/B⌋ or ⌈n/B⌉ points (the larger ones first,
as numpy.array_split); "equal-width" puts p̂ in [b/B, (b+1)/B) (the last bin closed), and a bin may be
empty. Per bin b with n_b points: p̄_b = mean p̂ (mean predicted probability) and ȳ_b = mean y
(fraction of positives). The metrics, over the B' non-empty bins:

    calibration RMSE = sqrt( (1/B') Σ_b (p̄_b − ȳ_b)² )         (unweighted; the paper's Table 3 quantity)
    ECE              = Σ_b (n_b / n) |p̄_b − ȳ_b|                 (expected calibration error)
    Brier score      = (1/n) Σ_i (p̂_i − y_i)²
    log loss         = −(1/n) Σ_i [y_i log p̃_i + (1 − y_i) log(1 − p̃_i)],  p̃_i = clip(p̂_i, 1e-15, 1 − 1e-15)
    accuracy         = (1/n) Σ_i 1[1(p̂_i > 1/2) = y_i]
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "BINNINGS",
    "CalibrationCurve",
    "CalibrationMetrics",
    "calibration_curve",
    "calibration_metrics",
    "predictive_probabilities",
]

BINNINGS = ("equal-count", "equal-width")
LOG_LOSS_CLIP = 1e-15
DRAW_CHUNK = 256
"""Posterior draws whose logits (n × DRAW_CHUNK) are held at once by `predictive_probabilities`."""


@dataclasses.dataclass(frozen=True)
class CalibrationCurve:
    """A reliability curve: per bin the mean predicted probability, the fraction of positives and the count.

    mean_predicted (B,), fraction_positive (B,) float64 (NaN for an empty equal-width bin), counts (B,)
    int64, edges (B + 1,): bin b holds p̂ in [edges[b], edges[b+1]] (for equal-count the smallest p̂ of
    each bin, then the largest overall), binning: "equal-count" or "equal-width".
    """

    mean_predicted: np.ndarray
    fraction_positive: np.ndarray
    counts: np.ndarray
    edges: np.ndarray
    binning: str

    @property
    def gaps(self) -> np.ndarray:
        """p̄_b − ȳ_b per bin (B,): positive where the predictions are too high (overconfident in y = 1)."""
        return self.mean_predicted - self.fraction_positive


@dataclasses.dataclass(frozen=True)
class CalibrationMetrics:
    """The module doc's metrics of one set of predictions (floats)."""

    calibration_rmse: float
    ece: float
    brier: float
    log_loss: float
    accuracy: float

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def calibration_curve(y_true, p_pred, *, bins: int = 10, binning: str = "equal-count") -> CalibrationCurve:
    """The reliability curve of predictions p_pred (n,) in [0, 1] for labels y_true (n,) in {0, 1}.

    bins B ≥ 1 (equal-count needs n ≥ B); binning: "equal-count" or "equal-width" (module doc).
    """
    y, p = _check(y_true, p_pred)
    if not (isinstance(bins, (int, np.integer)) and not isinstance(bins, bool) and bins >= 1):
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    if binning == "equal-count":
        if p.size < bins:
            raise ValueError(f"{p.size} predictions cannot fill {bins} equal-count bins: use fewer bins")
        groups = np.array_split(np.argsort(p, kind="stable"), bins)
        index = np.empty(p.size, np.int64)
        for b, members in enumerate(groups):
            index[members] = b
        edges = np.append([p[g].min() for g in groups], p.max())
    elif binning == "equal-width":
        edges = np.linspace(0.0, 1.0, bins + 1)
        index = np.minimum(np.floor(p * bins).astype(np.int64), bins - 1)
    else:
        raise ValueError(f"unknown binning {binning!r}: choose one of {', '.join(BINNINGS)}")
    counts = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_predicted = np.bincount(index, weights=p, minlength=bins) / counts
        fraction_positive = np.bincount(index, weights=y, minlength=bins) / counts
    return CalibrationCurve(mean_predicted, fraction_positive, counts, edges, binning)


def calibration_metrics(y_true, p_pred, *, bins: int = 10, binning: str = "equal-count") -> CalibrationMetrics:
    """Calibration RMSE and ECE over `bins` bins (`binning`), Brier score, log loss and accuracy (module doc)."""
    y, p = _check(y_true, p_pred)
    curve = calibration_curve(y, p, bins=bins, binning=binning)
    filled = curve.counts > 0
    gaps = curve.gaps[filled]
    clipped = np.clip(p, LOG_LOSS_CLIP, 1.0 - LOG_LOSS_CLIP)
    return CalibrationMetrics(
        calibration_rmse=float(np.sqrt(np.mean(gaps**2))),
        ece=float(np.sum(curve.counts[filled] / p.size * np.abs(gaps))),
        brier=float(np.mean((p - y) ** 2)),
        log_loss=float(-np.mean(y * np.log(clipped) + (1.0 - y) * np.log1p(-clipped))),
        accuracy=float(np.mean((p > 0.5) == (y == 1))),
    )


def predictive_probabilities(theta, X, *, chunk: int = DRAW_CHUNK) -> np.ndarray:
    """p̂_i = (1/K) Σ_k sigmoid(x_i · θ_k): draws theta (K, d), inputs X (n, d) → (n,) float64.

    One compiled float64 program; the draws are summed `chunk` at a time, so memory is O(n · chunk).
    """
    theta = np.asarray(theta, np.float64)
    X = np.asarray(X, np.float64)
    if theta.ndim != 2 or X.ndim != 2 or theta.shape[1] != X.shape[1]:
        raise ValueError(f"theta must be (K, d) and X (n, d) with the same d; got {theta.shape} and {X.shape}")
    if not np.all(np.isfinite(theta)):
        raise ValueError("theta holds non-finite draws: the posterior failed; refit it")
    draws = theta.shape[0]
    chunks = -(-draws // chunk)
    padded = np.zeros((chunks * chunk, theta.shape[1]))
    padded[:draws] = theta
    weight = (np.arange(chunks * chunk) < draws).astype(np.float64)
    with jax.enable_x64(True):
        total = _sum_sigmoid(
            jnp.asarray(padded.reshape(chunks, chunk, -1)), jnp.asarray(weight.reshape(chunks, chunk)), jnp.asarray(X)
        )
        return np.asarray(total) / draws


@jax.jit
def _sum_sigmoid(theta_chunks, weights, X):
    """Σ_k w_k sigmoid(X θ_k) over chunks: theta_chunks (C, c, d), weights (C, c), X (n, d) → (n,)."""

    def add(total, chunk):
        theta, weight = chunk
        return total + jax.nn.sigmoid(X @ theta.T) @ weight, None

    total, _ = jax.lax.scan(add, jnp.zeros(X.shape[0], X.dtype), (theta_chunks, weights))
    return total


def _check(y_true, p_pred) -> tuple[np.ndarray, np.ndarray]:
    """(y, p) as float64 (n,) vectors: y in {0, 1}, p finite in [0, 1], n ≥ 1."""
    y, p = np.asarray(y_true, np.float64), np.asarray(p_pred, np.float64)
    if y.ndim != 1 or y.shape != p.shape or y.size == 0:
        raise ValueError(
            f"y_true and p_pred must be non-empty vectors of one length; got shapes {y.shape} and {p.shape}"
        )
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("y_true must hold binary labels 0 and 1")
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("p_pred must hold probabilities in [0, 1] (not logits, not NaN)")
    return y, p
