"""Methods: every way of turning traces (or released statistics) into posteriors, behind one contract.

import noiseaware as na
na.methods.DEFAULT_REGISTRY.names()            # ('exact', 'laplace', 'nuts', 'naive', 'dpvim', 'bs2018', …)
post = na.fit(trace, "exact", key=0)
mine = na.methods.per_trace("mine", fit_one)   # a plug-in: usable in fit, coverage and calibration
na.FitFailure("no finite optimum", "…")        # what fit_one returns (or raises) when its fit fails statistically
"""

from .base import Batch, FitFailure, Method, NoOptions, Outcome, Problem, Registry, per_problem, per_trace
from .data_baselines import BS2018NaiveOptions, BS2018Options, BS2019NaiveOptions, BS2019Options
from .fit import fit, fit_batch
from .reference import NonPrivateOptions
from .registry import DEFAULT_REGISTRY
from .routes import ExactOptions, GradientModelOptions, LaplaceOptions, NutsOptions
from .trace_baselines import DPVImOptions

__all__ = [
    "BS2018NaiveOptions",
    "BS2018Options",
    "BS2019NaiveOptions",
    "BS2019Options",
    "NonPrivateOptions",
    "Batch",
    "DEFAULT_REGISTRY",
    "DPVImOptions",
    "ExactOptions",
    "FitFailure",
    "GradientModelOptions",
    "LaplaceOptions",
    "Method",
    "NoOptions",
    "NutsOptions",
    "Outcome",
    "Problem",
    "Registry",
    "fit",
    "fit_batch",
    "per_problem",
    "per_trace",
]
