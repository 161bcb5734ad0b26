"""Opacus: record a `DPOptimizer` run as a trace, through its step hook (importable without torch).

Opacus's `DPOptimizer.pre_step` clips each per-sample gradient to `max_grad_norm`, sums them, adds
N(0, σ²C²) noise, and with loss_reduction="mean" divides by expected_batch_size × accumulated_iterations; then it
calls `optimizer.step_hook(optimizer)`, after which the wrapped optimizer steps. In the hook, p.data is θ_t and
p.grad the released G̃_t. `PrivacyEngine.make_private` puts its accountant's hook in that one slot, so
`OpacusRecorder` chains: it calls the hook it found first, then records. It reads p.data and p.grad only, never
`summed_grad`, `grad_sample` or per-sample norms.

    recorder = OpacusRecorder(optimizer)       # after make_private
    ... train ...
    trace = recorder.trace(n_examples=len(dataset))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..trace import Convention, Trace
from .recorder import producer, unscaled

__all__ = ["OpacusRecorder", "as_numpy"]


def as_numpy(value) -> np.ndarray:
    """A torch tensor (detached, on the CPU) or an array as a numpy array."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.array(value, copy=True)


class OpacusRecorder:
    """Records θ_t and the released G̃_t of every step of an Opacus `DPOptimizer` (module doc).

    The optimizer's settings (noise_multiplier σ, max_grad_norm C, expected_batch_size, loss_reduction,
    accumulated_iterations) are read when the trace is made; the parameters are those of its param groups that
    require gradients, flattened in order.
    """

    def __init__(self, optimizer: Any):
        for name in ("noise_multiplier", "max_grad_norm", "expected_batch_size", "loss_reduction", "param_groups"):
            if not hasattr(optimizer, name):
                raise TypeError(
                    f"{type(optimizer).__name__} has no {name!r}: pass the DPOptimizer that "
                    "PrivacyEngine.make_private returned"
                )
        self.optimizer = optimizer
        self.previous: Callable | None = getattr(optimizer, "step_hook", None)
        self.params: list[np.ndarray] = []
        self.grads: list[np.ndarray] = []
        optimizer.step_hook = self._hook

    def _parameters(self) -> list:
        return [p for group in self.optimizer.param_groups for p in group["params"] if p.requires_grad]

    def _hook(self, optimizer) -> None:
        if self.previous is not None:
            self.previous(optimizer)
        parameters = self._parameters()
        self.params.append(np.concatenate([as_numpy(p.data).ravel() for p in parameters]))
        self.grads.append(np.concatenate([as_numpy(p.grad).ravel() for p in parameters]))

    def convention(self) -> Convention:
        """ "expected-batch" with Opacus's divisor (expected_batch_size × accumulated_iterations) for
        loss_reduction="mean"; "sum" otherwise."""
        version = producer("opacus")
        if self.optimizer.loss_reduction == "mean":
            divisor = float(self.optimizer.expected_batch_size) * float(
                getattr(self.optimizer, "accumulated_iterations", 1)
            )
            return Convention(normaliser="expected-batch", batch_divisor=divisor, producer=version)
        return Convention(producer=version)

    def trace(
        self, *, n_examples: int, sampling_rate: float | None = None, grad_scale=None, final_params=None, **fields
    ) -> Trace:
        """The recorded steps as a trace. n_examples N; sampling_rate q (default: expected_batch_size / N, Opacus's
        Poisson rate); grad_scale s: the run optimised φ' = φ ⊘ s (`recorder.unscaled`); final_params φ'_T (flat);
        fields: any other `Trace.from_arrays` keyword (learning_rate, epsilon, delta, sites …)."""
        if not self.params:
            raise ValueError("no step was recorded: create the recorder before training, after make_private")
        rate = sampling_rate if sampling_rate is not None else float(self.optimizer.expected_batch_size) / n_examples
        final = None if final_params is None else np.asarray(final_params)
        params, grads, final = unscaled(np.stack(self.params), np.stack(self.grads), final, grad_scale)
        return Trace.from_arrays(
            params,
            grads,
            noise_multiplier=float(self.optimizer.noise_multiplier),
            clip=float(self.optimizer.max_grad_norm),
            sampling_rate=rate,
            n_examples=n_examples,
            convention=self.convention(),
            grad_scale=1.0 if grad_scale is None else grad_scale,
            final_params=final,
            **fields,
        )
