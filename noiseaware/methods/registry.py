"""`DEFAULT_REGISTRY`: the built-in methods, by name.

Trace methods (read only the DP-released trace): exact, laplace, nuts (the noise-aware posterior by the
gradient model's three routes; for a plain DP-SGD trace of a point estimate, its noise-aware Laplace posterior),
sandwich (a point trace's frequentist intervals, Λ⁻¹VΛ⁻¹), naive, dpvim, random-scaling and bootstrap (which also
simulates from the model). Mechanism baselines (release their own DP statistics of the data at the same ε): bs2018,
bs2018-naive, ops (M1–M3), bs2019, bs2019-naive (linreg-10d), dp-sgld (any model: Langevin dynamics on the
data, its own DP mechanism); dp-pvi, na-dp-pvi (the data split over clients, each running DPVI; their factors
combined by partitioned VI, plainly or noise-aware). The non-private reference (reads the data,
fitted once on shared data): nonprivate (adult-logistic).
"""

from __future__ import annotations

from .base import Registry
from .data_baselines import BS2018, BS2018_NAIVE, BS2019, BS2019_NAIVE, DPSGLD, OPS
from .federated import DP_PVI, NA_DP_PVI
from .reference import NONPRIVATE
from .routes import EXACT, LAPLACE, NUTS, SANDWICH
from .trace_baselines import BOOTSTRAP, DPVIM, NAIVE, RANDOM_SCALING

__all__ = ["DEFAULT_REGISTRY"]

DEFAULT_REGISTRY = Registry(
    [
        EXACT,
        LAPLACE,
        NUTS,
        SANDWICH,
        NAIVE,
        DPVIM,
        RANDOM_SCALING,
        BOOTSTRAP,
        BS2018,
        BS2018_NAIVE,
        BS2019,
        BS2019_NAIVE,
        OPS,
        DPSGLD,
        DP_PVI,
        NA_DP_PVI,
        NONPRIVATE,
    ]
)
