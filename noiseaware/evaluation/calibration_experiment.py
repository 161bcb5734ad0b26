"""The calibration experiment (paper §4.4, method.md §5): Bayesian logistic regression on a real data set.

Repeat r = 1..R: one DPVI trace of the training set (all R traces in one vmapped, compiled program:
`record_dpvi_batch` on R copies of the data, chunks of `chunk`); every trace method turns trace r into a
posterior (exact, laplace and nuts by one `fit_batch` over the R traces; naive and dpvim trace by
trace); K draws θ_k of that posterior give the predictive p̂_i = (1/K) Σ_k sigmoid(x_i·θ_k) on the test
set, scored by `calibration_metrics`. All methods of repeat r read the same trace, so their differences
are paired. "nonprivate" is the reference without privacy: NUTS (numpyro, dense mass) on the training
data itself, run once (R = 1).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..baselines.dpvim import dpvim_posterior
from ..baselines.naive import naive_posterior
from ..datasets import Dataset
from ..dpvi import record_dpvi_batch
from ..fit import fit_batch
from ..keys import as_key
from ..models import get as get_model
from ..models.builtin import logistic_regression
from ..privacy import noise_multiplier as calibrate
from ..progress import Progress
from ..trace import Trace
from .calibration import calibration_curve, calibration_metrics, predictive_probabilities
from .calibration_result import METRICS, CalibrationResult
from .simulate import method_stream, none_on_failure

__all__ = ["CALIBRATION_METHODS", "PRESET", "TRACE_METHODS", "calibration", "nonprivate_draws"]

FIT_ROUTES = ("exact", "laplace", "nuts")
TRACE_METHODS = (*FIT_ROUTES, "naive", "dpvim")
CALIBRATION_METHODS = (*TRACE_METHODS, "nonprivate")
PRESET = "adult-logistic"
"""The built-in model whose research preset (C = 11, s = (1, 550), v = √114, init (0, −6), T = 10⁴, q = 0.1)
sets the DPVI runs."""
HISTOGRAM_BINS = 20
NONPRIVATE_WARMUP = 1000


def calibration(
    data: Dataset,
    *,
    methods: Sequence[str] = ("exact", "naive"),
    epsilon: float | None = None,
    noise_multiplier: float | None = None,
    delta: float = 1e-5,
    repeats: int = 20,
    draws: int = 4000,
    bins: int = 10,
    binning: str = "equal-count",
    key=0,
    prior="default",
    chunk: int = 20,
    method_options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Progress = False,
    **overrides,
) -> CalibrationResult:
    """Calibration of the predictive probabilities of `methods` on data's test set (module doc).

    data: a `Dataset` (e.g. `na.datasets.adult()`). methods: from CALIBRATION_METHODS. Privacy level:
    exactly one of epsilon (σ by the PLD accountant) and noise_multiplier, unless methods is only
    ("nonprivate",). repeats R: DPVI runs; draws K: draws of φ* per fit and of θ per posterior; bins and
    binning: of the metrics; prior: the gradient-model prior of exact/laplace/nuts; method_options:
    {method: options} (e.g. {"nuts": {"warmup": 500}}, {"nonprivate": {"warmup": 500}}); overrides
    replace the adult-logistic preset's DPVI settings (steps, …). The same key gives the same numbers,
    whichever other methods run beside a method.
    """
    unknown = sorted(set(methods) - set(CALIBRATION_METHODS))
    if unknown or not methods:
        raise ValueError(f"unknown methods {unknown or list(methods)}: choose from {', '.join(CALIBRATION_METHODS)}")
    for name, value in {"repeats": repeats, "draws": draws, "chunk": chunk}.items():
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"{name} must be a positive int; got {value!r}")
    method_options = {m: dict(o) for m, o in (method_options or {}).items()}
    k_dpvi, k_fit, k_draw = jax.random.split(as_key(key), 3)
    settings = dict(get_model(PRESET).dpvi_settings) | overrides
    traced = [m for m in methods if m in TRACE_METHODS]
    traces: list[Trace] = []
    seconds: dict[str, float] = {}
    if traced:
        if (epsilon is None) == (noise_multiplier is None):
            raise ValueError("give exactly one of epsilon and noise_multiplier")
        sigma = noise_multiplier if noise_multiplier is not None else calibrate(
            epsilon, delta, settings["sampling_rate"], settings["steps"])
        start = time.perf_counter()
        traces = record_traces(data, noise_multiplier=sigma, delta=delta, repeats=repeats, key=k_dpvi, chunk=chunk,
                               progress=progress, **settings)
        seconds["dpvi"] = time.perf_counter() - start
    parts = {name: {} for name in ("metrics", "curves", "histograms", "failures", "diagnostics")}
    for method in methods:
        options = method_options.get(method, {})
        if method in FIT_ROUTES:
            options = {"prior": prior} | options
        if method in ("nuts", "nonprivate"):
            options.setdefault("progress", progress)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            draws_per_repeat = _posterior_draws(method, data, traces, jax.random.fold_in(k_fit, method_stream(method)),
                                                jax.random.fold_in(k_draw, method_stream(method)), draws, options)
        seconds[method] = time.perf_counter() - start
        start = time.perf_counter()
        scores = _score(draws_per_repeat, data, bins, binning)
        seconds[f"predict_{method}"] = time.perf_counter() - start
        for name, value in scores.items():
            parts[name][method] = value
        parts["failures"][method] = sum(d is None for d in draws_per_repeat)
        parts["diagnostics"][method] = {"warnings": sorted({" ".join(str(w.message).split()) for w in caught})}
    first = traces[0] if traces else None
    return CalibrationResult(
        **parts,
        paired_methods=tuple(traced),
        seconds=seconds,
        settings={
            "dataset": data.name, "scaling": data.scaling, "n_train": int(data.X_train.shape[0]),
            "n_test": int(data.X_test.shape[0]), "dim": data.dim,
            "epsilon": epsilon if epsilon is not None or first is None else first.epsilon,
            "noise_multiplier": None if first is None else first.noise_multiplier, "delta": delta,
            "repeats": repeats, "draws": draws, "bins": bins, "binning": binning,
            "steps": None if first is None else first.steps, "preset": PRESET,
            "dpvi_settings": {k: repr(v) for k, v in settings.items()},
            "prior": prior if isinstance(prior, str) else repr(prior), "key": _key_repr(key),
            "methods": list(methods),
            "method_options": {m: {k: repr(v) for k, v in o.items()} for m, o in method_options.items()},
        },
    )


def record_traces(data: Dataset, *, noise_multiplier: float, delta: float, repeats: int, key, chunk: int = 20,
                  progress: Progress = False, **settings) -> list[Trace]:
    """R DPVI traces of data's training set with keys split(key, R): `record_dpvi_batch` on R copies, in chunks."""
    keys = jax.random.split(key, repeats)
    train = data.train_data()
    traces: list[Trace] = []
    for first in range(0, repeats, chunk):
        count = min(chunk, repeats - first)
        copies = {name: np.broadcast_to(array, (count, *array.shape)) for name, array in train.items()}
        traces += record_dpvi_batch(logistic_regression, copies, keys=keys[first:first + count],
                                    noise_multiplier=noise_multiplier, delta=delta, progress=progress, **settings)
    return traces


def nonprivate_draws(data: Dataset, *, key, draws: int = 4000, warmup: int = NONPRIVATE_WARMUP,
                     progress: bool = False) -> np.ndarray:
    """(draws, d) θ from the non-private posterior of the logistic regression on data's training set:
    numpyro NUTS with a dense mass matrix (the one-hot blocks and the bias are collinear), one chain."""
    from numpyro.infer import MCMC, NUTS

    mcmc = MCMC(NUTS(logistic_regression, dense_mass=True), num_warmup=warmup, num_samples=draws,
                progress_bar=bool(progress))
    mcmc.run(as_key(key), X=data.X_train, y=data.y_train)
    return np.asarray(mcmc.get_samples()["theta"], np.float64)


def _posterior_draws(method: str, data: Dataset, traces: list[Trace], k_fit, k_draw, draws: int,
                     options: Mapping) -> list[np.ndarray | None]:
    """θ draws (K, d) per repeat (None where the fit failed): R for a trace method, 1 for nonprivate."""
    if method == "nonprivate":
        return [nonprivate_draws(data, key=k_fit, draws=draws, **options)]
    if method in FIT_ROUTES:
        posteriors = fit_batch(traces, method, key=k_fit, draws=draws, on_error="skip", **options)
    else:
        fit_keys = jax.random.split(k_fit, len(traces))
        posteriors = [none_on_failure(lambda t=t, k=k: naive_posterior(t) if method == "naive"
                               else dpvim_posterior(t, key=k, draws=draws, **options))
                      for t, k in zip(traces, fit_keys)]
    keys = jax.random.split(k_draw, len(traces))
    samples = [None if p is None else np.asarray(p.sample(k, draws)) for p, k in zip(posteriors, keys)]
    return [s if s is not None and np.all(np.isfinite(s)) else None for s in samples]


def _score(draws_per_repeat: list[np.ndarray | None], data: Dataset, bins: int, binning: str) -> dict[str, Any]:
    """Per repeat: the metrics, the reliability curve and the histogram of p̂ (NaN rows where it failed)."""
    count = len(draws_per_repeat)
    metrics = {name: np.full(count, np.nan) for name in METRICS}
    curves = {"mean_predicted": np.full((count, bins), np.nan), "fraction_positive": np.full((count, bins), np.nan),
              "counts": np.zeros((count, bins), np.int64)}
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




def _key_repr(key) -> Any:
    return key if isinstance(key, int) else np.asarray(jax.random.key_data(as_key(key))).tolist()
