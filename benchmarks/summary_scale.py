"""Trace summaries at scale (issue 42): the summary's memory, its cost per training step, and the exact fit by P.

    python benchmarks/summary_scale.py [--cases 20000,200000,2000000] [--steps 2000] [--draws 400] [--force]

A case is a mean-field DP-SGD run of P = 2d parameters on a quadratic objective (G_t = q·h ⊙ (φ_t − φ*) + σC·ξ_t,
plain SGD; the training step of the toy costs O(P), like the summary, so the overhead measured here bounds the
relative overhead on any real model from above), `steps` steps, run twice in one jitted `lax.scan`: plain, and with
the summary's `add_step` (W = 10 windows). Recorded: the summary's bytes (float32 sums, its arrays' nbytes), the
warm seconds per step of both loops and their ratio, and the exact route's fit of every coordinate from the summary
(`ExactOptions(draws=…)`, blocks of 2 048), warm, with the peak resident memory of the case's process (each case runs
in a fresh process: `--case P` is the worker). A case whose fit would take over `--fit-limit` seconds (projected from
the previous case, linear in P) is not fitted; the results file says so. Writes benchmarks/results/summary_scale.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _common import merge_results, provenance, read_results

RESULTS = Path(__file__).parent / "results" / "summary_scale.json"
WINDOWS = 10


def run_case(n_params: int, steps: int, draws: int, fit: bool) -> dict:
    import noiseaware as na
    from noiseaware.inference.exact import fit_exact_batch
    from noiseaware.inference.gradient_model import gradient_model, select_rows
    from noiseaware.methods.routes import ExactOptions
    from noiseaware.trace.sums import add_step, empty_sums, window_bounds
    from noiseaware.trace.windowed import WindowedTrace

    d = n_params // 2
    q, sigma, clip = 0.01, 2.0, 1.0
    starts = tuple(window_bounds(steps, WINDOWS)[:-1].tolist())
    scale = slice(d, n_params)
    h = jnp.concatenate([jnp.full(d, 1000.0), jnp.full(d, 50.0)])
    optimum = jnp.concatenate([jnp.full(d, 0.3), jnp.full(d, -3.0)])
    rate = 0.05 / (q * h)

    def loop(summarise: bool):
        @jax.jit
        def run(key):
            sums = empty_sums(n_params, WINDOWS, scale, 0, jnp.float32) if summarise else None

            def step(carry, t):
                phi, sums, key = carry
                key, draw = jax.random.split(key)
                grad = q * h * (phi - optimum) + sigma * clip * jax.random.normal(draw, (n_params,))
                if summarise:
                    sums = add_step(sums, t, phi, grad, starts=starts, scale_rows=scale)
                return (phi - rate * grad, sums, key), None

            (phi, sums, _), _ = jax.lax.scan(step, (optimum + 0.01, sums, key), jnp.arange(steps))
            return phi, sums

        return run

    out = {"n_params": n_params, "steps": steps, "windows": WINDOWS}
    for name, summarise in (("plain", False), ("summary", True)):
        run = loop(summarise)
        jax.block_until_ready(run(jax.random.key(0)))
        start = time.perf_counter()
        phi, sums = jax.block_until_ready(run(jax.random.key(0)))
        out[f"{name}_us_per_step"] = round(1e6 * (time.perf_counter() - start) / steps, 2)
    out["overhead"] = round(out["summary_us_per_step"] / out["plain_us_per_step"], 3)
    sums = jax.tree.map(np.asarray, sums)
    out["summary_mb"] = round(sum(np.asarray(x).nbytes for x in jax.tree.leaves(sums)) / 1e6, 2)
    out["trace_mb_float32"] = round(2 * steps * n_params * 4 / 1e6, 1)
    if fit:
        rows = np.stack([np.asarray(optimum + 0.01), np.asarray(phi)]).astype(np.float32)  # φ_0 and φ_T
        sample = na.Trace.from_arrays(
            rows,
            np.zeros_like(rows),
            noise_multiplier=sigma,
            clip=clip,
            sampling_rate=q,
            n_examples=100_000,
            final_params=np.asarray(phi),
        )
        summary = WindowedTrace(sums, sample, np.array([0, steps - 1]), steps)
        options = ExactOptions(draws=draws)
        model = gradient_model(summary)
        keys = jax.random.split(jax.random.key(1), 1)
        first_block = select_rows(model, np.arange(min(options.block, n_params)))
        fit_exact_batch([first_block], keys=keys, options=options)  # compiles the one program every block runs
        start = time.perf_counter()
        result = fit_exact_batch([model], keys=keys, options=options)[0]
        out["fit_seconds"] = round(time.perf_counter() - start, 1)
        out["fit_draws"] = draws
        out["draws_mb"] = round(result.optimum.nbytes * 3 / 1e6, 1)  # φ*, A and u draws, float64
        z = (result.optimum[0].mean(axis=0) - np.asarray(optimum)) / result.diagnostics.optimum_sd
        out["optimum_within_3_sd"] = round(float(np.mean(np.abs(z) < 3)), 4)
    out["peak_rss_mb"] = round(_peak_rss_kb() / 1e3, 1)
    return out


def _peak_rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="20000,200000,2000000", help="comma-separated P = 2d")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--fit-limit", type=float, default=300.0, help="seconds a fit may be projected to take")
    parser.add_argument("--force", action="store_true", help="rerun cases already in the results file")
    parser.add_argument("--case", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--no-fit", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case is not None:
        print(json.dumps(run_case(args.case, args.steps, args.draws, not args.no_fit)))
        return
    done = read_results(RESULTS).get("results", {})
    per_coordinate = None
    print("P: plain and summary µs per step (ratio), summary MB (trace MB), fit s, draws MB, peak RSS MB", flush=True)
    for n_params in (int(p) for p in args.cases.split(",")):
        if str(n_params) in done and not args.force:
            print(f"{n_params}: done already ({done[str(n_params)]})")
            continue
        fit = per_coordinate is None or per_coordinate * n_params <= args.fit_limit
        command = [
            sys.executable,
            __file__,
            "--case",
            str(n_params),
            "--steps",
            str(args.steps),
            "--draws",
            str(args.draws),
        ]
        output = subprocess.run(command + ([] if fit else ["--no-fit"]), capture_output=True, text=True, check=True)
        case = json.loads(output.stdout.strip().splitlines()[-1])
        if "fit_seconds" in case:
            per_coordinate = case["fit_seconds"] / n_params
        else:
            case["fit_projected_seconds"] = round(per_coordinate * n_params, 1)
        case |= provenance(
            f"python benchmarks/summary_scale.py --cases {args.cases} --steps {args.steps} --draws {args.draws}"
        )
        merge_results(RESULTS, {str(n_params): case})
        fitted = case.get("fit_seconds", f"projected {case.get('fit_projected_seconds')}")
        print(
            f"{n_params}: {case['plain_us_per_step']} / {case['summary_us_per_step']} µs ({case['overhead']}×), "
            f"{case['summary_mb']} MB ({case['trace_mb_float32']}), fit {fitted} s, "
            f"draws {case.get('draws_mb', '-')} MB, peak {case['peak_rss_mb']} MB",
            flush=True,
        )


if __name__ == "__main__":
    main()
