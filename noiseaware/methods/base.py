"""The method contract: one protocol for every way of turning traces (or released statistics) into posteriors.

A `Method` is a small frozen record, in the spirit of optax's `GradientTransformation`: a name, the type
of its options (a frozen dataclass), what it reads, and one pure batched function

    fit_batch(batch, keys, options) -> [posterior or the FitFailure that explains its failure] × M

over the M problems of a `Batch` (traces, and for mechanism baselines the data), with keys (M,) one
PRNG key per problem. Problem m's draws depend on keys[m] alone, so `fit(trace, key=k)` is the batch of
one with keys [k], and `fit_batch(traces, key)` over M traces equals M `fit` calls with the keys
jax.random.split(key, M). A statistical failure (no finite optimum, a diverged sampler, a coordinate that
never moved) is a `FitFailure` with its reason, returned (or raised: it then fails every problem of the
batch), so a study counts it and goes on; anything else a method raises is a bug, and stops the study.

Methods are looked up in a `Registry`, an immutable mapping name → Method: `DEFAULT_REGISTRY` holds the
built-ins, `registry.including(method)` gives a new registry with a plug-in, and every entry point (fit,
fit_batch, coverage, calibration, the CLI) takes `methods` as names or `Method` objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import jax
import numpy as np

from ..models import get as builtin_model
from ..models.benchmark import BenchmarkModel
from ..posteriors.base import Posterior
from ..trace import Trace
from ..util.errors import FitFailure
from ..util.hints import hint
from ..util.keys import as_key
from .model_match import check_model_matches

__all__ = [
    "Batch",
    "FitFailure",
    "Method",
    "NoOptions",
    "Outcome",
    "Problem",
    "Registry",
    "failure_reasons",
    "fit_problems",
    "outcome_of",
    "per_problem",
    "per_trace",
    "research_transforms",
    "split_keys",
]

Outcome = Posterior | FitFailure
"""What a method returns per problem: its posterior, or the FitFailure that says why the fit failed."""

Reads = Literal["trace", "data"]


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A method without options."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """What a method may see of problem m: its trace, its data (mechanism baselines only) and the privacy level."""

    index: int
    trace: Trace | None
    data: Mapping[str, Any] | None
    model: BenchmarkModel | None
    epsilon: float | None
    delta: float | None


@dataclasses.dataclass(frozen=True)
class Batch:
    """M problems of one model at one privacy level: what methods may see, never the truth.

    traces: the M released traces (empty when a study runs mechanism baselines only); data: the problems'
    data, arrays with a leading axis M, or None when methods may not read it; model: the BenchmarkModel
    (None for traces of an unknown model); epsilon, delta: the privacy level a mechanism baseline may
    spend on each problem's data; shared_data: all M problems hold the same data (repeated DP runs on one
    data set), so a non-private reference method is fitted once; model_prior: whether the gradient-model routes
    take the VI optimum's prior from `model` (docs/method.md §2.3) — True for the model's own simulations and a
    user's `fit(trace, model=bm)`, False for a study of real data (calibration), where the trace-centred prior
    keeps what the burn-in says about φ* and the model's prior measurably does worse (docs/results.md). A batch
    whose prior comes from its model checks, when it is made, that the model's sites are its traces'
    (`check_model_matches`): `fit(trace, model=bm)` and a study give the same answer.
    """

    traces: tuple[Trace, ...]
    model: BenchmarkModel | None = None
    data: Mapping[str, Any] | None = None
    epsilon: float | None = None
    delta: float | None = None
    shared_data: bool = False
    size: int | None = None
    model_prior: bool = True

    def __post_init__(self):
        object.__setattr__(self, "traces", tuple(self.traces))
        if self.size is None:
            object.__setattr__(self, "size", len(self.traces))
        if self.traces and len(self.traces) != self.size:
            raise ValueError(f"a batch of {self.size} problems needs {self.size} traces; got {len(self.traces)}")
        if self.model is not None and self.model_prior and self.traces:
            check_model_matches(self.model, self.traces)  # the one place a fit's model meets its traces

    def __len__(self) -> int:
        return self.size

    def data_sets(self) -> dict[str, np.ndarray]:
        """The problems' data arrays with a leading axis M (data shared by all problems repeated, not copied); {}
        when methods may not read the data."""
        return {
            name: np.broadcast_to(np.asarray(values)[:1], (len(self), *np.shape(values)[1:]))
            if self.shared_data
            else np.asarray(values)
            for name, values in (self.data or {}).items()
        }

    def problem(self, m: int) -> Problem:
        data = None if self.data is None else jax.tree.map(lambda a: a[0 if self.shared_data else m], dict(self.data))
        return Problem(m, self.traces[m] if self.traces else None, data, self.model, self.epsilon, self.delta)


FitBatch = Callable[[Batch, jax.Array, Any], Sequence[Outcome]]


UNNAMING = ("description", "reads_rows")
"""The fields of a `Method` that do not change its results, left out of its fingerprint."""


@dataclasses.dataclass(frozen=True)
class Method:
    """A way from problems to posteriors.

    name: the registry key; fit_batch(batch, keys, options) → one Outcome per problem (or a single one for
    a non-private reference on shared data), a posterior or a `FitFailure`; options: the frozen dataclass of
    its options; reads: "trace" (only the DP-released traces) or "data" (releases its own DP statistics of the
    data at the batch's (ε, δ), or, with private=False, is a non-private reference that reads the data
    itself); models: the model names it supports (None: any); needs_epsilon: it spends an ε of its own (a run
    given by σ alone must say which ε σ stands for); transforms: "research" when its posteriors' θ uses the
    built-in models' research transforms whatever the run's (the sufficient-statistic baselines), None when it
    uses the run's own; reads_rows: it reads a trace's rows, so a run kept as windows (`Run.rows()` is None) is
    refused (False: it reads a run only through its moments, as the gradient-model routes do); families: the
    family kinds of the traces it fits (None: any; ("point",) for the sandwich), others refused; description: one
    line for tables and --help; version: the
    method's own version, which names it in a study's fingerprint instead of its code (bump it when its
    results change; without one, a study hashes fit_batch's code and closure values, so a changed body is new
    work).
    """

    name: str
    fit_batch: FitBatch
    options: type = NoOptions
    reads: Reads = "trace"
    models: tuple[str, ...] | None = None
    needs_epsilon: bool = False
    private: bool = True
    description: str = ""
    version: str | None = None
    transforms: str | None = None
    reads_rows: bool = True
    families: tuple[str, ...] | None = None

    def __fingerprint__(self) -> dict[str, Any]:
        """What names the method in a study: its declared version, or its fields with fit_batch's code."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in UNNAMING}
        if self.version is not None:
            fields.pop("fit_batch")
        return fields

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name):
            raise ValueError(f"a method needs a non-empty name; got {self.name!r}")
        if not callable(self.fit_batch):
            raise TypeError(f"method {self.name!r}: fit_batch must be callable")
        if not (isinstance(self.options, type) and dataclasses.is_dataclass(self.options)):
            raise TypeError(f"method {self.name!r}: options must be a dataclass type")
        if self.reads not in ("trace", "data"):
            raise ValueError(f"method {self.name!r}: reads must be 'trace' or 'data'; got {self.reads!r}")

    def make_options(self, options=None, **overrides):
        """The method's options from an instance of its options class, a mapping, or keywords (validated)."""
        if isinstance(options, self.options):
            return dataclasses.replace(options, **overrides) if overrides else options
        values = dict(options or {}) | overrides
        known = {field.name for field in dataclasses.fields(self.options)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"method {self.name!r} has no option {', '.join(map(repr, unknown))}; its options: "
                f"{', '.join(sorted(known)) or 'none'}"
            )
        return self.options(**values)

    def check(self, model: str | None, epsilon: float | None) -> None:
        """A ValueError, before any work, unless the method supports `model` and has the ε it needs."""
        if self.models is not None and model not in self.models:
            raise ValueError(f"method {self.name!r} supports the models {', '.join(self.models)}, not {model!r}")
        if self.needs_epsilon and epsilon is None:
            raise ValueError(
                f"method {self.name!r} releases its own statistics at an ε, and this run has a noise "
                "multiplier only: give the run an ε (--epsilon), or the ε that σ stands for as the "
                f"method's option, e.g. method_options={{{self.name!r}: {{'epsilon': …}}}}"
            )


def check_model_options(options: Any, bm: BenchmarkModel) -> None:
    """A ValueError, before any work, when a method's options do not suit the run's model `bm`: an options class
    may define check_model(bm) for what its fields cannot say alone (DP-PVI's clients against the model's N)."""
    check = getattr(options, "check_model", None)
    if check is not None:
        check(bm)


def check_transforms(method: Method, bm: BenchmarkModel) -> None:
    """A ValueError, before any work, when `method` draws θ under other transforms than the run's model `bm` (a
    BenchmarkModel) uses for its truth and traces: its intervals would be scored on another scale."""
    if method.transforms != "research":
        return
    research = builtin_model(bm.name).site_map
    run = {site.name: site.transform for site in bm.site_map.sites}
    wanted = {site.name: site.transform for site in research.sites}
    if run != wanted:
        shown = ", ".join(f"{name}: {transform}" for name, transform in wanted.items())
        mine = ", ".join(f"{name}: {transform}" for name, transform in run.items())
        raise ValueError(
            f"method {method.name!r} draws θ under the research transforms ({shown}), and this run's θ uses "
            f"{mine} (e.g. a tuned preset): run it with the research preset "
            f"({hint('na.models.get(name, preset=' + repr('research') + ')', '--preset research')})"
        )


def research_transforms(methods: Sequence[Method]) -> str | None:
    """Why a tuned preset (numpyro's transforms) cannot serve these methods: the ones that draw θ under the
    research transforms, named; None when there are none."""
    fixed = [method.name for method in methods if method.transforms == "research"]
    if not fixed:
        return None
    return f"{', '.join(fixed)} {'draws' if len(fixed) == 1 else 'draw'} θ under the research transforms"


def fit_problems(method: Method, batch: Batch, keys, options) -> list[Outcome]:
    """method.fit_batch with its promise checked: one Outcome per problem (one in all for a non-private
    reference on shared data); a FitFailure raised by the method becomes every problem's outcome. Anything
    else it raises propagates (a bug), and so does an outcome that is neither a posterior nor a FitFailure. A
    trace of a family the method does not fit is a ValueError before any work."""
    if method.families is not None and method.reads == "trace":
        other = sorted({t.family.kind for t in batch.traces} - set(method.families))
        if other:
            raise ValueError(
                f"method {method.name!r} fits traces of the {' and '.join(method.families)} family only, and these "
                f"are {', '.join(other)}: fit them with a method for any family (method='exact', the noise-aware one)"
            )
    try:
        outcomes = list(method.fit_batch(batch, keys, options))
    except FitFailure as failure:
        return [failure] * len(batch)
    expected = {len(batch)} | ({1} if batch.shared_data and not method.private else set())
    if len(outcomes) not in expected:
        raise RuntimeError(f"method {method.name!r} returned {len(outcomes)} outcomes for {len(batch)} problems")
    for m, outcome in enumerate(outcomes):
        if isinstance(outcome, BaseException) and not isinstance(outcome, FitFailure):
            raise TypeError(
                f"method {method.name!r} returned {type(outcome).__name__}({outcome}) for problem {m}: return a "
                "noiseaware FitFailure(reason, message) for a statistical failure, and raise for anything else"
            ) from outcome
    return outcomes


def failure_reasons(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """{reason: count} of the FitFailures among `outcomes`, e.g. {"no finite optimum": 3}, most frequent first."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        if isinstance(outcome, FitFailure):
            counts[outcome.reason] = counts.get(outcome.reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def per_trace(
    name: str,
    fit_one: Callable[[Trace, jax.Array, Any], Posterior],
    *,
    options: type = NoOptions,
    description: str = "",
    version: str | None = None,
) -> Method:
    """A method from a function of one trace: fit_one(trace, key, options) → posterior, called problem by problem
    (version: see `Method`)."""

    def fit_batch(batch: Batch, keys, opts) -> list[Outcome]:
        return [outcome_of(lambda t=t, k=k: fit_one(t, k, opts)) for t, k in zip(batch.traces, keys)]

    description = description or (fit_one.__doc__ or "").strip()
    return Method(name, fit_batch, options, "trace", description=description, version=version)


def per_problem(
    name: str,
    fit_one: Callable[[Problem, jax.Array, Any], Posterior],
    *,
    options: type = NoOptions,
    models: tuple[str, ...] | None = None,
    needs_epsilon: bool = False,
    private: bool = True,
    description: str = "",
    version: str | None = None,
) -> Method:
    """A method that reads each problem's data: fit_one(problem, key, options) → posterior, problem by problem.

    A mechanism baseline must spend at most problem.epsilon, problem.delta on problem.data; a non-private
    reference (private=False) is fitted once when the problems share their data.
    """

    def fit_batch(batch: Batch, keys, opts) -> list[Outcome]:
        count = 1 if batch.shared_data and not private else len(batch)
        return [outcome_of(lambda m=m: fit_one(batch.problem(m), keys[m], opts)) for m in range(count)]

    description = description or (fit_one.__doc__ or "").strip()
    return Method(name, fit_batch, options, "data", models, needs_epsilon, private, description, version)


def outcome_of(make: Callable[[], Posterior]) -> Outcome:
    """make()'s posterior, or the FitFailure it raised (anything else propagates)."""
    try:
        return make()
    except FitFailure as failure:
        return failure


class Registry(Mapping[str, Method]):
    """An immutable mapping name → Method; `including` returns a new registry with more methods."""

    def __init__(self, methods: Iterable[Method] = ()):
        self._methods: dict[str, Method] = {}
        for method in methods:
            if not isinstance(method, Method):
                raise TypeError(f"a registry holds Method records; got {type(method).__name__}")
            if method.name in self._methods:
                raise ValueError(f"two methods are called {method.name!r}")
            self._methods[method.name] = method

    def __getitem__(self, name: str) -> Method:
        try:
            return self._methods[name]
        except KeyError:
            raise KeyError(
                f"unknown method {name!r}: choose from {', '.join(self._methods)}, or pass a Method "
                "(see docs/methods.md)"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._methods)

    def __len__(self) -> int:
        return len(self._methods)

    def __repr__(self) -> str:
        return f"Registry({', '.join(self._methods)})"

    def including(self, *methods: Method) -> Registry:
        """A new registry with `methods` added (a method of an existing name replaces it)."""
        names = {method.name for method in methods}
        return Registry([m for m in self._methods.values() if m.name not in names] + list(methods))

    def names(self, reads: Reads | None = None) -> tuple[str, ...]:
        """The registered names (only those that read `reads`, when given)."""
        return tuple(name for name, m in self._methods.items() if reads is None or m.reads == reads)

    def resolve(self, methods: Sequence[str | Method]) -> list[Method]:
        """Method records for names or records; a ValueError naming every unknown name, before any work."""
        if isinstance(methods, (str, Method)):
            methods = [methods]
        if not methods:
            raise ValueError(f"no methods given: choose from {', '.join(self._methods)}")
        unknown = [m for m in methods if isinstance(m, str) and m not in self._methods]
        if unknown:
            raise ValueError(f"unknown methods {unknown}: choose from {', '.join(self._methods)}, or pass a Method")
        resolved = [self._methods[m] if isinstance(m, str) else m for m in methods]
        bad = [m for m in resolved if not isinstance(m, Method)]
        if bad:
            raise TypeError(f"methods are names or noiseaware Method records; got {type(bad[0]).__name__}")
        names = [m.name for m in resolved]
        if len(set(names)) != len(names):
            raise ValueError(f"a method is named twice in {names}")
        return resolved


def split_keys(key, count: int) -> jax.Array:
    """The batch-key convention: problem m of M uses jax.random.split(key, M)[m], a batch of one the key itself
    (so a batch of one is `fit` with that key): (M,) keys."""
    key = as_key(key)
    return key[None] if count == 1 else jax.random.split(key, count)
