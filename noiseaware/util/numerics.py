"""Numerically stable elementary functions on float64 numpy arrays."""

from __future__ import annotations

import numpy as np

__all__ = ["sigmoid", "softplus", "softplus_inverse"]


def softplus_inverse(a) -> np.ndarray:
    """softplus⁻¹(a) = log(expm1(a)), computed as a + log(−expm1(−a)): exact for large a, accurate for tiny a.

    a: any shape, > 0 (a ≤ 0 has no inverse: 0 gives −inf, a < 0 nan); returns float64 of the same shape.
    """
    a = np.asarray(a, dtype=np.float64)
    return a + np.log(-np.expm1(-a))


def softplus(x) -> np.ndarray:
    """softplus(x) = log(1 + eˣ), as logaddexp(0, x): no overflow for large x."""
    return np.logaddexp(0.0, np.asarray(x, dtype=np.float64))


def sigmoid(x) -> np.ndarray:
    """sigmoid(x) = 1/(1 + e⁻ˣ), as ½(1 + tanh(x/2)): no overflow for large |x|."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))
