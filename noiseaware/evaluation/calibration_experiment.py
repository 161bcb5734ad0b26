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

import dataclasses
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
from ..recording.settings import DEFAULT_DELTA, check_delta
from ..trace import Trace
from ..util.checks import positive_int
from ..util.chunks import chunk_slices
from ..util.codec import data_type
from ..util.defaults import DRAWS
from ..util.deprecation import warn_renamed
from ..util.keys import as_key, key_repr, key_words
from ..util.progress import Progress
from .calibration import calibration_curve, calibration_metrics, predictive_probabilities
from .calibration_result import METRICS, CalibrationResult
from .experiment import MethodPart, check_methods, fit_part, merge_parts, method_reads, split_design, with_progress

__all__ = [
    "PRESET",
    "CalibrationDesign",
    "CalibrationPart",
    "CalibrationSpec",
    "calibration",
    "calibration_part",
    "calibration_spec",
    "calibration_record",
    "merge_calibration",
    "record_traces",
]

PRESET = "adult-logistic"
"""The built-in model whose research preset (C = 11, s = (1, 550), v = √114, init (0, −6), T = 10⁴, q = 0.1)
sets the DPVI runs."""
HISTOGRAM_BINS = 20


@dataclasses.dataclass(frozen=True)
class CalibrationSpec:
    """Everything that determines a calibration study at one privacy level: its numbers are a function of this.

    data; methods and their options objects; settings: record_dpvi's; noise_multiplier σ (None when only the
    non-private reference runs), epsilon, delta; runs R, samples K, bins, binning; key: raw words (2,) uint32;
    chunk: DPVI runs per part (`parts`), the unit of work of a study. A study names its tasks by the spec's
    `canonical` data (`na.studies`); ε, σ and δ are stored as floats.
    """

    data: Dataset
    methods: tuple[Method, ...]
    options: Mapping[str, Any]
    settings: Mapping[str, Any]
    noise_multiplier: float | None
    epsilon: float | None
    delta: float
    runs: int
    samples: int
    bins: int
    binning: str
    key: np.ndarray
    chunk: int

    @property
    def traced(self) -> tuple[str, ...]:
        """The methods that read the DPVI traces."""
        return tuple(m.name for m in self.methods if m.reads == "trace")

    @property
    def parts(self) -> list[slice]:
        """The runs of each part, `chunk` at a time (one part of one problem for the reference alone)."""
        if not self.traced:
            return [slice(0, 1)]
        return chunk_slices(self.runs, self.chunk)


@data_type
@dataclasses.dataclass(frozen=True)
class CalibrationPart:
    """One part of a calibration study: every method's `MethodPart` on its runs, its DPVI seconds, and the
    traces' (ε, σ, T) (None without traces)."""

    parts: Mapping[str, MethodPart]
    dpvi_seconds: float | None
    trace_facts: tuple[float | None, float, int] | None


@dataclasses.dataclass(frozen=True)
class CalibrationDesign:
    """The design of a calibration study at each privacy level, beyond the data and the level: the defaults of
    `na.calibration`, `calibration_spec` and `noiseaware calibrate`, written once.

    methods: names or `Method` records that read a trace, and "nonprivate"; runs R (DPVI runs); samples K (θ
    draws per posterior for the predictive); bins and binning of the metrics; chunk: runs per part (a study's
    task); delta δ; method_options: {method: options object or mapping}.
    """

    methods: tuple[str | Method, ...] = ("exact", "naive")
    runs: int = 20
    samples: int = DRAWS
    bins: int = 10
    binning: str = "equal-count"
    chunk: int = 20
    delta: float = DEFAULT_DELTA
    method_options: Mapping[str, Any] | None = None


def calibration_spec(
    data: Dataset,
    *,
    key,
    epsilon: float | None = None,
    noise_multiplier: float | None = None,
    registry: Registry = DEFAULT_REGISTRY,
    **arguments,
) -> CalibrationSpec:
    """The CalibrationSpec of a `calibration` call, every argument checked before any work. arguments: fields of
    `CalibrationDesign` and DPVI settings that replace the adult-logistic preset's."""
    bm = get_model(PRESET)
    design, overrides = split_design(CalibrationDesign, arguments)
    resolved, options = check_methods(design.methods, registry, bm.name, epsilon, design.method_options)
    check_delta(design.delta, allow_weak_privacy=overrides.get("allow_weak_privacy", False))
    for method in resolved:
        if method.reads != "trace" and method.private:
            raise ValueError(
                f"method {method.name!r} releases its own statistics; calibration compares methods "
                "on the same DPVI traces (and the non-private reference)"
            )
    for name in ("runs", "samples", "chunk"):
        positive_int(name, getattr(design, name))
    settings = dict(bm.dpvi_settings) | {"labels": {"theta": tuple(data.feature_names)}} | overrides
    sigma = None
    if any(m.reads == "trace" for m in resolved):
        if (epsilon is None) == (noise_multiplier is None):
            raise ValueError("give exactly one of epsilon and noise_multiplier")
        sigma = (
            noise_multiplier
            if noise_multiplier is not None
            else calibrate(epsilon, design.delta, settings["sampling_rate"], settings["steps"])
        )
    return CalibrationSpec(
        data,
        tuple(resolved),
        options,
        settings,
        None if sigma is None else float(sigma),
        None if epsilon is None else float(epsilon),
        float(design.delta),
        design.runs,
        design.samples,
        design.bins,
        design.binning,
        key_words(key),
        design.chunk,
    )


def calibration(data: Dataset, *, key, progress: Progress = True, **arguments) -> CalibrationResult:
    """Calibration of the predictive probabilities of methods on data's test set (module doc).

    data: a `Dataset` (e.g. `na.datasets.adult()`). arguments: epsilon or noise_multiplier (exactly one, unless
    every method is a non-private reference), the fields of `CalibrationDesign` (methods, runs R, samples K,
    bins, binning, chunk, delta, method_options) with its defaults, registry, and DPVI settings that replace the
    adult-logistic preset's (steps, …). methods: names in `registry` or `Method` records that read a trace
    (plug-ins too), and "nonprivate". The R DPVI runs are recorded and fitted `chunk` at a time
    (`calibration_part`, merged exactly by `merge_calibration`; `na.studies.calibration_study` runs the parts
    elsewhere, resumably); method_options e.g. {"exact": {"prior": "paper"}}, {"nonprivate": {"warmup": 500}};
    the traces name θ's coordinates by data.feature_names (`theta[age]`). The same key and chunk give the same
    numbers, whichever other methods run beside a method.
    """
    spec = calibration_spec(data, key=key, **arguments)
    shown = dataclasses.replace(spec, options={n: with_progress(o, progress) for n, o in spec.options.items()})
    parts = [calibration_part(shown, part, progress=progress) for part in spec.parts]
    return merge_calibration(calibration_record(spec), parts)


def calibration_part(spec: CalibrationSpec, part: slice, progress: Progress = False) -> CalibrationPart:
    """Part `part` of the study `spec`: its DPVI runs (keys split(k, R)[part]), every method fitted and scored."""
    k_dpvi, k_fit, k_draw = jax.random.split(as_key(spec.key), 3)
    traces: list[Trace] = []
    seconds = None
    if spec.traced:
        start = time.perf_counter()
        traces = record_traces(
            spec.data,
            noise_multiplier=spec.noise_multiplier,
            delta=spec.delta,
            runs=spec.runs,
            key=k_dpvi,
            chunk=spec.chunk,
            progress=progress,
            part=part,
            **spec.settings,
        )
        seconds = time.perf_counter() - start
    train = spec.data.train_data()
    count = part.stop - part.start
    batch = Batch(
        tuple(traces),
        get_model(PRESET),
        {name: a[None] for name, a in train.items()},
        spec.epsilon,
        spec.delta,
        shared_data=True,
        size=count,
        model_prior=False,
    )

    def score(method: Method, outcomes: list[Outcome], keys) -> tuple[dict[str, Any], int]:
        draws = [
            None if isinstance(o, Exception) else np.asarray(o.sample(k, spec.samples)) for o, k in zip(outcomes, keys)
        ]
        finite = [d if d is not None and np.all(np.isfinite(d)) else None for d in draws]
        non_finite = sum(d is not None for d in draws) - sum(d is not None for d in finite)
        return _score(finite, spec.data, spec.bins, spec.binning), non_finite

    total = spec.runs if spec.traced else 1
    parts = fit_part(
        batch, spec.methods, spec.options, key=(k_fit, k_draw), score=score, offset=part.start, total=total
    )
    facts = (traces[0].epsilon, traces[0].noise_multiplier, traces[0].steps) if traces else None
    return CalibrationPart(parts, seconds, facts)


def calibration_record(spec: CalibrationSpec) -> dict[str, Any]:
    """All that merging and reporting a calibration study needs of its spec, as plain data (a study's plan.json);
    level: ["epsilon", ε] or ["noise_multiplier", σ], None for the non-private reference alone."""
    data = spec.data
    level = None
    if spec.traced:
        level = ["epsilon", spec.epsilon] if spec.epsilon is not None else ["noise_multiplier", spec.noise_multiplier]
    return {
        "dataset": data.name,
        "level": level,
        "scaling": data.scaling,
        "n_train": int(data.X_train.shape[0]),
        "n_test": int(data.X_test.shape[0]),
        "dim": data.dim,
        "epsilon": spec.epsilon,
        "delta": spec.delta,
        "runs": spec.runs,
        "samples": spec.samples,
        "bins": spec.bins,
        "binning": spec.binning,
        "preset": PRESET,
        "dpvi_settings": {k: repr(v) for k, v in spec.settings.items()},
        "key": key_repr(spec.key),
        "methods": method_reads(spec.methods),
        "traced": list(spec.traced),
        "method_options": {name: repr(o) for name, o in spec.options.items()},
        "chunk": spec.chunk,
        "parts": len(spec.parts),
    }


def calibration_summary(spec: CalibrationSpec) -> dict[str, Any]:
    """Deprecated alias of `calibration_record`."""
    warn_renamed("calibration_summary", "calibration_record")
    return calibration_record(spec)


def merge_calibration(record: Mapping[str, Any], parts: Sequence[CalibrationPart]) -> CalibrationResult:
    """The CalibrationResult of a study from its parts, in order (exact: `merge_parts`); record:
    `calibration_record` of its spec."""
    if len(parts) != record["parts"]:
        raise ValueError(f"a calibration study of {record['parts']} parts, given {len(parts)}")
    results = merge_parts([p.parts for p in parts], record["methods"])
    pieces = {name: {m: run.score[name] for m, run in results.items()} for name in ("metrics", "curves", "histograms")}
    seconds = {} if parts[0].dpvi_seconds is None else {"dpvi": sum(p.dpvi_seconds for p in parts)}
    for method, run in results.items():
        seconds[method] = run.fit_seconds
        seconds[f"predict_{method}"] = run.score_seconds
    facts = parts[0].trace_facts
    settings = {key: record[key] for key in SETTINGS}
    settings["epsilon"] = record["epsilon"] if record["epsilon"] is not None or facts is None else facts[0]
    settings["noise_multiplier"] = None if facts is None else facts[1]
    settings["steps"] = None if facts is None else facts[2]
    settings["methods"] = list(record["methods"])
    return CalibrationResult(
        **pieces,
        failures={m: run.failures for m, run in results.items()},
        diagnostics={m: run.diagnostics for m, run in results.items()},
        paired_methods=tuple(record["traced"]),
        seconds=seconds,
        settings=settings,
    )


SETTINGS = (
    "dataset",
    "scaling",
    "n_train",
    "n_test",
    "dim",
    "delta",
    "runs",
    "samples",
    "bins",
    "binning",
    "preset",
    "dpvi_settings",
    "key",
    "method_options",
    "chunk",
)
"""The entries of a spec's record that a CalibrationResult's settings repeat as they are."""


def record_traces(
    data: Dataset,
    *,
    noise_multiplier: float,
    delta: float,
    runs: int,
    key,
    chunk: int,
    progress: Progress = False,
    part: slice | None = None,
    **settings,
) -> list[Trace]:
    """R DPVI traces of data's training set with keys split(key, R) (those of runs `part` only, when given):
    `record_dpvi_batch` on copies of the data, `chunk` at a time."""
    keys = jax.random.split(key, runs)
    train = data.train_data()
    traces: list[Trace] = []
    part = part or slice(0, runs)
    for piece in chunk_slices(part.stop, chunk, part.start):
        count = piece.stop - piece.start
        copies = {name: np.broadcast_to(array, (count, *array.shape)) for name, array in train.items()}
        traces += record_dpvi_batch(
            logistic_regression,
            copies,
            keys=keys[piece],
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
