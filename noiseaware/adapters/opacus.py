"""Opacus: record a `DPOptimizer` run as a trace, through its step hook (importable without torch).

Opacus's `DPOptimizer.pre_step` clips each per-sample gradient to `max_grad_norm`, sums them, adds
N(0, σ²C²) noise (`add_noise`), and with loss_reduction="mean" divides by expected_batch_size ×
accumulated_iterations; then it calls `optimizer.step_hook(optimizer)`, after which the wrapped optimizer steps. In
the hook, p.data is θ_t and p.grad the released G̃_t. `PrivacyEngine.make_private` puts its accountant's hook in that
one slot, so `OpacusRecorder` chains: it calls the hook it found first, then records. It reads p.data and p.grad
only, never `summed_grad`, `grad_sample` or per-sample norms.

The settings are read as each step's noise is drawn (the recorder wraps `add_noise`): σ_t = noise_multiplier and
C_t = max_grad_norm. They change from step to step under adaptive clipping (`make_private(..., clipping="adaptive")`,
`AdaClipDPOptimizer`, which in recent releases moves C after the noise and before the hook, so the hook alone would
see C_{t+1}) and under a noise or clip scheduler (`opacus.schedulers`); the trace keeps them per step. Adaptive
clipping also releases each step a noisy count of the examples left unclipped, noise sd `fraction_std`
(`unclipped_num_std` in older releases; read when the optimizer has it, or given as count_noise_multiplier):
`trace(delta=δ)` accounts it with the gradient (`privacy.combined_noise_multiplier`).

    recorder = OpacusRecorder(optimizer)       # after make_private
    ... train ...
    trace = recorder.trace(n_examples=len(dataset), delta=1e-5)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..privacy import combined_noise_multiplier, epsilon_spent_per_step
from ..trace import Convention, Trace
from ..util.checks import positive_int
from .recorder import producer, unscaled

__all__ = ["OpacusRecorder", "as_numpy"]

LOSS_REDUCTIONS = ("mean", "sum")
COUNT_NOISE = ("fraction_std", "unclipped_num_std")
"""AdaClipDPOptimizer's noise sd of the unclipped count, by its name in newer and in older Opacus releases."""


def as_numpy(value) -> np.ndarray:
    """A torch tensor (detached, on the CPU) or an array as a numpy array."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.array(value, copy=True)


def _number(value) -> float:
    """A Python float of a number or a 0-d tensor (Opacus keeps an adaptive max_grad_norm as a tensor); nan when it
    is not one number."""
    try:
        return float(as_numpy(value))
    except (TypeError, ValueError):
        return math.nan


class OpacusRecorder:
    """Records θ_t, the released G̃_t and the step's σ_t, C_t (and the clipped count's noise sd, under adaptive
    clipping) of every step of an Opacus `DPOptimizer` (module doc).

    The parameters are those of its param groups that require gradients, flattened in order. The optimizer's
    loss_reduction and expected_batch_size are checked now; accumulated_iterations is read at each step (Opacus
    knows it only while the per-sample gradients exist).
    """

    def __init__(self, optimizer: Any):
        for name in ("noise_multiplier", "max_grad_norm", "expected_batch_size", "loss_reduction", "param_groups"):
            if not hasattr(optimizer, name):
                raise TypeError(
                    f"{type(optimizer).__name__} has no {name!r}: pass the DPOptimizer that "
                    "PrivacyEngine.make_private returned"
                )
        _divisor(optimizer, 1.0)  # an unusable expected_batch_size or loss_reduction fails before training
        self.optimizer = optimizer
        self.previous: Callable | None = getattr(optimizer, "step_hook", None)
        self.params: list[np.ndarray] = []
        self.grads: list[np.ndarray] = []
        self.settings: list[tuple[float, float, float, float]] = []
        self._drawn: tuple[float, float, float, float] | None = None
        optimizer.step_hook = self._hook
        if callable(getattr(optimizer, "add_noise", None)):
            add_noise = optimizer.add_noise
            optimizer.add_noise = lambda *args, **kwargs: self._before_noise(add_noise, *args, **kwargs)

    def _parameters(self) -> list:
        return [p for group in self.optimizer.param_groups for p in group["params"] if p.requires_grad]

    def _now(self) -> tuple[float, float, float, float]:
        """(σ, C, the clipped count's noise sd or nan, accumulated_iterations) as the optimizer holds them now."""
        optimizer = self.optimizer
        count = next((getattr(optimizer, name) for name in COUNT_NOISE if hasattr(optimizer, name)), None)
        try:
            accumulated = _number(getattr(optimizer, "accumulated_iterations", 1))
        except (AttributeError, TypeError, ValueError):  # Opacus's property fails without per-sample gradients
            accumulated = math.nan
        return _number(optimizer.noise_multiplier), _number(optimizer.max_grad_norm), _number(count), accumulated

    def _before_noise(self, add_noise: Callable, *args, **kwargs):
        self._drawn = self._now()
        return add_noise(*args, **kwargs)

    def _hook(self, optimizer) -> None:
        if self.previous is not None:
            self.previous(optimizer)
        parameters = self._parameters()
        missing = [k for k, p in enumerate(parameters) if p.grad is None]
        if missing:
            raise ValueError(
                f"at step {len(self.params)} the parameters {missing} (in param_groups order, those that require "
                "gradients) have no p.grad: freeze them (requires_grad=False) before make_private, or use them in "
                "the loss"
            )
        self.params.append(np.concatenate([as_numpy(p.data).ravel() for p in parameters]))
        self.grads.append(np.concatenate([as_numpy(p.grad).ravel() for p in parameters]))
        self.settings.append(self._drawn if self._drawn is not None else self._now())
        self._drawn = None

    def _accumulated(self) -> float:
        """accumulated_iterations of the recorded steps (1 before any); a ValueError when it changed or is unknown."""
        values = {setting[3] for setting in self.settings} or {1.0}
        if len(values) > 1 or not all(math.isfinite(value) and value >= 1 for value in values):
            raise ValueError(
                f"the optimizer's accumulated_iterations was {sorted(values)} over the recorded steps; the trace needs "
                "one number of accumulated batches per step for the whole run"
            )
        return values.pop()

    def convention(self) -> Convention:
        """ "expected-batch" with Opacus's divisor (expected_batch_size × accumulated_iterations) for
        loss_reduction="mean"; "sum" otherwise."""
        version = producer("opacus")
        divisor = _divisor(self.optimizer, self._accumulated())
        if divisor is not None:
            return Convention(normaliser="expected-batch", batch_divisor=divisor, producer=version)
        return Convention(producer=version)

    def trace(
        self,
        *,
        n_examples: int,
        sampling_rate: float | None = None,
        grad_scale=None,
        final_params=None,
        count_noise_multiplier=None,
        public_noise_schedule: bool = False,
        **fields,
    ) -> Trace:
        """The recorded steps as a trace, with σ_t and C_t per step where they changed.

        n_examples N: the size of the training set (len(data_loader.dataset)); sampling_rate q (default:
        expected_batch_size × accumulated_iterations / N, Opacus's Poisson rate); grad_scale s: the run optimised
        φ' = φ ⊘ s (`recorder.unscaled`); final_params φ'_T (flat). count_noise_multiplier σ_b (scalar or (T,)): the
        noise sd of adaptive clipping's unclipped count where the optimizer does not hold it as fraction_std.
        public_noise_schedule: say that a noise_multiplier that changed between steps followed a public schedule
        (an `opacus.schedulers` noise scheduler); without it a changing σ_t is refused, since Opacus's
        PrivacyEngineAdaptiveClipping sets it from the realised size of each Poisson batch, which is not DP-released.
        With delta and no epsilon in fields, ε is accounted here (PLD, Poisson rate q, add/remove): each step as one
        Gaussian of σ_t, combined with the count's σ_b under adaptive clipping (`privacy`). fields: any other
        `Trace.from_arrays` keyword (learning_rate, epsilon, delta, sites …)."""
        if not self.params:
            raise ValueError("no step was recorded: create the recorder before training, after make_private")
        n_examples = positive_int(
            "n_examples", n_examples, hint="the size of the training set, len(data_loader.dataset)"
        )
        sigma, clip, count, _ = (np.array(column) for column in zip(*self.settings))
        _check_settings(sigma, clip)
        if np.unique(sigma).size > 1 and not public_noise_schedule:
            raise ValueError(
                f"the optimizer's noise_multiplier changed between steps ({sigma.min():.4g} … {sigma.max():.4g}); a "
                "noise scheduler (opacus.schedulers) follows a public schedule: pass public_noise_schedule=True. "
                "Opacus's PrivacyEngineAdaptiveClipping sets it from the realised size of each Poisson batch, which "
                "is not DP-released and may not enter a trace: sample fixed-size batches, or use "
                "make_private(..., clipping='adaptive')"
            )
        if count_noise_multiplier is not None:
            count = np.asarray(count_noise_multiplier, np.float64)
            if count.shape not in ((), sigma.shape):
                raise ValueError(
                    f"count_noise_multiplier has shape {count.shape}; give one number, or one per recorded step "
                    f"({sigma.size})"
                )
            count = np.broadcast_to(count, sigma.shape)
        expected = _number(self.optimizer.expected_batch_size) * self._accumulated()
        rate = sampling_rate if sampling_rate is not None else expected / n_examples
        if sampling_rate is None and not 0 < rate <= 1:
            raise ValueError(
                f"the expected batch size {expected:g} (expected_batch_size × accumulated_iterations) is not in "
                f"(0, n_examples = {n_examples}]: n_examples is the size of the training set, len(data_loader.dataset)"
                "; or pass sampling_rate="
            )
        if "epsilon" not in fields and fields.get("delta") is not None:
            fields |= {"epsilon": _accounted_epsilon(sigma, clip, count, fields["delta"], rate), "accountant": "pld"}
        final = None if final_params is None else np.asarray(final_params)
        params, grads, final = unscaled(np.stack(self.params), np.stack(self.grads), final, grad_scale)
        return Trace.from_arrays(
            params,
            grads,
            noise_multiplier=sigma,
            clip=clip,
            sampling_rate=rate,
            n_examples=n_examples,
            convention=self.convention(),
            grad_scale=1.0 if grad_scale is None else grad_scale,
            final_params=final,
            **fields,
        )


def _divisor(optimizer, accumulated: float) -> float | None:
    """Opacus's divisor expected_batch_size × accumulated_iterations for loss_reduction="mean", None for "sum"; a
    ValueError in Opacus's words when either is unusable."""
    reduction = optimizer.loss_reduction
    if reduction not in LOSS_REDUCTIONS:
        raise ValueError(f"the optimizer's loss_reduction is {reduction!r}; Opacus takes 'mean' or 'sum'")
    if reduction == "sum":
        return None
    size = _number(optimizer.expected_batch_size)
    if not (math.isfinite(size) and size > 0):
        raise ValueError(
            f"the optimizer's expected_batch_size is {optimizer.expected_batch_size!r}; with loss_reduction='mean' "
            "Opacus divides the noisy sum by it (× accumulated_iterations): pass make_private a data loader with a "
            "batch size ≥ 1, or expected_batch_size to the DPOptimizer"
        )
    return size * accumulated


def _check_settings(sigma: np.ndarray, clip: np.ndarray) -> None:
    """A ValueError in Opacus's words for a step whose noise_multiplier or max_grad_norm is not a usable number."""
    for name, values, allowed in (("noise_multiplier", sigma, sigma >= 0), ("max_grad_norm", clip, clip > 0)):
        bad = np.flatnonzero(~(np.isfinite(values) & allowed))
        if bad.size:
            raise ValueError(
                f"the optimizer's {name} was {values[bad[0]]} at step {bad[0]}; it must be a finite number "
                f"({'≥ 0' if name == 'noise_multiplier' else '> 0'}) at every step: check the scheduler or the "
                "adaptive clipping bounds (min_clipbound > 0)"
            )


def _accounted_epsilon(sigma: np.ndarray, clip: np.ndarray, count: np.ndarray, delta, rate: float) -> float:
    """ε of the run (`OpacusRecorder.trace`): σ_t per step, combined with the count's σ_b,t where the count's noise is
    known; a ValueError when C_t moved and it is not (the count that moved C would go unaccounted)."""
    if np.all(np.isfinite(count)):
        return epsilon_spent_per_step(combined_noise_multiplier(sigma, count), delta, rate)
    if np.unique(clip).size > 1:
        raise ValueError(
            "the clip norm max_grad_norm changed between steps (adaptive clipping), so every step also released "
            "the noisy count of unclipped examples that moved it; pass count_noise_multiplier= its noise sd "
            "(AdaClipDPOptimizer's fraction_std, unclipped_num_std in older Opacus; batch_size / 20 for "
            "PrivacyEngineAdaptiveClipping) to account "
            "it, or epsilon= from your own accountant"
        )
    return epsilon_spent_per_step(sigma, delta, rate)
