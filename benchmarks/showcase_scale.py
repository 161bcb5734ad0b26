"""The showcase at scale (issue 42): a noise-aware posterior on every coefficient of a d = 10⁵ logistic regression.

    python benchmarks/showcase_scale.py [--seeds 0,1,2] [--d 100000] [--n 100000] [--steps 10000] [--epsilon 1]
                                        [--delta 1e-6]
                                        [--draws 400] [--reference] [--step] [--force]

The model is `noiseaware.models.bag_of_words` (θ ~ N(0, I_d); 8 words a document from a Zipf(0.8) vocabulary). Each
seed simulates a data set from the prior (a known truth), records DPVI with sparse per-example clipping kept as a
summary (`record_dpvi(..., windowed=True)`, P = 2d), runs the trace checks, and fits the exact route with the model's
own prior (blocks of 2 048 coordinates, `--draws` draws of φ*). Recorded per seed:

* the record's seconds and the summary's MB (its arrays' nbytes; a trace of the run would take 2·T·P·4 bytes);
* the checks' verdict, and the fit's seconds (warm: the model's prior is computed once per process, first): the
  default fit (the trace checks, the exact route, the repair of curved scale rows, which solves the ρ rows again),
  and the exact route alone (`checks="off"`, `repair=False`);
* the 90 % marginal intervals of θ from the posterior's draws: the fraction of the d true coefficients they cover
  and their median width, overall and by the word's expected count N·k·p_j (head ≥ 1 000, mid 30–1 000, tail < 30),
  beside the naive posterior q(θ; φ_T) of the last iterate;
* calibration on N held-out documents simulated with the same θ: calibration RMSE over 10 equal-count bins and log
  loss (`na.calibration_metrics`) of the posterior predictive probabilities p̂_i = mean_k sigmoid(η_i(θ_k)), beside
  the naive last iterate's.

`--reference` runs non-private VI on each seed's data instead (σ = 0, `REFERENCE_LEARNING_RATE`) and scores its last
iterate q(θ; φ_T) the same way: what the mean-field family itself covers, the target the noise-aware posterior
approximates. `--step` measures the training step at the showcase's size instead: µs per step of the DP-SGD step
alone (a jitted `lax.scan` of the recorder's step, nothing kept) and with the summary's sums and sample rows, warm,
over 200 steps. Each seed is saved when done (rerunning skips it unless --force). Writes
benchmarks/results/showcase_scale.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _common import merge_results, provenance, read_results

import noiseaware as na
from noiseaware.models.bag_of_words import bag_of_words, word_frequencies
from noiseaware.recording.settings import SettingsHint
from noiseaware.util.numerics import softplus_inverse

RESULTS = Path(__file__).parent / "results" / "showcase_scale.json"
SETTINGS = {
    "steps": 10_000,
    "sampling_rate": 0.1,
    "clip": 1.0,
    "learning_rate": (2e-4, 2e-4),
    "init": (0.0, -3.0),
}
"""DP-SGD settings of the showcase: the step size keeps the head's wander near its posterior sd (λ·q·h ≈ 0.02 for
the most frequent word); tail words barely move and the model's prior carries them. With `--init model` (the default)
ρ₀ is each coordinate's ρ* as the model predicts it, softplus⁻¹(mean_m h_mj^(−1/2)) (`prior_informed`), in place of
−3."""


def prior_informed(bm):
    """bm with ρ₀_j = softplus⁻¹(mean_m h_mj^(−1/2)), the model's own prediction of ρ*_j (`optimum_prior`, which costs
    no privacy: the model and the public N), and μ₀ = 0; the same model object, so its prior is computed once."""
    rho = softplus_inverse(np.mean(bm.optimum_prior().curvature, axis=0) ** -0.5)
    return dataclasses.replace(bm, dpvi_settings=bm.dpvi_settings | {"init": (0.0, tuple(rho.tolist()))})


REFERENCE_LEARNING_RATE = (5e-3, 5e-2)
"""The non-private reference run's step sizes (μ block, ρ block; σ = 0: no wander to keep small), so that every
coordinate settles within T (λ·q·h ≥ 5·10⁻⁴ for the rarest word's μ, ≤ 0.5 for the most frequent's; on a d = 10⁴
prototype every band's final sd was within 1.5 % of h^(−1/2)). λ_ρ = 5·10⁻³ left the tail's ρ unsettled (sd 9 % low)."""
BANDS = {"head": (1000, np.inf), "mid": (30, 1000), "tail": (0, 30)}
"""Bands of a word's expected count N·k·p_j."""
LEVEL = 0.9
Z90 = 1.6448536269514722
"""The standard normal's 95 % quantile: a Gaussian q's 90 % central interval is μ ± Z90·sd."""
DRAW_CHUNK = 25
"""Posterior draws per pass over the held-out documents ((chunk, n, k) gathered values)."""


def expected_counts(d: int, n: int, k: int = 8, exponent: float = 0.8) -> np.ndarray:
    """N·k·p_j: the design's expected count of each word (`word_frequencies`; public, from the model)."""
    return n * k * np.asarray(word_frequencies(d, exponent), np.float64)


def predictive(theta_draws, data) -> np.ndarray:
    """p̂_i = mean_k sigmoid(Σ_j θ_k[w_ij]·x_ij): draws (K, d) → (n,), in chunks of draws."""

    @jax.jit
    def chunk_sum(thetas):
        eta = jnp.einsum("knj,nj->kn", thetas[:, data["words"]], data["x"])
        return jnp.sum(jax.nn.sigmoid(eta), axis=0)

    total = sum(
        chunk_sum(jnp.asarray(theta_draws[i : i + DRAW_CHUNK], jnp.float32))
        for i in range(0, len(theta_draws), DRAW_CHUNK)
    )
    return np.clip(np.asarray(total, np.float64) / len(theta_draws), 0.0, 1.0)


def calibrated(y, p) -> dict:
    """Calibration RMSE (10 equal-count bins) and log loss of held-out predictions p (n,) of labels y (n,)."""
    metrics = na.calibration_metrics(y, p)
    return {"calibration_rmse": round(metrics.calibration_rmse, 4), "log_loss": round(metrics.log_loss, 4)}


def scores(low, high, truth, counts) -> dict:
    """Coverage and median width of intervals (low, high) (d,) of the truth, overall and by band."""
    inside = (truth >= low) & (truth <= high)
    out = {"coverage": round(float(inside.mean()), 4), "median_width": round(float(np.median(high - low)), 4)}
    for band, (lo, hi) in BANDS.items():
        chosen = (counts >= lo) & (counts < hi)
        out[band] = {
            "coordinates": int(chosen.sum()),
            "coverage": round(float(inside[chosen].mean()), 4),
            "median_width": round(float(np.median((high - low)[chosen])), 4),
        }
    return out


def run_seed(bm, seed: int, args) -> dict:
    d = args.d
    truth, data = bm.simulate(jax.random.key(seed))
    held_out = bm.simulate_given(truth, jax.random.key(10_000 + seed))
    truth = np.asarray(truth, np.float64)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SettingsHint)
        summary = na.record_dpvi(
            bm.model,
            data,
            key=100 + seed,
            epsilon=args.epsilon,
            delta=args.delta,
            windowed=True,
            progress=True,
            **bm.dpvi_settings,
        )
    record_seconds = time.perf_counter() - start
    report = na.diagnose(summary)
    start = time.perf_counter()
    post = na.fit(summary, key=seed, model=bm, draws=args.draws, progress=True)
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    na.fit(summary, key=seed, model=bm, draws=args.draws, checks="off", repair=False)
    exact_seconds = time.perf_counter() - start
    draws = np.asarray(post.sample(jax.random.key(seed), args.draws), np.float32)
    low, high = np.quantile(draws, [(1 - LEVEL) / 2, (1 + LEVEL) / 2], axis=0)
    counts = expected_counts(d, bm.n_examples)
    y = np.asarray(held_out["y"], np.float64)
    return {
        "record_seconds": round(record_seconds, 1),
        "summary_mb": round(sum(np.asarray(x).nbytes for x in jax.tree.leaves(summary.sums)) / 1e6, 1),
        "sample_mb": round(2 * np.asarray(summary.sample.params).nbytes / 1e6, 1),
        "trace_mb_float32": round(2 * summary.steps * 2 * d * 4 / 1e6, 1),
        "checks": report.verdict,
        "fit_seconds": round(fit_seconds, 1),
        "exact_fit_seconds": round(exact_seconds, 1),
        "fit_draws": args.draws,
        "noise_aware": scores(low, high, truth, counts) | calibrated(y, predictive(draws, held_out)),
        "naive_last_iterate": last_iterate_scores(summary, truth, held_out, seed, args),
        "held_out": int(y.size),
    }


def last_iterate_scores(run, truth, held_out, seed: int, args) -> dict:
    """`scores` and `calibrated` of q(θ; φ_T), the Gaussian of a run's last iterate: μ_T ± Z90·softplus(ρ_T), and
    `args.draws` draws of it for the predictive."""
    d = args.d
    last = np.asarray(run.sample.final_params, np.float64)
    mu, sd = last[:d], np.logaddexp(0.0, last[d:])
    draws = (mu + sd * np.asarray(jax.random.normal(jax.random.key(seed), (args.draws, d)))).astype(np.float32)
    counts = expected_counts(d, args.n)
    y = np.asarray(held_out["y"], np.float64)
    return scores(mu - Z90 * sd, mu + Z90 * sd, truth, counts) | calibrated(y, predictive(draws, held_out))


def run_reference(bm, seed: int, args) -> dict:
    """Non-private VI on the seed's data (σ = 0, `REFERENCE_LEARNING_RATE`), its last iterate q(θ; φ_T) scored as
    the seeds' posteriors are: what the mean-field family itself covers."""
    truth, data = bm.simulate(jax.random.key(seed))
    held_out = bm.simulate_given(truth, jax.random.key(10_000 + seed))
    start = time.perf_counter()
    settings = bm.dpvi_settings | {"learning_rate": REFERENCE_LEARNING_RATE}
    run = na.record_dpvi(bm.model, data, key=100 + seed, non_private=True, summary=True, progress=True, **settings)
    seconds = time.perf_counter() - start
    return {
        "non_private_vi": last_iterate_scores(run, np.asarray(truth, np.float64), held_out, seed, args),
        "record_seconds": round(seconds, 1),
        "learning_rate": list(REFERENCE_LEARNING_RATE),
    }


def step_costs(bm, steps: int = 200) -> dict:
    """µs per step of the recorder's DP-SGD step alone and with the summary (module doc), warm."""
    from noiseaware.recording.dpvi import build_recorder
    from noiseaware.recording.windowed import _run as summarised_run
    from noiseaware.trace.run import scale_rows_of
    from noiseaware.trace.sums import empty_sums, window_bounds
    from noiseaware.trace.windowed import ROWS, WINDOWS, coupled_dim, sample_steps

    _, data = bm.simulate(jax.random.key(0))
    settings = bm.dpvi_settings | {"steps": steps}
    recorder = build_recorder(bm.model, data, noise_multiplier=1.0, **settings)
    program, hyper, prepared = recorder.program, recorder.hyper(), recorder.prepare(data)
    family, size = recorder.settings.family, recorder.settings.family.n_params
    kept = sample_steps(steps, ROWS)
    starts = tuple(window_bounds(steps, WINDOWS)[:-1].tolist())

    @jax.jit
    def plain(state):
        return jax.lax.scan(lambda s, _: (program.step(hyper, prepared, s)[0], None), state, None, length=steps)[0]

    def summarised(state):
        carry = (
            empty_sums(size, WINDOWS, scale_rows_of(family), coupled_dim(family), recorder.dtype),
            jnp.zeros((kept.size, size), recorder.dtype),
            jnp.zeros((kept.size, size), recorder.dtype),
        )
        return summarised_run(program, hyper, prepared, state, carry, 0, steps, starts, tuple(kept.tolist()))

    out = {}
    for name, run in (("plain", plain), ("summary", summarised)):
        state = recorder.init(jax.random.key(1))
        jax.block_until_ready(run(state))
        start = time.perf_counter()
        jax.block_until_ready(run(state))
        out[f"{name}_us_per_step"] = round(1e6 * (time.perf_counter() - start) / steps, 1)
    out["overhead"] = round(out["summary_us_per_step"] / out["plain_us_per_step"], 3)
    out["steps_timed"] = steps
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--d", type=int, default=100_000)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=SETTINGS["steps"])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6, help="δ, well below 1/N")
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--init", choices=("model", "fixed"), default="model", help="ρ₀ from the model, or −3")
    parser.add_argument("--reference", action="store_true", help="run non-private VI on the seeds' data instead")
    parser.add_argument("--step", action="store_true", help="measure the step's cost instead of the seeds")
    parser.add_argument("--force", action="store_true", help="rerun seeds already in the results file")
    args = parser.parse_args()
    bm = bag_of_words(args.d, args.n, **(SETTINGS | {"steps": args.steps}))
    command = (
        f"python benchmarks/showcase_scale.py --d {args.d} --n {args.n} --steps {args.steps} "
        f"--epsilon {args.epsilon} --delta {args.delta} --draws {args.draws}"
    )
    label = f"d={args.d},n={args.n},T={args.steps},eps={args.epsilon},delta={args.delta}"
    if args.init == "model" and not args.reference:
        bm, label, command = prior_informed(bm), label + ",init=model", command + " --init model"
    if args.step:
        case = step_costs(bm) | provenance(command + " --step")
        merge_results(RESULTS, {f"{label},step": case})
        print(
            f"step at P = {2 * args.d}: {case['plain_us_per_step']} µs alone, {case['summary_us_per_step']} µs with "
            f"the summary ({case['overhead']}×)"
        )
        return
    done = read_results(RESULTS).get("results", {})
    start = time.perf_counter()
    bm.optimum_prior()
    print(f"the model's prior: {time.perf_counter() - start:.1f} s", flush=True)
    for seed in (int(s) for s in args.seeds.split(",")):
        name = f"{label},seed={seed}" + (",reference" if args.reference else "")
        if name in done and not args.force:
            print(f"{name}: done already")
            continue
        if args.reference:
            case = run_reference(bm, seed, args) | provenance(command + f" --seeds {seed} --reference")
            merge_results(RESULTS, {name: case})
            print(f"seed {seed}, non-private VI: {case['non_private_vi']}", flush=True)
            continue
        case = run_seed(bm, seed, args) | provenance(command + f" --seeds {seed}")
        merge_results(RESULTS, {name: case})
        aware, naive = case["noise_aware"], case["naive_last_iterate"]
        print(
            f"seed {seed}: coverage {aware['coverage']} (head {aware['head']['coverage']}, mid "
            f"{aware['mid']['coverage']}, tail {aware['tail']['coverage']}), naive {naive['coverage']}; "
            f"calibration RMSE {aware['calibration_rmse']} vs naive {naive['calibration_rmse']}; "
            f"record {case['record_seconds']} s, fit {case['fit_seconds']} s, summary {case['summary_mb']} MB; "
            f"{case['checks']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
