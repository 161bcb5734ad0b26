"""Trace: the released output of DP variational inference.

A trace is T aligned pairs (φ_t, G_t) plus the DP-SGD settings, where φ_t ∈ R^P (μ, ρ and, beyond
mean-field, the factor entries: `families`) is read before
step t and G_t = (Σ_{i ∈ B_t} clip_C(s ⊙ ∇ℓ_i(φ_t)) + ξ_t) ⊘ s, ξ_t ~ N(0, σ²C² I_P), is the noisy
sum of clipped per-example gradients of the negative ELBO (docs/method.md §1); plain SGD is
φ_{t+1} = φ_t − λ ⊙ G_t.

The fields, validated, and what follows from them alone are `TraceData` (`data`); `Trace` adds the behaviour,
which lives in the modules below and takes a `TraceData`, so none of them imports this module.

Only DP-released values (iterates, noisy gradients, settings) may enter a trace. Files are `.npz` or
`.nc` (netCDF4 via h5netcdf), never pickled; docs/trace-format.md describes the schema. The fields are
checked in `validation`, read and written in `files`, described in `report`.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from ..privacy import ACCOUNTANTS, PrivacyWarning, combined_noise_multiplier, epsilon_spent_per_step
from ..util.deprecation import warn_renamed
from .convention import Convention, to_sum
from .data import TraceData
from .files import read_trace, write_trace
from .report import description, short_description
from .sites import SiteMap, SiteSpec
from .validation import VARIATIONAL_FAMILIES, TraceError

__all__ = ["Trace"]


class Trace(TraceData):
    """The released output of DPVI (the fields and what follows from them: `TraceData`) with its behaviour:
    `describe()`, `save()`, `Trace.load`, `Trace.from_arrays`. Its checks are `na.diagnose(trace)`, its figure
    `noiseaware.plots.plot_trace(trace)`. Equality is identity."""

    def describe(self) -> str:
        """A readable multi-line report: the settings, then per θ coordinate the final μ and sd, the post-burn-in
        mean of μ and the sd of G over the last 80 % next to the DP noise sd σC/s. The trace checks' verdicts
        per coordinate and their findings are `print(na.diagnose(trace))`."""
        return description(self)

    def summary(self) -> str:
        """Deprecated: `describe()` (a posterior's `summary` is its table; a trace's report is `describe`)."""
        warn_renamed("Trace.summary()", "Trace.describe()")
        return self.describe()

    def __repr__(self) -> str:
        """A short description (steps, dimension, privacy, sites), not the arrays."""
        return short_description(self)

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> None:
        """Write the trace to `path` (.nc or .npz) atomically: a failed write leaves the target untouched; an
        existing file is replaced only with `overwrite=True`."""
        write_trace(self, path, overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Trace:
        """Read and validate a trace file (.nc or .npz); nothing is ever unpickled. A stated ε below what the
        run's sampling scheme spent is relabelled, with a warning (`as_spent`)."""
        return as_spent(read_trace(path, cls))

    @classmethod
    def from_arrays(
        cls,
        params,
        grads,
        *,
        noise_multiplier,
        clip,
        sampling_rate: float,
        n_examples: int,
        grad_scale=1.0,
        learning_rate=None,
        final_params=None,
        epsilon: float | None = None,
        delta: float | None = None,
        param_names: Sequence[str] | None = None,
        sites: Sequence[SiteSpec] | None = None,
        labels: Mapping[str, Sequence[str]] | None = None,
        accountant: str | None = None,
        mc_draws: int | None = None,
        optimizer: str | None = None,
        variational_family: str = VARIATIONAL_FAMILIES[0],
        reduction: str | None = None,
        convention: Convention | None = None,
        batch_sizes=None,
        clipped_counts=None,
        count_noise_multiplier: float | None = None,
        run_steps: int | None = None,
    ) -> Trace:
        """A trace from any other DP-SGD implementation (PyTorch/Opacus, d3p, TensorFlow).

        params, grads (T, P) as lists or float32/float64 arrays (kept as given; other dtypes are refused).
        convention: how the producer normalised the grads it released (`noiseaware.trace.Convention`: the
        normaliser, clipping unit, neighbouring relation, sampling, producer); the grads are converted to noisy
        sums G_t = b·D_t·G̃_t (`convention.to_sum`) and the convention is kept in the trace. batch_sizes (T,), or
        a constant: B_t, for the normalisers that divide by it ("realised-batch": optax's aggregate, which
        divides by the leading dimension it is given, padding included; "microbatches"). reduction is the older
        shorthand: "sum" (the default convention) or "mean" (normaliser "expected-batch", Opacus with
        loss_reduction="mean"); give one of reduction and convention. The adapters in `noiseaware.adapters`
        record a library's run with its convention filled in (docs/adapters.md). A given learning_rate with
        optimizer=None records optimizer="sgd", since
        per-coordinate step sizes describe plain SGD. variational_family: the family's trace name, e.g.
        "full-rank-normal-softplus" with params (μ, ρ, ℓ) (docs/trace-format.md lays out each family). labels
        {site name: one label per element} name the elements of `sites` (e.g. {"theta": feature_names}); they
        are the data schema, released with the trace.
        noise_multiplier σ and clip C take a scalar, or one value per step (T,) when the run changed them (adaptive
        clipping, a noise schedule); grad_scale takes a scalar, (P,), or (T, P) for a scale that changed every step
        (jax-privacy's scale_then_privatize). Per-step values that are all equal are kept as the scalar; values that
        vary are kept as step_noise_multipliers, step_clips, step_grad_scales (and the gradient model refuses them).
        clipped_counts (T,) and count_noise_multiplier σ_b: each step's released count of clipped examples and its
        noise sd (sensitivity 1), for the clipping check (docs/diagnostics.md); give both or neither.
        run_steps: the steps the run took where the rows are a sample of them (a windowed trace's; default: the
        rows), over which a stated ε is checked against the run's sampling scheme (`as_spent`).
        """
        convention = _convention(reduction, convention)
        steps = np.shape(params)[0] if np.ndim(params) == 2 else None
        noise_multiplier, step_noise_multipliers = _per_step("noise_multiplier", noise_multiplier, 1, steps)
        clip, step_clips = _per_step("clip", clip, 1, steps)
        grad_scale, step_grad_scales = _per_step("grad_scale", grad_scale, 2, steps)
        if step_grad_scales is not None and step_grad_scales.shape[1:] != np.shape(params)[1:]:
            raise TraceError(
                f"grad_scale has shape {step_grad_scales.shape}; a scale per step needs shape (T, P) = "
                f"{np.shape(params)}, one row per step"
            )
        if learning_rate is not None and optimizer is None:
            optimizer = "sgd"
        if labels is not None:
            sites = _labelled(sites, labels)
        trace = cls(
            params,
            grads,
            noise_multiplier=noise_multiplier,
            clip=clip,
            sampling_rate=sampling_rate,
            n_examples=n_examples,
            grad_scale=grad_scale,
            learning_rate=learning_rate,
            final_params=final_params,
            epsilon=epsilon,
            delta=delta,
            accountant=accountant,
            mc_draws=mc_draws,
            optimizer=optimizer,
            variational_family=variational_family,
            param_names=param_names,
            sites=sites,
            convention=convention,
            batch_sizes=batch_sizes,
            step_noise_multipliers=step_noise_multipliers,
            step_clips=step_clips,
            step_grad_scales=step_grad_scales,
            clipped_counts=clipped_counts,
            count_noise_multiplier=count_noise_multiplier,
        )
        trace = as_spent(trace, run_steps)
        if convention.normaliser == "sum" and convention.clip_factor == 1:
            return trace
        sums = to_sum(trace.grads, convention, trace.batch_sizes, trace.sampling_rate, trace.n_examples)
        return replace(trace, grads=sums)


def as_spent(trace: Trace, run_steps: int | None = None) -> Trace:
    """The trace, with the ε its sampling scheme spent where it states less, recomputed from its own settings: σ_t
    (with the released clipped count's σ_b, `combined_noise_multiplier`), δ, q, N and T = `run_steps` (default: the
    trace's rows). A trace's own accountant label is not taken on trust (a file may come from someone else).

    * Fixed-size batches (`Convention(sampling="fixed")`: B = q·N drawn without replacement each step, replace-one):
      the fixed-size accountant's ε; a Poisson accountant's would be several times too small. Where it exceeds the
      stated ε the trace is relabelled (epsilon, accountant "rdp-fixed"); a stated ε that matches it, with no
      accountant named, is labelled "rdp-fixed".
    * Poisson batches with one σ for the run: the PLD accountant's ε (the recorder's own); where it exceeds the
      stated ε by more than POISSON_SLACK the trace is relabelled (epsilon, accountant "pld"). A σ that varies per
      step (each distinct value costs the accountant about a second) is kept as stated.

    Each relabelling warns (PrivacyWarning) naming both numbers. Traces without ε and δ, and microbatch clipping,
    are kept."""
    convention = trace.convention
    if convention.clip_factor != 1 or trace.epsilon is None or trace.delta is None or not math.isfinite(trace.epsilon):
        return trace
    sigmas = trace.step_noise_multipliers
    steps = trace.params.shape[0] if run_steps is None else run_steps
    fixed = convention.sampling == "fixed"
    if not fixed and sigmas is not None and np.unique(sigmas).size > 1:
        return trace
    sigmas = np.full(steps, trace.noise_multiplier) if sigmas is None else np.asarray(sigmas, np.float64)
    if trace.count_noise_multiplier is not None:
        sigmas = combined_noise_multiplier(sigmas, trace.count_noise_multiplier)
    try:
        spent = epsilon_spent_per_step(
            sigmas, trace.delta, trace.sampling_rate, sampling=convention.sampling, dataset_size=trace.n_examples
        )
    except ValueError as error:
        raise TraceError(f"the trace declares {convention.sampling} batches, but {error}") from None
    accountant = ACCOUNTANTS[convention.sampling]
    if spent <= trace.epsilon * (1 + (1e-3 if fixed else POISSON_SLACK)):
        matches = fixed and trace.accountant is None and spent >= trace.epsilon * 0.98  # σ to 0.5 %: ε to ~1 %
        return replace(trace, accountant=accountant) if matches else trace
    if fixed:
        batch = round(trace.sampling_rate * trace.n_examples)
        scheme = (
            f"drew fixed-size batches (sampling='fixed', B = {batch} of N = {trace.n_examples} without replacement "
            "each step, replace-one neighbours)"
        )
        hint = (
            "as a Poisson accountant's ε would be. The trace now states the larger ε; to spend the smaller one, "
            "calibrate σ for the run's scheme: na.noise_multiplier(ε, δ, q, T, sampling='fixed', dataset_size=N)"
        )
    else:
        scheme = f"drew Poisson batches (q = {trace.sampling_rate:g}, add/remove neighbours)"
        hint = (
            "as no accountant's bound would be. The trace now states the larger ε; check the run's σ, q and T (a mean "
            "gradient recorded as a sum, or "
            "steps left out of the trace, changes them), or calibrate σ with na.noise_multiplier(ε, δ, q, T)"
        )
    warnings.warn(
        f"privacy relabelled: the run {scheme}, which spend ε = {spent:.3g} at δ = {trace.delta:g} with σ = "
        f"{trace.noise_multiplier:.4g} over T = {steps} steps; the stated ε = {trace.epsilon:.3g} "
        f"({trace.accountant or 'accountant not named'}) is below that, {hint}",
        PrivacyWarning,
        stacklevel=3,
    )
    return replace(trace, epsilon=spent, accountant=accountant)


POISSON_SLACK = 0.01
"""How far a Poisson trace's stated ε may fall below the PLD accountant's before it is relabelled: σ is calibrated
to 0.5 %, and another accountant's upper bound (RDP's, Opacus's) is larger, never smaller."""


def _per_step(name: str, value, ndim: int, steps: int | None) -> tuple:
    """(the first step's value, the per-step values or None) of a setting given as a constant or per step (an array
    with `ndim` dimensions whose first counts the steps); TraceError for per-step values that are not one per step."""
    if value is None or np.ndim(value) != ndim:
        return value, None
    values = np.asarray(value) if hasattr(value, "dtype") else np.asarray(value, np.float64)
    if steps is not None and values.shape[0] != steps:
        raise TraceError(
            f"{name} has {values.shape[0]} per-step values but the trace has T = {steps} steps; give one per step "
            f"(or a single {name} for the whole run)"
        )
    if values.shape[0] == 0:
        raise TraceError(f"{name} has no per-step values; give one per step, or a single {name} for the whole run")
    return values[0], values


def _convention(reduction: str | None, convention: Convention | None) -> Convention:
    """The convention from `convention`, or from the older `reduction` ("sum", "mean"); TraceError for both or a
    reduction that does not exist."""
    if reduction is not None and convention is not None:
        raise TraceError("give reduction or convention, not both: convention=Convention(normaliser=...) says it all")
    if convention is not None:
        return convention
    normalisers = {None: "sum", "sum": "sum", "mean": "expected-batch"}
    if reduction not in normalisers:
        raise TraceError(
            f"reduction={reduction!r} is not supported: use 'sum' when grads are the noisy sum of clipped "
            "per-example gradients, 'mean' when they were divided by the expected batch size q·N, or "
            "convention=Convention(...) for any other normaliser"
        )
    return Convention(normaliser=normalisers[reduction])


def _labelled(sites: Sequence[SiteSpec] | None, labels: Mapping[str, Sequence[str]]) -> tuple | None:
    """`sites` with `labels` attached; TraceError when there are no sites or the labels do not fit them."""
    if sites is None:
        raise TraceError("labels name the elements of the sites: pass sites=[SiteSpec(...), ...] too")
    sites = tuple(sites)
    if not all(isinstance(site, SiteSpec) for site in sites):
        return sites  # the constructor names the entry that is not a SiteSpec
    try:
        return SiteMap(sites).with_labels(labels).sites
    except ValueError as error:
        raise TraceError(str(error)) from None
