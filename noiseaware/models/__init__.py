"""Benchmark models: a numpyro model, its simulator and its DPVI preset, as one object.

bm = na.models.get("gamma-exponential")      # a built-in (see `names()`); used at an ε, its preset is chosen there
bm = na.models.get("M1", epsilon=1.0)        # the preset `noiseaware record` uses at ε = 1: tuned, where shipped
bm = na.models.from_numpyro(model, n_examples=1000, steps=..., sampling_rate=..., clip=...)
bm = na.models.bag_of_words(100_000, 100_000, steps=..., ...)   # d = 10⁵ coefficients, sparse clipping
theta, data = bm.simulate(key)               # θ ~ prior (unconstrained, (d,)), data ~ p(x | θ)
trace = na.record_dpvi(bm.model, data, epsilon=1.0, key=key, **bm.dpvi_settings)
"""

from .bag_of_words import bag_of_words
from .benchmark import BenchmarkModel, from_numpyro
from .builtin import get, names
from .presets import PRESETS, PresetChoice, preset_at

__all__ = ["PRESETS", "BenchmarkModel", "PresetChoice", "bag_of_words", "from_numpyro", "get", "names", "preset_at"]
