"""Coverage experiments: simulate, record DPVI for every simulation at once, fit each method, score by TARP.

One simulation m (docs/method.md §4): θ_m ~ prior, x_m ~ p(x | θ_m), trace_m = DPVI(x_m), then for every
method K draws θ_{m,k} ~ p̂(θ | trace_m) and the TARP fractions and ECP of `tarp` (the one TARP
implementation). The M traces come from one compiled DPVI program (`record_dpvi_batch`, in chunks); the
methods run through the shared experiment driver (`experiment.run_methods`) on the same traces; the
draws are scored chunk by chunk, so no (M, K, d) array is ever held. A simulation whose fit fails is
counted per method and left out of that method's ECP (reported, never silent). Every method is scored
against the same uniform draws U ~ U(−1, 1)^d: θ_ref = centre + U ⊙ half-width under each reference rule.

Why this module is long: the design, the spec, a part and the exact merge of parts are one study's data flow;
the merge must invert the part's layout field by field, so both stay in one place.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..methods.base import Method, Outcome, Registry, check_model_options, check_transforms, research_transforms
from ..methods.registry import DEFAULT_REGISTRY
from ..models.benchmark import BenchmarkModel
from ..models.presets import preset_at, transforms_obstacle
from ..privacy import noise_multiplier as calibrate
from ..recording.settings import DEFAULT_DELTA, check_delta
from ..trace import BURN_IN
from ..util.checks import positive_int
from ..util.chunks import chunk_slices
from ..util.codec import data_type
from ..util.defaults import field_default
from ..util.deprecation import warn_renamed
from ..util.keys import as_key, key_repr, key_words
from ..util.progress import Progress, progress_bar
from .experiment import (
    MethodPart,
    MethodRun,
    check_methods,
    fit_part,
    merge_parts,
    method_reads,
    split_design,
    with_progress,
)
from .reference_sd import nonprivate_width
from .result import REFERENCE_RULES, CoverageResult
from .simulations import Simulations, simulate_part
from .tarp import LEVELS, ecp_from_fractions, tarp_fractions

__all__ = [
    "CoverageDesign",
    "CoveragePart",
    "CoverageSpec",
    "coverage",
    "coverage_part",
    "coverage_spec",
    "coverage_record",
    "evaluate",
    "merge_coverage",
]

SCORE_CHUNK = 25
"""Simulations whose K draws are held at once while scoring (25 × 20 000 × d float64)."""


@dataclasses.dataclass(frozen=True)
class CoverageSpec:
    """Everything that determines a coverage study at one privacy level: its numbers are a function of this.

    model; methods and their options objects; settings: record_dpvi's (the preset's with the overrides);
    noise_multiplier σ (from ε by the accountant, or given); epsilon (None when σ was given) and delta;
    simulations M, references R, samples K; key: the study key's raw words (2,) uint32; chunk: the
    simulations of one part (`parts`), the unit of work of a study (one compiled DPVI program and one batch of
    fits each). Parts merge exactly (`merge_coverage`): the same chunk gives the same numbers bit for bit. A
    study names its tasks by the spec's `canonical` data (`na.studies`); ε, σ and δ are stored as floats, so
    1 and 1.0 are the same study.
    """

    model: BenchmarkModel
    methods: tuple[Method, ...]
    options: Mapping[str, Any]
    settings: Mapping[str, Any]
    noise_multiplier: float
    epsilon: float | None
    delta: float
    simulations: int
    references: int
    samples: int
    key: np.ndarray
    chunk: int

    @property
    def parts(self) -> list[slice]:
        """The simulations of each part: [0, chunk), [chunk, 2 chunk), … up to M."""
        return chunk_slices(self.simulations, self.chunk)


@data_type
@dataclasses.dataclass(frozen=True)
class CoveragePart:
    """One part of a coverage study: every method's `MethodPart` on its simulations, and its DPVI seconds.

    parts[method]: TARP fractions score {"joint": {rule: (m, R)}, "marginal": {rule: (m, R, d)}} over the
    part's m usable simulations; steps: T of the traces; noise_multiplier: the traces' σ; theta_names (d,).
    """

    parts: Mapping[str, MethodPart]
    dpvi_seconds: float
    steps: int
    noise_multiplier: float
    theta_names: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class CoverageDesign:
    """The design of a coverage study at each privacy level, beyond the model and the level: the defaults of
    `na.coverage`, `coverage_spec` and `noiseaware coverage`, written once.

    methods: names or `Method` records; simulations M; references R (sets of reference points); samples K
    (θ draws per posterior); chunk: simulations per part (a study's task); delta δ of the DP guarantee;
    method_options: {method: options object or mapping}.
    """

    methods: tuple[str | Method, ...] = ("exact", "naive")
    simulations: int = 500
    references: int = 20
    samples: int = 20_000
    chunk: int = 100
    delta: float = DEFAULT_DELTA
    method_options: Mapping[str, Any] | None = None


def coverage_spec(
    bm: BenchmarkModel,
    *,
    key,
    epsilon: float | None = None,
    noise_multiplier: float | None = None,
    registry: Registry = DEFAULT_REGISTRY,
    **arguments,
) -> CoverageSpec:
    """The CoverageSpec of a `coverage` call, every argument checked before any work (σ from ε by the PLD
    accountant). arguments: fields of `CoverageDesign` (methods, simulations, …) and DPVI settings that replace
    the model's preset (steps, …). A built-in from `na.models.get(name)` runs with the preset it brings to ε
    (`noiseaware.models.presets.preset_at`: tuned where one is shipped and no method needs the research
    transforms), as `noiseaware coverage` does."""
    if (epsilon is None) == (noise_multiplier is None):
        raise ValueError("give exactly one of epsilon and noise_multiplier")
    design, overrides = split_design(CoverageDesign, arguments)
    resolved, options = check_methods(design.methods, registry, bm.name, epsilon, design.method_options)
    bm = preset_at(bm, epsilon, obstacle=transforms_obstacle(overrides) or research_transforms(resolved)).model
    for method in resolved:
        check_transforms(method, bm)
        check_model_options(options[method.name], bm)
    check_delta(design.delta, allow_weak_privacy=overrides.get("allow_weak_privacy", False))
    many = "coverage is a fraction over simulations; 50 or more tell methods apart"
    positive_int("simulations", design.simulations, minimum=2, hint=many)
    for name in ("references", "samples", "chunk"):
        positive_int(name, getattr(design, name))
    settings = dict(bm.dpvi_settings) | overrides
    sigma = (
        noise_multiplier
        if noise_multiplier is not None
        else calibrate(epsilon, design.delta, settings["sampling_rate"], settings["steps"])
    )
    return CoverageSpec(
        bm,
        tuple(resolved),
        options,
        settings,
        float(sigma),
        None if epsilon is None else float(epsilon),
        float(design.delta),
        design.simulations,
        design.references,
        design.samples,
        key_words(key),
        design.chunk,
    )


def coverage(bm: BenchmarkModel, *, key, progress: Progress = True, **arguments) -> CoverageResult:
    """TARP coverage of methods on simulations of `bm` at privacy level ε (or σ).

    arguments: epsilon or noise_multiplier, the fields of `CoverageDesign` (methods, simulations M, references
    R, samples K, chunk, delta, method_options) with its defaults, registry, and DPVI settings that replace
    entries of bm.dpvi_settings (steps, …). In parts of `chunk` simulations (`coverage_part`: one compiled DPVI
    program, then every method fitted on the same traces, each posterior giving K θ draws scored against R
    sets of reference points under both reference rules), merged exactly (`merge_coverage`);
    `na.studies.coverage_study` runs the same parts on other processes or machines, resumably. methods: names
    in `registry` or `Method` records (plug-ins); method_options: {method: options object or mapping} (e.g.
    {"exact": {"prior": "paper"}}, {"nuts": {"warmup": 500}}). The same key and chunk give the same numbers,
    whichever other methods run.
    """
    spec = coverage_spec(bm, key=key, **arguments)
    shown = dataclasses.replace(spec, options={n: with_progress(o, progress) for n, o in spec.options.items()})
    parts = []
    with progress_bar(spec.simulations, "coverage", progress, unit="simulation") as advance:
        for part in spec.parts:
            parts.append(coverage_part(shown, part))
            advance(part.stop - part.start)
    return merge_coverage(coverage_record(spec), parts)


def coverage_part(spec: CoverageSpec, part: slice) -> CoveragePart:
    """Part `part` of the study `spec`: simulate and record its traces, fit every method, TARP fractions."""
    start = time.perf_counter()
    sims = simulate_part(
        spec.model,
        spec.noise_multiplier,
        spec.delta,
        spec.epsilon,
        _streams(spec.key)[0],
        spec.simulations,
        part,
        spec.settings,
    )
    seconds = time.perf_counter() - start
    parts = _method_parts(
        sims, spec.methods, spec.options, spec.references, spec.samples, spec.key, part, spec.simulations
    )
    return CoveragePart(parts, seconds, sims.traces[0].steps, sims.noise_multiplier, _theta_names(sims))


def coverage_record(spec: CoverageSpec) -> dict[str, Any]:
    """All that merging and reporting a coverage study needs of its spec, as plain data (a study's plan.json)."""
    level = ["epsilon", spec.epsilon] if spec.epsilon is not None else ["noise_multiplier", spec.noise_multiplier]
    return {
        "model": spec.model.name,
        "level": level,
        "epsilon": spec.epsilon,
        "delta": spec.delta,
        "simulations": spec.simulations,
        "references": spec.references,
        "samples": spec.samples,
        "chunk": spec.chunk,
        "parts": len(spec.parts),
        "key": key_repr(spec.key),
        "methods": method_reads(spec.methods),
        "method_options": {name: repr(o) for name, o in spec.options.items()},
    }


def coverage_summary(spec: CoverageSpec) -> dict[str, Any]:
    """Deprecated alias of `coverage_record`."""
    warn_renamed("coverage_summary", "coverage_record")
    return coverage_record(spec)


def merge_coverage(record: Mapping[str, Any], parts: Sequence[CoveragePart]) -> CoverageResult:
    """The CoverageResult of a study from its parts, in order (exact: `merge_parts`); record: `coverage_record`
    of its spec."""
    if len(parts) != record["parts"]:
        raise ValueError(f"a coverage study of {record['parts']} parts, given {len(parts)}")
    runs = merge_parts([p.parts for p in parts], record["methods"])
    result = _result(runs, record, parts[0].noise_multiplier, parts[0].steps, parts[0].theta_names)
    seconds = {"dpvi": sum(p.dpvi_seconds for p in parts), **result.seconds}
    return dataclasses.replace(result, seconds=seconds, settings={**result.settings, "chunk": record["chunk"]})


def evaluate(
    sims: Simulations,
    methods: Sequence[str | Method],
    *,
    references: int = field_default(CoverageDesign, "references"),
    samples: int = field_default(CoverageDesign, "samples"),
    key,
    method_options: Mapping[str, Any] | None = None,
    registry: Registry = DEFAULT_REGISTRY,
    progress: Progress = False,
) -> CoverageResult:
    """TARP coverage of `methods` on given simulations (from `simulate_traces`): fit, draw, score.

    Uses the streams 1–3 of jax.random.split(key, 4) (fits, θ draws, reference draws); `coverage`
    simulates with stream 0, so evaluate(simulate_traces(…, key=split(key, 4)[0]), key=key) is
    coverage(…, key=key, chunk=M). Further methods can be scored on the same simulations later. references R
    and samples K: `CoverageDesign`'s by default.
    """
    resolved, options = check_methods(methods, registry, sims.model.name, sims.batch.epsilon, method_options)
    for method in resolved:
        check_model_options(options[method.name], sims.model)
    options = {name: with_progress(o, progress) for name, o in options.items()}
    positive_int("references", references)
    positive_int("samples", samples)
    everything = slice(0, len(sims))
    runs = merge_parts(
        [_method_parts(sims, resolved, options, references, samples, key, everything, len(sims))],
        method_reads(resolved),
    )
    record = {
        "model": sims.model.name,
        "epsilon": sims.batch.epsilon,
        "delta": sims.batch.delta,
        "simulations": len(sims),
        "references": references,
        "samples": samples,
        "key": key_repr(key),
        "methods": method_reads(resolved),
        "method_options": {name: repr(o) for name, o in options.items()},
    }
    return _result(runs, record, sims.noise_multiplier, sims.traces[0].steps, _theta_names(sims))


def _method_parts(
    sims: Simulations,
    methods: Sequence[Method],
    options: Mapping[str, Any],
    references: int,
    samples: int,
    key,
    part: slice,
    total: int,
) -> dict[str, MethodPart]:
    """Every method fitted on the simulations `part` of `total` and its TARP fractions (`fit_part`)."""
    _, k_fit, k_draw, k_ref = _streams(key)
    d = sims.truth.shape[1]
    centre = np.stack([t.params[math.floor(BURN_IN * t.steps) :, :d].mean(axis=0) for t in sims.traces])
    dpvi_sd = np.stack([t.family.marginal_sd(np.asarray(t.final_iterate(), np.float64)) for t in sims.traces])
    uniform = np.asarray(
        jax.random.uniform(
            k_ref, (references, total, d), jnp.float64 if jax.config.jax_enable_x64 else jnp.float32, -1.0, 1.0
        ),
        np.float64,
    )[:, part]

    reference_width = nonprivate_width(sims.model.model, sims.traces[0], sims.batch.data, sims.truth)

    def score(method: Method, outcomes: list[Outcome], keys) -> tuple[dict[str, Any], int]:
        joint, per_dim, width, pit, failed = _score(
            outcomes, sims, keys, samples, uniform, centre, dpvi_sd, reference_width
        )
        return {"joint": joint, "marginal": per_dim, "width": width, "pit": pit}, failed

    return fit_part(sims.batch, methods, options, key=(k_fit, k_draw), score=score, offset=part.start, total=total)


def _result(
    runs: Mapping[str, MethodRun],
    record: Mapping[str, Any],
    noise_multiplier: float,
    steps: int,
    theta_names: tuple[str, ...],
) -> CoverageResult:
    """The CoverageResult of merged method runs: ECP curves from the simulations' TARP fractions; record: the
    study's settings (`coverage_record`)."""

    def curves(part: str) -> dict[str, dict[str, np.ndarray]]:
        return {
            rule: {name: ecp_from_fractions(np.moveaxis(run.score[part][rule], 0, 1)) for name, run in runs.items()}
            for rule in REFERENCE_RULES
        }

    return CoverageResult(
        levels=np.asarray(LEVELS),
        curves=curves("joint"),
        marginal_curves=curves("marginal"),
        failures={name: run.failures for name, run in runs.items()},
        width_ratio={name: run.score["width"] for name, run in runs.items() if "width" in run.score},  # not in old
        pit={name: run.score["pit"] for name, run in runs.items() if "pit" in run.score},  # studies' parts
        seconds={
            k: v
            for name, run in runs.items()
            for k, v in ((name, run.fit_seconds), (f"tarp_{name}", run.score_seconds))
        },
        diagnostics={name: run.diagnostics for name, run in runs.items()},
        theta_names=tuple(theta_names),
        settings={
            "model": record["model"],
            "epsilon": record["epsilon"],
            "noise_multiplier": noise_multiplier,
            "delta": record["delta"],
            "simulations": record["simulations"],
            "references": record["references"],
            "samples": record["samples"],
            "steps": steps,
            "key": record["key"],
            "methods": list(record["methods"]),
            "method_options": dict(record["method_options"]),
            "reference_rules": dict(REFERENCE_RULES),
        },
    )


def _theta_names(sims: Simulations) -> tuple[str, ...]:
    d = sims.truth.shape[1]
    return tuple(name.removeprefix("mu:") for name in sims.traces[0].param_names[:d])


def _score(
    outcomes: Sequence[Outcome],
    sims: Simulations,
    keys,
    samples: int,
    uniform: np.ndarray,
    centre: np.ndarray,
    dpvi_sd: np.ndarray,
    reference_width: np.ndarray,
):
    """f for each rule over the simulations whose posterior exists and gives finite draws (keys: one per
    simulation; uniform (R, M, d): the reference draws of these simulations), and the width of each central
    90 % interval relative to `reference_width` (M, d), the non-private posterior's.

    Returns ({rule: joint f (M_ok, R)}, {rule: marginal f (M_ok, R, d)}, width ratios (M_ok, d), the marginal
    PIT of the truth (M_ok, d), further failures (non-finite draws)): the simulation axis first, so that parts
    concatenate.
    """
    repeats = uniform.shape[0]
    alive = np.flatnonzero([not isinstance(o, Exception) for o in outcomes])
    joint: list[np.ndarray] = []
    marginal: list[np.ndarray] = []
    widths: list[np.ndarray] = []
    pits: list[np.ndarray] = []
    non_finite = 0
    for first in range(0, alive.size, SCORE_CHUNK):
        index = alive[first : first + SCORE_CHUNK]
        draws = np.stack([np.asarray(outcomes[m].sample(keys[m], samples), np.float64) for m in index])
        finite = np.all(np.isfinite(draws), axis=(1, 2))
        non_finite += int(np.sum(~finite))
        index, draws = index[finite], draws[finite]
        if index.size == 0:
            continue
        half_widths = {"research": 4.0 * draws.std(axis=1), "trace": 4.0 * dpvi_sd[index]}
        references = np.concatenate([centre[index] + uniform[:, index] * half_widths[rule] for rule in REFERENCE_RULES])
        f, fm = tarp_fractions(draws, sims.truth[index], references)
        joint.append(f)
        marginal.append(fm)
        low, high = np.quantile(draws, [0.05, 0.95], axis=1)
        widths.append((high - low) / reference_width[index])
        pits.append(np.mean(draws < sims.truth[index][:, None, :], axis=1))
    d = sims.truth.shape[1]
    f = np.concatenate(joint, axis=1) if joint else np.zeros((repeats * len(REFERENCE_RULES), 0))
    fm = np.concatenate(marginal, axis=1) if marginal else np.zeros((repeats * len(REFERENCE_RULES), 0, d))
    split = {rule: slice(i * repeats, (i + 1) * repeats) for i, rule in enumerate(REFERENCE_RULES)}
    joint_f = {rule: np.moveaxis(f[s], 1, 0) for rule, s in split.items()}
    width, pit = (np.concatenate(rows) if rows else np.zeros((0, d)) for rows in (widths, pits))
    return joint_f, {rule: np.moveaxis(fm[s], 1, 0) for rule, s in split.items()}, width, pit, non_finite


def _streams(key) -> jax.Array:
    """The four keys of a coverage run: simulations, fits, θ draws, reference draws."""
    return jax.random.split(as_key(key), 4)
