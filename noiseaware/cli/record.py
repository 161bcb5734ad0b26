"""`noiseaware record`: run DPVI on a built-in model (simulated data or --data) or on a user's numpyro model
`package.module:function` (--data) and save its trace.

Simulated runs default to seed 0; a run on real data draws a secret random seed that is never printed or saved.

Why this module is long: it is the one command that spends privacy, so every way a run can be set up is checked
here before the first step — three sources of model and data (a built-in simulated, a built-in on --data, a
model of the user's own on --data) times two sources of settings (a preset chosen by ε, or a settings file,
re-verified where a simulator exists) — and each combination has its own refusals, which read best side by side.
"""

from __future__ import annotations

import secrets
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import jax
import jax.numpy as jnp
import numpy as np

from .. import models
from ..checks import diagnose_if_long_enough
from ..evaluation.settings_report import YOURS, settings_path, settings_report
from ..models.presets import transforms_obstacle
from ..recording.config import required_settings
from ..recording.contract import inspect_model
from ..recording.dpvi import record_dpvi
from ..recording.settings import UNCHECKED_HINT, SettingsHint, check_preset_size
from ..tuning import TunedSettings
from ..util.tables import text_table
from .common import builtin, import_attribute, keys, trace_report
from .data import load_data
from .options import (
    SEED_BITS,
    SIMULATION_SEED,
    add_dp_sgd_options,
    add_family,
    add_force,
    add_seed,
    family_settings,
    positive_float,
    positive_int,
)
from .outputs import Outputs
from .presets import add_preset, no_preset, preset_models

TRACE_SUFFIXES = (".nc", ".npz")
USER_MODEL_REQUIRED = required_settings()
"""Settings a user model must be given: it has no preset (DPVISettings' fields without a default)."""
SETTING_OPTIONS = (
    "steps",
    "sampling_rate",
    "clip",
    "mc_draws",
    "grad_scale",
    "lr_multiplier",
    "learning_rate",
    "init",
    "transforms",
    "clip_count_share",
)
"""record options that override a preset's `dpvi_settings` (argparse destinations = DPVISettings fields)."""
BLOCK_OPTIONS = ("grad_scale", "lr_multiplier", "learning_rate")
"""Options taking one value (all coordinates), two (μ block, ρ block) or, beyond mean-field, three (and the
factor block)."""
KNOWN_SEED_WARNING = (
    "warning: --seed with --data: anyone who knows this seed can regenerate the DP noise and "
    "remove it from the trace; use a fixed seed on real data only for testing"
)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "record",
        help="record a DPVI trace of a built-in or your own numpyro model",
        description="Run DPVI (DP-SGD on the ELBO) and save its trace. A built-in model simulates its data "
        "(or reads --data) and uses its tuned preset at --epsilon where one is shipped, else the research preset "
        "(--preset chooses); options given here override the preset. A user "
        "model `package.module:function` needs --data, --steps, --sampling-rate and --clip.",
    )
    parser.add_argument(
        "--model",
        required=True,
        metavar="NAME",
        help=f"a built-in ({', '.join(models.names())}, M1, M2, M3) or package.module:function",
    )
    parser.add_argument(
        "--out", required=True, metavar="FILE", help="trace file to write (.nc or .npz; not the --data file)"
    )
    add_force(parser)
    parser.add_argument(
        "--data",
        metavar="FILE",
        help=".npz (arrays by keyword) or .csv (header = keywords; X[0], X[1], … stack into X)",
    )
    level = parser.add_mutually_exclusive_group(required=True)
    level.add_argument("--epsilon", type=positive_float, metavar="E", help="ε; σ is calibrated by the PLD accountant")
    level.add_argument(
        "--noise-multiplier", type=positive_float, metavar="S", help="σ; ε is reported by the accountant"
    )
    level.add_argument(
        "--non-private", action="store_true", help="σ = 0, a non-private reference run (needs --learning-rate)"
    )
    add_seed(
        parser,
        None,
        f"default: {SIMULATION_SEED} for simulated data; with --data a secret random seed, "
        "never printed or saved, since anyone who knows the seed can remove the DP noise: give --seed "
        "with --data only for testing",
    )
    add_dp_sgd_options(parser, defaults=False)
    parser.add_argument("--clip", type=positive_float, metavar="C", help="clipping norm C")
    parser.add_argument("--mc-draws", type=positive_int, metavar="DRAWS", help="Monte Carlo draws S per step")
    parser.add_argument(
        "--clip-count-share",
        type=positive_float,
        metavar="R",
        help="release each step a noisy count of the examples clipped, spending the share R of ε on it (e.g. 0.01; "
        "at most 0.5), so that the trace checks can tell whether clipping was active at the optimum",
    )
    parser.add_argument(
        "--grad-scale",
        type=positive_float,
        nargs="+",
        metavar="S",
        help="preconditioning s: one value, two (μ block, ρ block) or three (and the factor block of a "
        "full-rank or low-rank family; with two it takes μ's values row by row)",
    )
    parser.add_argument(
        "--lr-multiplier",
        type=positive_float,
        nargs="+",
        metavar="V",
        help="v of the κ heuristic λ = v·s/(sqrt(T·P)·σ·C): one value, two (μ, ρ) or three (μ, ρ, factor)",
    )
    parser.add_argument(
        "--learning-rate",
        type=positive_float,
        nargs="+",
        metavar="L",
        help="explicit step size λ instead of the κ heuristic: one value, two (μ, ρ) or three (μ, ρ, factor)",
    )
    parser.add_argument("--init", type=float, nargs=2, metavar=("MU0", "RHO0"), help="initial μ₀ and ρ₀")
    add_family(parser)
    add_preset(parser)
    parser.add_argument(
        "--transforms",
        choices=("numpyro", "research"),
        help="unconstrained maps: numpyro's biject_to, or research (softplus, additive log-ratio)",
    )
    parser.add_argument("--n-examples", type=positive_int, metavar="N", help="size of the simulated data set")
    parser.add_argument(
        "--settings",
        metavar="FILE",
        help="DP-SGD settings from `noiseaware tune` for this model (numpyro transforms for a built-in); "
        "they replace the preset and every setting option",
    )
    parser.add_argument("--float64", action="store_true", help="record in 64-bit floats")
    parser.add_argument(
        "--windowed",
        "--summary",
        dest="windowed",
        action="store_true",
        help="keep the run as a windowed trace (window sums and 64 sample rows, docs/windowed.md): --out FILE.npz "
        "(--summary is its older name)",
    )
    parser.set_defaults(run=run)


@dataclass(frozen=True)
class _Job:
    """What `record` runs: a model, its data, the record_dpvi settings and, for simulated data, the truth."""

    model: Callable
    data: Mapping
    settings: Mapping
    truth: tuple[models.BenchmarkModel, jax.Array] | None = None
    preset: str = YOURS
    """Where the settings came from, for the settings report: a built-in's preset, or yours."""
    preset_settings: Mapping = MappingProxyType({})


def run(args) -> int:
    outputs = Outputs(force=args.force, inputs=() if args.data is None else (args.data,))
    if args.windowed:
        out = outputs.file(args.out, "--out", (".npz",), "a windowed trace's file ends in .npz")
    else:
        out = outputs.file(args.out, "--out", TRACE_SUFFIXES, "a trace file ends in .nc (netCDF4) or .npz (numpy)")
    report_path = outputs.file(settings_path(out), "--out", (".json",), "")
    key_simulation, key_dpvi = keys(_record_seed(args))
    if args.settings is not None:
        job = _tuned_job(args, key_simulation)
    else:
        job = _user_job(args) if ":" in args.model else _builtin_job(args, key_simulation)
        if not args.non_private and "preflight" not in job.settings:
            print(f"hint: {UNCHECKED_HINT}", file=sys.stderr)
    used = dict(job.settings) | family_settings(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SettingsHint)
        trace = record_dpvi(
            job.model,
            job.data,
            key=key_dpvi,
            progress=True,
            dtype=_dtype(args),
            windowed=args.windowed,
            **_privacy(args),
            **used,
        )
    report = settings_report(
        job.model,
        used,
        preset=job.preset,
        preset_settings=job.preset_settings,
        site_map=trace.site_map,
        data=job.data,
        name=args.model,
    )
    print(report.brief(), file=sys.stderr)
    with outputs.writing():
        trace.save(out, overwrite=args.force)
        report.to_json(report_path, overwrite=args.force)
    checks = diagnose_if_long_enough(trace)
    print(trace_report(trace, checks))
    if job.truth is not None:
        print()
        print(_truth_report(*job.truth))
    kind = "windowed trace" if args.windowed else "trace"
    print(f"\n{kind} saved to {out}; what the run used (priors, settings and their sources): {report_path}")
    if checks is not None and "runaway" in checks.fired:
        print("it cannot be fitted (its iterates ran away): record again with a smaller learning rate")
    elif ":" not in args.model:
        print(f"fit it with the model's own prior: noiseaware fit {out} --model {args.model}")
    return 0


def _record_seed(args) -> int:
    """--seed, or the default: 0 for simulated data, a secret random seed (never shown) for real data."""
    if args.data is None:
        return SIMULATION_SEED if args.seed is None else args.seed
    if args.seed is None:
        return secrets.randbits(SEED_BITS)
    print(KNOWN_SEED_WARNING, file=sys.stderr)
    return args.seed


def _dtype(args):
    return jnp.float64 if args.float64 else None


def _privacy(args) -> dict:
    if args.non_private:
        if args.learning_rate is None:
            raise ValueError("--non-private needs --learning-rate L (the κ heuristic divides by σ = 0)")
        return {"non_private": True}
    return {
        "epsilon": args.epsilon,
        "noise_multiplier": args.noise_multiplier,
        "delta": args.delta,
        "allow_weak_privacy": args.allow_weak_privacy,
    }


def _settings(preset: Mapping, args) -> dict:
    """The preset's settings with the options given on the command line in their place."""
    given = {name: getattr(args, name) for name in SETTING_OPTIONS if getattr(args, name) is not None}
    for name in BLOCK_OPTIONS:
        if name in given:
            given[name] = _scalar_or_pair(given[name], name)
    if "init" in given:
        given["init"] = tuple(given["init"])
    settings = dict(preset)
    if given:
        settings.pop("preflight", None)  # the check was of the preset as it was
    if "learning_rate" in given and "lr_multiplier" not in given:
        settings.pop("lr_multiplier", None)  # an explicit λ replaces the preset's κ heuristic
    settings.update(given)
    return settings


def _scalar_or_pair(values: Sequence[float], name: str):
    if len(values) == 1:
        return values[0]
    if len(values) in (2, 3):
        return tuple(values)
    raise ValueError(
        f"--{name.replace('_', '-')} takes one value (all coordinates), two (μ block, ρ block) or three (and the "
        f"factor block of a full-rank or low-rank family), got {len(values)}"
    )


def _tuned_job(args, key) -> _Job:
    """The model of --model with the settings of --settings, checked to be the model they were tuned for."""
    given = [f"--{name.replace('_', '-')}" for name in SETTING_OPTIONS if getattr(args, name) is not None]
    given += ["--preset"] if args.preset is not None else []
    if given:
        raise ValueError(f"--settings fixes the DP-SGD settings: drop {', '.join(given)} (or tune again)")
    if ":" not in args.model and args.data is None:
        bm = builtin(args.model, preset=False)
        if args.n_examples is not None:
            bm = models.from_numpyro(bm.model, n_examples=args.n_examples, covariates=bm.covariates, name=bm.name)
        settings = _verified(args.settings, bm)
        theta, data = bm.simulate(key)
        return _Job(bm.model, data, settings, (bm, theta), f"yours ({args.settings})", settings)
    settings = TunedSettings.load(args.settings)
    if ":" in args.model:
        model = import_model(args.model)
        name, data = getattr(model, "__name__", "model"), _user_data(args)
    else:
        bm = builtin(args.model, preset=False)
        model, name, data = bm.model, bm.name, _user_data(args, bm)
    spec = inspect_model(model, data, transforms=settings["transforms"], sites=settings["sites"])
    settings.check_layout(name, spec.site_map, spec.n_examples)
    if ":" not in args.model:  # the settings that record are the ones re-verified (one read of the file)
        sized = models.from_numpyro(model, n_examples=spec.n_examples, covariates=bm.covariates, name=bm.name)
        settings = _verified(args.settings, sized)
    else:
        print(
            f"note: {args.settings} is not re-verified for a model without its simulator; check a file from "
            f"someone else with `noiseaware preflight --model … --settings {args.settings}` first",
            file=sys.stderr,
        )
    return _Job(model, data, settings, None, f"yours ({args.settings})", settings)


def _verified(path, bm: models.BenchmarkModel) -> TunedSettings:
    """The settings file at `path` for built-in `bm`, its recorded check re-verified on fresh simulations of `bm`
    (`TunedSettings.verify`: seconds, no privacy) before any privacy is spent on it."""
    settings = TunedSettings.load(path, bm, verify=True)
    print(
        f"settings: {path} re-verified on fresh simulations (σ, clipping, clipping shift, width agree with its "
        "recorded check)",
        file=sys.stderr,
    )
    return settings


def _builtin_job(args, key) -> _Job:
    """A built-in model on simulated data (or on --data) with its preset (`presets`: tuned where it applies)."""
    research = builtin(args.model)
    n_examples, data = args.n_examples, None
    if args.data is not None:
        data = _user_data(args, research)
        # the data's own problems (lengths, support) first, then whether a preset fits their size
        n_examples = inspect_model(
            research.model,
            data,
            transforms=research.dpvi_settings.get("transforms", "numpyro"),
            sites=research.dpvi_settings.get("sites"),
        ).n_examples
    epsilons = None if args.epsilon is None else [args.epsilon]
    (bm,) = preset_models(research, args.preset, epsilons, _obstacle(args, research, n_examples)).values()
    preset = "research preset" if bm.preset == "research" else f"tuned preset at ε = {args.epsilon:g}"
    if n_examples is not None:
        _check_preset_size(bm, n_examples)
    if data is not None:
        return _Job(bm.model, data, _settings(bm.dpvi_settings, args), None, preset, bm.dpvi_settings)
    bm = _resized(bm, args)
    theta, data = bm.simulate(key)
    return _Job(bm.model, data, _settings(bm.dpvi_settings, args), (bm, theta), preset, bm.dpvi_settings)


def _obstacle(args, research: models.BenchmarkModel, n_examples: int | None) -> str | None:
    """Why the tuned preset cannot apply to this run, or None."""
    if args.transforms is not None:
        return transforms_obstacle({"transforms": args.transforms})
    if n_examples is not None and n_examples != research.n_examples:
        return f"it was tuned for N = {research.n_examples} examples, not N = {n_examples}"
    return None


def _check_preset_size(bm: models.BenchmarkModel, n_examples: int) -> None:
    """`check_preset_size` in the command line's words: the preset named, the fix a `tune` command."""
    try:
        check_preset_size(n_examples, bm.n_examples, f"the {bm.name} preset was")
    except ValueError as error:
        raise ValueError(
            f"{error}; here: `noiseaware tune --model {bm.name} --n-examples {n_examples} --epsilon …` and record "
            "with --settings FILE"
        ) from None


def _resized(bm: models.BenchmarkModel, args) -> models.BenchmarkModel:
    """`bm` simulating --n-examples examples, and mapping θ by --transforms so that the true θ printed is in
    the trace's coordinates."""
    if args.n_examples is None and args.transforms is None:
        return bm
    settings = dict(bm.dpvi_settings)
    if args.transforms is not None:
        settings["transforms"] = args.transforms
    n_examples = bm.n_examples if args.n_examples is None else args.n_examples
    return models.from_numpyro(
        bm.model, n_examples=n_examples, covariates=bm.covariates, name=bm.name, description=bm.description, **settings
    )


def _user_job(args) -> _Job:
    """A user's numpyro model `package.module:function` on the data of --data."""
    model = import_model(args.model)
    no_preset(args)
    if args.data is None:
        raise ValueError(f"model {args.model} needs data: pass --data FILE (.csv or .npz)")
    missing = [f"--{name.replace('_', '-')}" for name in USER_MODEL_REQUIRED if getattr(args, name) is None]
    if missing:
        raise ValueError(f"a user model has no preset: pass {', '.join(missing)}")
    return _Job(model, _user_data(args), _settings({}, args))


def _user_data(args, model: models.BenchmarkModel | None = None) -> dict[str, np.ndarray]:
    """The data of --data (where N is the data's length, so --n-examples has no place), shaped as the built-in
    `model` declares them when one is given."""
    if args.n_examples is not None:
        raise ValueError("--n-examples sizes simulated data; with --data, N is the length of the data")
    return load_data(args.data, model)


def import_model(spec: str) -> Callable:
    """The function named by 'package.module:function' (the current directory is searched first)."""
    model = import_attribute(spec)
    if not callable(model):
        raise ValueError(f"--model {spec}: {spec.partition(':')[2]!r} is not a function")
    return model


def _truth_report(bm: models.BenchmarkModel, theta) -> str:
    """The simulation's true θ per coordinate and each site's value in the model's own space."""
    rows = [(name, f"{float(value):.4g}") for name, value in zip(bm.site_map.theta_names(), np.asarray(theta))]
    sites = [
        f"  {name} = {np.array2string(np.asarray(value), precision=4, max_line_width=sys.maxsize)}"
        for name, value in bm.site_map.constrain(jnp.asarray(theta)).items()
    ]
    return "\n".join(
        [
            "true θ of the simulation (printed only; it is not part of the trace)",
            text_table(("θ", "unconstrained"), rows),
            "in the model's space:",
            *sites,
        ]
    )
