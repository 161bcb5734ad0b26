"""The DPVI recorder's time per run against a plain, non-private jax SGD loop on the same ELBO (issue 30).

    python benchmarks/recorder_overhead.py [--cases m1,linreg-10d] [--repeats 5] [--steps 10000]

Both sides run the model's research settings (T, q, N, S = `dpvi_settings`) in one process, after compilation,
and report the minimum over `--repeats` interleaved rounds of wall time (and of the process's CPU time, steadier on
a shared machine):

* recorder: `na.record_dpvi` end to end (settings, accounting at the research σ, Poisson subsampling,
  per-example gradients, clipping, noise, the released trace on the host);
* plain: SGD on −ELBO(φ) ≈ (N/B) Σ_{i∈batch} (1/S) Σ_s −log p(x_i | θ_s) − (1/S) Σ_s log p̃(θ_s) − ½ log det Σ,
  θ_s = μ + A ε_s, on a batch of B = q·N examples drawn uniformly each step (`jax.random.randint`, with
  replacement: `jax.random.choice` without replacement sorts N keys per step, 17 s for M1's 10⁴ steps), its
  gradient by one `jax.grad`, `lax.scan` over the T steps, jitted; it returns φ_T.

The plain loop uses the recorder's own densities (`ModelSpec`) and family, so the two differ only in what DP-SGD
adds: a Poisson sample of random size (padded to a fixed capacity), per-example gradients and their clipping,
noise, and a recorded trace. Writes benchmarks/results/recorder_overhead.json.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
from _common import chosen, merge_results, provenance, results_path
from jax import lax

import noiseaware as na
from noiseaware.recording.dpvi import build_recorder
from noiseaware.recording.settings import SettingsHint

RESEARCH_SIGMA_EPS1 = 37.81
CASES = {"m1": "gamma-exponential", "linreg-10d": "linreg-10d"}
TARGET_RATIO = 2.0


def plain_sgd(recorder, data: dict, steps: int):
    """A jitted `run(key) → φ_T`: non-private minibatch SGD on the recorder's ELBO with its λ, S and init."""
    spec, family, settings = recorder.spec, recorder.program.family, recorder.settings
    n = spec.n_examples
    batch = round(settings.sampling_rate * n)
    per_example, constants = spec.split_data(recorder.prepare(data))
    lr = jnp.asarray(settings.learning_rate, recorder.dtype) / n
    init = jnp.asarray(settings.init, recorder.dtype)

    def log_likelihood(theta, examples):  # (S, B)
        one = jax.vmap(spec.example_log_likelihood, (None, 0, None))
        return jax.vmap(one, (0, None, None))(theta, examples, constants)

    def negative_elbo(params, eps, examples):
        thetas = family.sample(params, eps)
        prior = jax.vmap(spec.log_prior, (0, None, None))(thetas, examples, constants)
        data_term = jnp.mean(jnp.sum(log_likelihood(thetas, examples), axis=1)) * (n / batch)
        return -data_term - jnp.mean(prior) - family.entropy(params)

    def step(params, key):
        key_batch, key_mc = jax.random.split(key)
        indices = jax.random.randint(key_batch, (batch,), 0, n)
        examples = jax.tree.map(lambda a: a[indices], per_example)
        eps = jax.random.normal(key_mc, (settings.mc_draws, family.noise_dim), params.dtype)
        return params - lr * jax.grad(negative_elbo)(params, eps, examples), None

    @jax.jit
    def run(key):
        return lax.scan(step, init, jax.random.split(key, steps))[0]

    return run


def _best_of(repeats: int, runs: dict) -> dict:
    """{name: (min wall s, min CPU s)} over `repeats` rounds; each round calls every run once (interleaved, so a
    shared machine's load falls on all alike), each call waiting for its result."""
    wall = {name: [] for name in runs}
    cpu = {name: [] for name in runs}
    for r in range(repeats):
        for name, fn in runs.items():
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn(r))
            wall[name].append(time.perf_counter() - start_wall)
            cpu[name].append(time.process_time() - start_cpu)
    return {name: (min(wall[name]), min(cpu[name])) for name in runs}


def run_case(name: str, steps: int, repeats: int, command: str) -> dict:
    bm = na.models.get(CASES[name])
    settings = dict(bm.dpvi_settings) | {"steps": steps}
    _, data = bm.simulate(0)

    def record(seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SettingsHint)
            return na.record_dpvi(bm.model, data, key=seed, noise_multiplier=RESEARCH_SIGMA_EPS1, **settings).params

    recorder = build_recorder(bm.model, data, noise_multiplier=RESEARCH_SIGMA_EPS1, **settings)
    plain = plain_sgd(recorder, data, steps)
    start = time.perf_counter()
    record(100)  # compiles, and accounts σ once (the accountant remembers it for later runs)
    first_s = time.perf_counter() - start
    plain(jax.random.key(100))
    best = _best_of(repeats, {"recorder": record, "plain": lambda r: plain(jax.random.key(r))})
    (recorder_s, recorder_cpu), (plain_s, plain_cpu) = best["recorder"], best["plain"]
    return {
        "model": bm.name,
        "n_examples": bm.n_examples,
        "n_params": recorder.program.family.n_params,
        "steps": steps,
        "sampling_rate": recorder.settings.sampling_rate,
        "plain_batch_size": round(recorder.settings.sampling_rate * bm.n_examples),
        "recorder_chunk_capacity": recorder.program.batch_size,
        "mc_draws": recorder.settings.mc_draws,
        "repeats": repeats,
        "recorder_s": round(recorder_s, 4),
        "plain_sgd_s": round(plain_s, 4),
        "ratio": round(recorder_s / plain_s, 2),
        "recorder_cpu_s": round(recorder_cpu, 4),
        "plain_sgd_cpu_s": round(plain_cpu, 4),
        "ratio_cpu": round(recorder_cpu / plain_cpu, 2),
        "recorder_first_call_s": round(first_s, 3),
        "target_ratio": TARGET_RATIO,
        "meets_target": recorder_s / plain_s <= TARGET_RATIO,
        **provenance(command),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--steps", type=int, default=None, help="T (default: the research preset's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "recorder_overhead.json")
    args = parser.parse_args()
    names = chosen(parser, args.cases, CASES)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    command = "python benchmarks/recorder_overhead.py " + " ".join(
        f"--{k} {v}" for k, v in (("cases", args.cases), ("steps", args.steps), ("repeats", args.repeats)) if v
    )
    print(f"{'case':<12} {'T':>6} {'recorder s':>11} {'plain s':>9} {'ratio':>7} {'CPU ratio':>10}  ok")
    results = {}
    for name in names:
        steps = args.steps or na.models.get(CASES[name]).dpvi_settings["steps"]
        r = results[name] = run_case(name, steps, args.repeats, command)
        print(
            f"{name:<12} {steps:>6} {r['recorder_s']:>11.4f} {r['plain_sgd_s']:>9.4f} {r['ratio']:>6.2f}× "
            f"{r['ratio_cpu']:>9.2f}×  "
            f"{'yes' if r['meets_target'] else 'NO'}"
        )
        merge_results(args.out, results)
    print(f"wrote {results_path(args.out)}")


if __name__ == "__main__":
    main()
