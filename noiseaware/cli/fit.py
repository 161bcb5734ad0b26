"""`noiseaware fit`: the noise-aware posterior of a trace file, printed beside the naive last iterate and, with
--out, saved (without --out nothing is written: a "just show me" run)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import sys
from pathlib import Path

import jax
import numpy as np

from ..baselines.naive import naive_posterior
from ..inference.nuts import STARTS
from ..methods import GradientModelOptions, NutsOptions
from ..methods.fit_loop import run_checks, runaway_failure
from ..methods.model_match import check_model_matches
from ..methods.registry import DEFAULT_REGISTRY
from ..methods.routes import check_constant_settings
from ..models.benchmark import BenchmarkModel
from ..plots.base import select_columns
from ..plots.densities import coordinate_sites, site_elements
from ..plots.trace_panels import coordinate_names
from ..posteriors.mixture import MixturePosterior
from ..posteriors.summary import INTERVAL_LEVEL, comparison_table
from ..trace import Trace, TraceError
from ..trace.windowed import load_run
from ..util.keys import as_key
from .common import (
    THETA_STREAM,
    builtin,
    fit_reporting_warnings,
    import_attribute,
    reporting_warnings,
    route_options,
)
from .options import (
    add_force,
    add_prior,
    count,
    field_default,
    fraction,
    method_lists,
    positive_int,
    probability,
    seed,
    warmup_help,
)
from .outputs import Outputs

DIAGNOSTICS_FIRST = ("max_rhat", "min_ess", "divergences")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "fit",
        help="the noise-aware posterior of a trace, beside the naive last iterate",
        description="Fit the gradient model to a trace file's steps after the burn-in and print the noise-aware "
        "posterior's intervals of θ beside the naive ones (the DPVI last iterate, which ignores the DP noise). "
        "With --out, also save the posterior (.nc, read it with noiseaware.load_posterior); without it nothing "
        "is written.",
    )
    parser.add_argument(
        "trace",
        metavar="TRACE",
        help="trace file (.nc or .npz), e.g. from `noiseaware record`, or a trace summary (.npz, docs/windowed.md)",
    )
    parser.add_argument(
        "--method",
        choices=method_lists().routes,
        default="exact",
        help="exact: closed form and quadrature (fast, no sampling error); laplace: Newton MAP and "
        "a Gaussian; nuts: MCMC (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="posterior file to write (.nc; not the trace file); without --out the result is only printed",
    )
    add_force(parser)
    add_prior(parser, "prior preset of the gradient model; paper: the research settings (default: %(default)s)")
    parser.add_argument(
        "--model",
        metavar="NAME",
        help="the model the trace was recorded with: a built-in (M1, linreg-10d, …) or package.module:name of a "
        "noiseaware BenchmarkModel (na.models.from_numpyro(..., covariates=...)); its own prior becomes the prior "
        "of the VI optimum, so a trace that says little gives back the prior instead of a narrow interval around "
        "the iterates (default: none; the prior is then centred on the trace)",
    )
    parser.add_argument(
        "--burn-in",
        type=fraction,
        default=field_default(GradientModelOptions, "burn_in"),
        metavar="F",
        help="fraction of the first steps left out of the fit (default: %(default)g)",
    )
    parser.add_argument(
        "--draws",
        type=positive_int,
        default=field_default(GradientModelOptions, "draws"),
        metavar="K",
        help="draws of the VI optimum φ* (per chain with nuts) (default: %(default)d)",
    )
    parser.add_argument(
        "--seed",
        type=seed,
        default=0,
        metavar="SEED",
        help="key of the posterior's random draws (default: %(default)d)",
    )
    parser.add_argument(
        "--level",
        type=probability,
        default=INTERVAL_LEVEL,
        metavar="L",
        help="credibility level of the printed intervals and plotted bands (default: %(default)g)",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE",
        help="also write a figure (.png, .pdf or .svg, by the suffix): μ_t per θ with the burn-in and the "
        "inferred optimum μ*, beside the noise-aware and naive densities of each site on its own scale",
    )
    parser.add_argument(
        "--coordinates",
        nargs="+",
        metavar="NAME",
        help="what --plot shows: coordinate names (theta[age]), site names (all their elements) or indices "
        "(default: every coordinate up to 16 panels; the figure says what it left out)",
    )
    parser.add_argument(
        "--checks",
        choices=("warn", "raise", "off"),
        default="warn",
        help="the trace checks run before the fit (noiseaware.diagnose): warn prints their verdict and findings "
        "and fits anyway, raise stops with an error when any fired, off skips them (default: %(default)s)",
    )
    nuts = parser.add_argument_group("NUTS options (--method nuts only)")
    nuts.add_argument(
        "--start",
        choices=STARTS,
        help="where the chains start: exact (the exact route's posterior, step-size adaptation only) or prior (the "
        "cold start at the prior means, window adaptation; a cross-check) "
        f"(default: {field_default(NutsOptions, 'start')})",
    )
    nuts.add_argument("--warmup", type=count, metavar="W", help=warmup_help())
    nuts.add_argument(
        "--chains", type=positive_int, metavar="C", help=f"chains (default: {field_default(NutsOptions, 'chains')})"
    )
    nuts.add_argument(
        "--backend",
        metavar="NAME",
        help=f"sampler implementation: blackjax or numpyro (default: {field_default(NutsOptions, 'backend')})",
    )
    parser.set_defaults(run=run)


def run(args) -> int:
    outputs = Outputs(force=args.force, inputs=(args.trace,))
    out = None if args.out is None else outputs.file(args.out, "--out", (".nc",), "a posterior file ends in .nc")
    plot = None if args.plot is None else _plot_path(outputs, args.plot)
    if args.coordinates is not None and plot is None:
        raise ValueError("--coordinates chooses what --plot shows: pass --plot FILE too")
    options = route_options(args)
    trace = load_run(args.trace)
    if trace.rows() is None and plot is not None:
        raise ValueError(
            f"{args.trace} is a windowed trace, which keeps {len(trace.iterates())} sample rows, not the iterates "
            "--plot draws: drop --plot, or fit the full trace"
        )
    check_constant_settings(trace)  # every route fits the gradient model: refuse before any work
    if args.coordinates is not None:
        _check_coordinates(trace, args.coordinates)
    start = math.floor(args.burn_in * trace.steps)
    epsilon = "ε unknown" if trace.settings.epsilon is None else f"ε = {trace.settings.epsilon:g}"
    print(
        f"trace {args.trace}: {epsilon}, σ = {trace.settings.noise_multiplier:.4g}, T = {trace.steps} steps; fitting "
        f"steps {start}…{trace.steps - 1} (burn-in {args.burn_in:g}) by {args.method}"
    )
    with reporting_warnings():  # the checks in fit's modes, printed before the fit
        (report,) = run_checks([trace], args.burn_in, args.checks)
    if report is not None:
        print(str(report))
        failure = runaway_failure(report)
        if failure is not None:
            raise failure
    post = fit_reporting_warnings(
        trace,
        args.method,
        model=None if args.model is None else _recorded_with(args.model, trace),
        prior=args.prior,
        burn_in=args.burn_in,
        key=args.seed,
        draws=args.draws,
        checks="off",
        **options,
    )
    post = dataclasses.replace(post, checks=report)
    # θ draws for the file and plot, apart from the fit's
    key_theta = jax.random.fold_in(as_key(args.seed), THETA_STREAM)
    posteriors = {"noise-aware": post} | _naive_column(trace)
    print()
    print(post.describe())
    print(comparison_table(posteriors, args.level, key=key_theta))
    for line in _diagnostics_lines(post, args.method):
        print(line)
    print(_sensitivity_line(post, key_theta))
    with outputs.writing():
        if out is not None:
            post.save(out, key=key_theta, overwrite=args.force)
        if plot is not None:
            from .. import plots

            with reporting_warnings():
                plots.plot_trace(
                    trace,
                    plot,
                    posteriors=posteriors,
                    burn_in=args.burn_in,
                    level=args.level,
                    key=key_theta,
                    coordinates=_coordinates(args.coordinates),
                    overwrite=args.force,
                )
    note = "posterior not saved (pass --out FILE.nc to save it)" if out is None else f"posterior saved to {out}"
    print(f"\n{note}" + ("" if plot is None else f"; plot saved to {plot}"))
    return 0


def _recorded_with(name: str, trace: Trace) -> BenchmarkModel:
    """The model `name` the trace was recorded with: package.module:name of a BenchmarkModel, or a built-in with
    the trace's transforms, its research preset's or numpyro's (`na.models.get(name, preset=False)`); a ValueError
    naming the sites when it does not match the trace."""
    if ":" in name:
        model = import_attribute(name)
        if not isinstance(model, BenchmarkModel):
            raise ValueError(
                f"--model {name} is a {type(model).__name__}, not a BenchmarkModel: wrap the numpyro model with "
                "na.models.from_numpyro(model, n_examples=N, covariates=...) in that module"
            )
        check_model_matches(model, [trace])
        return model
    plain = builtin(name, preset=False)
    try:
        check_model_matches(plain, [trace])
    except ValueError:
        research = builtin(name)
        check_model_matches(research, [trace])  # names the sites when neither matches
        return research
    return plain


def _plot_path(outputs: Outputs, name: str) -> Path:
    """--plot's file, checked before any work (matplotlib is imported only when a plot is asked for)."""
    from ..plots import PLOT_SUFFIXES

    return outputs.file(name, "--plot", PLOT_SUFFIXES, f"a plot file ends in {', '.join(PLOT_SUFFIXES)}")


def _naive_column(trace: Trace) -> dict[str, MixturePosterior]:
    """{"naive": the last-iterate posterior}, or nothing (with a note) when the trace cannot give φ_T."""
    try:
        return {"naive": naive_posterior(trace)}
    except TraceError as error:
        print(f"note: no naive column: {' '.join(str(error).split())}", file=sys.stderr)
        return {}


def _diagnostics_lines(post: MixturePosterior, method: str) -> list[str]:
    """The route's scalar record in two lines, each only when it has entries: `options:` the settings it ran
    with (fields of the method's options class), `diagnostics:` what it found (R-hat, ESS, divergences first);
    a field at its record's default (e.g. scale_model "linear", unless a repair changed it) is left out."""
    defaults = {field.name: field.default for field in dataclasses.fields(post.diagnostics)}
    scalars = {
        name: value.item() if isinstance(value, np.generic) else value
        for name, value in post.diagnostics.items()
        if isinstance(value, (bool, int, float, str, np.generic))
        and not (isinstance(value, str) and value == defaults[name])
    }
    option_names = {field.name for field in dataclasses.fields(DEFAULT_REGISTRY[method].options)}
    order = [name for name in DIAGNOSTICS_FIRST if name in scalars] + [n for n in scalars if n not in DIAGNOSTICS_FIRST]
    lines = []
    for label, names in (
        ("options", [n for n in order if n in option_names]),
        ("diagnostics", [n for n in order if n not in option_names]),
    ):
        if names:
            lines.append(f"{label}: " + ", ".join(f"{name} {_scalar(scalars[name])}" for name in names))
    return lines


def _sensitivity_line(post: MixturePosterior, key) -> str:
    """One line of ArviZ's power-scaling prior sensitivity (`post.prior_sensitivity`): the site elements it flags,
    up to five, or that it flags none."""
    with contextlib.redirect_stdout(io.StringIO()):  # ArviZ prints its own pointer to its docs
        table = post.prior_sensitivity(key)
    flagged = table[table["diagnosis"] != "✓"]
    head = "prior sensitivity (ArviZ's power scaling of the gradient model's prior)"
    if flagged.empty:
        return f"{head}: no site flagged (largest {table['prior'].max():.3f}, threshold 0.05)"
    named = ", ".join(
        f"{name}: {row.diagnosis.removeprefix('potential ')} (prior {row.prior:.2f}, likelihood {row.likelihood:.2f})"
        for name, row in flagged.head(5).iterrows()
    )
    more = "" if len(flagged) <= 5 else f", and {len(flagged) - 5} more"
    return f"{head}: {named}{more}; their intervals lean on that prior (docs/gradient-model.md)"


def _scalar(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _check_coordinates(trace: Trace, names: list[str]) -> None:
    """--coordinates against the panels --plot will draw (μ_t of θ beside the densities on each site's own scale,
    as `plots.plot_trace` chooses them), before the fit: a ValueError names what matches nothing."""
    mu = (coordinate_names(trace), coordinate_sites(trace.site_map))
    densities = mu if trace.site_map is None else site_elements(trace.site_map)
    select_columns([mu, densities], _coordinates(names), figure="plot_trace")


def _coordinates(names: list[str] | None) -> list[str | int] | None:
    """--coordinates: names as given, plain numbers as indices."""
    return None if names is None else [int(name) if name.isdigit() else name for name in names]
