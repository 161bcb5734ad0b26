"""noiseaware: noise-aware differentially private Bayesian inference from DPVI traces.

    import noiseaware as na
    bm = na.models.get("gamma-exponential")
    theta, data = bm.simulate(0)
    trace = na.record_dpvi(bm.model, data, epsilon=1.0, key=1, **bm.dpvi_settings)
    trace.save("m1.nc")
    post = na.fit(trace, method="exact")          # the noise-aware posterior
    print(post.summary())
"""

from . import datasets, models
from .baselines import dpvim_posterior, naive_posterior
from .contract import ModelError
from .dpvi import record_dpvi, record_dpvi_batch
from .evaluation import (calibration, calibration_curve, calibration_metrics, coverage, coverage_rmse, register_method,
                         tarp_ecp)
from .fit import fit, fit_batch
from .gradient_model import Prior
from .posterior import NoiseAwarePosterior, load_posterior
from .privacy import epsilon_spent, noise_multiplier
from .trace import Trace, TraceError

__version__ = "0.1.0"

__all__ = [
    "ModelError",
    "NoiseAwarePosterior",
    "Prior",
    "Trace",
    "TraceError",
    "calibration",
    "calibration_curve",
    "calibration_metrics",
    "coverage",
    "coverage_rmse",
    "datasets",
    "dpvim_posterior",
    "epsilon_spent",
    "fit",
    "fit_batch",
    "load_posterior",
    "models",
    "naive_posterior",
    "noise_multiplier",
    "record_dpvi",
    "record_dpvi_batch",
    "register_method",
    "tarp_ecp",
]
