"""The figures of docs/diagnostics.md: `plot_trace(trace)` of a good, a diverged, an unconverged and a
mis-described trace.

    python benchmarks/diagnostics_figures.py            # writes docs/figures/trace-*.png (replacing them)

All M1 (gamma-exponential) at ε = 1 on one simulated data set (bm.simulate(0), DPVI key 1), except the
unconverged one, the 10D regression at its research preset (its σ² coordinate never settles).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

import noiseaware as na
from noiseaware.plots import plot_trace

FIGURES = Path(__file__).parents[1] / "docs" / "figures"


def main() -> None:
    FIGURES.mkdir(parents=True, exist_ok=True)
    m1 = na.models.get("gamma-exponential")
    theta, data = m1.simulate(0)
    good = na.record_dpvi(m1.model, data, epsilon=1.0, key=1, **m1.dpvi_settings)
    plain = {k: v for k, v in m1.dpvi_settings.items() if k != "lr_multiplier"}
    diverged = na.record_dpvi(m1.model, data, epsilon=1.0, key=1, **plain, learning_rate=100 * good.learning_rate)
    linreg = na.models.get("linreg-10d")
    theta_linreg, data_linreg = linreg.simulate(0)
    unconverged = na.record_dpvi(linreg.model, data_linreg, epsilon=1.0, key=1, **linreg.dpvi_settings)
    misdescribed = dataclasses.replace(good, noise_multiplier=2 * good.noise_multiplier)
    cases = {
        "good": (good, theta, None, "M1, research preset, ε = 1: all checks pass"),
        "diverged": (diverged, theta, None, "M1, learning rate ×100: curved gradient, autocorrelated residuals"),
        "unconverged": (unconverged, theta_linreg, ["w[0]", "sigma2"], "10D regression, research preset: σ² drifts"),
        "misdescribed": (misdescribed, theta, None, "M1 with σ recorded 2× too large: G varies less than its noise"),
    }
    for name, (trace, truth, coordinates, title) in cases.items():
        path = FIGURES / f"trace-{name}.png"
        plot_trace(trace, path, truth=np.asarray(truth), coordinates=coordinates, title=title, overwrite=True)
        print(f"{path}: {na.diagnose(trace).verdict}")


if __name__ == "__main__":
    main()
