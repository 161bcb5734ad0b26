"""The non-private reference: NUTS on the data itself (no privacy), for calibration studies on real data."""

from __future__ import annotations

import dataclasses

import numpy as np
from numpyro.infer import MCMC, NUTS

from ..posteriors.draws import DrawsPosterior
from ..util.checks import flag, positive_int
from ..util.defaults import DRAWS, WARMUP
from ..util.keys import as_key
from .base import Problem, per_problem

__all__ = ["NONPRIVATE", "NONPRIVATE_KIND", "NonPrivateOptions", "nonprivate_posterior"]


@dataclasses.dataclass(frozen=True)
class NonPrivateOptions:
    """NUTS warmup and draws of the one chain (dense mass matrix)."""

    warmup: int = WARMUP
    draws: int = DRAWS
    progress: bool = False

    def __post_init__(self):
        positive_int("warmup", self.warmup, hint=f"the number of NUTS adaptation steps, e.g. warmup={WARMUP}")
        positive_int("draws", self.draws, hint=f"the number of NUTS draws, e.g. draws={DRAWS}")
        flag("progress", self.progress)


NONPRIVATE_KIND = "non-private posterior (NUTS on the data)"
"""The posterior given the data itself: NUTS draws of θ, no privacy (a reference, never a release)."""


def nonprivate_posterior(problem: Problem, key, options: NonPrivateOptions) -> DrawsPosterior:
    """θ (1, draws, d) from the non-private posterior of the logistic regression on the problem's data:
    numpyro NUTS with a dense mass matrix (the one-hot blocks and the bias are collinear), one chain."""
    mcmc = MCMC(
        NUTS(problem.model.model, dense_mass=True),
        num_warmup=options.warmup,
        num_samples=options.draws,
        progress_bar=bool(options.progress),
    )
    mcmc.run(as_key(key), **problem.data)
    theta = np.asarray(mcmc.get_samples()["theta"], np.float64)
    return DrawsPosterior(theta[None], "nonprivate", sites=problem.model.site_map.sites, kind=NONPRIVATE_KIND)


NONPRIVATE = per_problem(
    "nonprivate",
    nonprivate_posterior,
    options=NonPrivateOptions,
    models=("adult-logistic",),
    private=False,
    description="non-private reference: NUTS on the data itself",
)
