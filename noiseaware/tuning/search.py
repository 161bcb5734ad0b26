"""na.tune: DP-SGD settings chosen on prior-predictive simulations, predicted first and simulated little
(docs/tuning.md §3).

    facts:    M simulations (θ_m, x_m) and their non-private facts (`facts`).
    predict:  `predictions` candidates (START, DESIGN, then Optuna's seeded TPE over the `SearchSpace`), each
              turned into settings (`space`) and judged on what the facts predict of its traces (`predict`:
              clipped fraction, clipping shift, memory of the start, stability, the pair model's ζ of the ρ rows,
              width), at no cost in simulations: TPE minimises the predicted width under the predicted constraints.
              They are ordered predicted-feasible first, by predicted width, then by predicted violation; the first
              is always START (or the caller's `start`).
    simulate: the first `trials` candidates in that order (kept apart in the unit cube, so that one prediction
              error does not sink them all) by successive halving over the simulations (`halving`): DPVI at
              σ(ε, δ, q, T) and the exact NA-DPVI fit on M/4 of them, then the better half on the next quarter,
              the better half of those on the last half, ranked as the full search ranks them (`_rank`: the ζ
              tests projected to M simulations, the width floor, clipping and flagged traces; then width). When no
              candidate meets every constraint on all M, the next `trials` candidates are simulated once more.
    choose:   feasible candidates by width; when none is feasible (a warning if its check fails too), those whose
              clipping and traces pass by calibration, then the rest by their summed violation.
    check:    the first-ranked settings on fresh simulations with disjoint keys (`preflight.check_settings`);
              where that check has findings, the next-ranked, up to `candidates` checks, on the same fresh
              simulations and facts: the tuner returns the first choice that passes its own check, else the checked
              one with the fewest findings (warned).

The search and the check draw from jax.random.fold_in(key, 0) and fold_in(key, 1): disjoint streams. Every
DPVI program and exact fit runs on padded batches of `TUNING.batch` simulations in the search and
`TUNING.check_batch` in the check, so each compiles once per model (`provenance["programs"]` counts the
programs). With an executor the candidates of a rung run as tasks on other processes; with a storage each
finished part is kept in a journal and the same call resumes (`parallel`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import warnings
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import asdict
from importlib.metadata import version
from typing import Any

import jax
import numpy as np
import optuna

from ..models.benchmark import BenchmarkModel
from ..privacy import noise_multiplier as calibrate
from ..recording.settings import DEFAULT_DELTA, DEFAULT_INIT, check_delta
from ..util.checks import positive_float, positive_int
from ..util.compiles import counting_compiles
from ..util.fingerprint import canonical, fingerprint
from ..util.hints import hint
from ..util.keys import as_key, key_repr
from ..util.progress import Progress, progress_bar
from .constraints import MECHANICS, NAMES, constraints
from .design import TUNING
from .facts import simulate, simulation_facts
from .halving import Evaluation, halving_runs, rung_sizes, successive_halving
from .parallel import TrialStore, run_tasks
from .preflight import check_settings, fresh_facts
from .preflight_report import PreflightWarning
from .proposals import judged, predicted_search, simulation_order
from .score import Score, score_settings
from .space import SearchSpace
from .tuned import TunedSettings, model_layout

__all__ = ["DEFAULTS", "DESIGN", "START", "streams", "tune"]

DEFAULTS = {"steps": 10_000, "sampling_rate": 0.1, "mc_draws": 10}
"""T, q and S for a model without a preset."""
START = {"clip": 1.5, "rho_weight": 1.0, "relaxation_mu": 0.015, "relaxation_rho": 0.003}
"""The first candidate, always simulated: no clipping at the optimum, ρ gradients weighted like μ's in the clipping
norm, relaxation slow enough for the ρ block (the research presets of M2 and M3 sit near it in these
coordinates)."""
DESIGN = (
    {"rho_weight": 0.3},
    {"rho_weight": 3.0},
    {"relaxation_mu": 0.005},
    {"relaxation_mu": 0.05},
    {"clip": 1.0, "relaxation_rho": 0.001},
)
"""Further first candidates, each START with one or two values moved: judged on their predictions like the
TPE's proposals after them."""


def tune(
    bm: BenchmarkModel,
    *,
    epsilon: float,
    delta: float = DEFAULT_DELTA,
    key,
    trials: int = TUNING.trials,
    simulations: int = TUNING.simulations,
    check_simulations: int = TUNING.check_simulations,
    candidates: int = TUNING.candidates,
    predictions: int = TUNING.predictions,
    space: SearchSpace | None = None,
    mc_draws: int | None = None,
    start: Mapping[str, float] | None = None,
    timeout: float | None = None,
    progress: Progress = True,
    executor: Executor | None = None,
    slots: int = 1,
    storage: str | os.PathLike | None = None,
) -> TunedSettings:
    """DP-SGD settings for `bm` at (ε, δ): `predictions` candidates judged on the facts of `simulations`
    prior-predictive simulations, the best `trials` of them simulated by successive halving, the choice checked on
    `check_simulations` fresh ones (module doc). Returns TunedSettings (with the check's PreflightReport, the
    trials table — each simulated candidate's prediction beside what its simulations showed — and the provenance);
    warns (PreflightWarning) with each finding of the check. candidates: how many ranked candidates may be checked
    until one passes; space: the searched ranges and the choices of T and q (default: the model's preset T and q,
    else T = 10⁴, q = 0.1); start: the first candidate's values (default START, a conservative point: clip 1.5 ×
    the 99 % gradient-norm quantile, slow relaxation); timeout: seconds after which no second round of candidates
    starts (the rungs under way finish). executor
    (any concurrent.futures executor, e.g. a Dask client's) runs `slots` candidates of a rung at once; storage, a
    journal file (Optuna's JournalFileBackend) that keeps every finished part, so that the same call resumes.
    The same key gives the same settings, with or without them. progress: a bar per stage on stderr (the
    default), a callable progress(done, total), or False. Every argument is checked before any simulation.
    """
    epsilon = positive_float("epsilon", epsilon)
    check_delta(delta, bm.n_examples)
    positive_int("trials", trials)
    positive_int("simulations", simulations, minimum=4, hint="the pooled tests need a few simulations, e.g. 24")
    positive_int("check_simulations", check_simulations, minimum=2)
    positive_int("candidates", candidates)
    positive_int("predictions", predictions)
    positive_int("slots", slots)
    if mc_draws is not None:
        positive_int("mc_draws", mc_draws)
    unknown = sorted(set(start or {}) - set(START))
    if unknown:
        raise ValueError(f"start names {unknown}: it takes values of {sorted(START)}")
    if space is not None and not isinstance(space, SearchSpace):
        raise TypeError(f"space must be a na.tuning.SearchSpace, got {type(space).__name__}")
    preset = {**DEFAULTS, **{k: v for k, v in bm.dpvi_settings.items() if k in DEFAULTS}}
    space = (space or SearchSpace()).with_grid(preset["steps"], preset["sampling_rate"])
    base = {
        "mc_draws": int(mc_draws or preset["mc_draws"]),
        "transforms": {site.name: site.transform for site in bm.site_map.sites},
        "sites": bm.site_map.names,
    }
    labels = bm.dpvi_settings.get("labels")
    if labels is not None:
        base["labels"] = dict(labels)
    started = time.perf_counter()
    with counting_compiles() as compiles:
        k_sim, k_facts, k_dpvi, k_fit, k_sampler = jax.random.split(streams(key)[0], 5)
        truth, data = simulate(bm, simulations, k_sim)
        init = tuple(np.median(truth, axis=0).tolist()), DEFAULT_INIT[1]
        with progress_bar(simulations, "simulation facts", progress, unit="simulation") as advance:
            facts = simulation_facts(
                bm,
                truth,
                data,
                key=k_facts,
                init=init,
                mc_draws=base["mc_draws"],
                transforms=base["transforms"],
                sites=base["sites"],
            )
            advance(simulations)
        grid = [(T, q) for T in space.grid()[0] for q in space.grid()[1]]
        sigmas = {(T, q): calibrate(epsilon, delta, q, T) for T, q in grid}
        seed = int(jax.random.randint(k_sampler, (), 0, 2**31 - 1))
        first = [{**START, **(start or {})}] + [{**START, **point} for point in DESIGN]
        judge = functools.partial(judged, facts=facts, bm=bm, base=base, sigmas=sigmas, simulations=simulations)
        with progress_bar(predictions, "candidates judged on their predictions", progress, unit="candidate") as step:
            pool = predicted_search(first, space, predictions, seed, judge, advance=step)
        name = "tune-" + fingerprint(
            {
                "model": canonical(bm),
                "epsilon": epsilon,
                "delta": delta,
                "key": key_repr(key),
                "space": asdict(space),
                "simulations": simulations,
                "start": first[0],
                "predictions": predictions,
                "mc_draws": base["mc_draws"],
            }
        )
        store = TrialStore(storage, name, space)
        context = _Context(bm, facts, jax.random.split(k_dpvi, simulations), k_fit, delta, sigmas)
        sizes = rung_sizes(simulations)
        simulated: list[Evaluation] = []
        order = simulation_order(pool)
        for bracket in range(2):
            late = timeout is not None and time.perf_counter() - started > timeout
            batch = order[bracket * trials : (bracket + 1) * trials]
            if not batch or late or any(_feasible(e, simulations) for e in simulated):
                break
            evaluations = [dataclasses.replace(pool[i], number=i) for i in batch]
            label = f"{len(batch)} candidates by successive halving" + (" (again: none feasible)" if bracket else "")
            with progress_bar(halving_runs(len(batch), sizes), label, progress, unit="DPVI run") as advance:
                successive_halving(
                    evaluations,
                    sizes,
                    lambda todo, part: _run_rung(todo, part, context, store, executor, slots),
                    lambda e: _rank(e, simulations),
                    advance=advance,
                )
            for evaluation in evaluations:
                store.close(evaluation, evaluation.simulations == simulations)
            simulated += evaluations
        search_seconds = time.perf_counter() - started
        ranked = sorted(simulated, key=lambda e: (e.simulations < simulations, _rank(e, simulations)))
        check_key = streams(key)[1]
        check_facts = fresh_facts(bm, ranked[0].settings, check_simulations, check_key)
        checked = []
        for evaluation in ranked[:candidates]:
            check = check_settings(
                bm,
                evaluation.settings,
                check_facts,
                epsilon=epsilon,
                delta=delta,
                key=jax.random.split(as_key(check_key), 3)[2],
                progress=progress,
                key_text=key_repr(check_key),
                tuned=True,
            )
            checked.append((evaluation, check))
            if not check.findings:
                break
    best, check = min(checked, key=lambda pair: len(pair[1].findings))  # the first of the fewest findings
    for finding in check.findings:
        warnings.warn(finding, PreflightWarning, stacklevel=2)
    if check.findings and len(checked) > 1:
        warnings.warn(
            f"none of the {len(checked)} best candidates passed its check on fresh simulations; the settings are "
            f"candidate {best.number}'s, with the fewest findings",
            PreflightWarning,
            stacklevel=2,
        )
    if not _feasible(best, simulations) and check.findings:  # a passed fresh check outweighs the search's noise
        warnings.warn(
            f"no candidate met every constraint among the {len(simulated)} simulated; the settings are the least "
            f"infeasible candidate's: simulate more candidates ({hint('trials=', '--trials')}), widen the "
            "SearchSpace, or consider another parametrisation of the model",
            PreflightWarning,
            stacklevel=2,
        )
    return TunedSettings(
        model=bm.name,
        layout=model_layout(bm),
        n_examples=bm.n_examples,
        epsilon=epsilon,
        delta=delta,
        settings=best.settings,
        check=check,
        trials=tuple(_trials_table(simulated, simulations)),
        provenance={
            "key": key_repr(key),
            "trials": len(simulated),
            "predictions": len(pool),
            "predicted_feasible": sum(all(v <= 0 for v in e.predicted["constraints"]) for e in pool),
            "rungs": list(sizes),
            "simulation_runs": sum(e.simulations for e in simulated),
            "chosen_trial": best.number,
            "checked_trials": [e.number for e, _ in checked],
            "simulations": simulations,
            "check_simulations": check_simulations,
            "search_streams": "fold_in(key, 0): search; fold_in(key, 1): check",
            "search_simulation_key": key_repr(k_sim),
            "check_simulation_key": key_repr(jax.random.split(check_key, 3)[0]),  # fresh_facts' split
            "space": asdict(space),
            "programs": compiles.programs,
            "compile_seconds": round(compiles.seconds, 1),
            "search_seconds": round(search_seconds, 1),
            "check_seconds": round(time.perf_counter() - started - search_seconds, 1),
            "versions": {"noiseaware": version("noiseaware"), "jax": jax.__version__, "optuna": optuna.__version__},
        },
    )


def streams(key) -> tuple[jax.Array, jax.Array]:
    """The search's and the check's keys: fold_in(key, 0) and fold_in(key, 1), disjoint streams."""
    return jax.random.fold_in(as_key(key), 0), jax.random.fold_in(as_key(key), 1)


@dataclasses.dataclass(frozen=True)
class _Context:
    """What every part of every candidate shares: the model, the search's facts, DPVI keys (M,), the fit key, δ and
    σ per (T, q). Picklable, so that parts run on other processes."""

    bm: BenchmarkModel
    facts: Any
    keys: jax.Array
    fit_key: jax.Array
    delta: float
    sigmas: dict


def score_part(payload: tuple) -> Score:
    """One candidate's DPVI and exact fits on simulations `part` (a task of `_run_rung`)."""
    context, settings, part = payload
    return score_settings(
        context.facts.subset(part),
        context.bm,
        settings,
        noise_multiplier=context.sigmas[(settings["steps"], settings["sampling_rate"])],
        delta=context.delta,
        keys=context.keys[part],
        fit_key=jax.random.fold_in(context.fit_key, part.start),
    )


def _run_rung(todo: list[Evaluation], part: slice, context, store: TrialStore, executor, slots) -> list[Score]:
    """The rung's part of each candidate: from the journal where it was finished, else as a task; each finished part
    is kept."""
    scores: list[Score | None] = [store.finished_part(e.number, part) for e in todo]
    missing = [i for i, score in enumerate(scores) if score is None]

    def done(index: int, score: Score) -> None:
        scores[missing[index]] = score
        store.save(todo[missing[index]], part, score)

    run_tasks(score_part, [(context, todo[i].settings, part) for i in missing], executor, slots, done)
    return scores


def _feasible(evaluation: Evaluation, simulations: int) -> bool:
    """Whether a candidate met every constraint on all the search's simulations."""
    score = evaluation.score
    return score is not None and score.simulations == simulations and all(v <= 0 for v in constraints(score))


def _rank(evaluation: Evaluation, simulations: int) -> tuple:
    """Smallest first: the feasible (ζ's tests projected to the search's M, `constraints`) by width; then those whose
    DP-SGD mechanics pass (MECHANICS), the ones above the width floor first, by the largest mean ζ²; then the rest
    by their summed violation."""
    score = evaluation.score
    values = constraints(score, simulations)
    if all(v <= 0 for v in values):
        return (0, score.width)
    if all(v <= 0 for v in values[MECHANICS]):  # p-values underflow to 0 far from calibration: mean ζ² ranks
        return (1, values[1] > 0, float(np.nanmax(score.zeta2)))
    return (2, sum(max(v, 0.0) for v in values))


def _trials_table(simulated: list[Evaluation], simulations: int) -> list[dict]:
    """One row per simulated candidate, in the order simulated: its searched values (`clip` is c, relative to the
    99 % gradient-norm quantile: `space`), the clip C that record_dpvi uses (`clip_absolute`), its prediction
    (`predicted_*`) beside its score on the simulations it reached, the constraints it fails, and feasibility."""
    rows = []
    for e in simulated:
        values = constraints(e.score)
        predicted = {k: v for k, v in e.predicted.items() if k != "constraints"}
        rows.append(
            {
                "trial": e.number,
                "state": "complete" if e.simulations == simulations else "pruned",
                **e.candidate.as_point(),
                "clip_absolute": e.settings["clip"],
                **predicted,
                "simulations": e.simulations,
                **e.score.as_row(),
                "fails": ", ".join(name for name, v in zip(NAMES, values) if v > 0),
                "feasible": _feasible(e, simulations),
            }
        )
    return rows
