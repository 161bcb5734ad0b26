"""`noiseaware account`: the noise multiplier σ for a privacy level ε, or ε for σ (PLD accountant)."""

from __future__ import annotations

from ..privacy import epsilon_spent, noise_multiplier
from ..recording.settings import check_delta
from ..util.tables import text_table
from .options import add_dp_sgd_options, positive_float


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "account",
        help="noise multiplier σ ⇄ ε (PLD accountant)",
        description="Noise multiplier σ for a privacy level ε, or ε for σ, of T Poisson-subsampled Gaussian "
        "steps (DP-SGD), by the PLD accountant of dp-accounting. σ is always on the private side.",
    )
    level = parser.add_mutually_exclusive_group(required=True)
    level.add_argument(
        "--epsilon", type=positive_float, nargs="+", metavar="E", help="one or more ε > 0: print σ for each"
    )
    level.add_argument(
        "--noise-multiplier", type=positive_float, nargs="+", metavar="S", help="one or more σ > 0: print ε for each"
    )
    add_dp_sgd_options(parser, defaults=True)
    parser.set_defaults(run=run)


def run(args) -> int:
    check_delta(args.delta, allow_weak_privacy=args.allow_weak_privacy)
    rows = [("δ", f"{args.delta:g}"), ("sampling rate q", f"{args.sampling_rate:g}"), ("steps T", str(args.steps))]
    if args.epsilon is not None:
        rows += [
            (f"σ for ε = {e:g}", f"{noise_multiplier(e, args.delta, args.sampling_rate, args.steps):.5g}")
            for e in args.epsilon
        ]
    else:
        rows += [
            (f"ε for σ = {s:g}", f"{epsilon_spent(s, args.delta, args.sampling_rate, args.steps):.5g}")
            for s in args.noise_multiplier
        ]
    print(text_table(("setting", "value"), rows, numeric=False))
    return 0
