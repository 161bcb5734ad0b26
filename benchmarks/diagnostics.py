"""False alarms, detection and cost of the trace checks (`na.diagnose`).

    python benchmarks/diagnostics.py                       # every section not yet in the results file
    python benchmarks/diagnostics.py --sections ou,bad --force

Sections (each saved as it finishes, so a cut-off run resumes where it stopped):
* ou: traces drawn exactly from the gradient model (tests/ou.py, T = 4000); the rate at which each check fires
  at the default level α = 0.05 (stated: ≤ α/7 per check, ≤ α for any) and at α = 0.5 (stated ≤ 0.071 per
  check), where the rates are large enough to compare with their level;
* null-<model>: DPVI traces of each built-in model at its research preset (ε = 1, seed per model); rate of any
  finding, per check, and per parameter; and logistic-3d with ρ started at −3 instead of −6;
* bad: M1 traces of five bad families: learning rate ×100 (diverged); T = 2000 at the T = 10⁴ learning rate,
  and the learning rate ÷ 10 (unconverged); grads recorded as a mean but described as a sum; σ in the
  metadata ×2 and ×½ (mis-described); the share flagged;
* linreg: the 10D regression at its research preset at ε = 0.1, 0.3, 1: how often σ² and the weights are flagged,
  and the coverage of σ²'s central 90 % interval (exact route) on the traces flagged and not flagged;
* timing: diagnosing a T = 10⁴, P = 24 trace, after a first call;
* logistic: TARP coverage (100 simulations, ε = 1, exact and naive) of logistic-3d from its preset, whose ρ
  never settle (flagged), and from ρ₀ = −3 (not flagged).
Results: benchmarks/results/diagnostics.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from _common import machine, read_results, write_json
from scipy import stats

import noiseaware as na
from noiseaware.checks import CHECKS
from noiseaware.evaluation import simulate_traces

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from ou import ou_traces  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "diagnostics.json"
SECTIONS = ("ou", "null", "bad", "linreg", "timing", "logistic")


def rates(diagnoses, names) -> dict:
    """Share of traces with any finding, per check, and per parameter."""
    count = len(diagnoses)
    checks = Counter(check for d in diagnoses for check in d.fired)
    flagged = np.zeros(len(names))
    for d in diagnoses:
        flagged += np.any(np.stack([d.flags[c] for c in CHECKS]), axis=0)
    return {
        "traces": count,
        "any": float(np.mean([not d.ok for d in diagnoses])),
        "per_check": {c: checks[c] / count for c in CHECKS},
        "per_parameter": {name: float(f / count) for name, f in zip(names, flagged) if f},
    }


def ou_section(traces: int, seed: int) -> dict:
    runs = ou_traces(traces, seed=seed)
    return {level: rates([na.diagnose(t, level=level) for t in runs], runs[0].param_names) for level in (0.05, 0.5)}


def simulate(name: str, traces: int, key, epsilon: float = 1.0, **overrides) -> list:
    """`traces` DPVI traces of the built-in model `name` on prior-predictive data, σ calibrated to ε."""
    return simulations(name, traces, key, epsilon, **overrides).batch.traces


def simulations(name: str, traces: int, key, epsilon: float = 1.0, **overrides):
    """The `Simulations` (traces and true θ) behind `simulate`."""
    bm = na.models.get(name)
    settings = {**bm.dpvi_settings, **overrides}
    if "learning_rate" in overrides:  # an explicit λ replaces the κ heuristic's multiplier
        del settings["lr_multiplier"]
    sigma = na.noise_multiplier(epsilon, 1e-5, settings["sampling_rate"], settings["steps"])
    return simulate_traces(
        bm, noise_multiplier=sigma, epsilon=epsilon, delta=1e-5, simulations=traces, key=key, chunk=50, **settings
    )


def null_section(name: str, traces: int, seed: int, **overrides) -> dict:
    start = time.perf_counter()
    runs = simulate(name, traces, seed, **overrides)
    return rates([na.diagnose(t) for t in runs], runs[0].param_names) | {"seconds": time.perf_counter() - start}


def bad_section(traces: int, seed: int) -> dict:
    good = simulate("gamma-exponential", traces, seed)
    lr = np.asarray(good[0].learning_rate)
    families = {
        "diverged: learning rate ×100": simulate("gamma-exponential", traces, seed + 1, learning_rate=100 * lr),
        "unconverged: T = 2000 at the T = 10⁴ learning rate": simulate(
            "gamma-exponential", traces, seed + 2, steps=2000, learning_rate=lr
        ),
        "unconverged: learning rate ÷ 10": simulate("gamma-exponential", traces, seed + 3, learning_rate=lr / 10),
        "mis-described: grads a mean, described as a sum": [
            dataclasses.replace(t, grads=t.grads / (t.sampling_rate * t.n_examples)) for t in good
        ],
        "mis-described: σ ×2 in the metadata": [
            dataclasses.replace(t, noise_multiplier=2 * t.noise_multiplier) for t in good
        ],
        "mis-described: σ ×½ in the metadata": [
            dataclasses.replace(t, noise_multiplier=t.noise_multiplier / 2) for t in good
        ],
    }
    return {family: rates([na.diagnose(t) for t in runs], runs[0].param_names) for family, runs in families.items()}


def linreg_section(traces: int, seed: int) -> dict:
    out = {}
    for epsilon in (0.1, 0.3, 1.0):
        sims = simulations("linreg-10d", traces, seed, epsilon)
        runs = sims.batch.traces
        verdicts = np.array([na.diagnose(t).theta_verdicts() for t in runs]) != "ok"
        names = runs[0].param_names[: runs[0].dim]
        posts = na.fit_batch(runs, "exact", key=seed, checks="off")
        covered = np.array([abs(pit(p, truth)[-1] - 0.5) < 0.45 for p, truth in zip(posts, sims.truth)])
        flagged = verdicts[:, -1]
        out[str(epsilon)] = {
            "traces": traces,
            "sigma2_flagged": float(flagged.mean()),
            "weights_flagged_any": float(verdicts[:, :-1].any(axis=1).mean()),
            "per_theta": {n.removeprefix("mu:"): float(v) for n, v in zip(names, verdicts.mean(axis=0))},
            "sigma2_coverage90_flagged": float(covered[flagged].mean()) if flagged.any() else None,
            "sigma2_coverage90_not_flagged": float(covered[~flagged].mean()) if (~flagged).any() else None,
        }
    return out


def pit(post, truth) -> np.ndarray:
    """P(θ_j ≤ truth_j | trace) per coordinate under the mixture posterior, (d,)."""
    means, sds = post.optimum_draws[:, : post.dim], np.logaddexp(0.0, post.optimum_draws[:, post.dim :])
    return stats.norm.cdf((np.asarray(truth) - means) / sds).mean(axis=0)


def logistic_section(simulations_count: int, seed: int) -> dict:
    """TARP coverage of logistic-3d at ε = 1 from its preset (ρ₀ = −6, flagged) and from ρ₀ = −3 (not flagged)."""
    bm = na.models.get("logistic-3d")
    out = {}
    for label, overrides in (("research preset, rho0 = -6", {}), ("rho0 = -3", {"init": (0.0, -3.0)})):
        result = na.coverage(
            bm, methods=("exact", "naive"), epsilon=1.0, simulations=simulations_count, key=seed, **overrides
        )
        out[label] = {
            "rmse": {rule: {m: list(v) for m, v in result.rmse_under(rule).items()} for rule in result.curves},
            "trace_checks": result.diagnostics["exact"]["trace_checks"],
        }
    return out


def timing_section() -> dict:
    (trace,) = simulate("linreg-10d", 1, 0)
    na.diagnose(trace)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        na.diagnose(trace)
        times.append(time.perf_counter() - start)
    return {"steps": trace.steps, "params": trace.n_params, "median_seconds": float(np.median(times))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--traces", type=int, default=200)
    parser.add_argument("--adult-traces", type=int, default=20, help="the Adult model's DPVI runs cost minutes each")
    parser.add_argument("--linreg-traces", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="rerun sections already in the results file")
    args = parser.parse_args()
    results = read_results(RESULTS).get("results", {})

    def run(name: str, compute) -> None:
        if name in results and not args.force:
            print(f"{name}: in {RESULTS.name}, skipped (--force reruns)")
            return
        start = time.perf_counter()
        results[name] = compute()
        print(f"{name} ({time.perf_counter() - start:.0f} s):", results[name])
        write_json(RESULTS, {"machine": machine(), "seed": args.seed, "results": results})

    chosen = args.sections.split(",")
    if "ou" in chosen:
        run("ou", lambda: ou_section(args.traces, args.seed))
    if "bad" in chosen:
        run("bad", lambda: bad_section(args.traces, args.seed + 10))
    if "linreg" in chosen:
        run("linreg", lambda: linreg_section(args.linreg_traces, args.seed + 20))
    if "timing" in chosen:
        run("timing", timing_section)
    if "logistic" in chosen:
        run("logistic", lambda: logistic_section(100, args.seed))
    if "null" in chosen:
        for index, name in enumerate(na.models.names()):
            count = args.adult_traces if name == "adult-logistic" else args.traces
            run(
                f"null-{name}", lambda name=name, count=count, index=index: null_section(name, count, args.seed + index)
            )
        # the logistic-3d preset starts ρ at −6, far from its optimum near −2.6: started at −3 instead
        run(
            "null-logistic-3d-init-rho-3",
            lambda: null_section("logistic-3d", args.traces, args.seed + 4, init=(0.0, -3.0)),
        )


if __name__ == "__main__":
    main()
