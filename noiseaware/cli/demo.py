"""`noiseaware demo`: M1 end to end: simulate, record a DPVI trace, fit it, compare and plot.

The comparison's closed forms (the exact Gamma posterior of λ) are in `m1_closed_form`. The demo marks its
folder (DEMO_MARKER, a JSON record of the sha256 of each file it wrote), so running it again replaces the files of
its own earlier run without --force (`make demo` cannot pass flags), and only those: a file of a demo name that the
record does not hold as written, or that changed since, still needs --force, as in any other folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from .. import models
from ..baselines.naive import naive_posterior
from ..checks import diagnose_if_long_enough
from ..models.builtin import GAMMA_PRIOR
from ..posteriors.base import SUMMARY_DRAWS
from ..posteriors.mixture import MixturePosterior
from ..posteriors.summary import INTERVAL_LEVEL
from ..recording.dpvi import record_dpvi
from ..recording.settings import SettingsHint
from ..trace import Trace
from ..util.files import atomic_write
from ..util.keys import as_key
from ..util.tables import text_table
from .common import THETA_STREAM, fit_reporting_warnings, keys, route_options, trace_report
from .m1_closed_form import IntervalEstimate, distribution_estimate, draws_estimate, exact_posterior
from .options import SIMULATION_SEED, add_force, add_seed, method_lists, positive_float, positive_int
from .outputs import Outputs
from .presets import preset_models

DEMO_MODEL = "gamma-exponential"
DEMO_TRACE, DEMO_POSTERIOR, DEMO_PLOT = "m1-trace.nc", "m1-posterior.nc", "m1-trace.png"
DEMO_FILES = (DEMO_TRACE, DEMO_POSTERIOR, DEMO_PLOT)
DEMO_MARKER = ".noiseaware-demo"
"""The file that marks a folder the demo wrote: its record of the files it wrote (`demo_files_changed`)."""
MARKER_WRITER = "noiseaware demo"
"""The marker's `written_by`: a record of this demo's, with `files` {name: sha256 of the bytes it wrote}."""
FIT_STREAM = 2
"""The demo's fit key: fold_in(key of --seed, FIT_STREAM), apart from the simulation and DPVI keys."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="M1 end to end: simulate, record a DPVI trace, fit it, compare and plot",
        description=f"Simulate M1 (gamma-exponential, N = 5000), record a DPVI trace with the preset `noiseaware "
        "record` uses at ε (tuned where one is shipped, at ε = 0.1, 0.3 and 1; else the paper's) at the tight σ for "
        "ε, fit its noise-aware posterior with the model's prior on the VI optimum, and compare it with the naive "
        f"last iterate, the exact non-private posterior and the true value. Saves DIR/{DEMO_TRACE} (the trace), "
        f"DIR/{DEMO_POSTERIOR} (the posterior) and DIR/{DEMO_PLOT} (trace and densities); all three are checked "
        f"before any work. Run again into its own folder (marked by DIR/{DEMO_MARKER}), the demo replaces them; "
        "in any other folder an existing one needs --force.",
    )
    parser.add_argument("--epsilon", type=positive_float, default=1.0, metavar="E", help="ε > 0 (default: %(default)g)")
    add_seed(parser, SIMULATION_SEED, "default: %(default)d; the data are simulated; the fit's key derives from it too")
    parser.add_argument(
        "--out",
        default="noiseaware-demo",
        metavar="DIR",
        help="output directory, created if missing (default: ./%(default)s)",
    )
    add_force(parser)
    parser.add_argument(
        "--steps",
        type=positive_int,
        metavar="T",
        help="DP-SGD steps (default: the preset's 10000; fewer are for quick checks)",
    )
    parser.add_argument(
        "--method",
        choices=method_lists().routes,
        default="exact",
        help="inference route of the noise-aware posterior (default: %(default)s)",
    )
    parser.set_defaults(run=run)


class DemoRun(NamedTuple):
    """One run of the demo: the model with its preset, the simulated θ (unconstrained, (d,)) and data, the trace,
    its noise-aware posterior, and the key of the θ draws that the demo saves, plots and compares."""

    model: models.BenchmarkModel
    theta: jax.Array
    data: dict
    trace: Trace
    posterior: MixturePosterior
    draw_key: jax.Array


def demo_run(
    bm: models.BenchmarkModel, epsilon: float, seed: int, *, steps: int | None, method: str, options, quiet: bool
) -> DemoRun:
    """Simulate `bm` with --seed's simulation key, record DPVI at ε with its DPVI key, print the trace's report
    (and its checks) unless `quiet`, and fit `method` with the model's prior on the VI optimum under the key
    fold_in(seed, FIT_STREAM). `benchmarks/demo_width.py` runs the same over many seeds."""
    key_simulation, key_dpvi = keys(seed)
    theta, data = bm.simulate(key_simulation)
    settings = dict(bm.dpvi_settings, **({} if steps is None else {"steps": steps}))
    with warnings.catch_warnings():  # simulated data: no preflight hint for a built-in's preset here
        warnings.simplefilter("ignore", SettingsHint)
        trace = record_dpvi(bm.model, data, epsilon=epsilon, key=key_dpvi, progress=not quiet, **settings)
    if not quiet:
        print(trace_report(trace, diagnose_if_long_enough(trace)), end="\n\n")
    key_fit = jax.random.fold_in(as_key(seed), FIT_STREAM)
    post = fit_reporting_warnings(trace, method, key=key_fit, model=bm, **options)
    return DemoRun(bm, theta, data, trace, post, jax.random.fold_in(key_fit, THETA_STREAM))


def run(args) -> int:
    (bm,) = preset_models(models.get(DEMO_MODEL), None, [args.epsilon]).values()
    changed = demo_files_changed(args.out)
    if changed and not args.force:
        raise FileExistsError(
            f"--out: {Path(args.out) / changed[0]} exists and is not the file the demo wrote there (changed since, "
            "or never the demo's); pass --force to replace it"
        )
    replace = args.force or changed == []
    outputs = Outputs(force=replace)
    out = outputs.directory(args.out, "--out", (*DEMO_FILES, DEMO_MARKER))
    options = route_options(args)
    _, theta, data, trace, post, key_theta = demo_run(
        bm, args.epsilon, args.seed, steps=args.steps, method=args.method, options=options, quiet=False
    )
    posteriors = {"noise-aware": post, "naive": naive_posterior(trace)}
    truth = np.asarray(theta, np.float64)
    from .. import plots

    with outputs.writing():
        trace.save(out / DEMO_TRACE, overwrite=replace)
        post.save(out / DEMO_POSTERIOR, key=key_theta, overwrite=replace)
        plots.plot_trace(
            trace,
            out / DEMO_PLOT,
            posteriors=posteriors,
            truth=truth,
            level=INTERVAL_LEVEL,
            key=key_theta,
            title=f"M1 gamma-exponential: DPVI trace at ε = {trace.epsilon:g} "
            f"(σ = {trace.noise_multiplier:.4g}), fitted by {args.method}",
            overwrite=replace,
        )
        record = {"written_by": MARKER_WRITER, "files": {name: _sha256(out / name) for name in DEMO_FILES}}
        atomic_write(out / DEMO_MARKER, lambda temporary: temporary.write_text(json.dumps(record)), overwrite=replace)
    print(post.describe())
    print()
    true_rate = float(bm.site_map.constrain(theta)["rate"])
    transform = bm.site_map.sites[0].transform
    print(_m1_comparison(posteriors, true_rate, transform, np.asarray(data["x"], np.float64), trace.epsilon, key_theta))
    print(f"\nsaved in {out}:")
    print(
        text_table(
            ("file", "contents"),
            [
                (
                    DEMO_TRACE,
                    f"the DPVI trace (refit it: noiseaware fit {out / DEMO_TRACE} --model {DEMO_MODEL} --out FILE.nc)",
                ),
                (
                    DEMO_POSTERIOR,
                    f"the noise-aware posterior, method {args.method} (noiseaware.load_posterior reads it)",
                ),
                (
                    DEMO_PLOT,
                    f"μ_t with the burn-in and the inferred optimum μ* ({100 * INTERVAL_LEVEL:g}% band), beside the "
                    "noise-aware and naive densities of each site on its own scale, with the true value",
                ),
            ],
            numeric=False,
        )
    )
    return 0


def demo_files_changed(directory: str | Path) -> list[str] | None:
    """The demo files in `directory` that its marker does not record as the demo wrote them (another sha256, or a
    link), [] when every one is as written; None when the folder holds no marker of the demo's (any file there then
    needs --force, as in any other folder)."""
    folder = Path(directory)
    try:
        record = json.loads((folder / DEMO_MARKER).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("written_by") != MARKER_WRITER:
        return None
    written = record.get("files") if isinstance(record.get("files"), dict) else {}
    present = [name for name in DEMO_FILES if os.path.lexists(folder / name)]
    return [name for name in present if (folder / name).is_symlink() or written.get(name) != _sha256(folder / name)]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _m1_comparison(
    posteriors: Mapping[str, MixturePosterior], true_rate: float, transform: str, x: np.ndarray, epsilon: float, key
) -> str:
    """True λ, the exact non-private posterior, the DPVI last iterate and the noise-aware posterior (mean, sd
    and central interval of λ, whose unconstrained θ is λ's `transform` inverse)."""
    prior_shape, prior_rate = GAMMA_PRIOR
    rows = [
        ("true λ (simulated)", f"{true_rate:.4g}", "", ""),
        _row(
            f"exact posterior Gamma({prior_shape:g} + N, {prior_rate:g} + Σx), non-private",
            distribution_estimate(exact_posterior(x, GAMMA_PRIOR), INTERVAL_LEVEL),
        ),
    ]
    labels = {
        "naive": f"DPVI last iterate (naive), ε = {epsilon:g}",
        "noise-aware": f"noise-aware posterior ({posteriors['noise-aware'].method}), ε = {epsilon:g}",
    }
    for name in ("naive", "noise-aware"):
        draws = posteriors[name].constrained_sample(key, SUMMARY_DRAWS)["rate"]
        rows.append(_row(labels[name], draws_estimate(draws, INTERVAL_LEVEL)))
    note = (
        f"λ = {transform}(θ). The naive posterior is q at the last iterate and ignores the DP noise in the trace; "
        f"the noise-aware one integrates over the VI optimum it implies. Posterior λ from {SUMMARY_DRAWS} draws."
    )
    header = ("λ = rate of the exponential", "mean", "sd", f"{100 * INTERVAL_LEVEL:g}% interval")
    return "\n".join([text_table(header, rows), note])


def _row(label: str, estimate: IntervalEstimate) -> tuple[str, str, str, str]:
    return (label, f"{estimate.mean:.4g}", f"{estimate.sd:.3g}", f"[{estimate.low:.4g}, {estimate.high:.4g}]")
