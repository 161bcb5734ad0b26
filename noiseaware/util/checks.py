"""Argument validators shared by the package: each returns the checked value or raises one clear ValueError.

    positive_int    an integer ≥ minimum (1 by default)
    positive_float  a finite number > 0 (≥ 0 with allow_zero), at most `maximum` when given
    probability     a number in the open interval (0, 1)
    fraction        a number in the half-open interval [0, 1)
    flag            a bool (True or False, never 0 or 1)
    choice          one of the given options

A number is a Python or numpy scalar or a 0-d numpy or jax array; a bool is never a number. A failure names the
argument, what is allowed and what it got, then an optional hint with the fix:

    steps must be a positive integer, got steps=2.5; pass the number of DP-SGD steps as an int

(`choice` says "unknown NAME VALUE: choose one of …"). `error` swaps in a ValueError subclass, such as a
module's own error type (e.g. ModelError).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["choice", "flag", "fraction", "positive_float", "positive_int", "probability"]


def positive_int(
    name: str, value: Any, *, minimum: int = 1, hint: str = "", error: type[ValueError] = ValueError
) -> int:
    """`value` as an int, checked to be an integer ≥ `minimum` (an integral float such as 3.0 is not)."""
    if not (_is_number(value, integral=True) and value >= minimum):
        allowed = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer ≥ {minimum}")
        raise error(_message(name, value, allowed, hint))
    return int(value)


def positive_float(
    name: str,
    value: Any,
    *,
    maximum: float | None = None,
    allow_zero: bool = False,
    hint: str = "",
    error: type[ValueError] = ValueError,
) -> float:
    """`value` as a float, checked to lie in (0, maximum] (in [0, maximum] with `allow_zero`); maximum None
    means finite (∞ and nan are always rejected)."""
    number = _float(value)
    in_range = (number >= 0 if allow_zero else number > 0) and math.isfinite(number)
    if not (in_range and (maximum is None or number <= maximum)):
        lower = "non-negative" if allow_zero else "positive"
        upper = "finite" if maximum is None else f"at most {maximum:g}"
        raise error(_message(name, value, f"{lower} and {upper}", hint))
    return number


def probability(name: str, value: Any, *, hint: str = "", error: type[ValueError] = ValueError) -> float:
    """`value` as a float, checked to lie in the open interval (0, 1)."""
    number = _float(value)
    if not 0 < number < 1:
        raise error(_message(name, value, "a number in (0, 1)", hint))
    return number


def fraction(name: str, value: Any, *, hint: str = "", error: type[ValueError] = ValueError) -> float:
    """`value` as a float, checked to lie in the half-open interval [0, 1) (a share of something, such as a
    burn-in)."""
    number = _float(value)
    if not 0 <= number < 1:
        raise error(_message(name, value, "a number in [0, 1)", hint))
    return number


def flag(name: str, value: Any, *, hint: str = "", error: type[ValueError] = ValueError) -> bool:
    """`value` as a bool, checked to be True or False (a Python or numpy bool; 0, 1 and "yes" are not)."""
    if not isinstance(value, (bool, np.bool_)):
        raise error(_message(name, value, "True or False", hint))
    return bool(value)


def choice(name: str, value: Any, options: Sequence, *, hint: str = "", error: type[ValueError] = ValueError):
    """`value`, checked to be one of `options`; the message lists them: "unknown NAME VALUE: choose one of …"."""
    if value not in options:
        raise error(f"unknown {name} {value!r}: choose one of {', '.join(map(str, options))}" + _suffix(hint))
    return value


def _is_number(value: Any, *, integral: bool) -> bool:
    """Whether `value` is one integer (`integral`) or one real number: a Python or numpy scalar, or a 0-d numpy
    or jax array of an integer (or float) dtype; a bool is neither."""
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Integral if integral else numbers.Real):
        return True
    kinds = "iu" if integral else "iuf"
    return getattr(value, "ndim", None) == 0 and hasattr(value, "dtype") and np.dtype(value.dtype).kind in kinds


def _float(value: Any) -> float:
    """`value` as a float when it is one real number, else nan (which fails every range check)."""
    return float(value) if _is_number(value, integral=False) else math.nan


def _message(name: str, value: Any, allowed: str, hint: str) -> str:
    shown = value.item() if isinstance(value, np.generic) else value
    return f"{name} must be {allowed}, got {name}={shown!r}" + _suffix(hint)


def _suffix(hint: str) -> str:
    return f"; {hint}" if hint else ""
