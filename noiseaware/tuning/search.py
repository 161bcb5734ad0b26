"""na.tune: DP-SGD settings chosen on prior-predictive simulations by Optuna (docs/tuning.md).

    search:  M simulations (θ_m, x_m) and their non-private facts (`facts`); each Optuna trial proposes a
             `Candidate` (clip, ρ weight, relaxation rates, T, q), turns it into settings (`space`), records
             DPVI on the simulations at σ(ε, δ, q, T) and scores exact NA-DPVI (`score`): objective the mean
             posterior sd relative to the non-private VI sd; constraints the tests of φ* against the
             non-private optimum, a width no smaller than the VI posterior's, the clipping shift and clipped
             fraction, the share of traces flagged.
             Seeded TPE. Before any trace, the trial's laws are predicted from the facts (`predict`: clipped
             fraction, clipping shift in predicted posterior sds, stationary spread and memory of the start,
             width); a trial far beyond a constraint there, or predicted far wider than the best feasible
             trial so far, is pruned without recording (`PRUNE`). Otherwise it is pruned after its first half of
             the simulations when that half is hopeless.
    choose:  the trials ranked: feasible ones by width; when none is feasible (a warning if its check fails too),
             those whose clipping and traces pass by calibration, then the rest by their summed violation.
    check:   the first-ranked settings on fresh simulations with disjoint keys (`preflight.check_settings`);
             where that check has findings, the next-ranked, up to `candidates` checks: the tuner returns the
             first choice that passes its own check, else the checked one with the fewest findings (warned).

The search and the check draw from jax.random.fold_in(key, 0) and fold_in(key, 1): disjoint streams.
With an executor or a storage the trials run through `parallel` (several at once, kept in a journal file, a
search resumed by the same call, or extended by one with more trials).
"""

from __future__ import annotations

import dataclasses
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
from ..util.fingerprint import canonical, fingerprint
from ..util.hints import hint
from ..util.keys import as_key, key_repr
from ..util.progress import Progress, progress_bar
from .constraints import MECHANICS, constraints, doomed, hopeless, predicted_constraints
from .design import TUNING
from .facts import simulate, simulation_facts
from .parallel import optimize_in_parallel, sampler_for
from .predict import predict
from .preflight import fresh_check
from .preflight_report import PreflightWarning
from .score import Score, score_settings
from .space import Candidate, SearchSpace, settings_for
from .tuned import TunedSettings, model_layout

__all__ = ["DEFAULTS", "DESIGN", "START", "streams", "tune"]

DEFAULTS = {"steps": 10_000, "sampling_rate": 0.1, "mc_draws": 10}
"""T, q and S for a model without a preset."""
START = {"clip": 1.5, "rho_weight": 1.0, "relaxation_mu": 0.015, "relaxation_rho": 0.003}
"""The first trial: no clipping at the optimum, ρ gradients weighted like μ's in the clipping norm, relaxation
slow enough for the ρ block (the research presets of M2 and M3 sit near it in these coordinates)."""
DESIGN = (
    {"rho_weight": 0.3},
    {"rho_weight": 3.0},
    {"relaxation_mu": 0.005},
    {"relaxation_mu": 0.05},
    {"clip": 1.0, "relaxation_rho": 0.001},
)
"""Further first trials, each START with one or two values moved: TPE starts from sensible points rather
than from uniform draws over the whole space."""


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
    space: SearchSpace | None = None,
    mc_draws: int | None = None,
    start: Mapping[str, float] | None = None,
    timeout: float | None = None,
    progress: Progress = True,
    executor: Executor | None = None,
    slots: int = 1,
    storage: str | os.PathLike | None = None,
) -> TunedSettings:
    """DP-SGD settings for `bm` at (ε, δ), searched on `simulations` prior-predictive simulations over `trials`
    Optuna trials and checked on `check_simulations` fresh ones (module doc). Returns TunedSettings (with the
    check's PreflightReport, the trials table and the provenance); warns (PreflightWarning) with each finding
    of the check. candidates: how many ranked trials may be checked until one passes (module doc); space: the
    searched ranges and the choices of T and q (default: the model's preset T and q,
    else T = 10⁴, q = 0.1); start: the first trial's values (default START, a conservative point: clip 1.5 ×
    the 99 % gradient-norm quantile, slow relaxation; the DESIGN trials after it move one or two
    of START's values);
    timeout: seconds after which no new trial starts. Parallel and durable trials (`parallel`): executor
    (any concurrent.futures executor, e.g. a Dask client's) runs `slots` trials at once; storage, a journal
    file (Optuna's JournalFileBackend) that keeps every finished trial, so that the same call resumes the
    search; with either, the trials' order, hence the choice, depends on timing (without, a key gives the
    same settings). progress: a bar per stage on stderr (the default: a search takes minutes), a callable
    progress(done, total), or False. Every argument is checked before any simulation.
    """
    epsilon = positive_float("epsilon", epsilon)
    check_delta(delta, bm.n_examples)
    positive_int("trials", trials)
    positive_int("simulations", simulations, minimum=4, hint="the pooled tests need a few simulations, e.g. 24")
    positive_int("check_simulations", check_simulations, minimum=2)
    positive_int("candidates", candidates)
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
    objective = Objective(
        bm, facts, space, base, epsilon, delta, jax.random.split(k_dpvi, simulations), k_fit, simulations
    )
    seed = int(jax.random.randint(k_sampler, (), 0, 2**31 - 1))
    startup = min(10, max(1, trials // 4)) + len(DESIGN) + 1  # TPE starts after START, DESIGN and random trials
    first = [{**space.clamp(START), **(start or {})}] + [space.clamp({**START, **p}) for p in DESIGN[: trials - 1]]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if executor is None and storage is None:
        study = optuna.create_study(direction="minimize", sampler=sampler_for(seed, startup))
        for point in first:  # the caller's start as given
            study.enqueue_trial(point)
        with progress_bar(trials, "tuning", progress, unit="trial") as advance:
            study.optimize(objective, n_trials=trials, timeout=timeout, callbacks=[lambda study, trial: advance(1)])
    else:
        name = "tune-" + fingerprint(
            {
                "model": canonical(bm),
                "epsilon": epsilon,
                "delta": delta,
                "key": key_repr(key),
                "space": asdict(space),
                "simulations": simulations,
                "start": first[0],
                "design": DESIGN,
                "mc_draws": base["mc_draws"],
            }
        )
        study = optimize_in_parallel(
            objective,
            name=name,
            storage=storage,
            first=first,
            trials=trials,
            seed=seed,
            startup=startup,
            executor=executor,
            slots=slots,
            timeout=timeout,
            progress=progress,
        )
    search_seconds = time.perf_counter() - started
    checked = []
    for trial in _ranked(study)[:candidates]:
        check = fresh_check(
            bm,
            trial.user_attrs["settings"],
            epsilon=epsilon,
            delta=delta,
            simulations=check_simulations,
            key=streams(key)[1],
            progress=progress,
            tuned=True,
        )
        checked.append((trial, check))
        if not check.findings:
            break
    best, check = min(checked, key=lambda pair: len(pair[1].findings))  # the first of the fewest findings
    settings = best.user_attrs["settings"]
    for finding in check.findings:
        warnings.warn(finding, PreflightWarning, stacklevel=2)
    if check.findings and len(checked) > 1:
        warnings.warn(
            f"none of the {len(checked)} best trials passed its check on fresh simulations; the settings are "
            f"trial {best.number}'s, with the fewest findings",
            PreflightWarning,
            stacklevel=2,
        )
    if not best.user_attrs["feasible"] and check.findings:  # a passed fresh check outweighs the search's noise
        warnings.warn(
            f"no trial met every constraint in {trials} trials; the settings are the least infeasible trial's: "
            f"run more trials ({hint('trials=', '--trials')}), widen the SearchSpace, or consider another "
            "parametrisation of the model",
            PreflightWarning,
            stacklevel=2,
        )
    return TunedSettings(
        model=bm.name,
        layout=model_layout(bm),
        n_examples=bm.n_examples,
        epsilon=epsilon,
        delta=delta,
        settings=settings,
        check=check,
        trials=tuple(_trials_table(study)),
        provenance={
            "key": key_repr(key),
            "trials": len(study.trials),
            "predicted_pruned": sum("pruned_by" in t.user_attrs for t in study.trials),
            "chosen_trial": best.number,
            "checked_trials": [trial.number for trial, _ in checked],
            "simulations": simulations,
            "check_simulations": check_simulations,
            "search_streams": "fold_in(key, 0): search; fold_in(key, 1): check",
            "search_simulation_key": key_repr(k_sim),
            "check_simulation_key": key_repr(jax.random.split(streams(key)[1], 3)[0]),  # fresh_check's split
            "space": asdict(space),
            "search_seconds": round(search_seconds, 1),
            "check_seconds": round(time.perf_counter() - started - search_seconds, 1),
            "versions": {"noiseaware": version("noiseaware"), "jax": jax.__version__, "optuna": optuna.__version__},
        },
    )


@dataclasses.dataclass
class Objective:
    """One Optuna trial: a `Candidate` turned into settings, DPVI on the search simulations at σ(ε, δ, q, T),
    scored by `score_settings` in two halves (pruned after the first when it is hopeless); returns the width.
    Picklable, so that trials run on other processes (`parallel`)."""

    bm: BenchmarkModel
    facts: Any
    space: SearchSpace
    base: dict
    epsilon: float
    delta: float
    keys: jax.Array
    k_fit: jax.Array
    simulations: int
    sigmas: dict = dataclasses.field(default_factory=dict)

    def __call__(self, trial: optuna.Trial) -> float:
        candidate = Candidate.from_trial(trial, self.space)
        grid = (candidate.steps, candidate.sampling_rate)
        if grid not in self.sigmas:
            self.sigmas[grid] = calibrate(self.epsilon, self.delta, candidate.sampling_rate, candidate.steps)
        settings = settings_for(candidate, self.facts, self.bm.site_map, self.sigmas[grid], self.base)
        prediction = predict(self.facts, settings, self.sigmas[grid])
        trial.set_user_attr("predicted", prediction.as_row())
        reason = None if trial.number == 0 else doomed(prediction, _best_width(trial.study))
        if reason is not None:  # the first trial is always recorded: the ranking needs one scored trial
            trial.set_user_attr("pruned_by", reason)
            trial.set_user_attr("predicted_constraints", predicted_constraints(prediction))
            raise optuna.TrialPruned()
        half = self.simulations // 2
        scores = []
        for part in (slice(0, half), slice(half, 2 * half)):
            scores.append(
                score_settings(
                    self.facts.subset(part),
                    self.bm,
                    settings,
                    noise_multiplier=self.sigmas[grid],
                    delta=self.delta,
                    keys=self.keys[part],
                    fit_key=jax.random.fold_in(self.k_fit, part.start),
                )
            )
            if len(scores) == 1 and hopeless(scores[0]):
                _record(trial, scores[0], settings)
                raise optuna.TrialPruned()
        score = scores[0] + scores[1]
        _record(trial, score, settings)
        return score.width


def streams(key) -> tuple[jax.Array, jax.Array]:
    """The search's and the check's keys: fold_in(key, 0) and fold_in(key, 1), disjoint streams."""
    return jax.random.fold_in(as_key(key), 0), jax.random.fold_in(as_key(key), 1)


def _best_width(study: optuna.Study) -> float | None:
    """The smallest width of a complete feasible trial so far, None without one."""
    widths = [
        t.value
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if t.user_attrs.get("feasible")
    ]
    return min(widths, default=None)


def _record(trial: optuna.Trial, score: Score, settings: dict) -> None:
    values = constraints(score)
    trial.set_user_attr("constraints", values)
    trial.set_user_attr("feasible", all(v <= 0 for v in values))
    trial.set_user_attr("score", score.as_row())
    trial.set_user_attr("settings", settings)


def _ranked(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The scored trials, best first: the complete feasible ones by width; then those whose DP-SGD mechanics
    pass (MECHANICS), the ones above the width floor first, by the largest mean ζ² (φ* closest to the
    non-private optimum); then the rest by their summed violation."""
    scored = [t for t in study.trials if "constraints" in t.user_attrs]
    if not scored:
        raise RuntimeError("no trial finished: give tune more trials or a longer timeout")

    def feasible(t):
        return t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs["feasible"]

    def sound(t):
        return all(v <= 0 for v in t.user_attrs["constraints"][MECHANICS])

    def rank(t):  # p-values underflow to 0 far from calibration: the mean ζ² ranks the sound trials
        constraints_ = t.user_attrs["constraints"]
        if feasible(t):
            return (0, t.value)
        if sound(t):
            return (1, constraints_[1] > 0, t.user_attrs["score"]["max_zeta2"])
        return (2, sum(max(v, 0.0) for v in constraints_))

    return sorted(scored, key=rank)


def _trials_table(study: optuna.Study) -> list[dict]:
    """One row per scored trial: its searched values (`clip` is c, relative to the 99 % gradient-norm
    quantile: `space`), the clip C that record_dpvi uses (`clip_absolute`), its score and feasibility."""
    rows = []
    for t in study.trials:
        if "score" not in t.user_attrs:
            continue
        rows.append(
            {
                "trial": t.number,
                "state": t.state.name.lower(),
                **t.params,
                "clip_absolute": t.user_attrs["settings"]["clip"],
                **t.user_attrs["score"],
                "feasible": t.user_attrs["feasible"],
            }
        )
    return rows
