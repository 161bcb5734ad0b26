"""The `noiseaware` command line: `account`, `tune`, `preflight`, `record`, `fit`, `coverage`, `calibrate`, `study`,
`report`, `demo`.

    noiseaware account --epsilon 0.1 0.3 1.0          # σ for each ε (PLD accountant)
    noiseaware account --noise-multiplier 37.81       # ε spent by a given σ
    noiseaware tune --model M1 --epsilon 1 --out m1-settings.json   # settings from simulations, no data
    noiseaware preflight --model M1 --epsilon 1 --settings m1-settings.json
    noiseaware record --model M1 --epsilon 1 --out m1.nc
    noiseaware record --model M1 --epsilon 1 --settings m1-settings.json --out m1.nc
    noiseaware record --model mymodels:logistic --data adult.csv --epsilon 1 \\
        --steps 10000 --sampling-rate 0.01 --clip 2 --out adult.nc
    noiseaware fit m1.nc --method exact --out m1-posterior.nc --plot m1.png
    noiseaware coverage --model M1 --epsilon 0.1 1 --methods exact,nuts,naive --simulations 500 --out cov/
    noiseaware coverage --model M1 --epsilon 0.1 1 --out cov/ --workers 2    # the same study, resumed on 2 workers
    noiseaware study privacy-utility --model M1 --epsilons 0.3 1 3 --out pu/   # any kind of study, by its design
    noiseaware report cov/                            # a study's progress and tables, from its directory
    noiseaware calibrate --dataset adult --epsilon 0.1 1 --methods exact,nuts,laplace,naive,dpvim --runs 20 \\
        --out cal/
    noiseaware demo                                   # M1 end to end: trace, fit, comparison, plot

Simulated runs default to seed 0, for reproducibility. A run on real data (--data) draws a secret random
seed that is never printed or saved: the DP noise is a function of the seed, so anyone who knows it can
subtract the noise from the trace.

No command replaces an existing file unless given --force, and none writes over one of its inputs, not
even with --force; the exceptions are a study's own output files (rebuilt from its tasks when the study is
resumed, or by `report --write`) and `demo`'s own files in its own marked folder. Every argument and every
output location is checked before any work, and a failing command leaves nothing behind (`outputs`). `fit`
without --out prints its result and writes nothing.

Exit status: 0 done; 2 a user error, printed as one line `error: …` on stderr; 1 a bug, printed as its
traceback and a line saying it is a bug and where to report it; 130 interrupted. `main(argv)` returns the
status instead of exiting, so it can be called in-process. A user error is: a command line argparse
rejects; an OSError (a file or folder); a `UserError`; a fit that failed for a statistical reason
(`FitFailure`); and a ValueError raised by noiseaware's own checks of its input (a bad option, model, data,
trace or settings file: ModelError, TraceError, DataError, …), whose message names the problem and the fix.
Anything else — a TypeError, an IndexError, a ValueError raised inside numpy or JAX, a study task that
raised (`TaskError`, shown with the task's own traceback) — is a bug (in noiseaware, or in plug-in code it
ran). Warnings of a fit (a weak signal, a quadrature grid that cuts posterior mass) print as `warning: …`
lines on stderr, each once. Hints name commands (`noiseaware tune`), not Python calls (`util.hints`).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import jax

from .. import __version__
from ..util.compilation import use_compilation_cache
from ..util.errors import FitFailure, UserError
from ..util.hints import speaking_cli
from . import account, calibrate, coverage, demo, fit, record, report, study, tune
from .data import DataError, load_data

__all__ = ["DataError", "build_parser", "is_user_error", "load_data", "main"]

EXIT_USAGE = 2
EXIT_BUG = 1
PACKAGE = Path(__file__).resolve().parent.parent
"""The noiseaware package's folder: a ValueError raised by code under it is one of noiseaware's input checks."""
REPORT = (
    "this is a bug in noiseaware (or in plug-in code it ran), not in what you typed: please report it on "
    "noiseaware's issue tracker with the command line and the traceback above"
)
COMMANDS = (account, tune, record, fit, coverage, calibrate, study, report, demo)
"""The command modules, in the order of `noiseaware --help`: each has add_parser(subparsers) and run(args)."""


class UsageError(UserError):
    """A command line argparse rejects."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default sys.argv[1:]) and return its exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as error:
        return _fail(str(error))
    except SystemExit as done:  # --help, --version
        return done.code if isinstance(done.code, int) else 0
    use_compilation_cache()
    try:
        with _precision(getattr(args, "float64", False)), speaking_cli():
            return args.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if is_user_error(error):
            return _fail(" ".join(str(error).split("\n")))
        traceback.print_exc()
        print(f"noiseaware {__version__}: {REPORT}", file=sys.stderr)
        return EXIT_BUG


def is_user_error(error: BaseException) -> bool:
    """Whether `error` means the user's input is wrong (module doc), rather than a bug."""
    if isinstance(error, (UserError, OSError, FitFailure)):
        return True
    return isinstance(error, ValueError) and _raised_by_noiseaware(error)


def _raised_by_noiseaware(error: BaseException) -> bool:
    """Whether a `raise` statement of noiseaware's code raised `error` (one of its checks): the innermost frame
    of its traceback, not a library's (numpy's, JAX's), a plug-in's, nor an unpacking that went wrong."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return False
    innermost = frames[-1]
    statement = innermost.line or "raise"  # no source to read (an installed archive): trust the location
    return Path(innermost.filename).resolve().is_relative_to(PACKAGE) and statement.startswith("raise")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of `noiseaware` with its subcommands."""
    parser = _Parser(
        prog="noiseaware", description="Noise-aware differentially private Bayesian inference from DPVI traces."
    )
    parser.add_argument("--version", action="version", version=f"noiseaware {__version__}")
    subparsers = parser.add_subparsers(title="commands", dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


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
