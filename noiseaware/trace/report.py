"""A run's text report: its settings, then one row per θ coordinate comparing the noisy gradients with the DP noise
(`Trace.describe`, `WindowedTrace.describe`). The trace checks' verdicts are their own report (`noiseaware.checks`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..util.tables import text_table
from .data import BURN_IN
from .files import SCHEMA, written_version
from .validation import TraceError

if TYPE_CHECKING:
    from .data import TraceData

__all__ = ["KeptColumns", "description", "short_description"]


class KeptColumns(NamedTuple):
    """What a windowed trace gives the table in place of the trace's rows: the mean of μ (d,) and the sd of G (P,)
    over the kept steps, the last row φ (P,) where φ_T is unknown, the share of the steps kept and T."""

    mean_mu: np.ndarray
    grad_sd: np.ndarray
    last_row: np.ndarray
    kept: float
    steps: int


def description(trace: TraceData, kept: KeptColumns | None = None, title: str | None = None) -> str:
    """The text of `Trace.describe`: the settings lines, a blank line, the per-coordinate table. kept: the columns
    a windowed trace's sums give (`KeptColumns`; `trace` is then its sample), else they come from the trace's rows
    after the default burn-in. title: the first line (default: the trace's schema)."""
    steps = trace.steps if kept is None else kept.steps
    return "\n".join([*_settings_lines(trace, title, steps), "", _coordinate_table(trace, kept, steps)])


def short_description(trace: TraceData) -> str:
    """`repr(trace)`: TraceData(T steps, d, privacy, N, sites) in one line."""
    privacy = "non-private" if trace.epsilon == math.inf else f"ε = {_fmt(trace.epsilon)}"
    sites = ", ".join(s.name if s.shape == () else f"{s.name}{list(s.shape)}" for s in trace.sites or ()) or "unknown"
    return (
        f"Trace(T = {trace.steps} steps, d = {trace.dim}, {privacy}, σ = {_sigma(trace)}, "
        f"N = {trace.n_examples}, sites: {sites})"
    )


def _fmt(value) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, float):
        return "∞" if value == math.inf else f"{value:.4g}"
    return str(value)


def _range(values: np.ndarray | None, constant=None) -> str:
    """min … max of `values`, "per step" when they are a setting's per-step values; `constant` when they are None."""
    if values is None:
        return "unknown" if constant is None else _range(np.asarray(constant))
    low, high = float(values.min()), float(values.max())
    shown = _fmt(low) if low == high else f"{_fmt(low)} … {_fmt(high)}"
    return shown if constant is None else f"{shown} (varies per step)"


def _sigma(trace: TraceData) -> str:
    """σ, or the range of σ_t when it varies per step."""
    return _range(trace.step_noise_multipliers, trace.noise_multiplier)


def _clip_count(trace: TraceData) -> str:
    """Whether the run released its counts of clipped examples, with their noise sd σ_b (the clipping check's input)."""
    if trace.count_noise_multiplier is None:
        return "not released (the clipping check cannot run; record with clip_count_share=0.01)"
    return f"released each step, noise sd σ_b = {_fmt(trace.count_noise_multiplier)} (the clipping check reads it)"


def _settings_lines(trace: TraceData, title: str | None, steps: int) -> list[str]:
    privacy = "non-private (σ = 0)" if trace.epsilon == math.inf else f"ε = {_fmt(trace.epsilon)}"
    sites = trace.sites or ()
    rows = [
        ("privacy", f"{privacy}, δ = {_fmt(trace.delta)}, accountant {_fmt(trace.accountant)}"),
        ("DP-SGD", f"σ = {_sigma(trace)}, C = {_range(trace.step_clips, trace.clip)}, q = {_fmt(trace.sampling_rate)}"),
        ("clip count", _clip_count(trace)),
        ("size", f"N = {trace.n_examples}, T = {steps}, S = {_fmt(trace.mc_draws)}"),
        ("optimizer", f"{_fmt(trace.optimizer)}, learning rate λ {_range(trace.learning_rate)}"),
        ("grad scale", f"s {_range(trace.step_grad_scales, trace.grad_scale)}"),
        ("family", f"{trace.variational_family}, d = {trace.dim}, P = {trace.n_params}"),
        ("sites", ", ".join(f"{s.name}{list(s.shape)} {s.transform}" for s in sites) or "unknown"),
    ]
    width = max(len(label) for label, _ in rows)
    title = title or f"noiseaware trace (schema {SCHEMA} v{written_version(trace)})"
    return [title] + [f"  {label:<{width}}  {text}" for label, text in rows]


def _coordinate_table(trace: TraceData, kept, steps: int) -> str:
    """One row per θ coordinate j: final μ_j and sd_j = sqrt(Σ_jj) (softplus(ρ_j) for mean-field; none for a point
    estimate), post-burn-in mean of μ_j, and the sd of G vs σC/s."""
    try:
        final, source = trace.final_iterate(), "φ_T"
    except TraceError:
        final, source = (trace.params[-1] if kept is None else kept.last_row), "φ_(T-1), φ_T unknown"
    d, start = trace.dim, int(BURN_IN * steps)
    noise_sd, final_sd = trace.mean_noise_sd(start), trace.family.marginal_sd(np.asarray(final, float))
    if kept is None:
        kept = KeptColumns(
            trace.params[start:, :d].mean(axis=0), trace.grads[start:].std(axis=0), None, 1 - BURN_IN, steps
        )
    mean_mu, grad_sd = kept.mean_mu, kept.grad_sd
    header = ("θ (unconstrained)", f"μ at {source}", "sd of q", f"mean μ last {kept.kept:.0%}", "sd G_μ", "noise sd_μ")
    columns = (final[:d], final_sd, mean_mu, grad_sd[:d], noise_sd[:d])
    if trace.family.kind == "point":  # a point estimate: no q to have an sd, no ρ rows
        header, columns = header[:2] + header[3:], columns[:1] + columns[2:]
    else:
        header += ("sd G_ρ", "noise sd_ρ")
        columns += (grad_sd[d : 2 * d], noise_sd[d : 2 * d])
    rows = [
        (label.removeprefix("mu:"), *(f"{float(column[j]):.4g}" for column in columns))
        for j, label in enumerate(trace.param_names[:d])
    ]
    return text_table(header, rows)
