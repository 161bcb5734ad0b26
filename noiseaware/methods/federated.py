"""DP-PVI over clients (Heikkilä et al., TMLR 2023; seed 004), plain and noise-aware, as methods that read the data.

Each problem's N examples are split over M clients (`baselines.pvi.split_clients`). Every client runs DPVI on its
shard at the run's (ε, δ) with the model's DPVI settings, all P·M runs in one vmapped program; the shards are
disjoint, so each example's privacy is (ε, δ) (parallel composition), and only the clients' traces are released.
The server combines the clients' mean-field answers by one round of parallel PVI, q = p Π_m (q_m / p):

    dp-pvi      q_m from each client's last iterate φ_T (the published DP-PVI, unaware of the DP noise);
    na-dp-pvi   each client's trace fitted by the exact route (the noise-aware posterior of its optimum φ*_m); the
                clients' fits are independent (their data and DP noise are), so joint draws pair the clients'
                k-th draws; each joint draw combines to one component of the mixture posterior. A joint draw
                whose combined precision is not positive cannot be the truth and is dropped (counted).

Problem p's key: split into (DPVI, fit); client m's run uses split_keys(DPVI key, M)[m], its fit split_keys(fit key,
M)[m] (`methods.base.split_keys`: one client uses the key itself).
With one client, q = q₁: dp-pvi is the naive posterior and na-dp-pvi the exact route of DPVI on the whole data.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from ..baselines.pvi import combine, prior_gaussian, split_clients
from ..models.benchmark import BenchmarkModel
from ..posteriors.mixture import PVI, MixturePosterior
from ..recording.dpvi import record_dpvi_batch
from ..trace import Trace
from ..trace.families import MEAN_FIELD
from ..util.checks import positive_float, positive_int
from ..util.diagnostics import Diagnostics
from ..util.errors import FitFailure
from ..util.numerics import softplus_inverse
from .base import Batch, Method, Outcome, split_keys
from .fit_loop import fit_each
from .routes import EXACT

__all__ = ["DP_PVI", "NA_DP_PVI", "PVIDiagnostics", "PVIOptions", "check_clients", "client_traces"]

NO_PRECISION = "no positive combined precision"
MAX_DROPPED = 0.5
"""na-dp-pvi fails a problem when more than this fraction of its joint draws has no positive precision."""


@dataclasses.dataclass(frozen=True)
class PVIOptions:
    """clients M (dividing N, with q·N/M ≥ 1: `check_clients`); epsilon: the ε each client spends instead of the
    batch's (a run given by σ)."""

    clients: int = 4
    epsilon: float | None = None

    def __post_init__(self):
        positive_int("clients", self.clients, hint="the number of clients the data are split over, e.g. clients=4")
        if self.epsilon is not None:
            positive_float("epsilon", self.epsilon, hint="the ε each client spends, e.g. epsilon=1.0")

    def check_model(self, bm: BenchmarkModel) -> None:
        """A ValueError, before any work, unless the clients split `bm`'s N examples as `check_clients` asks."""
        check_clients(self.clients, bm.n_examples, bm.dpvi_settings.get("sampling_rate"))


def check_clients(clients: int, n_examples: int, sampling_rate: float | None) -> None:
    """A ValueError, before any client runs, unless M clients split N examples into equal shards of N/M on which
    DPVI's expected batch q·N/M holds at least one example (below it the clients' runs release noise only)."""
    if clients > n_examples:
        raise ValueError(
            f"clients={clients} is more than the N = {n_examples} examples of each data set: every client needs a "
            f"shard of its own; choose clients dividing {n_examples}, e.g. clients=4"
        )
    if n_examples % clients:
        divisors = [m for m in range(1, min(n_examples, 64) + 1) if n_examples % m == 0]
        raise ValueError(
            f"clients={clients} does not divide the N = {n_examples} examples into equal shards: choose one of "
            f"{', '.join(map(str, divisors))}{', …' if n_examples > 64 else ''}"
        )
    if sampling_rate is not None and sampling_rate * n_examples / clients < 1.0:
        raise ValueError(
            f"clients={clients} leaves each client {n_examples // clients} example(s), and DPVI's sampling rate "
            f"q = {sampling_rate:g} then draws an expected batch of {sampling_rate * n_examples / clients:.2g} "
            f"examples per step: its runs would release DP noise only; choose at most "
            f"{math.floor(sampling_rate * n_examples)} clients"
        )


@dataclasses.dataclass(frozen=True)
class PVIDiagnostics(Diagnostics):
    """clients M; dropped: joint draws without a positive combined precision; client_steps T of each client's run."""

    clients: int
    dropped: int
    client_steps: int

    def describe(self, posterior) -> list[str]:
        draws = len(posterior.optimum_draws)
        text = f"{self.clients} clients' factors combined, {draws} component(s)"
        return [text + (f"; {self.dropped} joint draws without a positive precision dropped" if self.dropped else "")]


def client_traces(bm: BenchmarkModel, data, keys, *, clients: int, epsilon: float, delta: float) -> list[Trace]:
    """The P·M clients' DPVI traces (problem p's client m at p·M + m) of P data sets (P, N, …), keys (P,)."""
    shards = split_clients(data, clients)
    client_keys = np.concatenate([np.asarray(jax.random.key_data(split_keys(k, clients))) for k in keys])
    return record_dpvi_batch(
        bm.model,
        shards,
        keys=jax.random.wrap_key_data(client_keys),
        settings=bm.dpvi_settings,
        epsilon=epsilon,
        delta=delta,
    )


def _run(method: Method, batch: Batch, keys, opts: PVIOptions, combine_clients) -> list[Outcome]:
    """Both methods: check, split the data, run the clients, then combine_clients(traces of one problem, fit key)."""
    epsilon = batch.epsilon if opts.epsilon is None else opts.epsilon
    if batch.model is None or batch.data is None:
        raise ValueError("DP-PVI runs on a model's data sets; this batch has no model or no data")
    method.check(batch.model.name, epsilon)
    data = batch.data_sets()
    n_examples = next(iter(jax.tree.leaves(data))).shape[1]
    check_clients(opts.clients, n_examples, batch.model.dpvi_settings.get("sampling_rate"))
    split = [jax.random.split(k) for k in keys]
    traces = client_traces(
        batch.model, data, [s[0] for s in split], clients=opts.clients, epsilon=epsilon, delta=batch.delta
    )
    if traces[0].variational_family != MEAN_FIELD:
        raise ValueError(
            f"DP-PVI combines mean-field factors; the model's DPVI settings use {traces[0].variational_family}"
        )
    prior = prior_gaussian(batch.model)
    m = opts.clients
    return [combine_clients(traces[p * m : (p + 1) * m], split[p][1], prior) for p in range(len(batch))]


def _posterior(traces, combined: np.ndarray, method: str, dropped: int) -> MixturePosterior:
    """The mixture over combined φ = (mean, softplus⁻¹(sd)) (K, 2d), labelled by the first client's trace."""
    first = traces[0]
    return MixturePosterior(
        kind=PVI,
        optimum_chains=combined[None],
        hessian_chains=None,
        extra_noise_chains=None,
        method=method,
        param_names=first.param_names,
        sites=first.sites,
        diagnostics=PVIDiagnostics(clients=len(traces), dropped=dropped, client_steps=first.steps),
        info={"epsilon": first.epsilon, "delta": first.delta, "clients": len(traces)},
    )


def _as_params(mean: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """φ = (μ, ρ) with softplus(ρ) = √variance: (…, 2d)."""
    return np.concatenate([mean, softplus_inverse(np.sqrt(variance))], axis=-1)


def _moments(traces, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean-field factors' means and variances (…, d) from their φ (…, P), by the traces' family."""
    family = traces[0].family
    return family.mean(phi), family.marginal_sd(phi) ** 2


def _plain(traces, key, prior) -> Outcome:
    del key
    means, variances = _moments(traces, np.stack([t.final_iterate() for t in traces]).astype(np.float64))
    mean, variance, ok = combine(*prior, means, variances)
    if not ok:
        return FitFailure(NO_PRECISION, "the clients' last iterates combine to no positive precision")
    return _posterior(traces, _as_params(mean, variance)[None], "dp-pvi", 0)


def _noise_aware(traces, key, prior) -> Outcome:
    # the one fit loop: a client whose iterates ran away is refused, a fit that is not finite is a failure
    fits, _ = fit_each(EXACT, Batch(tuple(traces)), split_keys(key, len(traces)), EXACT.make_options(), checks="warn")
    failed = [f for f in fits if isinstance(f, FitFailure)]
    if failed:
        return failed[0]
    draws = min(f.optimum_draws.shape[0] for f in fits)
    optimum = np.stack([f.optimum_draws[:draws] for f in fits], axis=1)  # (K, M, P)
    means, variances = _moments(traces, optimum)
    mean, variance, ok = combine(*prior, means, variances)
    dropped = int(np.sum(~ok))
    if dropped > MAX_DROPPED * draws:
        return FitFailure(
            NO_PRECISION, f"{dropped} of {draws} joint draws of the clients' optima have no positive precision"
        )
    return _posterior(traces, _as_params(mean[ok], variance[ok]), "na-dp-pvi", dropped)


def _method(name: str, combine_clients, description: str) -> Method:
    def fit_batch(batch: Batch, keys, opts: PVIOptions) -> list[Outcome]:
        return _run(method, batch, keys, opts, combine_clients)

    method = Method(name, fit_batch, PVIOptions, "data", needs_epsilon=True, description=description, version="1")
    return method


DP_PVI = _method(
    "dp-pvi",
    _plain,
    "DP-PVI (Heikkilä et al. 2023): clients' DPVI last iterates combined by one round of parallel PVI",
)
NA_DP_PVI = _method(
    "na-dp-pvi",
    _noise_aware,
    "noise-aware DP-PVI: each client's trace fitted by the exact route, the clients' factors combined per joint draw",
)
