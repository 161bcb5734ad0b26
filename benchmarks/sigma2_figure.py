"""The 10D regression's σ² before and after the model's own prior (issue 38): its gradient rows and its intervals.

    python benchmarks/sigma2_figure.py [--simulations 40] [--out benchmarks/results/sigma2_figure.json]
        [--figure docs/figures/linreg-sigma2.png]

M simulations of linreg-10d at its research preset, ε = 1 (research σ = 37.81, seed 0), one DPVI trace each, and
the exact route fitted twice to the same traces: with φ*'s prior centred on the trace (`na.fit_batch(traces)`) and
with the model's own prior (`na.fit_batch(traces, model=bm)`, docs/method.md §2.3, §2.10). The figure has two
panels. Left: the σ² μ row's gradient of simulation 0 (running mean over 500 steps after the burn-in) as recorded
and net of the wander shift that the model's coupling predicts; the gradient model reads a mean away from 0 as an
optimum away from the iterates. Right: each simulation's 90 % interval for σ² (the model's scale) under the two
priors, sorted by the truth, with the true σ² marked. Stored: each prior's 90 % coverage of σ² and median width, the
mean raw and net σ² μ-row gradient of every trace.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import jax
import matplotlib
import numpy as np
from _common import machine, results_path, write_json

import noiseaware as na
from noiseaware.evaluation.simulations import simulate_traces
from noiseaware.inference.statistics import kept_arrays, wander_shift

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SIGMA_RESEARCH_EPS1 = 37.81
WINDOW = 500
"""Steps in the running mean of the left panel."""


def sigma2_intervals(traces, bm, with_model: bool, draws: int) -> np.ndarray:
    """Each trace's 90 % interval for σ² under the exact route, (M, 2) on the model's scale."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        posts = na.fit_batch(traces, "exact", key=0, model=bm if with_model else None)
    samples = [post.constrained_sample(jax.random.key(m), draws)["sigma2"] for m, post in enumerate(posts)]
    return np.stack([np.quantile(s, [0.05, 0.95]) for s in samples])


def sigma2_rows(trace, bm) -> tuple[np.ndarray, np.ndarray]:
    """The σ² μ row's gradient after the burn-in as recorded and net of the model's wander shift, (T',) each."""
    facts = bm.optimum_prior()
    params, grads = kept_arrays(trace)
    shift = wander_shift(params, trace.sampling_rate, facts.coupling, np.median(facts.curvature, axis=0))
    j = facts.coupling.shape[0] - 1
    return grads[:, j], grads[:, j] - shift[:, j]


def draw(path: Path, raw: np.ndarray, net: np.ndarray, truth: np.ndarray, intervals: dict) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    kernel = np.ones(WINDOW) / WINDOW
    for colour, label, rows in (("C0", "as recorded", raw), ("C1", "net of the wander shift", net)):
        smooth = np.convolve(rows, kernel, mode="valid")
        left.plot(smooth, label=f"{label} (mean {rows.mean():.0f})", lw=1, color=colour)
    left.axhline(0.0, color="black", lw=0.5)
    left.set_xlabel("step after the burn-in")
    left.set_ylabel(f"σ² μ-row gradient, mean over {WINDOW} steps")
    left.set_title("simulation 0: what the gradient model reads")
    left.legend(fontsize=8)
    order = np.argsort(truth)
    x = np.arange(truth.size)
    for offset, colour, (label, band) in zip((-0.15, 0.15), ("C0", "C1"), intervals.items(), strict=True):
        band = band[order]
        covered = np.mean((band[:, 0] < truth[order]) & (truth[order] < band[:, 1]))
        right.vlines(x + offset, band[:, 0], band[:, 1], lw=2, label=f"{label}: covers {covered:.0%}", color=colour)
    right.plot(x, truth[order], "k.", label="true σ²")
    right.set_yscale("log")
    right.set_xlabel("simulation (sorted by the true σ²)")
    right.set_ylabel("σ², 90 % interval")
    right.set_title("exact route, ε = 1, research preset")
    right.legend(fontsize=8)
    fig.tight_layout()
    temporary = path.with_suffix(".tmp.png")
    fig.savefig(temporary, dpi=110)
    temporary.replace(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=40)
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sigma2_figure.json")
    parser.add_argument(
        "--figure", type=Path, default=Path(__file__).parents[1] / "docs" / "figures" / "linreg-sigma2.png"
    )
    args = parser.parse_args()
    start = time.time()
    bm = na.models.get("linreg-10d")
    simulations = simulate_traces(
        bm,
        noise_multiplier=SIGMA_RESEARCH_EPS1,
        delta=1e-5,
        simulations=args.simulations,
        key=jax.random.key(0),
        chunk=20,
        progress=True,
        **bm.dpvi_settings,
    )
    traces = simulations.batch.traces
    constrained = bm.site_map.constrain_sites(bm.site_map.unflatten(np.asarray(simulations.truth)))
    truth = np.asarray(constrained["sigma2"])
    intervals = {
        "trace's prior": sigma2_intervals(traces, bm, False, args.draws),
        "model's prior": sigma2_intervals(traces, bm, True, args.draws),
    }
    rows = [sigma2_rows(trace, bm) for trace in traces]
    draw(args.figure, *rows[0], truth, intervals)
    result = {
        label: {
            "coverage90": float(np.mean((band[:, 0] < truth) & (truth < band[:, 1]))),
            "median_width90": float(np.median(band[:, 1] - band[:, 0])),
        }
        for label, band in intervals.items()
    }
    result["mu_row_gradient_mean"] = {
        "as recorded": [round(float(raw.mean()), 1) for raw, _ in rows],
        "net of the wander shift": [round(float(net.mean()), 1) for _, net in rows],
    }
    result["_meta"] = {
        "command": f"python benchmarks/sigma2_figure.py --simulations {args.simulations} --draws {args.draws}",
        "simulations": args.simulations,
        "epsilon": 1.0,
        "noise_multiplier": SIGMA_RESEARCH_EPS1,
        "seed": 0,
        "seconds": round(time.time() - start, 1),
        "machine": machine(),
    }
    write_json(args.out, result)
    for label in intervals:
        row = result[label]
        print(f"{label}: σ² 90 % coverage {row['coverage90']:.2f}, median width {row['median_width90']:.3g}")
    print(f"wrote {results_path(args.out)} and {args.figure}")


if __name__ == "__main__":
    main()
