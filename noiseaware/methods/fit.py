"""`fit` and `fit_batch`: traces → posteriors by any registered method; `fit` is the batch of one.

fit(trace, "exact", key=k)                  ≡ fit_batch([trace], "exact", key=…) with keys [k]
fit_batch(traces, "exact", key=k)[m]        ≡ fit(traces[m], "exact", key=jax.random.split(k, M)[m])
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..posteriors.base import Posterior
from ..trace import Trace
from ..util.keys import as_key
from .base import Batch, Method, Registry, fit_problems, split_keys, summarise_warnings
from .registry import DEFAULT_REGISTRY

__all__ = ["fit", "fit_batch"]

OnError = Literal["raise", "skip"]


def fit(
    trace: Trace,
    method: str | Method = "exact",
    *,
    key,
    options: Any = None,
    registry: Registry = DEFAULT_REGISTRY,
    **option_values,
) -> Posterior:
    """The posterior of one trace by `method` (a registered name or a `Method`), with its options.

    key: a jax PRNG key or int seed (required: the draws depend on it). options: the method's options
    object (e.g. `na.methods.ExactOptions(prior="paper")`) or a mapping; keyword options override it, e.g.
    fit(trace, "nuts", key=0, chains=4, warmup=500). A failed fit raises its ValueError.
    """
    return _fit([trace], method, as_key(key)[None], options, registry, "raise", option_values, stacklevel=3)[0]


def fit_batch(
    traces: Sequence[Trace],
    method: str | Method = "exact",
    *,
    key,
    options: Any = None,
    on_error: OnError = "raise",
    registry: Registry = DEFAULT_REGISTRY,
    **option_values,
) -> list[Posterior | None]:
    """`fit` for M traces of one model in one batched computation (vmapped where the method allows).

    Trace m uses jax.random.split(key, M)[m], so the result equals M `fit` calls with those keys.
    on_error="raise" raises the first failed fit's error (naming the trace); "skip" puts None in its
    place and warns with the count. Warnings are gathered: one per kind, with the number of traces.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip'; got {on_error!r}")
    traces = list(traces)
    if not traces:
        raise ValueError("fit_batch needs at least one trace")
    return _fit(traces, method, split_keys(key, len(traces)), options, registry, on_error, option_values, stacklevel=3)


def _fit(
    traces: list[Trace],
    method: str | Method,
    keys,
    options,
    registry: Registry,
    on_error: OnError,
    option_values: Mapping[str, Any],
    stacklevel: int,
) -> list[Posterior | None]:
    (chosen,) = registry.resolve([method])
    if chosen.reads != "trace":
        raise ValueError(
            f"method {chosen.name!r} reads the data, not a trace: run it in na.coverage or call its "
            "baseline function on your data"
        )
    for trace in traces:
        if not isinstance(trace, Trace):
            raise TypeError(f"fit needs a noiseaware.Trace, got {type(trace).__name__}: load one with Trace.load(path)")
    settings = chosen.make_options(options, **option_values)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcomes = fit_problems(chosen, Batch(tuple(traces)), keys, settings)
    failed = [(m, o) for m, o in enumerate(outcomes) if isinstance(o, Exception)]
    if failed and on_error == "raise":
        index, error = failed[0]
        raise type(error)(str(error) if len(traces) == 1 else f"trace {index}: {error}")
    summarise_warnings(caught, len(traces), stacklevel=stacklevel + 1)
    if failed:
        index, error = failed[0]
        warnings.warn(
            f"{len(failed)} of {len(traces)} fits failed and are None (first: trace {index}: {error})",
            stacklevel=stacklevel,
        )
    return [None if isinstance(o, Exception) else o for o in outcomes]
