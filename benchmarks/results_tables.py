"""Markdown tables of coverage results files, for docs/results.md (numbers are copied, never typed).

    python benchmarks/results_tables.py benchmarks/results/table1.json [benchmarks/results/table2.json]

Per model: one row per method (and prior, and settings), one column per ε with the research-rule RMSE mean ± sd
over the R reference draws, in brackets the method-independent "trace" rule and, where the file has it, the
median 90 % interval width over the non-private posterior's ("×1.04"; the median over θ's coordinates); then the
mean over ε, failures and the wall time of each stage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = (
    "exact",
    "exact/tuned",
    "nuts",
    "laplace",
    "exact/paper",
    "laplace/paper",
    "nuts/paper",
    "naive",
    "naive/tuned",
    "dpvim",
    "random-scaling",
    "ops",
    "bs2018",
    "bs2018-naive",
    "bs2019",
    "bs2019-naive",
)


def model_table(model: str, per_epsilon: dict) -> str:
    epsilons = sorted(per_epsilon, key=float)
    methods = sorted(
        {m for e in epsilons for m in per_epsilon[e]}, key=lambda m: (ORDER.index(m) if m in ORDER else len(ORDER), m)
    )
    lines = [
        f"### {model}",
        "",
        "| method | " + " | ".join(f"ε = {e}" for e in epsilons) + " | mean | failures |",
        "|---|" + "---|" * (len(epsilons) + 2),
    ]
    for method in methods:
        cells, values, failures = [], [], 0
        for e in epsilons:
            entry = per_epsilon[e].get(method)
            if entry is None:
                cells.append("—")
                continue
            values.append(entry["rmse_mean"])
            failures += entry["failures"]
            widths = entry.get("width_ratio") or []
            width = f" ×{sorted(widths)[len(widths) // 2]:.2f}" if widths else ""
            cells.append(
                f"{entry['rmse_mean']:.3f} ± {entry['rmse_sd']:.3f} ({entry['rmse_trace_reference_mean']:.3f}){width}"
            )
        mean = f"{sum(values) / len(values):.3f}" if len(values) == len(epsilons) else "—"
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {mean} | {failures} |")
    notes = []
    for method in methods:
        facts = [(e, per_epsilon[e][method].get("diagnostics", {})) for e in epsilons if method in per_epsilon[e]]
        if any("max_rhat" in f for _, f in facts):
            notes.append(
                f"{method}: "
                + "; ".join(
                    f"ε = {e}: max R-hat {f['max_rhat']:.3f}, "
                    f"{f.get('simulations_rhat_above_1.01', '?')} simulations above 1.01"
                    + (f", {f['divergences']} divergences" if "divergences" in f else "")
                    + (f", min ESS {f['min_ess']:.0f}" if "min_ess" in f else "")
                    + (f", {f['fallbacks']} support fallbacks" if "fallbacks" in f else "")
                    for e, f in facts
                    if "max_rhat" in f
                )
            )
        if any("simulations_not_converged" in f for _, f in facts):
            notes.append(
                f"{method}: simulations with a coordinate that never passed the convergence test: "
                + "; ".join(
                    f"ε = {e}: {f['simulations_not_converged']}" for e, f in facts if "simulations_not_converged" in f
                )
            )
    if notes:
        lines += ["", *(f"* {note}" for note in notes)]
    lines += ["", "Seconds per stage (DPVI of all M simulations; each method's fit; its draws and TARP):", ""]
    lines += [
        "| ε | DPVI | " + " | ".join(f"{m} fit + TARP" for m in methods) + " | wall |",
        "|---|---|" + "---|" * (len(methods) + 1),
    ]
    for e in epsilons:
        entries = per_epsilon[e]
        any_entry = next(iter(entries.values()))["seconds"]
        cells = [
            f"{entries[m]['seconds']['fit']:.0f} + {entries[m]['seconds']['draws_and_tarp']:.0f}"
            if m in entries and "fit" in entries[m]["seconds"]
            else "—"
            for m in methods
        ]
        lines.append(
            f"| {e} | {any_entry.get('dpvi_all_simulations', float('nan')):.0f} | "
            + " | ".join(cells)
            + f" | {any_entry.get('wall_this_epsilon_all_methods', float('nan')):.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    for path in sys.argv[1:]:
        results = json.loads(Path(path).read_text())
        print(f"<!-- from {path} -->")
        for model, per_epsilon in results.items():
            print(model_table(model, per_epsilon))
            print()


if __name__ == "__main__":
    main()
