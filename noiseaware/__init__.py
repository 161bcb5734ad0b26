"""noiseaware: noise-aware differentially private Bayesian inference from DPVI traces.

    import noiseaware as na
    bm = na.models.get("gamma-exponential")
    theta, data = bm.simulate(0)
    trace = na.record_dpvi(bm.model, data, epsilon=1.0, key=1, **bm.dpvi_settings)
    trace.save("m1.nc")
    post = na.fit(trace, "exact", key=2)          # the noise-aware posterior
    print(post.summary(key=3))                    # each site on its own scale: mean, sd, MCSE, intervals

The data flow reads off the subpackages: recording (DPVI → trace) → trace (the released file) → checks (does it
meet the gradient model's assumptions: `diagnose`) and inference (the gradient model and its routes) →
posteriors → methods (one contract for every method) → evaluation (coverage, calibration) → tuning (settings
found and checked on simulations) → plots and cli.
"""

from . import datasets, methods, models, studies, tuning
from .baselines.dpvim import dpvim_posterior
from .baselines.naive import naive_posterior
from .checks import TraceCheckError, TraceDiagnosis, diagnose
from .evaluation import calibration, calibration_curve, calibration_metrics, coverage, coverage_rmse, tarp_ecp
from .inference.gradient_model import Prior
from .methods import DEFAULT_REGISTRY, FitFailure, Method, Registry, fit, fit_batch, per_problem, per_trace
from .posteriors import DrawsPosterior, MixturePosterior, Posterior, load_posterior
from .privacy import epsilon_spent, noise_multiplier
from .recording import DPVISettings, ModelError, Optimizer, SparseFeatures, record_dpvi, record_dpvi_batch
from .trace import DEPRECATED, Run, Trace, TraceError, WindowedTrace, windowed
from .tuning import PreflightReport, TunedSettings, preflight, tune
from .util.compilation import use_compilation_cache
from .util.deprecation import deprecated_names

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_REGISTRY",
    "DPVISettings",
    "DrawsPosterior",
    "FitFailure",
    "Method",
    "ModelError",
    "MixturePosterior",
    "Optimizer",
    "Posterior",
    "PreflightReport",
    "Prior",
    "Registry",
    "SparseFeatures",
    "Run",
    "Trace",
    "TraceCheckError",
    "TraceDiagnosis",
    "TraceError",
    "TunedSettings",
    "WindowedTrace",
    "calibration",
    "calibration_curve",
    "calibration_metrics",
    "coverage",
    "coverage_rmse",
    "datasets",
    "diagnose",
    "dpvim_posterior",
    "epsilon_spent",
    "fit",
    "fit_batch",
    "load_posterior",
    "methods",
    "models",
    "naive_posterior",
    "noise_multiplier",
    "per_problem",
    "per_trace",
    "preflight",
    "record_dpvi",
    "record_dpvi_batch",
    "tarp_ecp",
    "tune",
    "use_compilation_cache",
    "windowed",
    "studies",
    "tuning",
]

__getattr__ = deprecated_names(__name__, DEPRECATED)
