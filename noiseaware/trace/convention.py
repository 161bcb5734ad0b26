"""How a DP-SGD library's released gradient relates to the noisy sum a trace holds (schema version 3).

A trace's grads are always G_t = Σ_{i ∈ B_t} clip(g_i) + ξ_t, ξ_t ~ N(0, σ²(bC)² I), the noisy sum of clipped
per-example contributions (b = 1 for per-example clipping). Libraries release G̃_t = G_t / D_t with their own
divisor D_t (the `normaliser`):

    sum                 D = 1                    noiseaware, jax-privacy with normalize_by=1
    expected-batch      D = q·N                  Opacus (loss_reduction="mean")
    realised-batch      D = B_t                  optax's aggregate (the leading dimension it is given, padding
                                                 included); jax-privacy's normalize_by
    microbatches        D = B_t / b              TF Privacy: b examples per microbatch, each microbatch's mean
                                                 gradient clipped to C and the noisy sum divided by their number
    population-scaled   D = q                    d3p: the sum scaled to the population, (N / (qN))·(Σ + ξ)

`to_sum` undoes the divisor (and, for microbatches, the mean inside each microbatch: G = b·D_t·G̃, whose noise sd
is σ·b·C). B_t must be public: a fixed-size or padded batch (sampling "fixed"). The realised size of a Poisson
sample is not DP-released (adding an example changes it), so a trace refuses B_t that vary under Poisson sampling.
Noise correlated across steps (BandMF, matrix factorisation) breaks the gradient model's independent noise and
is refused before any work (`Convention(noise="correlated")` cannot be built).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

__all__ = [
    "CLIPPING_UNITS",
    "Convention",
    "ConventionError",
    "NEIGHBOURING",
    "NORMALISERS",
    "SAMPLINGS",
    "divisors",
    "check_batch_sizes",
    "implied_normaliser",
    "normaliser_advice",
    "to_sum",
]

NORMALISERS = ("sum", "expected-batch", "realised-batch", "microbatches", "population-scaled")
CLIPPING_UNITS = ("example", "microbatch")
NEIGHBOURING = ("add-remove", "replace")
SAMPLINGS = ("poisson", "fixed")
_NEEDS_BATCH_SIZES = ("realised-batch", "microbatches")


class ConventionError(ValueError):
    """A convention that does not exist, does not fit the trace, or would put a private value in it."""


@dataclasses.dataclass(frozen=True)
class Convention:
    """normaliser: what the released gradient was divided by (module doc); clipping: "example" or "microbatch"
    (with microbatch_size b); neighbouring: "add-remove" or "replace" (the DP guarantee's relation); sampling:
    "poisson" or "fixed" (fixed-size or padded batches); noise: "iid" (the only kind a trace holds); producer:
    the library and version that released it, e.g. "optax 0.2.8" (None: unknown)."""

    normaliser: str = "sum"
    clipping: str = "example"
    microbatch_size: int | None = None
    neighbouring: str = "add-remove"
    sampling: str = "poisson"
    noise: str = "iid"
    producer: str | None = None
    batch_divisor: float | None = None

    def __post_init__(self):
        for name, allowed in (
            ("normaliser", NORMALISERS),
            ("clipping", CLIPPING_UNITS),
            ("neighbouring", NEIGHBOURING),
            ("sampling", SAMPLINGS),
        ):
            if getattr(self, name) not in allowed:
                raise ConventionError(f"{name} is {getattr(self, name)!r}; choose one of {', '.join(allowed)}")
        if self.noise != "iid":
            raise ConventionError(
                f"noise is {self.noise!r}: noise correlated across steps (BandMF, matrix factorisation) breaks the "
                "gradient model, which needs independent noise per step; record the run with i.i.d. Gaussian noise "
                "(jax-privacy's gaussian_privatizer)"
            )
        microbatched = self.clipping == "microbatch" or self.normaliser == "microbatches"
        if microbatched and not (
            self.clipping == "microbatch"
            and self.normaliser == "microbatches"
            and isinstance(self.microbatch_size, int)
            and self.microbatch_size >= 1
        ):
            raise ConventionError(
                "microbatch clipping goes with normaliser 'microbatches' and a microbatch_size b ≥ 1 (examples per "
                "microbatch), e.g. Convention(normaliser='microbatches', clipping='microbatch', microbatch_size=4)"
            )
        if not microbatched and self.microbatch_size is not None:
            raise ConventionError("microbatch_size is only for clipping='microbatch'")
        if self.batch_divisor is not None and not (
            self.normaliser == "expected-batch" and math.isfinite(self.batch_divisor) and self.batch_divisor > 0
        ):
            raise ConventionError("batch_divisor is a positive number, and only for normaliser 'expected-batch'")

    @property
    def clip_factor(self) -> int:
        """b: the sum's noise sd is σ·b·C (1 for per-example clipping)."""
        return self.microbatch_size or 1

    def needs_batch_sizes(self) -> bool:
        """Whether the divisor is the per-step batch size B_t."""
        return self.normaliser in _NEEDS_BATCH_SIZES


def check_batch_sizes(convention: Convention, batch_sizes, steps: int) -> np.ndarray | None:
    """B_t (T,) as a read-only int64 array, or None when the convention does not use them; ConventionError when
    they are missing, misshapen, not positive integers, or private (varying under Poisson sampling)."""
    if batch_sizes is None:
        if convention.needs_batch_sizes():
            raise ConventionError(
                f"normaliser {convention.normaliser!r} divides by the batch size B_t: pass batch_sizes (T,) "
                "(a constant for fixed-size or padded batches)"
            )
        return None
    if not convention.needs_batch_sizes():
        raise ConventionError(f"batch_sizes are only for the normalisers {', '.join(_NEEDS_BATCH_SIZES)}")
    sizes = np.broadcast_to(np.asarray(batch_sizes), (steps,)).copy()
    if sizes.dtype.kind not in "iuf" or np.any(sizes != np.round(sizes)) or np.any(sizes < 1):
        raise ConventionError("batch_sizes must be positive integers, one per step")
    sizes = sizes.astype(np.int64)
    if convention.sampling == "poisson" and np.unique(sizes).size > 1:
        raise ConventionError(
            "batch_sizes vary from step to step under Poisson sampling: the realised size of a Poisson sample is "
            "not DP-released (adding an example changes it), so it may not enter a trace; divide by the expected "
            "batch size q·N (normaliser 'expected-batch'), or sample fixed-size (or padded) batches "
            "(sampling='fixed')"
        )
    if convention.normaliser == "microbatches" and np.any(sizes % convention.clip_factor):
        raise ConventionError(f"batch_sizes must be multiples of the microbatch size {convention.clip_factor}")
    sizes.setflags(write=False)
    return sizes


def divisors(convention: Convention, batch_sizes, sampling_rate: float, n_examples: int, steps: int) -> np.ndarray:
    """D_t (T,): the released gradient is G_t / D_t (module doc)."""
    kind = convention.normaliser
    if kind == "sum":
        return np.ones(steps)
    if kind == "expected-batch":
        return np.full(steps, convention.batch_divisor or sampling_rate * n_examples)
    if kind == "population-scaled":
        return np.full(steps, sampling_rate)
    sizes = np.asarray(batch_sizes, np.float64)
    return sizes if kind == "realised-batch" else sizes / convention.clip_factor


def to_sum(grads: np.ndarray, convention: Convention, batch_sizes, sampling_rate: float, n_examples: int) -> np.ndarray:
    """The noisy sums G (T, P) from the released G̃ (T, P): b·D_t·G̃_t, in G̃'s dtype."""
    grads = np.asarray(grads)
    factor = convention.clip_factor * divisors(convention, batch_sizes, sampling_rate, n_examples, grads.shape[0])
    return (grads * factor[:, None]).astype(grads.dtype)


def implied_normaliser(
    ratio: float, convention: Convention, batch_sizes, sampling_rate: float, n_examples: int
) -> tuple[float, float, str | None] | None:
    """What the noise says the released gradients were divided by.

    ratio: the observed r²/ν² (residual variance of G over the DP noise variance). Had the producer divided by D'
    while the trace records D, G would be D/D' times the true sum, so r²/ν² ≈ (D/D')² and D' ≈ D/√ratio. Returns
    (D, D', the normaliser whose divisor is within a factor √1.5 of D', if any, and not the recorded one), or None
    when the ratio says nothing (not finite).
    """
    if not (math.isfinite(ratio) and ratio > 0):
        return None
    steps = 1 if batch_sizes is None else len(batch_sizes)
    claimed = float(np.mean(divisors(convention, batch_sizes, sampling_rate, n_examples, steps)))
    implied = claimed / math.sqrt(ratio)
    candidates = {"sum": 1.0, "expected-batch": sampling_rate * n_examples, "population-scaled": sampling_rate}
    if batch_sizes is not None:
        candidates["realised-batch"] = float(np.mean(batch_sizes))
    kind, divisor = min(candidates.items(), key=lambda item: abs(math.log(item[1] / implied)))
    matches = abs(math.log(divisor / implied)) <= 0.5 * math.log(1.5) and kind != convention.normaliser
    return claimed, implied, kind if matches else None


def normaliser_advice(ratio: float, settings, batch_sizes, *, small: bool) -> str | None:
    """The noise checks' advice for a run with `settings` (a `RunSettings`) and released batch sizes (or None) at the
    observed r²/ν²: the normaliser the data match; when the noise is too small (`small`) and none matches, σ or C 2×
    too large (r²/ν² ≈ 1/4) or the divisor the data imply; None when there is nothing to add."""
    implied = implied_normaliser(ratio, settings.convention, batch_sizes, settings.sampling_rate, settings.n_examples)
    if implied is None:
        return None
    claimed, divisor, kind = implied
    if kind is not None:
        return (
            f"r²/ν² ≈ {ratio:.3g}: the released grads look divided by {divisor:.4g} ({kind}), not by the recorded "
            f"{settings.convention.normaliser} divisor {claimed:.4g}; load them with "
            f"convention=Convention(normaliser={kind!r})"
        )
    if not small:
        return None
    if 0.15 < ratio < 0.4:
        return "r²/ν² ≈ 1/4: σ or C may be recorded 2× too large"
    return (
        f"r²/ν² ≈ {ratio:.3g}: the released grads look divided by ≈ {divisor:.4g}, not the recorded {claimed:.4g} "
        "— a padded or realised batch size (normaliser 'realised-batch' with batch_sizes), microbatches, or σ, C "
        "recorded too large"
    )
