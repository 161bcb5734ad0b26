"""The mechanism baselines as methods: Bernstein & Sheldon's sufficient-statistic posteriors (docs/baselines.md §1, §2),
OPS and DP-SGLD.

They read the problems' data, not the traces: problem m's data is released at the batch's (ε, δ) (the same
budget as DP-SGD: an alternative analysis, never composed with it) with the first half of split(keys[m]),
and the noise-aware methods sample with the second half. A run given by its noise multiplier passes the ε
that σ stands for as the option `epsilon`.

    bs2018, bs2018-naive   M1–M3: gamma-exponential, beta-bernoulli, dirichlet-categorical
    bs2019, bs2019-naive   linreg-10d (data X (M, N, d+1) with the bias column last, y (M, N))
    ops                    M1–M3: one posterior sample (Foulds et al. 2016): k tempered-posterior draws at ε/k each
    dp-sgld                any model: Langevin dynamics on clipped gradients (Wang et al. 2015), θ on the run's scale
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..baselines.bernstein_sheldon import GibbsSettings, Init, ReleaseSettings, bs2018_batch, bs2018_naive_batch
from ..baselines.bernstein_sheldon_regression import CHUNK, MODEL, bs2019_batch, bs2019_naive_batch
from ..baselines.dpsgld import SGLDSettings, dpsgld_batch
from ..baselines.expfam import FAMILIES
from ..baselines.mechanisms import Mechanism, Neighbouring, check_epsilon
from ..baselines.ops import OPSSettings, ops_batch
from ..baselines.regression_gibbs import NIGPrior, RegressionGibbs
from ..baselines.regression_release import Moments, RegressionRelease
from ..util.checks import positive_int
from .base import Batch, Method, Outcome

__all__ = [
    "BS2018",
    "BS2018_NAIVE",
    "BS2018NaiveOptions",
    "BS2018Options",
    "BS2019",
    "BS2019_NAIVE",
    "BS2019NaiveOptions",
    "BS2019Options",
    "DPSGLD",
    "DPSGLDOptions",
    "OPS",
    "OPSOptions",
]


@dataclasses.dataclass(frozen=True)
class _MechanismOptions:
    """epsilon: the ε to spend instead of the batch's (a run given by its noise multiplier); None: the batch's."""

    epsilon: float | None = None

    def __post_init__(self):
        self.settings()  # builds, and so checks, the typed settings: a bad option fails before any work
        if self.epsilon is not None:
            check_epsilon(self.epsilon)

    def settings(self) -> dict[str, Any]:
        """The typed settings, as keyword arguments of the baseline's batch function."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class BS2018NaiveOptions(_MechanismOptions):
    """The release (§1.1): mechanism "laplace" (pure ε-DP) or "gaussian" (analytic Gaussian, (ε, δ)-DP);
    neighbouring "add-remove" or "substitute"; bound: M1's truncation B (None: the prior-predictive 0.99
    quantile 1.557); epsilon as `_MechanismOptions`."""

    mechanism: Mechanism = ReleaseSettings.mechanism
    neighbouring: Neighbouring = ReleaseSettings.neighbouring
    bound: float | None = ReleaseSettings.bound

    def settings(self) -> dict[str, Any]:
        return {"release": ReleaseSettings(self.mechanism, self.neighbouring, self.bound)}


@dataclasses.dataclass(frozen=True)
class BS2018Options(BS2018NaiveOptions):
    """The release as bs2018-naive's, and the Gibbs sampler (§1.3): chains × (warmup + draws) sweeps
    (4 × (1000 + 5000)), retries R of a support draw before projecting (20), init "naive" or "prior"."""

    chains: int = GibbsSettings.chains
    warmup: int = GibbsSettings.warmup
    draws: int = GibbsSettings.draws
    retries: int = GibbsSettings.retries
    init: Init = GibbsSettings.init

    def settings(self) -> dict[str, Any]:
        return super().settings() | {
            "gibbs": GibbsSettings(self.chains, self.warmup, self.draws, self.retries, self.init)
        }


@dataclasses.dataclass(frozen=True)
class BS2019NaiveOptions(_MechanismOptions):
    """The release (§2.2): clamping bounds bound_x, bound_y (3, 4), mechanism, neighbouring; the NIG prior
    (a0, b0, prior_scale) = (20, 0.5, 2), linreg-10d's; epsilon as `_MechanismOptions`."""

    bound_x: float = RegressionRelease.bound_x
    bound_y: float = RegressionRelease.bound_y
    mechanism: Mechanism = RegressionRelease.mechanism
    neighbouring: Neighbouring = RegressionRelease.neighbouring
    a0: float = NIGPrior.a0
    b0: float = NIGPrior.b0
    prior_scale: float = NIGPrior.prior_scale

    def settings(self) -> dict[str, Any]:
        return {
            "release": RegressionRelease(self.bound_x, self.bound_y, self.mechanism, self.neighbouring),
            "prior": NIGPrior(self.a0, self.b0, self.prior_scale),
        }


@dataclasses.dataclass(frozen=True)
class BS2019Options(BS2019NaiveOptions):
    """bs2019-naive's options, the design moments ("noisy": Gibbs-SS-Noisy spends half the budget on them;
    "known"), and the sampler (§2.5): chains × (warmup + draws·thin) sweeps keeping every thin-th
    (4 × (500 + 500·2)), redraws of S1 before the PSD projection (10); chunk: problems per compiled program (50)."""

    moments: Moments = RegressionRelease.moments
    chains: int = RegressionGibbs.chains
    warmup: int = RegressionGibbs.warmup
    draws: int = RegressionGibbs.draws
    thin: int = RegressionGibbs.thin
    redraws: int = RegressionGibbs.redraws
    chunk: int = CHUNK

    def settings(self) -> dict[str, Any]:
        naive = super().settings()
        return naive | {
            "release": dataclasses.replace(naive["release"], moments=self.moments),
            "gibbs": RegressionGibbs(self.chains, self.warmup, self.draws, self.thin, self.redraws),
            "chunk": positive_int("chunk", self.chunk),
        }


@dataclasses.dataclass(frozen=True)
class OPSOptions(_MechanismOptions):
    """draws k: the posterior draws released, each at ε/k (10); tail: the prior mass cut from each end of every
    parameter's range, the public truncation region (1e-4); neighbouring "add-remove" or "substitute"; epsilon
    as `_MechanismOptions`."""

    draws: int = OPSSettings.draws
    tail: float = OPSSettings.tail
    neighbouring: Neighbouring = OPSSettings.neighbouring

    def settings(self) -> dict[str, Any]:
        return {"settings": OPSSettings(self.draws, self.tail, self.neighbouring)}


@dataclasses.dataclass(frozen=True)
class DPSGLDOptions(_MechanismOptions):
    """steps T and sampling_rate q (None: the model's DPVI preset's); step_size η, clip C and burn_in (None:
    chosen on simulations from the prior); draws: post-burn-in iterates kept; tuning_simulations, tuning_seed:
    the prior simulations of the choice; epsilon as `_MechanismOptions` (baselines/dpsgld.py)."""

    steps: int | None = SGLDSettings.steps
    sampling_rate: float | None = SGLDSettings.sampling_rate
    step_size: float | None = SGLDSettings.step_size
    clip: float | None = SGLDSettings.clip
    burn_in: float | None = SGLDSettings.burn_in
    draws: int = SGLDSettings.draws
    tuning_simulations: int = SGLDSettings.tuning_simulations
    tuning_seed: int = SGLDSettings.tuning_seed

    def settings(self) -> dict[str, Any]:
        names = [field.name for field in dataclasses.fields(SGLDSettings)]
        return {"settings": SGLDSettings(**{name: getattr(self, name) for name in names})}


def _records(batch: Batch) -> tuple[str, np.ndarray]:
    """bs2018's data arguments: the model's name and the records x (M, N)."""
    return batch.model.name, _stacked(batch, "x")


def _regression(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """bs2019's data arguments: X (M, N, d+1) and y (M, N)."""
    return _stacked(batch, "X"), _stacked(batch, "y")


def _stacked(batch: Batch, name: str) -> np.ndarray:
    """The problems' data array `name` with a leading axis M (data shared by all problems is repeated)."""
    data = batch.data_sets()
    if name not in data:
        raise ValueError(f"this method releases statistics of the data {name!r}; the batch holds {sorted(data)}")
    return data[name]


def _data_sets(batch: Batch) -> tuple:
    """DP-SGLD's data arguments: the BenchmarkModel and every data array with a leading axis M."""
    if batch.model is None or batch.data is None:
        raise ValueError("DP-SGLD runs on a model's data sets; this batch has no model or no data")
    return batch.model, batch.data_sets()


def _method(
    name: str,
    fit: Callable[..., list[Outcome]],
    arguments: Callable[[Batch], tuple],
    options: type,
    models: tuple[str, ...] | None,
    description: str,
    transforms: str | None = "research",
) -> Method:
    """A mechanism baseline: fit(*arguments(batch), keys=keys, epsilon, delta, **options.settings()) after
    the method's own check of the model and the ε (the option's, else the batch's); transforms: see `Method`."""

    def fit_batch(batch: Batch, keys, opts) -> list[Outcome]:
        epsilon = batch.epsilon if opts.epsilon is None else opts.epsilon
        method.check(None if batch.model is None else batch.model.name, epsilon)
        return fit(*arguments(batch), keys=keys, epsilon=epsilon, delta=batch.delta, **opts.settings())

    method = Method(
        name, fit_batch, options, "data", models, needs_epsilon=True, description=description, transforms=transforms
    )
    return method


BS2018 = _method(
    "bs2018",
    bs2018_batch,
    _records,
    BS2018Options,
    tuple(FAMILIES),
    "Bernstein & Sheldon 2018: a DP release of Σ t(x), then Gibbs over the statistic (noise-aware)",
)
BS2018_NAIVE = _method(
    "bs2018-naive",
    bs2018_naive_batch,
    _records,
    BS2018NaiveOptions,
    tuple(FAMILIES),
    "the conjugate update of bs2018's released Σ t(x), as if it were exact (noise-naive)",
)
BS2019 = _method(
    "bs2019",
    bs2019_batch,
    _regression,
    BS2019Options,
    (MODEL,),
    "Bernstein & Sheldon 2019 Gibbs-SS-Noisy: a DP release of the Gram matrix, then Gibbs (noise-aware)",
)
BS2019_NAIVE = _method(
    "bs2019-naive",
    bs2019_naive_batch,
    _regression,
    BS2019NaiveOptions,
    (MODEL,),
    "the NIG update of the released Gram matrix, as if it were exact (noise-naive)",
)
OPS = _method(
    "ops",
    ops_batch,
    _records,
    OPSOptions,
    tuple(FAMILIES),
    "one posterior sample (Wang et al. 2015; Foulds et al. 2016): k draws of the truncated posterior tempered "
    "to ε/k each, as an empirical posterior",
)
DPSGLD = _method(
    "dp-sgld",
    dpsgld_batch,
    _data_sets,
    DPSGLDOptions,
    None,
    "DP-SGLD (Wang et al. 2015): Langevin dynamics on clipped Poisson-sampled gradients, its noise paying for "
    "privacy; post-burn-in iterates as the posterior",
    transforms=None,
)
