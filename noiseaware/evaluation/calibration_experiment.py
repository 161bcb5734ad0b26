"""The calibration experiment (paper §4.4, docs/method.md §5): Bayesian logistic regression on a real data set.

Run r = 1..R: one DPVI trace of the training set (all R traces in one vmapped, compiled program:
`record_dpvi_batch` on R copies of the data, chunks of `chunk`); the shared experiment driver
(`experiment.run_methods`) turns trace r into a posterior by every method (exact, laplace and nuts in one
batched fit over the R traces; naive and dpvim trace by trace; plug-ins alike); K draws θ_k of that
posterior give the predictive p̂_i = (1/K) Σ_k sigmoid(x_i·θ_k) on the test set, scored by
`calibration_metrics`. All methods of run r read the same trace, so their differences are paired.
"nonprivate" is the reference without privacy: NUTS on the training data itself, fitted once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..datasets import Dataset
from ..methods.base import Batch, Method, Outcome, Registry
from ..methods.registry import DEFAULT_REGISTRY
from ..models import get as get_model
from ..models.builtin import logistic_regression
from ..privacy import noise_multiplier as calibrate
from ..recording.dpvi import record_dpvi_batch
from ..recording.settings import check_delta
from ..trace import Trace
from ..util.checks import positive_int
from ..util.keys import as_key, key_repr
from ..util.progress import Progress
from .calibration import calibration_curve, calibration_metrics, predictive_probabilities
from .calibration_result import METRICS, CalibrationResult
from .experiment import check_methods, check_overrides, run_methods, with_progress

__all__ = ["PRESET", "calibration", "record_traces"]

PRESET = "adult-logistic"
"""The built-in model whose research preset (C = 11, s = (1, 550), v = √114, init (0, −6), T = 10⁴, q = 0.1)
sets the DPVI runs."""
HISTOGRAM_BINS = 20


def calibration(
    data: Dataset,
    *,
    methods: Sequence[str | Method] = ("exact", "naive"),
    epsilon: float | None = None,
    noise_multiplier: float | None = None,
    delta: float = 1e-5,
    runs: int = 20,
    samples: int = 4000,
    bins: int = 10,
    binning: str = "equal-count",
    key,
    chunk: int = 20,
    method_options: Mapping[str, Any] | None = None,
    registry: Registry = DEFAULT_REGISTRY,
    progress: Progress = False,
    **overrides,
) -> CalibrationResult:
    """Calibration of the predictive probabilities of `methods` on data's test set (module doc).

    data: a `Dataset` (e.g. `na.datasets.adult()`). methods: names in `registry` or `Method` records that
    read a trace (plug-ins too), and "nonprivate". Privacy level: exactly one of epsilon (σ by the PLD
    accountant) and noise_multiplier, unless every method is a non-private reference. runs R: DPVI runs;
    samples K: θ draws per posterior for the predictive; bins and binning: of the metrics; method_options:
    {method: options} (e.g. {"exact": {"prior": "paper"}}, {"nonprivate": {"warmup": 500}}); overrides
    replace the adult-logistic preset's DPVI settings (steps, …); the traces name θ's coordinates by
    data.feature_names (`theta[age]`). The same key gives the same numbers,
    whichever other methods run beside a method.
    """
    bm = get_model(PRESET)
    resolved, options = check_methods(methods, registry, bm.name, epsilon, method_options)
    check_overrides(overrides)
    check_delta(delta, allow_weak_privacy=overrides.get("allow_weak_privacy", False))
    options = {name: with_progress(o, progress) for name, o in options.items()}
    for method in resolved:
        if method.reads != "trace" and method.private:
            raise ValueError(
                f"method {method.name!r} releases its own statistics; calibration compares methods "
                "on the same DPVI traces (and the non-private reference)"
            )
    for name, value in {"runs": runs, "samples": samples, "chunk": chunk}.items():
        positive_int(name, value)
    k_dpvi, k_fit, k_draw = jax.random.split(as_key(key), 3)
    settings = dict(bm.dpvi_settings) | {"labels": {"theta": tuple(data.feature_names)}} | overrides
    traced = [m.name for m in resolved if m.reads == "trace"]
    traces: list[Trace] = []
    seconds: dict[str, float] = {}
    if traced:
        if (epsilon is None) == (noise_multiplier is None):
            raise ValueError("give exactly one of epsilon and noise_multiplier")
        sigma = (
            noise_multiplier
            if noise_multiplier is not None
            else calibrate(epsilon, delta, settings["sampling_rate"], settings["steps"])
        )
        start = time.perf_counter()
        traces = record_traces(
            data, noise_multiplier=sigma, delta=delta, runs=runs, key=k_dpvi, chunk=chunk, progress=progress, **settings
        )
        seconds["dpvi"] = time.perf_counter() - start
    train = data.train_data()
    batch = Batch(
        tuple(traces),
        bm,
        {name: a[None] for name, a in train.items()},
        epsilon,
        delta,
        shared_data=True,
        size=runs if traced else 1,
    )

    def score(method: Method, outcomes: list[Outcome], k_samples) -> tuple[dict[str, Any], int]:
        keys = jax.random.split(k_samples, len(outcomes))
        draws = [None if isinstance(o, Exception) else np.asarray(o.sample(k, samples)) for o, k in zip(outcomes, keys)]
        finite = [d if d is not None and np.all(np.isfinite(d)) else None for d in draws]
        non_finite = sum(d is not None for d in draws) - sum(d is not None for d in finite)
        return _score(finite, data, bins, binning), non_finite

    results = run_methods(batch, resolved, options, key=(k_fit, k_draw), score=score)
    parts = {name: {m: run.score[name] for m, run in results.items()} for name in ("metrics", "curves", "histograms")}
    for method, run in results.items():
        seconds[method] = run.fit_seconds
        seconds[f"predict_{method}"] = run.score_seconds
    first = traces[0] if traces else None
    return CalibrationResult(
        **parts,
        failures={m: run.failures for m, run in results.items()},
        diagnostics={m: run.diagnostics for m, run in results.items()},
        paired_methods=tuple(traced),
        seconds=seconds,
        settings={
            "dataset": data.name,
            "scaling": data.scaling,
            "n_train": int(data.X_train.shape[0]),
            "n_test": int(data.X_test.shape[0]),
            "dim": data.dim,
            "epsilon": epsilon if epsilon is not None or first is None else first.epsilon,
            "noise_multiplier": None if first is None else first.noise_multiplier,
            "delta": delta,
            "runs": runs,
            "samples": samples,
            "bins": bins,
            "binning": binning,
            "steps": None if first is None else first.steps,
            "preset": PRESET,
            "dpvi_settings": {k: repr(v) for k, v in settings.items()},
            "key": key_repr(key),
            "methods": [m.name for m in resolved],
            "method_options": {name: repr(o) for name, o in options.items()},
        },
    )


def record_traces(
    data: Dataset,
    *,
    noise_multiplier: float,
    delta: float,
    runs: int,
    key,
    chunk: int = 20,
    progress: Progress = False,
    **settings,
) -> list[Trace]:
    """R DPVI traces of data's training set with keys split(key, R): `record_dpvi_batch` on R copies, in chunks."""
    keys = jax.random.split(key, runs)
    train = data.train_data()
    traces: list[Trace] = []
    for first in range(0, runs, chunk):
        count = min(chunk, runs - first)
        copies = {name: np.broadcast_to(array, (count, *array.shape)) for name, array in train.items()}
        traces += record_dpvi_batch(
            logistic_regression,
            copies,
            keys=keys[first : first + count],
            noise_multiplier=noise_multiplier,
            delta=delta,
            progress=progress,
            **settings,
        )
    return traces


def _score(draws_per_repeat: list[np.ndarray | None], data: Dataset, bins: int, binning: str) -> dict[str, Any]:
    """Per repeat: the metrics, the reliability curve and the histogram of p̂ (NaN rows where it failed)."""
    count = len(draws_per_repeat)
    metrics = {name: np.full(count, np.nan) for name in METRICS}
    curves = {
        "mean_predicted": np.full((count, bins), np.nan),
        "fraction_positive": np.full((count, bins), np.nan),
        "counts": np.zeros((count, bins), np.int64),
    }
    histograms = np.zeros((count, HISTOGRAM_BINS), np.int64)
    for r, theta in enumerate(draws_per_repeat):
        if theta is None:
            continue
        p = predictive_probabilities(theta, data.X_test)
        for name, value in calibration_metrics(data.y_test, p, bins=bins, binning=binning).as_dict().items():
            metrics[name][r] = value
        curve = calibration_curve(data.y_test, p, bins=bins, binning=binning)
        curves["mean_predicted"][r], curves["fraction_positive"][r] = curve.mean_predicted, curve.fraction_positive
        curves["counts"][r] = curve.counts
        histograms[r] = np.histogram(p, bins=HISTOGRAM_BINS, range=(0.0, 1.0))[0]
    return {"metrics": metrics, "curves": curves, "histograms": histograms}
