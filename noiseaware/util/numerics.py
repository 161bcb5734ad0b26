"""Numerically stable elementary functions on float64 numpy arrays."""

from __future__ import annotations

import numpy as np

__all__ = ["softplus_inverse"]


def softplus_inverse(a) -> np.ndarray:
    """softplus⁻¹(a) = log(expm1(a)), computed as a + log(−expm1(−a)): exact for large a, accurate for tiny a.

    a: any shape, > 0 (a ≤ 0 has no inverse: 0 gives −inf, a < 0 nan); returns float64 of the same shape.
    """
    a = np.asarray(a, dtype=np.float64)
    return a + np.log(-np.expm1(-a))
