"""The gradient model with extra terms (`prior="expanded"`) against the paper's diagonal model (`"default"`).

    python benchmarks/gradient_expansion.py [--cases coupled,curved,linreg]
        [--out benchmarks/results/gradient_expansion.json]

Three cases, each scored by the 90 % central interval's coverage of the true φ* per coordinate (the exact route,
2000 draws of φ*), its median width, the mean posterior probability of each term set, and wall time:

* coupled: the test suite's Ornstein–Uhlenbeck traces (tests/ou.py, T = 4000, 100 traces) with the Hessian's
  first two coordinates coupled, A_01 = A_10 = c·A_00 for c = 0.5 and 0.9; φ* is known exactly.
* curved: a conjugate normal model x_i ~ N(θ, 1), θ ~ N(0, 3²), N = 1000, recorded by DPVI (T = 10⁴, q = 0.1,
  C = 6, s = (1, 30), ε = 1) with a learning rate 30× the κ rule, 100 data sets; the VI optimum is the exact
  posterior (μ* its mean, softplus(ρ*) its sd).
The exact route as users call it, `na.fit_batch(traces, "exact")`, is scored too ("default+repair": the default prior
with the repair of scale rows whose evidence favours the variance model, docs/method.md §2.9).

* linreg: the 10D regression's research preset at the research σ for ε = 1 (37.81), 50 simulations; φ̂ from
  `simulation_facts` (the non-private optimum, Newton-polished).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from _common import machine, merge_results

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from ou import OPTIMUM, ou_traces  # noqa: E402

import noiseaware as na  # noqa: E402
from noiseaware.evaluation.simulations import simulate_traces  # noqa: E402
from noiseaware.inference.exact import fit_exact_batch  # noqa: E402
from noiseaware.inference.gradient_model import gradient_model  # noqa: E402
from noiseaware.methods import ExactOptions  # noqa: E402
from noiseaware.recording.dpvi import record_dpvi_batch  # noqa: E402
from noiseaware.tuning.facts import simulation_facts  # noqa: E402

PRIORS = ("default", "expanded", "variance")
TAU = 3.0


def _route(traces) -> tuple[list, np.ndarray, int]:
    """The exact route as users call it (default prior, repair on): its diagnostics, draws of φ* and repairs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        posts = na.fit_batch(traces, "exact", key=0, draws=2000, checks="off")
    draws = np.stack([p.optimum_chains[0] for p in posts])
    return [p.diagnostics for p in posts], draws, sum("repaired" in p.prior for p in posts)


def score(traces, truth: np.ndarray) -> dict:
    """Coverage and width of the 90 % intervals of φ* per coordinate, term probabilities and time, per prior, and
    for the exact route with its repair of curved scale rows ("default+repair")."""
    out = {}
    for prior in PRIORS + ("default+repair",):
        start = time.perf_counter()
        repaired = None
        if prior == "default+repair":
            diagnostics, draws, repaired = _route(traces)
        else:
            models = [gradient_model(trace, prior) for trace in traces]
            results = fit_exact_batch(
                models, keys=jax.random.split(jax.random.key(0), len(models)), options=ExactOptions(draws=2000)
            )
            diagnostics, draws = [r.diagnostics for r in results], np.stack([r.optimum[0] for r in results])
        wall = time.perf_counter() - start
        low, high = np.quantile(draws, [0.05, 0.95], axis=1)
        covered = (truth > low) & (truth < high)
        row = {
            "coverage_90": covered.mean(axis=0).round(3).tolist(),
            "binomial_se": float(np.sqrt(0.09 / len(traces))),
            "median_width": np.median(high - low, axis=0).tolist(),
            "seconds": round(wall, 2),
            "seconds_per_trace": round(wall / len(traces), 4),
        }
        if repaired is not None:
            row["traces_repaired"] = repaired
        if diagnostics[0].get("term_probability") is not None:
            row["term_sets"] = list(diagnostics[0]["term_sets"])
            probability = np.mean([d["term_probability"] for d in diagnostics], axis=0)
            row["term_probability"] = probability.round(3).tolist()
        out[prior] = row
        print(
            f"  {prior:14s} coverage {row['coverage_90']}  "
            f"width {np.round(row['median_width'], 4).tolist()}  {wall:.1f} s"
        )
    return out


def coupled() -> dict:
    results = {}
    for coupling in (0.5, 0.9):
        hessian = np.diag([400.0, 400.0, 20.0, 5.0])
        hessian[0, 1] = hessian[1, 0] = coupling * 400.0
        traces = ou_traces(100, steps=4000, hessian=hessian, seed=3)
        print(f"coupled c = {coupling}")
        results[f"c={coupling}"] = score(traces, np.broadcast_to(OPTIMUM, (100, 4)))
    return results


def normal_model(x=None, n_examples=None):
    theta = numpyro.sample("theta", dist.Normal(0.0, TAU))
    with numpyro.plate("data", n_examples):
        numpyro.sample("x", dist.Normal(theta, 1.0), obs=x)


def curved(count: int = 100, n: int = 1000) -> dict:
    rng = np.random.default_rng(0)
    theta = rng.normal(0.0, TAU, count)
    x = (theta[:, None] + rng.normal(size=(count, n))).astype(np.float32)
    sigma = na.privacy.noise_multiplier(epsilon=1.0, delta=1e-5, sampling_rate=0.1, steps=10_000)
    traces = record_dpvi_batch(
        normal_model,
        {"x": x},
        keys=jax.random.split(jax.random.key(3), count),
        noise_multiplier=sigma,
        steps=10_000,
        sampling_rate=0.1,
        clip=6.0,
        grad_scale=(1.0, 30.0),
        lr_multiplier=30 * np.sqrt(2.0),
        init=(0.0, -2.0),
        mc_draws=10,
    )
    precision = n + 1 / TAU**2
    sd = 1 / np.sqrt(precision)
    truth = np.stack([x.astype(np.float64).sum(axis=1) / precision, np.full(count, np.log(np.expm1(sd)))], axis=1)
    print("curved: learning rate 30× the κ rule")
    return {"lr×30": score(traces, truth)}


def linreg(count: int = 50) -> dict:
    bm = na.models.get("linreg-10d")
    settings = dict(bm.dpvi_settings)
    sims = simulate_traces(bm, noise_multiplier=37.81, delta=1e-5, simulations=count, key=jax.random.key(0), **settings)
    facts = simulation_facts(
        bm,
        sims.truth,
        {k: np.asarray(v) for k, v in sims.batch.data.items()},
        key=jax.random.key(1),
        init=settings["init"],
        mc_draws=settings["mc_draws"],
        transforms=settings["transforms"],
        sites=settings["sites"],
    )
    usable = ~np.isnan(facts.optimum).any(axis=1)
    print(f"linreg-10d, research σ at ε = 1: {usable.sum()} of {count} simulations with a finite φ̂")
    traces = [t for t, keep in zip(sims.traces, usable) if keep]
    return {"eps=1": {"simulations": int(usable.sum()), **score(traces, facts.optimum[usable])}}


CASES = {"coupled": coupled, "curved": curved, "linreg": linreg}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "gradient_expansion.json")
    args = parser.parse_args()
    for case in args.cases.split(","):
        merge_results(args.out, {case: {"machine": machine(), "command": " ".join(sys.argv), **CASES[case]()}})


if __name__ == "__main__":
    main()
