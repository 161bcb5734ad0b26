"""Benchmark models: a numpyro model, its simulator and its DPVI preset, as one object.

bm = na.models.get("gamma-exponential")      # a built-in (see `names()`)
bm = na.models.from_numpyro(model, n_examples=1000, steps=..., sampling_rate=..., clip=...)
theta, data = bm.simulate(key)               # θ ~ prior (unconstrained, (d,)), data ~ p(x | θ)
trace = na.record_dpvi(bm.model, data, epsilon=1.0, key=key, **bm.dpvi_settings)
"""

from .benchmark import BenchmarkModel, from_numpyro
from .builtin import get, names

__all__ = ["BenchmarkModel", "from_numpyro", "get", "names"]
