"""Steps shared by the `noiseaware` commands: keys from a seed, models by name, a trace's report, fits that report
their warnings (output files: `outputs`; the per-level reports of `coverage` and `calibrate`: their study kinds)."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import jax

from .. import models
from ..checks import TraceDiagnosis
from ..methods.fit import fit
from ..posteriors.mixture import MixturePosterior
from ..trace import Trace
from ..util.keys import as_key
from ..util.notes import gather

THETA_STREAM = 3
"""θ draws for saved posteriors and plots: fold_in(fit key, THETA_STREAM), apart from the fit's own draws."""
NUTS_OPTIONS = ("start", "warmup", "chains", "backend")
"""fit options for --method nuts only (argparse destinations = NutsOptions fields)."""


# ---------------------------------------------------------------- keys and models


def keys(seed: int) -> tuple[jax.Array, jax.Array]:
    """Independent keys for the simulation and the DPVI run from one seed < 2^63 (all its bits kept)."""
    key_simulation, key_dpvi = jax.random.split(as_key(seed))
    return key_simulation, key_dpvi


def builtin(name: str, *, preset: bool = True) -> models.BenchmarkModel:
    """Built-in model `name` with its research preset (the commands choose between presets by ε with
    `presets.preset_models`), or as a user writes it (preset=False)."""
    try:
        return models.get(name, preset="research" if preset else False)
    except KeyError as error:
        raise ValueError(error.args[0]) from None


def import_attribute(spec: str):
    """The object named by 'package.module:name' (the current directory is searched first)."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ValueError(f"--model {spec}: write a user model as package.module:name")
    cwd = str(Path.cwd())
    sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"--model {spec}: cannot import {module_name} ({error}); run from the directory that "
            "holds it, or install it"
        ) from error
    finally:
        sys.path.remove(cwd)
    if not hasattr(module, name):
        raise ValueError(f"--model {spec}: module {module_name} has no {name!r}")
    return getattr(module, name)


# ---------------------------------------------------------------- traces and fits


def trace_report(trace: Trace, report: TraceDiagnosis | None) -> str:
    """What a command prints after recording: `trace.describe()`, then the trace checks' report (`report`, from
    `diagnose_if_long_enough(trace)`: verdict, findings, verdict per θ coordinate) when there is one."""
    return trace.describe() if report is None else f"{trace.describe()}\n\n{report}"


def route_options(args) -> dict:
    """The route's own options given on the command line: --start, --warmup, --chains, --backend for nuts."""
    given = {name: getattr(args, name) for name in NUTS_OPTIONS if getattr(args, name, None) is not None}
    if args.method != "nuts":
        if given:
            flags = ", ".join(f"--{name}" for name in given)
            raise ValueError(f"{flags} apply to --method nuts only, not to --method {args.method}")
        return {}
    return given | {"progress": True}


def fit_reporting_warnings(trace: Trace, method: str, **options) -> MixturePosterior:
    """`fit(trace, method, **options)`, its warnings printed as `warning: …` lines on stderr, each once."""
    with reporting_warnings():
        return fit(trace, method, **options)


@contextmanager
def reporting_warnings() -> Iterator[None]:
    """The warnings raised inside (a fit's, a plot's) printed as `warning: …` lines on stderr, each once —
    also when the block fails: they may explain why."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        _show_warnings(caught)


def _show_warnings(caught: Sequence[warnings.WarningMessage]) -> None:
    """The fit's warnings as one complete line each, repeats dropped (`notes.gather`): its own and
    libraries' advice (UserWarning) and numerical ones (RuntimeWarning, with where they arose); the rest
    (deprecations and the like) go back to Python's warning filters."""
    shown = [w for w in caught if issubclass(w.category, (UserWarning, RuntimeWarning))]
    for warning in caught:
        if not issubclass(warning.category, (UserWarning, RuntimeWarning)):
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    for _, line in gather(shown, 1):
        print(f"warning: {line}", file=sys.stderr)
