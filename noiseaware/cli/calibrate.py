"""`noiseaware calibrate`: calibration of posterior predictive probabilities on real data (UCI Adult)."""

from __future__ import annotations

from ..evaluation.calibration_experiment import CalibrationDesign
from ..methods import GradientModelOptions
from .options import (
    add_delta,
    add_family,
    add_method_list,
    add_output_dir,
    add_prior,
    add_privacy_levels,
    add_renamed,
    check_privacy_levels,
    count,
    experiment_options,
    family_settings,
    field_default,
    method_lists,
    positive_int,
    privacy_levels,
    seed,
    warmup_help,
)
from .study import add_study_options, run_cli_study

DATASETS = ("adult",)


def add_parser(subparsers) -> None:
    from ..datasets import SCALINGS
    from ..evaluation.calibration import BINNINGS

    parser = subparsers.add_parser(
        "calibrate",
        help="calibration of posterior predictive probabilities on real data (UCI Adult)",
        description="Record R DPVI traces of a Bayesian logistic regression on the training set (the adult-logistic "
        "research preset, one compiled program), fit every method on the same traces, and score the posterior "
        "predictive probabilities on the test set: calibration RMSE over equal-count bins, ECE, Brier score, log "
        "loss, accuracy, and the paired difference to the naive last iterate. Prints a table and writes "
        "DIR/calibration-DATASET-eps-E.json and .png (reliability diagram) per privacy level. The work runs as a "
        "study in DIR (tasks of --chunk runs per level, kept as they finish; the same command resumes it; "
        "`noiseaware report DIR` rebuilds its tables). Every argument and every level's files are checked "
        "before any run: an existing file needs --force, a directory holding another study is refused. The runs use a "
        "fixed default seed (--seed 0): Adult is public benchmark data, the one exception to the rule that a "
        "seed on real data must be secret (your own data go through `noiseaware record`, which draws a secret "
        "seed).",
    )
    parser.add_argument("--dataset", choices=DATASETS, default="adult", help="(default: %(default)s)")
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="folder with your own copy of adult.data and adult.test (default: the shipped copy)",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="read files whose SHA-256 differs from the UCI originals (a copy changed on purpose)",
    )
    parser.add_argument(
        "--scaling",
        choices=SCALINGS,
        default="zscore",
        help="of the continuous columns, with training statistics (default: %(default)s)",
    )
    add_privacy_levels(parser)
    methods = method_lists()
    add_method_list(
        parser,
        methods.calibration,
        default=methods.calibration_default,
        note="; nonprivate (NUTS on the data, no privacy) runs once for all levels",
    )
    parser.add_argument(
        "--runs",
        type=positive_int,
        default=field_default(CalibrationDesign, "runs"),
        metavar="R",
        help="DPVI runs per level (default: %(default)d)",
    )
    parser.add_argument(
        "--samples",
        type=positive_int,
        default=field_default(CalibrationDesign, "samples"),
        metavar="K",
        help="θ draws per posterior for the predictive (and the draws of nonprivate's NUTS); the routes' fits "
        f"draw their own {field_default(GradientModelOptions, 'draws')} φ* (default: %(default)d)",
    )
    add_renamed(parser, "--repeats", "--runs", "DPVI runs per level")
    add_renamed(parser, "--draws", "--samples", "θ draws per posterior; fit --draws counts draws of φ*")
    parser.add_argument("--steps", type=positive_int, metavar="T", help="DP-SGD steps (default: the preset's)")
    add_family(parser)
    add_delta(parser)
    parser.add_argument(
        "--bins",
        type=positive_int,
        default=field_default(CalibrationDesign, "bins"),
        metavar="B",
        help="(default: %(default)d)",
    )
    parser.add_argument(
        "--binning",
        choices=BINNINGS,
        default=field_default(CalibrationDesign, "binning"),
        help="(default: %(default)s)",
    )
    add_prior(parser)
    parser.add_argument("--warmup", type=count, metavar="W", help=warmup_help(" of nuts and nonprivate"))
    parser.add_argument(
        "--seed",
        type=seed,
        default=0,
        metavar="SEED",
        help="of the DPVI runs and the posterior draws; fixed by default, since Adult is public benchmark data "
        "(default: %(default)d)",
    )
    add_output_dir(parser)
    add_study_options(parser, chunk=field_default(CalibrationDesign, "chunk"), unit="DPVI runs")
    parser.set_defaults(run=run)


def run(args) -> int:
    from ..datasets import adult
    from ..evaluation.calibration_experiment import PRESET
    from ..models import get as get_model
    from ..studies import calibration_plan

    overrides = (
        {"allow_weak_privacy": args.allow_weak_privacy}
        | ({} if args.steps is None else {"steps": args.steps})
        | family_settings(args)
    )
    settings = dict(get_model(PRESET).dpvi_settings) | overrides
    levels = privacy_levels(args)
    check_privacy_levels(args, settings["sampling_rate"], settings["steps"])
    data = adult(args.data_dir, scaling=args.scaling, verify=not args.no_verify)
    options = experiment_options(args.methods, args.prior, args.warmup)
    if "nonprivate" in args.methods:  # the reference's K NUTS draws are its θ draws
        options["nonprivate"] = options.get("nonprivate", {}) | {"draws": args.samples}
    plan = calibration_plan(
        data,
        levels=levels,
        key=args.seed,
        methods=args.methods,
        method_options=options,
        delta=args.delta,
        runs=args.runs,
        samples=args.samples,
        bins=args.bins,
        binning=args.binning,
        chunk=args.chunk,
        **overrides,
    )
    return run_cli_study(args, plan)
