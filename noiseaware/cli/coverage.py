"""`noiseaware coverage`: TARP coverage of noise-aware and baseline posteriors on data simulated from a model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import models
from ..evaluation.coverage import CoverageDesign
from ..evaluation.settings_report import YOURS, SettingsReport, settings_path, settings_report
from ..methods.base import research_transforms
from ..methods.registry import DEFAULT_REGISTRY
from .common import builtin, import_attribute
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
from .presets import add_preset, no_preset, preset_models
from .study import add_study_options, run_cli_study


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "coverage",
        help="TARP coverage of noise-aware and baseline posteriors on simulated data",
        description="Simulate M data sets from the model's prior, record a DPVI trace of each (one compiled "
        "program), fit every method on the same traces and score them by TARP (expected coverage of balls "
        "around reference points, R reference draws). Prints the coverage RMSE under both reference rules "
        "and writes DIR/coverage-MODEL-eps-E.json, .csv (the ECP curves) and .png (the curves). The work runs as "
        "a study in DIR (tasks of --chunk simulations per level, kept as they finish): the same command resumes "
        "it, here or with --workers / --scheduler, and `noiseaware report DIR` rebuilds its tables at any time. "
        "Every argument and every level's files are checked before any work: an existing file needs --force, "
        "and a directory holding another study is refused.",
    )
    parser.add_argument(
        "--model",
        required=True,
        metavar="NAME",
        help=f"a built-in ({', '.join(models.names())}, M1, M2, M3) or package.module:name of a "
        "model made by noiseaware.models.from_numpyro",
    )
    add_privacy_levels(parser)
    add_method_list(parser, method_lists().coverage, default=field_default(CoverageDesign, "methods"))
    parser.add_argument(
        "--simulations",
        type=positive_int,
        default=field_default(CoverageDesign, "simulations"),
        metavar="M",
        help="simulated data sets, each with its true θ (default: %(default)d)",
    )
    parser.add_argument(
        "--references",
        type=positive_int,
        default=field_default(CoverageDesign, "references"),
        metavar="R",
        help="sets of reference points (default: %(default)d)",
    )
    parser.add_argument(
        "--samples",
        type=positive_int,
        default=field_default(CoverageDesign, "samples"),
        metavar="K",
        help="θ draws per posterior (default: %(default)d)",
    )
    add_renamed(parser, "--repeats", "--references", "sets of reference points")
    add_renamed(parser, "--draws", "--samples", "θ draws per posterior; fit --draws counts draws of φ*")
    parser.add_argument("--steps", type=positive_int, metavar="T", help="DP-SGD steps (default: the preset's)")
    add_family(parser)
    add_preset(parser)
    add_delta(parser)
    add_prior(parser)
    parser.add_argument("--warmup", type=count, metavar="W", help=warmup_help(" of nuts"))
    parser.add_argument("--seed", type=seed, default=0, metavar="SEED", help="(default: %(default)d)")
    add_output_dir(parser)
    add_study_options(parser, chunk=field_default(CoverageDesign, "chunk"), unit="simulations")
    parser.set_defaults(run=run)


def run(args) -> int:
    from ..studies import coverage_plan

    bm = _coverage_model(args.model)
    levels = privacy_levels(args)
    by_level = {level: bm for level in levels}
    presets = dict.fromkeys(levels, YOURS)
    if ":" not in args.model:
        epsilons = [value for name, value in levels if name == "epsilon"] or None
        obstacle = research_transforms(DEFAULT_REGISTRY.resolve(args.methods))
        by_epsilon = preset_models(bm, args.preset, epsilons, obstacle)
        by_level = {(name, value): by_epsilon[value if name == "epsilon" else None] for name, value in levels}
        presets = {
            level: "research preset" if model.preset == "research" else f"tuned preset at ε = {level[1]:g}"
            for level, model in by_level.items()
        }
    else:
        no_preset(args)
    overrides = (
        {"allow_weak_privacy": args.allow_weak_privacy}
        | ({} if args.steps is None else {"steps": args.steps})
        | family_settings(args)
    )
    grids = {(s["sampling_rate"], s["steps"]) for s in (dict(m.dpvi_settings) | overrides for m in by_level.values())}
    for sampling_rate, steps in grids:
        check_privacy_levels(args, sampling_rate, steps)
    plan = coverage_plan(
        by_level,
        levels=levels,
        key=args.seed,
        methods=args.methods,
        delta=args.delta,
        simulations=args.simulations,
        references=args.references,
        samples=args.samples,
        chunk=args.chunk,
        method_options=experiment_options(args.methods, args.prior, args.warmup),
        **overrides,
    )
    reports = {
        _report_path(args.out, model.name, level): settings_report(
            model, dict(model.dpvi_settings) | overrides, preset=presets[level], gradient_prior=args.prior
        )
        for level, model in by_level.items()
    }
    replaced = _check_reports(reports, args.force)
    for text in dict.fromkeys(report.brief() for report in reports.values()):
        print(text, file=sys.stderr)
    status = run_cli_study(args, plan, recompute=replaced)
    for path, report in reports.items():
        report.to_json(path, overwrite=True)  # checked above: absent, the same report, or --force
    print(f"wrote {', '.join(map(str, reports))} (what each level used: priors, settings, and who chose them)")
    return status


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _report_path(out: str, model: str, level) -> Path:
    """DIR/coverage-MODEL-eps-E.used.json: what the level's runs used, beside its results."""
    from ..studies import COVERAGE

    return settings_path(Path(out) / (COVERAGE.stem({"model": model, "level": list(level)}) + ".json"))


def _check_reports(reports: dict[Path, SettingsReport], force: bool) -> bool:
    """Before any work: a settings report may replace only the same report (a resumed study) unless --force; True
    when --force replaces another (the results beside it are then of other inputs, and are recomputed)."""
    replaced = False
    for path, report in reports.items():
        if path.exists() and _read(path) != report.to_dict():
            if not force:
                raise FileExistsError(
                    f"{path} exists and reports other settings than this run's: pass --force to replace it and "
                    "recompute the study's results (they were of those settings), or choose another --out"
                )
            replaced = True
    return replaced


def _coverage_model(spec: str) -> models.BenchmarkModel:
    """A built-in, or the BenchmarkModel named by package.module:name."""
    if ":" not in spec:
        return builtin(spec)
    bm = import_attribute(spec)
    if not isinstance(bm, models.BenchmarkModel):
        raise ValueError(
            f"--model {spec} is not a BenchmarkModel: make one with "
            "noiseaware.models.from_numpyro(model, n_examples=…, steps=…, …)"
        )
    return bm
