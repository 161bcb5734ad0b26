"""The `noiseaware` command line: `account`, `record`, `fit`, `coverage`, `calibrate` and `demo`.

    noiseaware account --epsilon 0.1 0.3 1.0          # σ for each ε (PLD accountant)
    noiseaware account --noise-multiplier 37.81       # ε spent by a given σ
    noiseaware record --model M1 --epsilon 1 --out m1.nc
    noiseaware record --model mymodels:logistic --data adult.csv --epsilon 1 \\
        --steps 10000 --sampling-rate 0.01 --clip 2 --out adult.nc
    noiseaware fit m1.nc --method exact --out m1-posterior.nc --plot m1.png
    noiseaware coverage --model M1 --epsilon 0.1 1 --methods exact,nuts,naive --simulations 500 --out cov/
    noiseaware calibrate --dataset adult --epsilon 0.1 1 --methods exact,nuts,laplace,naive,dpvim --repeats 20 \\
        --out cal/
    noiseaware demo                                   # M1 end to end: trace, fit, comparison, plot

Simulated runs default to seed 0, for reproducibility. A run on real data (--data) draws a secret random
seed that is never printed or saved: the DP noise is a function of the seed, so anyone who knows it can
subtract the noise from the trace.

User errors (a bad option, model, data or trace file, or setting) print one line `error: …` on stderr
and exit with status 2; `main(argv)` returns the exit status instead of exiting, so it can be called
in-process. Warnings of a fit (a weak signal, a quadrature grid that cuts posterior mass) print as
`warning: …` lines on stderr, each once.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import math
import re
import secrets
import sys
import warnings
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from scipy.stats import gamma

from . import __version__, models
from .baselines.naive import naive_posterior
from .dpvi import record_dpvi
from .evaluation.calibration_experiment import CALIBRATION_METHODS, TRACE_METHODS
from .evaluation.simulate import METHODS as COVERAGE_REGISTRY
from .fit import METHODS, fit
from .gradient_model import PRIORS
from .keys import as_key
from .models.builtin import GAMMA_PRIOR
from .posterior import NoiseAwarePosterior, comparison_table
from .privacy import epsilon_spent, noise_multiplier
from .trace import BURN_IN, Trace, TraceError, text_table

__all__ = ["DataError", "build_parser", "load_data", "main"]

EXIT_USAGE = 2
TRACE_SUFFIXES = (".nc", ".npz")
DATA_SUFFIXES = (".csv", ".npz")
USER_MODEL_REQUIRED = ("steps", "sampling_rate", "clip")
"""Settings a user model must be given: it has no preset."""
SETTING_OPTIONS = ("steps", "sampling_rate", "clip", "mc_draws", "grad_scale", "lr_multiplier", "learning_rate",
                   "init", "transforms")
"""record options that override a preset's `dpvi_settings` (argparse destinations = record_dpvi keywords)."""
BLOCK_OPTIONS = ("grad_scale", "lr_multiplier", "learning_rate")
"""Options taking one value (all coordinates) or two (μ block, ρ block)."""
DEMO_MODEL = "gamma-exponential"
DEMO_TRACE, DEMO_POSTERIOR, DEMO_PLOT = "m1-trace.nc", "m1-posterior.nc", "m1-trace.png"
LEVEL = 0.9
"""Credibility level of the printed intervals: fit's default, the demo's."""
LAMBDA_DRAWS = 20_000
"""Draws of λ behind the demo's posterior means, sds and intervals."""
FIT_STREAM = 2
"""The demo's fit key: fold_in(key of --seed, FIT_STREAM), apart from the simulation and DPVI keys."""
THETA_STREAM = 3
"""θ draws for saved posteriors and plots: fold_in(fit key, THETA_STREAM), apart from the fit's own draws."""
NUTS_OPTIONS = ("warmup", "chains", "backend")
"""fit options for --method nuts only (argparse destinations = fit_nuts keywords)."""
COVERAGE_METHODS = tuple(COVERAGE_REGISTRY)
"""The built-in methods of `noiseaware coverage`: the trace methods and the sufficient-statistic baselines."""
DATASETS = ("adult",)
DIAGNOSTICS_FIRST = ("max_rhat", "min_ess", "divergences")
SIMULATION_SEED = 0
"""The default seed of simulated runs (reproducible); real data get a secret random seed instead."""
SEED_BITS = 63
KNOWN_SEED_WARNING = ("warning: --seed with --data: anyone who knows this seed can regenerate the DP noise and "
                      "remove it from the trace; use a fixed seed on real data only for testing")

_INDEXED_COLUMN = re.compile(r"^(?P<name>[A-Za-z_]\w*)(?:\[(?P<bracket>\d+)\]|\.(?P<dot>\d+))$")
_INTEGER = re.compile(r"^[+-]?\d+$")


class UsageError(Exception):
    """A command line argparse rejects."""


class DataError(ValueError):
    """A data file that cannot be read into keyword arrays for a model."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


# ---------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default sys.argv[1:]) and return its exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as error:
        return _fail(str(error))
    except SystemExit as done:  # --help, --version
        return done.code if isinstance(done.code, int) else 0
    try:
        with _precision(getattr(args, "float64", False)):
            return args.run(args)
    except (ValueError, OSError) as error:  # ModelError, TraceError, DataError, files; not bugs
        return _fail(" ".join(str(error).split("\n")))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


@contextmanager
def _precision(float64: bool) -> Iterator[None]:
    """With float64, enable 64-bit JAX before any array is made, and restore the setting afterwards."""
    if not float64:
        yield
        return
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of `noiseaware` with its subcommands."""
    parser = _Parser(prog="noiseaware", description="Noise-aware differentially private Bayesian inference "
                     "from DPVI traces.")
    parser.add_argument("--version", action="version", version=f"noiseaware {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", required=True)
    _add_account(commands)
    _add_record(commands)
    _add_fit(commands)
    _add_coverage(commands)
    _add_calibrate(commands)
    _add_demo(commands)
    return parser


def _add_dp_sgd_options(parser, defaults: bool) -> None:
    """--delta, --sampling-rate, --steps: the research defaults for `account`, the preset's for `record`."""
    preset = "" if defaults else " (default: the model's preset)"
    parser.add_argument("--delta", type=float, default=1e-5, metavar="D", help="δ (default: %(default)g)")
    parser.add_argument("--sampling-rate", type=float, default=0.1 if defaults else None, metavar="Q",
                        help="Poisson sampling rate q" + (" (default: %(default)g)" if defaults else preset))
    parser.add_argument("--steps", type=int, default=10_000 if defaults else None, metavar="T",
                        help="DP-SGD steps T" + (" (default: %(default)d)" if defaults else preset))


def _add_seed(parser, default: int | None, default_help: str) -> None:
    parser.add_argument("--seed", type=_seed, default=default, metavar="SEED",
                        help=f"integer in [0, 2^{SEED_BITS}), split into the simulation key and the DPVI key "
                        f"({default_help})")


def _seed(text: str) -> int:
    """--seed: an integer in [0, 2^63), all of whose bits enter the keys."""
    try:
        seed = int(text)
    except ValueError:
        seed = None
    if seed is None or not 0 <= seed < 2**SEED_BITS:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: give an integer in [0, 2^{SEED_BITS})")
    return seed


def _add_account(commands) -> None:
    parser = commands.add_parser(
        "account", help="noise multiplier σ ⇄ ε (PLD accountant)",
        description="Noise multiplier σ for a privacy level ε, or ε for σ, of T Poisson-subsampled Gaussian "
        "steps (DP-SGD), by the PLD accountant of dp-accounting. σ is always on the private side.",
    )
    level = parser.add_mutually_exclusive_group(required=True)
    level.add_argument("--epsilon", type=float, nargs="+", metavar="E", help="one or more ε: print σ for each")
    level.add_argument("--noise-multiplier", type=float, nargs="+", metavar="S",
                       help="one or more σ: print ε for each")
    _add_dp_sgd_options(parser, defaults=True)
    parser.set_defaults(run=_account)


def _add_record(commands) -> None:
    parser = commands.add_parser(
        "record", help="record a DPVI trace of a built-in or your own numpyro model",
        description="Run DPVI (DP-SGD on the ELBO) and save its trace. A built-in model simulates its data "
        "(or reads --data) and uses its research preset; options given here override the preset. A user "
        "model `package.module:function` needs --data, --steps, --sampling-rate and --clip.",
    )
    parser.add_argument("--model", required=True, metavar="NAME",
                        help=f"a built-in ({', '.join(models.names())}, M1, M2, M3) or package.module:function")
    parser.add_argument("--out", required=True, metavar="FILE", help="trace file to write (.nc or .npz)")
    parser.add_argument("--data", metavar="FILE",
                        help=".npz (arrays by keyword) or .csv (header = keywords; X[0], X[1], … stack into X)")
    level = parser.add_mutually_exclusive_group(required=True)
    level.add_argument("--epsilon", type=float, metavar="E", help="ε; σ is calibrated by the PLD accountant")
    level.add_argument("--noise-multiplier", type=float, metavar="S", help="σ; ε is reported by the accountant")
    level.add_argument("--non-private", action="store_true",
                       help="σ = 0, a non-private reference run (needs --learning-rate)")
    _add_seed(parser, None, f"default: {SIMULATION_SEED} for simulated data; with --data a secret random seed, "
              "never printed or saved, since anyone who knows the seed can remove the DP noise: give --seed "
              "with --data only for testing")
    _add_dp_sgd_options(parser, defaults=False)
    parser.add_argument("--clip", type=float, metavar="C", help="clipping norm C")
    parser.add_argument("--mc-draws", type=int, metavar="DRAWS", help="Monte Carlo draws S per step")
    parser.add_argument("--grad-scale", type=float, nargs="+", metavar="S",
                        help="preconditioning s: one value, or two (μ block, ρ block)")
    parser.add_argument("--lr-multiplier", type=float, nargs="+", metavar="V",
                        help="v of the κ heuristic λ = v·s/(sqrt(T·P)·σ·C): one value or two (μ, ρ)")
    parser.add_argument("--learning-rate", type=float, nargs="+", metavar="L",
                        help="explicit step size λ instead of the κ heuristic: one value or two (μ, ρ)")
    parser.add_argument("--init", type=float, nargs=2, metavar=("MU0", "RHO0"), help="initial μ₀ and ρ₀")
    parser.add_argument("--transforms", choices=("numpyro", "research"),
                        help="unconstrained maps: numpyro's biject_to, or research (softplus, additive log-ratio)")
    parser.add_argument("--n-examples", type=int, metavar="N", help="size of the simulated data set")
    parser.add_argument("--float64", action="store_true", help="record in 64-bit floats")
    parser.set_defaults(run=_record)


def _add_fit(commands) -> None:
    parser = commands.add_parser(
        "fit", help="the noise-aware posterior of a trace, beside the naive last iterate",
        description="Fit the gradient model to a trace file's steps after the burn-in, save the noise-aware "
        "posterior (.nc, read it with noiseaware.load_posterior), and print its intervals of θ beside the "
        "naive ones (the DPVI last iterate, which ignores the DP noise).",
    )
    parser.add_argument("trace", metavar="TRACE", help="trace file (.nc or .npz), e.g. from `noiseaware record`")
    parser.add_argument("--method", choices=METHODS, default="exact",
                        help="exact: closed form and quadrature (fast, no sampling error); laplace: Newton MAP and "
                        "a Gaussian; nuts: MCMC (default: %(default)s)")
    parser.add_argument("--out", required=True, metavar="FILE", help="posterior file to write (.nc)")
    parser.add_argument("--prior", choices=tuple(PRIORS), default="default",
                        help="prior preset of the gradient model; paper: the research settings (default: "
                        "%(default)s)")
    parser.add_argument("--burn-in", type=_fraction, default=BURN_IN, metavar="F",
                        help="fraction of the first steps left out of the fit (default: %(default)g)")
    parser.add_argument("--draws", type=_positive_int, default=4000, metavar="K",
                        help="draws of the VI optimum φ* (per chain with nuts) (default: %(default)d)")
    parser.add_argument("--seed", type=_seed, default=0, metavar="SEED",
                        help="key of the posterior's random draws (default: %(default)d)")
    parser.add_argument("--level", type=_probability, default=LEVEL, metavar="L",
                        help="credibility level of the printed intervals and plotted bands (default: %(default)g)")
    parser.add_argument("--plot", metavar="FILE", help="also write a PNG: μ_t per θ with the burn-in and the "
                        "inferred optimum μ*, beside the noise-aware and naive densities of θ")
    nuts = parser.add_argument_group("NUTS options (--method nuts only)")
    nuts.add_argument("--warmup", type=_count, metavar="W", help="warmup (adaptation) steps per chain (default: 1000)")
    nuts.add_argument("--chains", type=_positive_int, metavar="C", help="chains (default: 1)")
    nuts.add_argument("--backend", metavar="NAME",
                      help="sampler implementation: numpyro or blackjax (default: numpyro)")
    parser.set_defaults(run=_fit)


def _add_coverage(commands) -> None:
    parser = commands.add_parser(
        "coverage", help="TARP coverage of noise-aware and baseline posteriors on simulated data",
        description="Simulate M data sets from the model's prior, record a DPVI trace of each (one compiled "
        "program), fit every method on the same traces and score them by TARP (expected coverage of balls "
        "around reference points, R reference draws). Prints the coverage RMSE under both reference rules "
        "and writes DIR/coverage-MODEL-eps-E.json, .csv (the ECP curves) and .png (the curves).",
    )
    parser.add_argument("--model", required=True, metavar="NAME",
                        help=f"a built-in ({', '.join(models.names())}, M1, M2, M3) or package.module:name of a "
                        "model made by noiseaware.models.from_numpyro")
    _add_privacy_levels(parser)
    parser.add_argument("--methods", type=_method_list, default=("exact", "naive"), metavar="LIST",
                        help=f"comma-separated, from {', '.join(COVERAGE_METHODS)} (default: exact,naive)")
    parser.add_argument("--simulations", type=_positive_int, default=500, metavar="M", help="(default: %(default)d)")
    parser.add_argument("--repeats", type=_positive_int, default=20, metavar="R",
                        help="reference-point draws (default: %(default)d)")
    parser.add_argument("--draws", type=_positive_int, default=20_000, metavar="K",
                        help="θ draws per posterior (default: %(default)d)")
    parser.add_argument("--steps", type=_positive_int, metavar="T", help="DP-SGD steps (default: the preset's)")
    parser.add_argument("--delta", type=float, default=1e-5, metavar="D", help="δ (default: %(default)g)")
    parser.add_argument("--prior", choices=tuple(PRIORS), default="default",
                        help="gradient-model prior of exact, laplace and nuts (default: %(default)s)")
    parser.add_argument("--warmup", type=_count, metavar="W", help="NUTS warmup steps (default: 1000)")
    parser.add_argument("--seed", type=_seed, default=0, metavar="SEED", help="(default: %(default)d)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    parser.set_defaults(run=_coverage)


def _add_privacy_levels(parser) -> None:
    """The required choice of coverage and calibrate: one or more ε, or one or more σ."""
    level = parser.add_mutually_exclusive_group(required=True)
    level.add_argument("--epsilon", type=float, nargs="+", metavar="E", help="one or more ε (σ by the accountant)")
    level.add_argument("--noise-multiplier", type=float, nargs="+", metavar="S", help="one or more σ")


def _privacy_levels(args) -> list[tuple[str, float]]:
    """(keyword, value) per privacy level given by _add_privacy_levels' options."""
    if args.epsilon:
        return [("epsilon", e) for e in args.epsilon]
    return [("noise_multiplier", s) for s in args.noise_multiplier]


def _method_list(text: str, choices: Sequence[str] = COVERAGE_METHODS) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in choices]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown methods {unknown or text!r}: choose from {', '.join(choices)}")
    return names


def _add_calibrate(commands) -> None:
    from .datasets import SCALINGS
    from .evaluation.calibration import BINNINGS

    parser = commands.add_parser(
        "calibrate", help="calibration of posterior predictive probabilities on real data (UCI Adult)",
        description="Record R DPVI traces of a Bayesian logistic regression on the training set (the adult-logistic "
        "research preset, one compiled program), fit every method on the same traces, and score the posterior "
        "predictive probabilities on the test set: calibration RMSE over equal-count bins, ECE, Brier score, log "
        "loss, accuracy, and the paired difference to the naive last iterate. Prints a table and writes "
        "DIR/calibration-DATASET-eps-E.json and .png (reliability diagram) per privacy level.",
    )
    parser.add_argument("--dataset", choices=DATASETS, default="adult", help="(default: %(default)s)")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="folder with your own copy of adult.data and adult.test (default: the shipped copy)")
    parser.add_argument("--no-verify", action="store_true",
                        help="read files whose SHA-256 differs from the UCI originals (a copy changed on purpose)")
    parser.add_argument("--scaling", choices=SCALINGS, default="zscore",
                        help="of the continuous columns, with training statistics (default: %(default)s)")
    _add_privacy_levels(parser)
    parser.add_argument("--methods", type=lambda text: _method_list(text, CALIBRATION_METHODS),
                        default=TRACE_METHODS, metavar="LIST",
                        help=f"comma-separated, from {', '.join(CALIBRATION_METHODS)}; nonprivate (NUTS on the data, "
                        f"no privacy) runs once for all levels (default: {','.join(TRACE_METHODS)})")
    parser.add_argument("--repeats", type=_positive_int, default=20, metavar="R",
                        help="DPVI runs per level (default: %(default)d)")
    parser.add_argument("--draws", type=_positive_int, default=4000, metavar="K",
                        help="draws of φ* per fit and of θ per posterior (default: %(default)d)")
    parser.add_argument("--steps", type=_positive_int, metavar="T", help="DP-SGD steps (default: the preset's 10000)")
    parser.add_argument("--delta", type=float, default=1e-5, metavar="D", help="δ (default: %(default)g)")
    parser.add_argument("--bins", type=_positive_int, default=10, metavar="B", help="(default: %(default)d)")
    parser.add_argument("--binning", choices=BINNINGS, default="equal-count", help="(default: %(default)s)")
    parser.add_argument("--prior", choices=tuple(PRIORS), default="default",
                        help="gradient-model prior of exact, laplace and nuts (default: %(default)s)")
    parser.add_argument("--warmup", type=_count, metavar="W", help="NUTS warmup steps of nuts and nonprivate "
                        "(default: 1000)")
    parser.add_argument("--seed", type=_seed, default=0, metavar="SEED",
                        help="of the DPVI runs and the posterior draws (default: %(default)d)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    parser.set_defaults(run=_calibrate)


def _add_demo(commands) -> None:
    parser = commands.add_parser(
        "demo", help="M1 end to end: simulate, record a DPVI trace, fit it, compare and plot",
        description=f"Simulate M1 (gamma-exponential, N = 5000), record a DPVI trace with the research preset "
        f"at the tight σ for ε, fit its noise-aware posterior, and compare it with the naive last iterate, "
        f"the exact non-private posterior and the true value. Saves DIR/{DEMO_TRACE} (the trace), "
        f"DIR/{DEMO_POSTERIOR} (the posterior) and DIR/{DEMO_PLOT} (trace and densities).",
    )
    parser.add_argument("--epsilon", type=float, default=1.0, metavar="E", help="ε (default: %(default)g)")
    _add_seed(parser, SIMULATION_SEED, "default: %(default)d; the data are simulated; the fit's key derives from "
              "it too")
    parser.add_argument("--out", default="noiseaware-demo", metavar="DIR",
                        help="output directory (default: ./%(default)s)")
    parser.add_argument("--steps", type=int, metavar="T",
                        help="DP-SGD steps (default: the preset's 10000; fewer are for quick checks)")
    parser.add_argument("--method", choices=METHODS, default="exact",
                        help="inference route of the noise-aware posterior (default: %(default)s)")
    parser.set_defaults(run=_demo)


def _number(text: str, kind, check: Callable, meaning: str):
    """An argparse type: `text` as `kind` passing `check`, else an error naming `meaning`."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not check(value):
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: give {meaning}")
    return value


def _fraction(text: str) -> float:
    return _number(text, float, lambda x: 0.0 <= x < 1.0, "a fraction in [0, 1)")


def _probability(text: str) -> float:
    return _number(text, float, lambda x: 0.0 < x < 1.0, "a probability in (0, 1)")


def _positive_int(text: str) -> int:
    return _number(text, int, lambda n: n >= 1, "a positive integer")


def _count(text: str) -> int:
    return _number(text, int, lambda n: n >= 0, "a non-negative integer")


# ---------------------------------------------------------------- account


def _account(args) -> int:
    rows = [("δ", f"{args.delta:g}"), ("sampling rate q", f"{args.sampling_rate:g}"), ("steps T", str(args.steps))]
    if args.epsilon is not None:
        rows += [(f"σ for ε = {e:g}", f"{noise_multiplier(e, args.delta, args.sampling_rate, args.steps):.5g}")
                 for e in args.epsilon]
    else:
        rows += [(f"ε for σ = {s:g}", f"{epsilon_spent(s, args.delta, args.sampling_rate, args.steps):.5g}")
                 for s in args.noise_multiplier]
    print(text_table(("setting", "value"), rows, numeric=False))
    return 0


# ---------------------------------------------------------------- record


@dataclass(frozen=True)
class _Job:
    """What `record` runs: a model, its data, the record_dpvi settings and, for simulated data, the truth."""

    model: Callable
    data: Mapping
    settings: Mapping
    truth: tuple[models.BenchmarkModel, jax.Array] | None = None


def _record(args) -> int:
    out = _output_path(args.out)
    key_simulation, key_dpvi = _keys(_record_seed(args))
    job = _user_job(args) if ":" in args.model else _builtin_job(args, key_simulation)
    trace = record_dpvi(job.model, job.data, key=key_dpvi, progress=True, dtype=_dtype(args), **_privacy(args),
                        **job.settings)
    trace.save(out)
    print(trace.summary())
    if job.truth is not None:
        print()
        print(_truth_report(*job.truth))
    print(f"\ntrace saved to {out}")
    return 0


def _output_path(name: str) -> Path:
    """The trace path, checked before any work: a known suffix in an existing directory."""
    return _checked_path(name, "--out", TRACE_SUFFIXES, "a trace file ends in .nc (netCDF4) or .npz (numpy)")


def _record_seed(args) -> int:
    """--seed, or the default: 0 for simulated data, a secret random seed (never shown) for real data."""
    if args.data is None:
        return SIMULATION_SEED if args.seed is None else args.seed
    if args.seed is None:
        return secrets.randbits(SEED_BITS)
    print(KNOWN_SEED_WARNING, file=sys.stderr)
    return args.seed


def _keys(seed: int) -> tuple[jax.Array, jax.Array]:
    """Independent keys for the simulation and the DPVI run from one seed < 2^63 (all its bits kept)."""
    key_simulation, key_dpvi = jax.random.split(as_key(seed))
    return key_simulation, key_dpvi


def _dtype(args):
    return jnp.float64 if args.float64 else None


def _privacy(args) -> dict:
    if args.non_private:
        if args.learning_rate is None:
            raise ValueError("--non-private needs --learning-rate L (the κ heuristic divides by σ = 0)")
        return {"non_private": True}
    return {"epsilon": args.epsilon, "noise_multiplier": args.noise_multiplier, "delta": args.delta}


def _settings(preset: Mapping, args) -> dict:
    """The preset's settings with the options given on the command line in their place."""
    given = {name: getattr(args, name) for name in SETTING_OPTIONS if getattr(args, name) is not None}
    for name in BLOCK_OPTIONS:
        if name in given:
            given[name] = _scalar_or_pair(given[name], name)
    if "init" in given:
        given["init"] = tuple(given["init"])
    settings = dict(preset)
    if "learning_rate" in given and "lr_multiplier" not in given:
        settings.pop("lr_multiplier", None)  # an explicit λ replaces the preset's κ heuristic
    settings.update(given)
    return settings


def _scalar_or_pair(values: Sequence[float], name: str):
    if len(values) == 1:
        return values[0]
    if len(values) == 2:
        return tuple(values)
    raise ValueError(f"--{name.replace('_', '-')} takes one value (all coordinates) or two (μ block, ρ block), "
                     f"got {len(values)}")


def _builtin_job(args, key) -> _Job:
    """A built-in model on simulated data (or on --data) with its preset."""
    bm = _builtin(args.model)
    if args.data is not None:
        return _Job(bm.model, _user_data(args), _settings(bm.dpvi_settings, args))
    bm = _resized(bm, args)
    theta, data = bm.simulate(key)
    return _Job(bm.model, data, _settings(bm.dpvi_settings, args), (bm, theta))


def _resized(bm: models.BenchmarkModel, args) -> models.BenchmarkModel:
    """`bm` simulating --n-examples examples, and mapping θ by --transforms so that the true θ printed is in
    the trace's coordinates."""
    if args.n_examples is None and args.transforms is None:
        return bm
    settings = dict(bm.dpvi_settings)
    if args.transforms is not None:
        settings["transforms"] = args.transforms
    n_examples = bm.n_examples if args.n_examples is None else args.n_examples
    return models.from_numpyro(bm.model, n_examples=n_examples, covariates=bm.covariates, name=bm.name,
                               description=bm.description, **settings)


def _builtin(name: str) -> models.BenchmarkModel:
    try:
        return models.get(name)
    except KeyError as error:
        raise ValueError(error.args[0]) from None


def _user_job(args) -> _Job:
    """A user's numpyro model `package.module:function` on the data of --data."""
    model = import_model(args.model)
    if args.data is None:
        raise ValueError(f"model {args.model} needs data: pass --data FILE (.csv or .npz)")
    missing = [f"--{name.replace('_', '-')}" for name in USER_MODEL_REQUIRED if getattr(args, name) is None]
    if missing:
        raise ValueError(f"a user model has no preset: pass {', '.join(missing)}")
    return _Job(model, _user_data(args), _settings({}, args))


def _user_data(args) -> dict[str, np.ndarray]:
    """The data of --data (where N is the data's length, so --n-examples has no place)."""
    if args.n_examples is not None:
        raise ValueError("--n-examples sizes simulated data; with --data, N is the length of the data")
    return load_data(args.data)


def import_model(spec: str) -> Callable:
    """The function named by 'package.module:function' (the current directory is searched first)."""
    model = _import_attribute(spec)
    if not callable(model):
        raise ValueError(f"--model {spec}: {spec.partition(':')[2]!r} is not a function")
    return model


def _import_attribute(spec: str):
    """The object named by 'package.module:name' (the current directory is searched first)."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ValueError(f"--model {spec}: write a user model as package.module:name")
    cwd = str(Path.cwd())
    sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"--model {spec}: cannot import {module_name} ({error}); run from the directory that "
                          "holds it, or install it") from error
    finally:
        sys.path.remove(cwd)
    if not hasattr(module, name):
        raise ValueError(f"--model {spec}: module {module_name} has no {name!r}")
    return getattr(module, name)


def _truth_report(bm: models.BenchmarkModel, theta) -> str:
    """The simulation's true θ per coordinate and each site's value in the model's own space."""
    rows = [(name, f"{float(value):.4g}") for name, value in zip(bm.site_map.theta_names(), np.asarray(theta))]
    sites = [f"  {name} = {np.array2string(np.asarray(value), precision=4, max_line_width=sys.maxsize)}"
             for name, value in bm.site_map.constrain(jnp.asarray(theta)).items()]
    return "\n".join(["true θ of the simulation (printed only; it is not part of the trace)",
                      text_table(("θ", "unconstrained"), rows), "in the model's space:", *sites])


# ---------------------------------------------------------------- fit


def _fit(args) -> int:
    out = _checked_path(args.out, "--out", (".nc",), "a posterior file ends in .nc (netCDF)")
    plot = None if args.plot is None else _checked_path(args.plot, "--plot", (".png",), "a plot file ends in .png")
    options = _route_options(args)
    trace = Trace.load(args.trace)
    start = math.floor(args.burn_in * trace.steps)
    epsilon = "ε unknown" if trace.epsilon is None else f"ε = {trace.epsilon:g}"
    print(f"trace {args.trace}: {epsilon}, σ = {trace.noise_multiplier:.4g}, T = {trace.steps} steps; fitting "
          f"steps {start}…{trace.steps - 1} (burn-in {args.burn_in:g}) by {args.method}")
    post = _fit_reporting_warnings(trace, args.method, prior=args.prior, burn_in=args.burn_in, key=args.seed,
                                   draws=args.draws, **options)
    key_theta = jax.random.fold_in(as_key(args.seed), THETA_STREAM)  # θ draws for the file and plot, apart from the fit's
    post.save(out, key=key_theta)
    posteriors = {"noise-aware": post} | _naive_column(trace)
    print()
    print(post.describe())
    print(comparison_table(posteriors, args.level))
    diagnostics = _diagnostics_line(post)
    if diagnostics:
        print(diagnostics)
    if plot is not None:
        from . import plots

        plots.plot_trace(trace, plot, posteriors=posteriors, burn_in=args.burn_in, level=args.level, key=key_theta)
    print(f"\nposterior saved to {out}" + ("" if plot is None else f"; plot saved to {plot}"))
    return 0


def _checked_path(name: str, option: str, suffixes: Sequence[str], rule: str) -> Path:
    """An output path, checked before any work: a known suffix in an existing directory."""
    path = Path(name)
    if path.suffix.lower() not in suffixes:
        raise ValueError(f"{option} {name}: {rule}")
    if not path.parent.is_dir():
        raise ValueError(f"{option} {name}: the directory {path.parent} does not exist; create it first")
    return path


def _route_options(args) -> dict:
    """The route's own options given on the command line: --warmup, --chains, --backend for nuts."""
    given = {name: getattr(args, name) for name in NUTS_OPTIONS if getattr(args, name, None) is not None}
    if args.method != "nuts":
        if given:
            flags = ", ".join(f"--{name}" for name in given)
            raise ValueError(f"{flags} apply to --method nuts only, not to --method {args.method}")
        return {}
    return given | {"progress": True}


def _coverage(args) -> int:
    from .evaluation import coverage

    bm = _coverage_model(args.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    overrides = {} if args.steps is None else {"steps": args.steps}
    options = {"nuts": {"warmup": args.warmup}} if args.warmup is not None else {}
    for name, value in _privacy_levels(args):
        result = coverage(bm, methods=args.methods, delta=args.delta, simulations=args.simulations,
                          repeats=args.repeats, draws=args.draws, key=args.seed, prior=args.prior,
                          method_options=options, progress=True, **{name: value}, **overrides)
        s = result.settings
        tag = f"eps-{value:g}" if name == "epsilon" else f"sigma-{value:g}"
        print(f"\n{bm.name}, ε = {_epsilon_text(s['epsilon'])}, σ = {s['noise_multiplier']:.4g}, M = {s['simulations']}, "
              f"R = {s['repeats']}, K = {s['draws']}, T = {s['steps']}, seed {args.seed}; DPVI "
              f"{result.seconds['dpvi']:.0f} s")
        print(result.table())
        for method, facts in result.diagnostics.items():
            for line in facts.get("warnings", []):
                print(f"warning: {method}: {' '.join(line.split())}", file=sys.stderr)
        stem = f"coverage-{bm.name}-{tag}"
        result.to_json(out / f"{stem}.json")
        result.to_csv(out / f"{stem}.csv")
        result.plot(out / f"{stem}.png")
        print(f"wrote {out / stem}.json, .csv, .png")
    return 0


def _calibrate(args) -> int:
    from .datasets import adult
    from .evaluation import calibration

    data = adult(args.data_dir, scaling=args.scaling, verify=not args.no_verify)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    common = dict(repeats=args.repeats, draws=args.draws, bins=args.bins, binning=args.binning, key=args.seed,
                  method_options={m: {"warmup": args.warmup} for m in ("nuts", "nonprivate")}
                  if args.warmup is not None else None, progress=True)
    reference = (calibration(data, methods=("nonprivate",), **common) if "nonprivate" in args.methods else None)
    traced = [m for m in args.methods if m != "nonprivate"]
    overrides = {} if args.steps is None else {"steps": args.steps}
    for name, value in _privacy_levels(args):
        result = calibration(data, methods=traced, delta=args.delta, prior=args.prior, **common, **{name: value},
                             **overrides) if traced else reference
        if traced and reference is not None:
            result = result.merge(reference)
        s = result.settings
        tag = f"eps-{value:g}" if name == "epsilon" else f"sigma-{value:g}"
        sigma = "" if s["noise_multiplier"] is None else f", σ = {s['noise_multiplier']:.4g}, T = {s['steps']}"
        print(f"\n{data.name} ({s['n_train']} train, {s['n_test']} test, d = {s['dim']}, {data.scaling}), ε = "
              f"{_epsilon_text(s['epsilon'])}{sigma}, R = {s['repeats']}, K = {s['draws']}, seed {args.seed}"
              + (f"; DPVI {result.seconds['dpvi']:.0f} s" if "dpvi" in result.seconds else ""))
        print(result.table())
        for method, facts in result.diagnostics.items():
            for line in facts.get("warnings", []):
                print(f"warning: {method}: {line}", file=sys.stderr)
        stem = out / f"calibration-{data.name}-{tag}"
        result.to_json(stem.with_name(f"{stem.name}.json"))
        result.plot(stem.with_name(f"{stem.name}.png"))
        print(f"wrote {stem}.json, .png")
    return 0


def _epsilon_text(epsilon) -> str:
    return "unknown" if epsilon is None else f"{epsilon:g}"


def _coverage_model(spec: str) -> models.BenchmarkModel:
    """A built-in, or the BenchmarkModel named by package.module:name."""
    if ":" not in spec:
        return _builtin(spec)
    bm = _import_attribute(spec)
    if not isinstance(bm, models.BenchmarkModel):
        raise ValueError(f"--model {spec} is not a BenchmarkModel: make one with "
                         "noiseaware.models.from_numpyro(model, n_examples=…, steps=…, …)")
    return bm


def _fit_reporting_warnings(trace: Trace, method: str, **options) -> NoiseAwarePosterior:
    """`fit(trace, method, **options)`, its warnings printed as `warning: …` lines on stderr, each once."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            post = fit(trace, method, **options)
    finally:  # shown also when the fit fails: they may explain why
        _show_warnings(caught)
    return post


def _show_warnings(caught: Sequence[warnings.WarningMessage]) -> None:
    """UserWarnings (the fit's own, and libraries' advice) as one line each, repeats dropped; the rest
    (deprecations and the like) go back to Python's warning filters."""
    shown = set()
    for warning in caught:
        if not issubclass(warning.category, UserWarning):
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
            continue
        line = " ".join(str(warning.message).split())
        if line not in shown:
            shown.add(line)
            print(f"warning: {line}", file=sys.stderr)


def _naive_column(trace: Trace) -> dict[str, NoiseAwarePosterior]:
    """{"naive": the last-iterate posterior}, or nothing (with a note) when the trace cannot give φ_T."""
    try:
        return {"naive": naive_posterior(trace)}
    except TraceError as error:
        print(f"note: no naive column: {' '.join(str(error).split())}", file=sys.stderr)
        return {}


def _diagnostics_line(post: NoiseAwarePosterior) -> str | None:
    """The route's scalar diagnostics and settings (R-hat, ESS, divergences first), or None if there are none."""
    scalars = {name: value.item() if isinstance(value, np.generic) else value
               for name, value in post.diagnostics.items()
               if isinstance(value, (bool, int, float, str, np.generic))}
    if not scalars:
        return None
    order = [name for name in DIAGNOSTICS_FIRST if name in scalars] + [n for n in scalars if n not in DIAGNOSTICS_FIRST]
    return "diagnostics: " + ", ".join(f"{name} {_scalar(scalars[name])}" for name in order)


def _scalar(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# ---------------------------------------------------------------- data files


def load_data(path: str | Path) -> dict[str, np.ndarray]:
    """Keyword arrays for a model from a .npz (arrays by name) or a .csv (see `read_csv`)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in DATA_SUFFIXES:
        raise DataError(f"--data {path}: a data file ends in .csv or .npz")
    if not path.is_file():
        raise DataError(f"--data {path}: no such file")
    return read_csv(path) if suffix == ".csv" else read_npz(path)


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a .npz archive by name (never unpickled)."""
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile) as error:
        raise DataError(f"{path} is not a readable .npz archive: {error}") from error
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataError(f"{path} holds a single array; save a dict of arrays with np.savez(path, x=..., y=...)")
    with archive:
        try:
            return {name: archive[name] for name in archive.files}
        except ValueError as error:
            raise DataError(f"{path}: {error} (save numeric arrays, not object arrays)") from error


def read_csv(path: Path) -> dict[str, np.ndarray]:
    """Columns of a CSV file as arrays named by its header row.

    Integer-looking columns become int arrays, others float. Columns `X[0]`, `X[1]`, … (or `X.0`, `X.1`, …)
    are stacked in index order into one 2-D array `X` (N, k).
    """
    with open(path, newline="", encoding="utf-8-sig") as file:  # utf-8-sig: drop a spreadsheet's BOM
        lines = [(line, row) for line, row in _rows(path, csv.reader(file)) if row]
    if not lines:
        raise DataError(f"{path} is empty; the first row must name the columns")
    header = [name.strip() for name in lines[0][1]]
    body = lines[1:]
    if not body:
        raise DataError(f"{path} has a header but no data rows")
    for line, row in body:
        if len(row) != len(header):
            raise DataError(f"{path}, line {line}: {len(row)} field(s), but the header names {len(header)} columns")
    columns = {name: _parse_column(path, name, [(line, row[j]) for line, row in body])
               for j, name in enumerate(_check_header(path, header))}
    return _stack_indexed(path, columns)


def _rows(path: Path, reader) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each CSV record."""
    try:
        for row in reader:
            yield reader.line_num, row
    except csv.Error as error:
        raise DataError(f"{path}, line {reader.line_num}: {error}") from error


def _check_header(path: Path, header: Sequence[str]) -> Sequence[str]:
    for name in header:
        if not (name.isidentifier() or _INDEXED_COLUMN.match(name)):
            raise DataError(f"{path}: column name {name!r} is not a keyword name (or an indexed one like X[0])")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise DataError(f"{path}: columns {duplicates} appear more than once")
    return header


def _parse_column(path: Path, name: str, cells: Sequence[tuple[int, str]]) -> np.ndarray:
    """One column: int64 when every cell is an integer literal, else float64."""
    values = [cell.strip() for _, cell in cells]
    if all(_INTEGER.match(value) for value in values):
        return np.array([int(value) for value in values], dtype=np.int64)
    numbers = []
    for (line, _), value in zip(cells, values):
        try:
            numbers.append(float(value))
        except ValueError:
            raise DataError(f"{path}, line {line}, column {name!r}: {value!r} is not a number") from None
    return np.array(numbers, dtype=np.float64)


def _stack_indexed(path: Path, columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Plain columns as they are; indexed columns X[j] stacked into X (N, k), j = 0..k−1."""
    plain, indexed = {}, {}
    for name, column in columns.items():
        match = _INDEXED_COLUMN.match(name)
        if match is None:
            plain[name] = column
            continue
        group = indexed.setdefault(match.group("name"), {})
        index = int(match.group("bracket") or match.group("dot"))
        if index in group:
            raise DataError(f"{path}: column {match.group('name')}[{index}] appears more than once")
        group[index] = column
    both = sorted(set(plain) & set(indexed))
    if both:
        raise DataError(f"{path}: {both[0]} is both a column and a group of indexed columns; rename one")
    return {**plain, **{name: _stack(path, name, group) for name, group in indexed.items()}}


def _stack(path: Path, name: str, group: Mapping[int, np.ndarray]) -> np.ndarray:
    """Columns {j: column} with j = 0..k−1 → (N, k); int when every column is int."""
    if sorted(group) != list(range(len(group))):
        raise DataError(f"{path}: columns of {name} have indices {sorted(group)}; they must be 0, 1, …, "
                        f"{len(group) - 1}")
    return np.stack([group[j] for j in range(len(group))], axis=1)


# ---------------------------------------------------------------- demo


def _demo(args) -> int:
    bm = models.get(DEMO_MODEL)
    key_simulation, key_dpvi = _keys(args.seed)
    key_fit = jax.random.fold_in(as_key(args.seed), FIT_STREAM)
    theta, data = bm.simulate(key_simulation)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = dict(bm.dpvi_settings, **({} if args.steps is None else {"steps": args.steps}))
    trace = record_dpvi(bm.model, data, epsilon=args.epsilon, key=key_dpvi, progress=True, **settings)
    trace.save(out / DEMO_TRACE)
    print(trace.summary())
    print()
    post = _fit_reporting_warnings(trace, args.method, key=key_fit, **_route_options(args))
    key_theta = jax.random.fold_in(key_fit, THETA_STREAM)
    post.save(out / DEMO_POSTERIOR, key=key_theta)
    posteriors = {"noise-aware": post, "naive": naive_posterior(trace)}
    truth = np.asarray(theta, np.float64)
    from . import plots

    plots.plot_trace(trace, out / DEMO_PLOT, posteriors=posteriors, truth=truth, level=LEVEL, key=key_theta,
                     title=f"M1 gamma-exponential: DPVI trace at ε = {trace.epsilon:g} "
                     f"(σ = {trace.noise_multiplier:.4g}), fitted by {args.method}")
    print(post.describe())
    print(comparison_table(posteriors, LEVEL, truth=truth))
    print()
    print(_m1_comparison(posteriors, float(truth[0]), np.asarray(data["x"], np.float64), trace.epsilon, key_theta))
    print(f"\nsaved in {out}:")
    print(text_table(("file", "contents"), [
        (DEMO_TRACE, f"the DPVI trace (refit it: noiseaware fit {out / DEMO_TRACE} --out FILE.nc)"),
        (DEMO_POSTERIOR, f"the noise-aware posterior, method {args.method} (noiseaware.load_posterior reads it)"),
        (DEMO_PLOT, f"μ_t with the burn-in and the inferred optimum μ* ({100 * LEVEL:g}% band), beside the "
         "noise-aware and naive densities of θ and the true θ"),
    ], numeric=False))
    return 0


def _m1_comparison(posteriors: Mapping[str, NoiseAwarePosterior], theta: float, x: np.ndarray, epsilon: float,
                   key) -> str:
    """True λ, the exact non-private posterior, the DPVI last iterate and the noise-aware posterior (mean, sd
    and central interval of λ)."""
    prior_shape, prior_rate = GAMMA_PRIOR
    shape, rate = prior_shape + x.size, prior_rate + float(x.sum())
    tail = 0.5 * (1.0 - LEVEL)
    exact = gamma(shape, scale=1.0 / rate)
    rows = [
        ("true λ (simulated)", f"{np.logaddexp(0.0, theta):.4f}", "", ""),
        (f"exact posterior Gamma({prior_shape:g} + N, {prior_rate:g} + Σx), non-private", f"{exact.mean():.4f}",
         f"{exact.std():.4f}", _interval(exact.ppf(tail), exact.ppf(1.0 - tail))),
    ]
    labels = {"naive": f"DPVI last iterate (naive), ε = {epsilon:g}",
              "noise-aware": f"noise-aware posterior ({posteriors['noise-aware'].method}), ε = {epsilon:g}"}
    for name in ("naive", "noise-aware"):
        draws = posteriors[name].constrained_sample(key, LAMBDA_DRAWS)["rate"]
        rows.append((labels[name], f"{draws.mean():.4f}", f"{draws.std():.4f}",
                     _interval(*np.quantile(draws, [tail, 1.0 - tail]))))
    note = (f"λ = softplus(θ). The naive posterior is q at the last iterate and ignores the DP noise in the trace; "
            f"the noise-aware one integrates over the VI optimum it implies. Posterior λ from {LAMBDA_DRAWS} draws.")
    header = ("λ = rate of the exponential", "mean", "sd", f"{100 * LEVEL:g}% interval")
    return "\n".join([text_table(header, rows), note])


def _interval(low: float, high: float) -> str:
    return f"[{low:.4f}, {high:.4f}]"
