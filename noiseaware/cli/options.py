"""Argument helpers shared by the `noiseaware` commands: argparse types, seeds, privacy levels and method lists.

`method_lists` is the one place where the command line reads the method registries.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..inference.gradient_model import PRIORS
from ..methods import DEFAULT_REGISTRY, GradientModelOptions, NutsOptions
from ..methods.reference import NonPrivateOptions
from ..models.builtin import RESEARCH_COMMON
from ..privacy import epsilon_spent, noise_multiplier
from ..recording.settings import DEFAULT_DELTA, check_delta
from ..trace.families import FAMILY_KINDS
from ..util.defaults import WARM_START_WARMUP, WARMUP, field_default

SIMULATION_SEED = 0
"""The default seed of simulated runs (reproducible); real data get a secret random seed instead."""
SEED_BITS = 63
EXPERIMENT_PRIOR_HELP = "gradient-model prior of exact, laplace and nuts (default: %(default)s)"
"""--prior's help in coverage and calibrate."""


# ---------------------------------------------------------------- renamed flags, defaults read from their owners


class RenamedFlag(argparse.Action):
    """An old spelling of a flag that now has one meaning under another name: using it is an error naming the
    new flag (it takes any values, so the message is about the name, not the values)."""

    def __init__(self, option_strings, dest, new: str, meaning: str, **kwargs):
        super().__init__(
            option_strings, argparse.SUPPRESS, nargs="*", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        self.new, self.meaning = new, meaning

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} was renamed: use {self.new} ({self.meaning})")


def add_renamed(parser, old: str, new: str, meaning: str) -> None:
    """`old`, hidden, as an error pointing to `new` (`RenamedFlag`)."""
    parser.add_argument(old, action=RenamedFlag, new=new, meaning=meaning)


def warmup_help(whose: str = "") -> str:
    """--warmup's help with the defaults of `util.defaults`: the nuts route's from its exact start and from the prior
    (the cold start, and the non-private reference's)."""
    return (
        f"NUTS warmup (adaptation) steps per chain{whose} (default: {WARM_START_WARMUP} for nuts from its exact start, "
        f"{WARMUP} from a cold start: nuts --start prior, nonprivate)"
    )


# ---------------------------------------------------------------- method lists


@dataclass(frozen=True)
class MethodLists:
    """The method names the commands offer."""

    routes: tuple[str, ...]
    """Inference routes of the noise-aware posterior: `fit --method`, `demo --method`."""
    coverage: tuple[str, ...]
    """`coverage --methods`: the trace methods and the sufficient-statistic baselines."""
    calibration: tuple[str, ...]
    """`calibrate --methods`: the trace methods and nonprivate."""
    calibration_default: tuple[str, ...]
    """The default of `calibrate --methods`: the trace methods that fit any family (the recorded runs are DPVI)."""


def method_lists() -> MethodLists:
    """The method names of every command, read from the method registry (here only)."""
    routes = tuple(name for name, m in DEFAULT_REGISTRY.items() if issubclass(m.options, GradientModelOptions))
    calibration = tuple(name for name, m in DEFAULT_REGISTRY.items() if m.reads == "trace" or not m.private)
    return MethodLists(
        routes=routes,
        coverage=tuple(name for name, m in DEFAULT_REGISTRY.items() if m.private),
        calibration=calibration,
        calibration_default=tuple(n for n in DEFAULT_REGISTRY.names("trace") if DEFAULT_REGISTRY[n].families is None),
    )


def experiment_options(methods: Sequence[str], prior: str, warmup: int | None) -> dict[str, dict]:
    """method_options of a study from --prior (the routes' gradient-model prior) and --warmup (the NUTS
    warmup of nuts and of the non-private reference; the Gibbs baselines keep their own)."""
    options: dict[str, dict] = {}
    for name in methods:
        fields = {f.name for f in dataclasses.fields(DEFAULT_REGISTRY[name].options)}
        chosen = {"prior": prior} if "prior" in fields else {}
        if warmup is not None and issubclass(DEFAULT_REGISTRY[name].options, (NutsOptions, NonPrivateOptions)):
            chosen["warmup"] = warmup
        if chosen:
            options[name] = chosen
    return options


def add_method_list(parser, choices: Sequence[str], default: Sequence[str], note: str = "") -> None:
    """--methods: a comma-separated list from `choices`; `note` goes between the choices and the default."""
    parser.add_argument(
        "--methods",
        type=method_list(choices),
        default=default,
        metavar="LIST",
        help=f"comma-separated, from {', '.join(choices)}{note} (default: {','.join(default)})",
    )


def method_list(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma-separated list of names from `choices`."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(name.strip() for name in text.split(",") if name.strip())
        unknown = [name for name in names if name not in choices]
        if not names or unknown:
            raise argparse.ArgumentTypeError(f"unknown methods {unknown or text!r}: choose from {', '.join(choices)}")
        return names

    return parse


# ---------------------------------------------------------------- privacy levels and DP-SGD settings


def add_privacy_levels(parser) -> None:
    """The required choice of coverage and calibrate: one or more ε, or one or more σ."""
    level = parser.add_mutually_exclusive_group(required=True)
    level.add_argument(
        "--epsilon", type=positive_float, nargs="+", metavar="E", help="one or more ε > 0 (σ by the accountant)"
    )
    level.add_argument("--noise-multiplier", type=positive_float, nargs="+", metavar="S", help="one or more σ > 0")


def privacy_levels(args) -> list[tuple[str, float]]:
    """(keyword, value) per privacy level given by add_privacy_levels' options."""
    if args.epsilon:
        return [("epsilon", e) for e in args.epsilon]
    return [("noise_multiplier", s) for s in args.noise_multiplier]


def check_privacy_levels(args, sampling_rate: float, steps: int) -> None:
    """`privacy_levels(args)` checked before any work at the run's q and T: δ (`check_delta`, with
    --allow-weak-privacy), each ε by the accountant (one it cannot meet is an error) and each σ (one with no
    finite ε is an error)."""
    check_delta(args.delta, allow_weak_privacy=args.allow_weak_privacy)
    for keyword, value in privacy_levels(args):
        try:
            if keyword == "epsilon":
                noise_multiplier(value, args.delta, sampling_rate, steps)
            elif not math.isfinite(epsilon_spent(value, args.delta, sampling_rate, steps)):
                raise ValueError(f"it gives no finite ε at δ = {args.delta:g}: increase the noise")
        except ValueError as error:
            raise ValueError(f"--{keyword.replace('_', '-')} {value:g}: {error}") from None


def add_delta(parser) -> None:
    """--delta and --allow-weak-privacy."""
    parser.add_argument(
        "--delta",
        type=probability,
        default=DEFAULT_DELTA,
        metavar="D",
        help="δ, well below 1/N for N examples: δ ≥ 1/N warns, δ ≥ 0.5 is refused (default: %(default)g)",
    )
    parser.add_argument(
        "--allow-weak-privacy",
        action="store_true",
        help="accept δ ≥ 0.5 (a guarantee that protects next to nothing; for tests and demonstrations only)",
    )


def add_dp_sgd_options(parser, defaults: bool) -> None:
    """--delta, --sampling-rate, --steps: the research presets' (`RESEARCH_COMMON`) for `account`, the model's
    preset for `record`."""
    preset = "" if defaults else " (default: the model's preset)"
    add_delta(parser)
    parser.add_argument(
        "--sampling-rate",
        type=sampling_rate,
        default=RESEARCH_COMMON["sampling_rate"] if defaults else None,
        metavar="Q",
        help="Poisson sampling rate q" + (" (default: %(default)g)" if defaults else preset),
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=RESEARCH_COMMON["steps"] if defaults else None,
        metavar="T",
        help="DP-SGD steps T" + (" (default: %(default)d)" if defaults else preset),
    )


def add_family(parser) -> None:
    """--family and --rank: the variational family of the recorded traces."""
    parser.add_argument(
        "--family",
        choices=tuple(FAMILY_KINDS),
        help="variational family: mean-field N(μ, diag sd²) (default), full-rank N(μ, L Lᵀ), low-rank "
        "N(μ, diag sd² + B Bᵀ) with --rank columns in B, or point: plain DP-SGD of the MAP (docs/dp-sgd.md)",
    )
    parser.add_argument("--rank", type=positive_int, metavar="R", help="columns of B for --family low-rank")


def family_settings(args) -> dict:
    """--family and --rank as record_dpvi keywords (none when neither is given: the default family)."""
    if args.rank is not None and args.family != "low-rank":
        raise ValueError("--rank sets the columns of B for --family low-rank: add --family low-rank or drop --rank")
    return {} if args.family is None else {"family": args.family, "rank": args.rank}


def add_prior(parser, help_text: str = EXPERIMENT_PRIOR_HELP) -> None:
    default = field_default(GradientModelOptions, "prior")
    parser.add_argument("--prior", choices=tuple(PRIORS), default=default, help=help_text)


def add_output_dir(parser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    add_force(parser)


def add_force(parser) -> None:
    """--force of every command that writes files."""
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace existing output files (without it an existing file is an error; an input file is never replaced)",
    )


# ---------------------------------------------------------------- seeds and numbers


def add_seed(parser, default: int | None, default_help: str) -> None:
    """--seed of a simulation and a DPVI run."""
    parser.add_argument(
        "--seed",
        type=seed,
        default=default,
        metavar="SEED",
        help=f"integer in [0, 2^{SEED_BITS}), split into the simulation key and the DPVI key ({default_help})",
    )


def seed(text: str) -> int:
    """--seed: an integer in [0, 2^63), all of whose bits enter the keys."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value < 2**SEED_BITS:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: give an integer in [0, 2^{SEED_BITS})")
    return value


def _number(text: str, kind, check: Callable, meaning: str):
    """An argparse type: `text` as `kind` passing `check`, else an error naming `meaning`."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not check(value):
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: give {meaning}")
    return value


def positive_float(text: str) -> float:
    return _number(text, float, lambda x: 0.0 < x < math.inf, "a finite number > 0")


def sampling_rate(text: str) -> float:
    return _number(text, float, lambda x: 0.0 < x <= 1.0, "a rate in (0, 1]")


def fraction(text: str) -> float:
    return _number(text, float, lambda x: 0.0 <= x < 1.0, "a fraction in [0, 1)")


def probability(text: str) -> float:
    return _number(text, float, lambda x: 0.0 < x < 1.0, "a probability in (0, 1)")


def positive_int(text: str) -> int:
    return _number(text, int, lambda n: n >= 1, "a positive integer")


def count(text: str) -> int:
    return _number(text, int, lambda n: n >= 0, "a non-negative integer")
