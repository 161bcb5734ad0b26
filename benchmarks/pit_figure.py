"""ArviZ's coverage plot of a coverage study, drawn from the product's own output (docs/coverage.md).

    python benchmarks/pit_figure.py [--simulations 200] [--epsilon 0.1]

M1 at its research preset and ε, `na.coverage` with the exact noise-aware posterior and the naive last iterate on
the same simulations (K = 4 000 draws each, seed 0); `result.pit_tree()` handed to `az.plot_ecdf_pit(…,
coverage=True)`: per method, the share of simulations whose central interval at each level holds the truth, minus
that level, with ArviZ's uniformity test. Stored: per method the share of simulations outside the central 50 % and
90 % intervals, the Kolmogorov–Smirnov p-value of the PIT against U(0, 1), and the TARP RMSE beside them.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import arviz as az
import matplotlib
import numpy as np
import scipy.stats
from _common import figure_path, machine, write_json

import noiseaware as na

matplotlib.use("Agg")

RESULTS = Path(__file__).parent / "results" / "pit_figure.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=200)
    parser.add_argument("--epsilon", type=float, default=0.1)
    args = parser.parse_args()
    start = time.time()
    result = na.coverage(
        na.models.get("M1", preset="research"),
        methods=("exact", "naive"),
        epsilon=args.epsilon,
        simulations=args.simulations,
        references=5,
        samples=4000,
        key=0,
    )
    figure = figure_path("coverage-pit-m1.png")
    temporary = figure.with_suffix(".tmp.png")
    plot = az.plot_ecdf_pit(
        result.pit_tree(), coverage=True, figure_kwargs={"figsize": (8, 3.6), "layout": "constrained"}
    )
    plot.savefig(temporary, dpi=100)
    temporary.replace(figure)
    rows = {}
    for method, pit in result.pit.items():
        u = pit[:, 0]
        rows[method] = {
            "outside_central_50": float(np.mean(np.abs(u - 0.5) > 0.25)),
            "outside_central_90": float(np.mean(np.abs(u - 0.5) > 0.45)),
            "ks_uniform_pvalue": float(scipy.stats.kstest(u, "uniform").pvalue),
            "tarp_rmse": result.rmse[method][0],
        }
        print(
            f"{method:>6}: outside the central 50 % / 90 % interval in {rows[method]['outside_central_50']:.2f} / "
            f"{rows[method]['outside_central_90']:.2f} of the simulations (0.50 / 0.10 when calibrated); "
            f"KS p = {rows[method]['ks_uniform_pvalue']:.3g}; TARP RMSE {rows[method]['tarp_rmse']:.3f}"
        )
    rows["_meta"] = {
        "command": f"python benchmarks/pit_figure.py --simulations {args.simulations} --epsilon {args.epsilon}",
        "model": "M1 (research preset)",
        "samples": 4000,
        "seed": 0,
        "seconds": round(time.time() - start, 1),
        "machine": machine(),
    }
    write_json(RESULTS, rows)
    print(f"figure: {figure}")


if __name__ == "__main__":
    main()
