"""Fingerprints: a stable name for everything that determines a computation (a study's tasks are named by it).

    canonical(value)  → plain JSON data, the same in every process and session for equal inputs
    fingerprint(value) = sha256(json(canonical(value)))[:16]

Floats keep every bit (repr); arrays become their dtype, shape and values (large ones the sha256 of their
bytes); functions and classes their module-qualified names; dataclasses their type and fields; anything else
its repr, unless that repr holds a memory address (`<… at 0x…>`), which would change from run to run: such a
value is named by its type.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import types
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["canonical", "fingerprint"]

LARGE = 10_000
"""Arrays with more elements are named by the sha256 of their bytes (a data set), smaller ones by their values."""
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def canonical(value: Any) -> Any:
    """Plain JSON data standing for `value` (module doc): equal inputs give equal data in any process."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Mapping):
        return {str(key): canonical(item) for key, item in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    if isinstance(value, (np.generic, np.ndarray)) or hasattr(value, "__array__") and hasattr(value, "dtype"):
        array = np.asarray(value)
        if array.dtype.kind == "V" or str(array.dtype).startswith("key"):
            raise TypeError("canonical: pass PRNG keys as their key_data")
        if array.size > LARGE:
            digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
            return {"dtype": str(array.dtype), "shape": list(array.shape), "sha256": digest}
        return {"dtype": str(array.dtype), "shape": list(array.shape), "values": array.tolist()}
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return f"{value.__module__}:{value.__qualname__}"
    if dataclasses.is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"type": f"{type(value).__module__}:{type(value).__qualname__}", "fields": canonical(fields)}
    text = repr(value)
    return f"{type(value).__module__}:{type(value).__qualname__}" if ADDRESS.search(text) else text


def fingerprint(value: Any) -> str:
    """16 hex digits of sha256 over the canonical JSON of `value`."""
    text = json.dumps(canonical(value), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
