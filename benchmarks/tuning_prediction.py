"""The tuner's predictions (noiseaware/tuning/predict.py) against recorded traces and their exact fits.

    python benchmarks/tuning_prediction.py                       # m1@1 on 12 simulations, m3@1 on 8
    python benchmarks/tuning_prediction.py --cases m1@1:12 --force
    python benchmarks/tuning_prediction.py --replay benchmarks/results/tuned/gamma-exponential-eps1.json

A case model@ε:M draws M prior-predictive simulations (key 1) of `na.models.get(model, preset=False)`, their
facts (key 2) and, for six settings (START, a clip of 0.6, fast and slow relaxation, a small ρ weight and a
wide point; T = 10⁴, q = 0.1), records DPVI (key 3) and fits the exact route (key 4). Per setting it reports the
median over simulations of measured / predicted: the stationary sd of the iterates after burn-in and the
posterior sd of φ* (per coordinate), and the predicted and measured width (posterior sd of θ over the VI sd)
and clipping shift (in posterior sds of φ*). `--replay FILE` (a settings file `na.tune` wrote with key 0, ε = 1
and 24 search simulations, as benchmarks/tuning.py's) rebuilds the search's simulations and facts and puts each
scored trial's prediction beside its score. Results: benchmarks/results/tuning_prediction.json (docs/tuning.md
§3 quotes them).
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from _common import machine, merge_results, read_results, write_json

import noiseaware as na
from noiseaware.methods.base import Batch, fit_problems, split_keys
from noiseaware.methods.registry import DEFAULT_REGISTRY
from noiseaware.privacy import noise_multiplier
from noiseaware.recording.dpvi import record_dpvi_batch
from noiseaware.recording.settings import DEFAULT_INIT
from noiseaware.trace import BURN_IN
from noiseaware.tuning.facts import simulate, simulation_facts
from noiseaware.tuning.predict import predict
from noiseaware.tuning.search import START, streams
from noiseaware.tuning.space import Candidate, settings_for

RESULTS = Path(__file__).parent / "results" / "tuning_prediction.json"
CASES = ("m1@1:12", "m3@1:8")
STEPS, RATE, DELTA = 10_000, 0.1, 1e-5
POINTS = (
    START,
    {**START, "clip": 0.6},
    {**START, "relaxation_mu": 0.1, "relaxation_rho": 0.05},
    {**START, "rho_weight": 0.1},
    {**START, "relaxation_mu": 0.002, "relaxation_rho": 0.001},
    {"clip": 3.0, "rho_weight": 2.0, "relaxation_mu": 0.03, "relaxation_rho": 0.01},
)


def run_case(case: str) -> dict:
    model, rest = case.split("@")
    eps, count = rest.split(":")
    bm = na.models.get(model, preset=False)
    simulations = int(count)
    truth, data = simulate(bm, simulations, jax.random.key(1))
    base = {"mc_draws": 10, "transforms": {s.name: s.transform for s in bm.site_map.sites}, "sites": bm.site_map.names}
    init = tuple(np.median(truth, axis=0).tolist()), DEFAULT_INIT[1]
    facts = simulation_facts(
        bm, truth, data, key=jax.random.key(2), init=init, mc_draws=10, transforms=base["transforms"],
        sites=base["sites"],
    )  # fmt: skip
    sigma = noise_multiplier(float(eps), DELTA, RATE, STEPS)
    exact = DEFAULT_REGISTRY["exact"]
    rows = []
    for point in POINTS:
        settings = settings_for(Candidate(**point, steps=STEPS, sampling_rate=RATE), facts, bm.site_map, sigma, base)
        start = time.perf_counter()
        prediction = predict(facts, settings, sigma)
        seconds = time.perf_counter() - start
        traces = record_dpvi_batch(
            bm.model, facts.data, keys=jax.random.split(jax.random.key(3), simulations), noise_multiplier=sigma,
            delta=DELTA, **settings,
        )  # fmt: skip
        keys = split_keys(jax.random.key(4), simulations)
        fits = fit_problems(exact, Batch(tuple(traces)), keys, exact.make_options())
        kept = STEPS - int(BURN_IN * STEPS)
        stationary = np.stack([np.asarray(t.params)[-kept:].std(axis=0) for t in traces])
        optimum_sd = np.stack([np.asarray(f.optimum_draws).std(axis=0) for f in fits])
        ratio = np.stack([f.theta_sd / facts.vi_sd[m] for m, f in enumerate(fits)])
        rows.append(
            {
                "point": point,
                "relaxation": np.median(prediction.relaxation, axis=0).tolist(),
                "clipped": prediction.clipped,
                "stationary_sd_ratio": np.median(stationary / prediction.stationary_sd, axis=0).tolist(),
                "optimum_sd_ratio": np.median(optimum_sd / prediction.optimum_sd, axis=0).tolist(),
                "width_predicted": prediction.width,
                "width_measured": float(np.mean(ratio)),
                "shift_predicted": prediction.relative_shift,
                "shift_measured": float(np.max(np.mean(np.abs(prediction.shift) / optimum_sd, axis=0))),
                "remembered": prediction.remembered,
                "prediction_seconds": round(seconds, 4),
            }
        )
        print(case, rows[-1], flush=True)
    return {"model": bm.name, "epsilon": float(eps), "simulations": simulations, "rows": rows}


def replay(path: Path) -> dict:
    """Each scored trial of a tuned settings file: its prediction on the search's own facts beside its score."""
    tuned = na.TunedSettings.load(path)
    bm = na.models.get(tuned.model, preset=False)
    simulations = tuned.provenance["simulations"]
    k_sim, k_facts, *_ = jax.random.split(streams(0)[0], 5)  # as na.tune(key=0) splits its search stream
    truth, data = simulate(bm, simulations, k_sim)
    init = tuple(np.median(truth, axis=0).tolist()), DEFAULT_INIT[1]
    transforms = {s.name: s.transform for s in bm.site_map.sites}
    facts = simulation_facts(
        bm, truth, data, key=k_facts, init=init, mc_draws=tuned.settings["mc_draws"], transforms=transforms,
        sites=bm.site_map.names,
    )  # fmt: skip
    sigma = noise_multiplier(tuned.epsilon, tuned.delta, tuned.settings["sampling_rate"], tuned.settings["steps"])
    rows = []
    for trial in tuned.trials:
        point = {name: trial[name] for name in START}
        candidate = Candidate(**point, steps=trial["steps"], sampling_rate=trial["sampling_rate"])
        prediction = predict(facts, settings_for(candidate, facts, bm.site_map, sigma, {}), sigma)
        rows.append(
            {
                "trial": trial["trial"],
                "state": trial["state"],
                **point,
                "width_measured": trial["sd_ratio"],
                "width_predicted": prediction.width,
                "shift_measured": trial["shift"],
                "shift_predicted": prediction.relative_shift,
                "clipped": trial["clipped"],
                "feasible": trial["feasible"],
            }
        )
    return {"model": bm.name, "epsilon": tuned.epsilon, "file": path.name, "trials": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--force", action="store_true", help="rerun cases already in the results file")
    parser.add_argument("--replay", type=Path, help="a tuned settings file whose trials to replay")
    args = parser.parse_args()
    if args.replay is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            merge_results(RESULTS, {f"replay:{args.replay.stem}": replay(args.replay)})
        write_json(RESULTS, {**read_results(RESULTS), "machine": machine()})
        return
    done = read_results(RESULTS).get("results", {})
    for case in args.cases.split(","):
        if case in done and not args.force:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = run_case(case)
        merge_results(RESULTS, {case: result})
    write_json(RESULTS, {**read_results(RESULTS), "machine": machine()})


if __name__ == "__main__":
    main()
