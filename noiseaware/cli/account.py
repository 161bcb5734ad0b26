"""`noiseaware account`: the noise multiplier σ for a privacy level ε, or ε for σ, under the run's sampling scheme."""

from __future__ import annotations

from ..privacy import SAMPLINGS, accountant_of, epsilon_spent, noise_multiplier
from ..recording.settings import check_delta
from ..util.tables import text_table
from .options import add_dp_sgd_options, positive_float, positive_int


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "account",
        help="noise multiplier σ ⇄ ε (PLD accountant; RDP for fixed-size batches)",
        description="Noise multiplier σ for a privacy level ε, or ε for σ, of T subsampled Gaussian steps "
        "(DP-SGD), by dp-accounting: Poisson sampling at rate q under add/remove-one by the PLD accountant (the "
        "default), or --sampling fixed: B = q·N examples drawn without replacement each step, under replace-one, "
        "by the RDP accountant (needs --dataset-size N). σ is always on the private side.",
    )
    level = parser.add_mutually_exclusive_group(required=True)
    level.add_argument(
        "--epsilon", type=positive_float, nargs="+", metavar="E", help="one or more ε > 0: print σ for each"
    )
    level.add_argument(
        "--noise-multiplier", type=positive_float, nargs="+", metavar="S", help="one or more σ > 0: print ε for each"
    )
    add_dp_sgd_options(parser, defaults=True)
    parser.add_argument(
        "--sampling",
        choices=SAMPLINGS,
        default="poisson",
        help="how each step drew its batch: poisson (each example with probability q, add/remove-one; the default) "
        "or fixed (B = q·N without replacement, replace-one; needs --dataset-size)",
    )
    parser.add_argument("--dataset-size", type=positive_int, metavar="N", help="the number of examples N")
    parser.set_defaults(run=run)


def run(args) -> int:
    check_delta(args.delta, allow_weak_privacy=args.allow_weak_privacy)
    if args.sampling == "fixed" and args.dataset_size is None:
        raise ValueError("--sampling fixed draws B = q·N of the N examples each step: pass --dataset-size N")
    scheme = {"sampling": args.sampling, "dataset_size": args.dataset_size}
    run_settings = (args.delta, args.sampling_rate, args.steps)
    rows = [
        ("δ", f"{args.delta:g}"),
        ("sampling rate q", f"{args.sampling_rate:g}"),
        ("steps T", str(args.steps)),
        ("sampling", args.sampling + ("" if args.dataset_size is None else f", N = {args.dataset_size}")),
        ("accountant", accountant_of(args.sampling)),
    ]
    if args.epsilon is not None:
        rows += [(f"σ for ε = {e:g}", f"{noise_multiplier(e, *run_settings, **scheme):.5g}") for e in args.epsilon]
    else:
        rows += [
            (f"ε for σ = {s:g}", f"{epsilon_spent(s, *run_settings, **scheme):.5g}") for s in args.noise_multiplier
        ]
    print(text_table(("setting", "value"), rows, numeric=False))
    return 0
