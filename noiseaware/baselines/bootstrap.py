"""Parametric bootstrap from the DP estimate (Ferrando, Wang & Sheldon, AISTATS 2022), at no privacy cost.

θ̂ = the post-burn-in mean of the trace's μ (the released estimate). For b = 1..B: data x_b ~ p(x | θ̂) of the
trace's size (covariates from the model's simulator: the real ones are private), a DPVI run on x_b with the
trace's own settings (T, q, C, s, λ, S, φ₀, family, transforms) and σ, all B in one vmapped program, and θ̂_b its
post-burn-in μ mean. The basic bootstrap's draws θ*_b = 2θ̂ − θ̂_b have the quantiles of the interval
[2θ̂ − q_{1−α/2}(θ̂_b), 2θ̂ − q_{α/2}(θ̂_b)], which covers θ when θ̂ − θ behaves like θ̂_b − θ̂: both the data's
sampling noise and the DP noise re-enter every θ̂_b. Only released values (the trace) and public settings are
used, so it is post-processing. Cost: B DP-SGD runs per trace.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ..models.benchmark import BenchmarkModel
from ..posteriors.draws import DrawsPosterior
from ..recording.dpvi import record_dpvi_batch
from ..trace import BURN_IN, Trace, kept_steps
from ..trace.run import varying_settings_reason
from ..util.diagnostics import Diagnostics
from ..util.errors import VARYING_SETTINGS, FitFailure
from ..util.keys import as_key

__all__ = ["BootstrapDiagnostics", "bootstrap_posterior", "estimate", "replay_settings"]

UNSUPPORTED = "unsupported trace"


@dataclasses.dataclass(frozen=True)
class BootstrapDiagnostics(Diagnostics):
    """The estimate θ̂ (d,) the replicates were simulated at, and their number B."""

    estimate: np.ndarray
    replicates: int


def replay_settings(trace: Trace) -> dict:
    """record_dpvi's settings that reproduce the run of `trace` on other data (its σ, δ and every setting the
    trace records); a FitFailure for a run it cannot replay (an optimizer other than SGD)."""
    if trace.optimizer != "sgd":
        raise FitFailure(UNSUPPORTED, f"the bootstrap replays SGD runs; this trace used {trace.optimizer!r}")
    if trace.varying_settings:
        raise FitFailure(
            VARYING_SETTINGS, varying_settings_reason(trace, "the bootstrap replays the run with one σ, C and s")
        )
    privacy = {"non_private": True} if trace.noise_multiplier == 0 else {"noise_multiplier": trace.noise_multiplier}
    return privacy | {
        "delta": trace.delta,
        "steps": trace.steps,
        "sampling_rate": trace.sampling_rate,
        "clip": trace.clip,
        "grad_scale": tuple(np.asarray(trace.grad_scale, np.float64).tolist()),
        "learning_rate": tuple(np.asarray(trace.learning_rate, np.float64).tolist()),
        "init": tuple(np.asarray(trace.params[0], np.float64).tolist()),
        "mc_draws": trace.mc_draws,
        "family": trace.family.kind,
        "rank": trace.family.rank,
        "transforms": {site.name: site.transform for site in trace.sites},
        "sites": tuple(site.name for site in trace.sites),
        "allow_weak_privacy": True,  # the replicates re-run a released run's settings on simulated data
    }


def estimate(trace: Trace, burn_in: float = BURN_IN) -> np.ndarray:
    """θ̂ (d,): the mean of μ over the kept steps."""
    kept = kept_steps(trace, burn_in)
    return np.asarray(trace.params[trace.steps - kept :, : trace.dim], np.float64).mean(axis=0)


def bootstrap_posterior(
    trace: Trace, model: BenchmarkModel, *, key, replicates: int = 50, burn_in: float = BURN_IN
) -> DrawsPosterior:
    """The basic parametric bootstrap of `trace` (module doc): draws (1, B, d) of θ* = 2θ̂ − θ̂_b."""
    if model.n_examples != trace.n_examples:
        model = dataclasses.replace(model, n_examples=trace.n_examples)
    theta_hat = estimate(trace, burn_in)
    k_data, k_dpvi = jax.random.split(as_key(key))
    data = jax.vmap(lambda k: model.simulate_given(theta_hat, k))(jax.random.split(k_data, replicates))
    runs = record_dpvi_batch(model.model, data, keys=jax.random.split(k_dpvi, replicates), **replay_settings(trace))
    replicated = np.stack([estimate(run, burn_in) for run in runs])
    if not np.all(np.isfinite(replicated)):
        bad = int(np.sum(~np.all(np.isfinite(replicated), axis=1)))
        raise FitFailure(UNSUPPORTED, f"{bad} of {replicates} bootstrap runs diverged")
    return DrawsPosterior(
        chains=(2.0 * theta_hat - replicated)[None],
        method="bootstrap",
        sites=trace.sites,
        diagnostics=BootstrapDiagnostics(estimate=theta_hat, replicates=replicates),
    )
