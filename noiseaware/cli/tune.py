"""`noiseaware tune` and `noiseaware preflight`: DP-SGD settings found and checked on simulations, no data.

    noiseaware tune --model M1 --epsilon 1 --trials 12 --out m1-settings.json
    noiseaware tune --model M1 --epsilon 1 --trials 12 --out m1-settings.json --workers 2 --study m1-trials/
    noiseaware tune --model mymodels:regression --covariates mymodels:design --n-examples 5000 --epsilon 1 \\
        --out settings.json
    noiseaware preflight --model M1 --epsilon 1 --settings m1-settings.json

`tune` writes the settings file and, beside it, <stem>-coverage.png (the check's coverage curve) and
<stem>-privacy-utility.png (posterior sd and coverage against ε for the chosen settings). With --workers or
--scheduler the candidates of a rung run in parallel; with --study DIR their finished parts are kept in
DIR/trials.journal and the same command resumes the search (docs/tuning.md).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from .. import models
from ..plots import plot_check, plot_privacy_utility
from ..tuning import PreflightWarning, TunedSettings, preflight, privacy_utility, tune
from ..tuning.design import TuningDesign
from ..util.defaults import field_default
from ..util.tables import text_table
from .common import builtin, import_attribute
from .options import add_delta, add_force, add_seed, positive_float, positive_int
from .outputs import Outputs
from .presets import add_preset, no_preset, preset_models
from .study import add_workers, executor_of

TOP_TRIALS = 8
"""Rows of the best-candidates table."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="choose DP-SGD settings on simulations from the model's prior (spends no privacy)",
        description="Judge candidate clips, gradient scales, learning rates and initial values on what the facts "
        "of data sets simulated from the model's prior predictive predict (Optuna's TPE), simulate the best by "
        "successive halving, then check the chosen settings on fresh simulations.",
    )
    _add_common(parser)
    for flag, metavar, what in (
        ("predictions", "K", "candidates judged on their predictions, before any simulation"),
        ("trials", "K", "candidates simulated by successive halving (again as many when none is feasible)"),
        ("simulations", "M", "simulations of the search"),
        ("check-simulations", "M", "fresh simulations of the final check"),
        ("candidates", "K", "best candidates checked, in turn, until one passes its check"),
        ("curve-simulations", "M", "simulations per privacy level of the privacy–utility curve"),
    ):
        default = field_default(TuningDesign, flag.replace("-", "_"))
        parser.add_argument(
            f"--{flag}", type=positive_int, default=default, metavar=metavar, help=f"{what} (default: {default})"
        )
    epsilons = field_default(TuningDesign, "curve_epsilons")
    parser.add_argument(
        "--curve-epsilons",
        type=positive_float,
        nargs="+",
        default=epsilons,
        metavar="E",
        help=f"privacy levels of the privacy–utility curve (default: {' '.join(f'{e:g}' for e in epsilons)})",
    )
    parser.add_argument("--out", required=True, metavar="FILE", help="settings file to write (.json)")
    add_force(parser)
    group = add_workers(parser, "candidates run --workers at a time; with --study they are kept and resumed")
    group.add_argument(
        "--study",
        metavar="DIR",
        help="keep every finished trial in DIR/trials.journal (Optuna's journal file): the same command resumes "
        "the search; other machines may share it",
    )
    parser.set_defaults(run=run_tune)
    check = subparsers.add_parser(
        "preflight",
        help="check DP-SGD settings on fresh simulations before spending privacy",
        description="Run the settings (a tuned settings file, or the model's preset) on data simulated from "
        "the model's prior: coverage, width, clipping at the optimum and trace checks, with what to change.",
    )
    _add_common(check)
    check.add_argument("--settings", metavar="FILE", help="a settings file of `noiseaware tune` (default: the preset)")
    add_preset(check)
    simulations = field_default(TuningDesign, "preflight_simulations")
    check.add_argument(
        "--simulations",
        type=positive_int,
        default=simulations,
        metavar="M",
        help=f"fresh simulations (default: {simulations})",
    )
    check.add_argument("--plot", metavar="FILE", help="the coverage curve (.png, .pdf or .svg)")
    add_force(check)
    check.set_defaults(run=run_preflight)


def _add_common(parser) -> None:
    """--model, --covariates, --n-examples, --epsilon, --delta and --seed of both commands."""
    parser.add_argument(
        "--model",
        required=True,
        metavar="NAME",
        help=f"a built-in ({', '.join(models.names())}, M1, M2, M3; as a user would write it: numpyro's "
        "transforms, no preset) or package.module:function (a numpyro model or a BenchmarkModel)",
    )
    parser.add_argument(
        "--covariates",
        metavar="FUNC",
        help="package.module:function(key, n) → {name: array} simulating the model's non-modelled inputs",
    )
    parser.add_argument("--n-examples", type=positive_int, metavar="N", help="N of the data the settings are for")
    parser.add_argument("--epsilon", type=positive_float, required=True, metavar="E", help="the privacy level ε")
    add_delta(parser)
    add_seed(parser, 0, "default: 0")


def benchmark_model(args, *, preset: bool = False) -> models.BenchmarkModel:
    """The model of --model: a built-in (numpyro transforms, no preset unless `preset`), a BenchmarkModel, or a
    numpyro function wrapped by from_numpyro with --n-examples and --covariates."""
    if ":" not in args.model:
        bm = builtin(args.model, preset=preset)
        if args.covariates is not None:
            raise ValueError("--covariates is for a user model; a built-in simulates its own")
        if args.n_examples is None or args.n_examples == bm.n_examples:
            return bm
        return models.from_numpyro(
            bm.model, n_examples=args.n_examples, covariates=bm.covariates, name=bm.name, **bm.dpvi_settings
        )
    target = import_attribute(args.model)
    if isinstance(target, models.BenchmarkModel):
        return target
    if not callable(target):
        raise ValueError(f"--model {args.model}: not a numpyro model or a BenchmarkModel")
    if args.n_examples is None:
        raise ValueError(f"--model {args.model} needs --n-examples N: the settings depend on the data's size")
    covariates = None if args.covariates is None else import_attribute(args.covariates)
    return models.from_numpyro(target, n_examples=args.n_examples, covariates=covariates)


def run_tune(args) -> int:
    outputs = Outputs(force=args.force)
    out = outputs.file(args.out, "--out", (".json",), "a settings file ends in .json")
    stem = out.with_suffix("")
    figures = [Path(f"{stem}-coverage.png"), Path(f"{stem}-privacy-utility.png")]
    for path in figures:
        outputs.file(path, "--out", (".png",), "")
    bm = benchmark_model(args)
    parallel = args.workers is not None or args.scheduler is not None
    storage = None if args.study is None else Path(args.study) / "trials.journal"
    with warnings.catch_warnings(record=True) as caught, executor_of(args) as (executor, slots):
        warnings.simplefilter("always", PreflightWarning)
        tuned = tune(
            bm,
            epsilon=args.epsilon,
            delta=args.delta,
            key=args.seed,
            trials=args.trials,
            predictions=args.predictions,
            simulations=args.simulations,
            check_simulations=args.check_simulations,
            candidates=args.candidates,
            progress=True,
            executor=executor if parallel else None,
            slots=slots,
            storage=storage,
        )
        curve = privacy_utility(
            bm,
            tuned,
            epsilons=args.curve_epsilons,
            delta=args.delta,
            simulations=args.curve_simulations,
            key=args.seed,
            progress=True,
        )
    print(best_trials(tuned))
    if not tuned.check.findings and not any(trial["feasible"] for trial in tuned.trials):
        print(
            f"no candidate met every constraint on the {tuned.provenance['simulations']} search simulations, but the "
            f"chosen one passed its fresh check on {tuned.check.simulations}: that check is the verdict"
        )
    print()
    print(tuned.table())
    print()
    print(tuned.check.table())
    print()
    print(curve.table())
    with outputs.writing():
        tuned.save(out, overwrite=args.force)
        plot_check(tuned.check, figures[0], overwrite=args.force)
        plot_privacy_utility(curve, figures[1], overwrite=args.force)
    _print_findings(caught)
    print(f"\nsettings saved to {out}; figures {figures[0]}, {figures[1]}")
    return 0


def run_preflight(args) -> int:
    outputs = Outputs(force=args.force, inputs=() if args.settings is None else (args.settings,))
    plot = None if args.plot is None else outputs.file(args.plot, "--plot", (".png", ".pdf", ".svg"), "a plot file")
    settings = None
    if args.settings is None:
        bm = _preset_model(args)
    else:
        if args.preset is not None:
            raise ValueError("--settings replaces the preset: drop --preset")
        bm = benchmark_model(args)
        settings = TunedSettings.load(args.settings, bm, verify=False)  # the preflight below checks them whole
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PreflightWarning)
        report = preflight(
            bm,
            settings,
            epsilon=args.epsilon,
            delta=args.delta,
            simulations=args.simulations,
            key=args.seed,
            progress=True,
        )
    print(report.table())
    if plot is not None:
        with outputs.writing():
            plot_check(report, plot, overwrite=args.force)
        print(f"\ncoverage curve saved to {plot}")
    _print_findings(caught)
    return 0


def _preset_model(args) -> models.BenchmarkModel:
    """The model of --model with its preset: for a built-in, tuned at --epsilon where it applies (`presets`)."""
    if ":" in args.model:
        no_preset(args)
        return benchmark_model(args, preset=True)
    research = benchmark_model(args, preset=True)  # sized by --n-examples: another N than the tuned one's is
    (bm,) = preset_models(research, args.preset, [args.epsilon]).values()  # an obstacle `preset_at` names
    return bm


def best_trials(tuned: TunedSettings) -> str:
    """The best simulated candidates (feasible first, then by width) as a table: each one's predicted width beside
    the measured one, the simulations it reached, the clip C as record_dpvi uses it (the settings file's `clip`)
    beside c, the clip relative to the 99 % gradient-norm quantile that the search moves (docs/tuning.md)."""
    rows = sorted(tuned.trials, key=lambda t: (not t["feasible"], t["state"] != "complete", t["sd_ratio"]))
    cells = [
        [
            str(t["trial"]),
            str(t.get("simulations", "–")),
            "yes" if t["feasible"] else t.get("fails") or "no",
            f"{t['predicted_width']:.3f}" if "predicted_width" in t else "–",
            f"{t['sd_ratio']:.3f}",
            f"{t['theta_p']:.3g}",
            f"{t['clip_absolute']:.3g}" if "clip_absolute" in t else "–",
            f"{t['clip']:.3g}",
            f"{t['rho_weight']:.3g}",
            f"{t['relaxation_mu']:.3g}",
            f"{t['relaxation_rho']:.3g}",
            f"{100 * t['clipped']:.2f}",
            f"{100 * t['flagged']:.0f}",
        ]
        for t in rows[:TOP_TRIALS]
    ]
    header = [
        "trial",
        "M",
        "feasible (or fails)",
        "predicted sd/VI sd",
        "sd/VI sd",
        "calib. p",
        "clip C",
        "c = C / q99",
        "ρ weight",
        "κ μ",
        "κ ρ",
        "clip %",
        "flag %",
    ]
    chosen = tuned.settings["clip"]
    judged = tuned.provenance.get("predictions")
    prior = f" of {judged} judged on their predictions" if judged else ""
    return (
        f"best of {len(tuned.trials)} simulated candidates{prior} (M: simulations it reached; clip C as in the "
        f"settings, chosen {chosen:.3g}; c: C over the 99 % quantile of the simulated per-example gradient norms "
        "at the optimum, what the search moves)\n" + text_table(header, cells)
    )


def _print_findings(caught) -> None:
    for warning in caught:
        if issubclass(warning.category, PreflightWarning):
            print(f"warning: {warning.message}", file=sys.stderr)
