"""Results as data: a value tree ⇄ JSON plus named arrays, rebuilt without running anything the file chose.

    tree, arrays = encode(value)      tree: JSON data (small numeric arrays inside it); arrays: {"a0": ndarray, …}
                                      (saved as .npz members)
    value = decode(tree, arrays)      the same value back (arrays bit for bit, floats exactly)

What can be encoded: None, bools, ints, floats (NaN and ±inf too), strings, lists, tuples, mappings (any keys
that are themselves encodable), numpy arrays and scalars (not object arrays), and the frozen dataclasses
registered with `data_type` (a fit's `Note`s among them) or as a `Diagnostics` kind. Decoding builds only those
types, named by the registry, from plain values: a file from a stranger can be read safely (nothing is
unpickled, no code it names is imported). Anything else raises TypeError when encoded, and a tree that names an
unknown type, or a node that encode does not write, raises `UndecodableData`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .diagnostics import Diagnostics, diagnostics_type
from .notes import Note

__all__ = ["UndecodableData", "data_type", "decode", "encode"]

INLINE = 64
"""Numeric arrays of at most this many elements are written inside the JSON tree (exactly), larger ones as named
arrays (.npz members): a task's result holds hundreds of small diagnostics arrays."""
_TYPES: dict[str, type] = {}


class UndecodableData(ValueError):
    """A stored tree that is not the data `encode` writes (an unknown type, a missing array, a malformed node)."""


def data_type[T: type](cls: T) -> T:
    """Class decorator: `cls` (a dataclass) may be encoded and rebuilt by its name (`decode`)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    _TYPES[cls.__qualname__] = cls
    return cls


data_type(Note)


def encode(value: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """JSON data and the arrays it refers to (module doc)."""
    arrays: dict[str, np.ndarray] = {}
    return _encode(value, arrays), arrays


def decode(tree: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """The value `encode` wrote as (tree, arrays); UndecodableData when the tree is not such data."""
    try:
        return _decode(tree, arrays)
    except (KeyError, TypeError, IndexError) as error:
        raise UndecodableData(f"not noiseaware result data: {type(error).__name__}: {error}") from None


def _encode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, Diagnostics):
        return {"$diagnostics": type(value).__name__, "fields": _encode(dict(value), arrays)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__qualname__
        if _TYPES.get(name) is not type(value):
            raise TypeError(f"{name} is not a registered data type (noiseaware.util.codec.data_type)")
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"$data": name, "fields": _encode(fields, arrays)}
    if isinstance(value, Mapping):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _encode(v, arrays) for k, v in value.items()}
        return {"$mapping": [[_encode(k, arrays), _encode(v, arrays)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"$tuple": [_encode(item, arrays) for item in value]}
    if isinstance(value, list):
        return [_encode(item, arrays) for item in value]
    if isinstance(value, np.ndarray) or hasattr(value, "__array__") and hasattr(value, "dtype"):
        array = np.asarray(value)
        if array.dtype.kind in "OV":
            raise TypeError(f"an array of {array.dtype} is not data")
        if array.size <= INLINE and array.dtype.kind in "biuf":  # exact: JSON floats round-trip every bit
            return {"$values": array.tolist(), "dtype": array.dtype.str, "shape": list(array.shape)}
        name = f"a{len(arrays)}"
        arrays[name] = array
        return {"$array": name}
    raise TypeError(f"cannot store a {type(value).__qualname__} as data")


def _decode(tree: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if isinstance(tree, list):
        return [_decode(item, arrays) for item in tree]
    if not isinstance(tree, dict):
        return tree
    if "$float" in tree:
        return float(tree["$float"])
    if "$array" in tree:
        return arrays[tree["$array"]]
    if "$values" in tree:
        dtype = np.dtype(tree["dtype"])
        if dtype.kind not in "biuf":
            raise UndecodableData(f"an inline array of {dtype}")
        return np.array(tree["$values"], dtype).reshape(tree["shape"])
    if "$tuple" in tree:
        return tuple(_decode(item, arrays) for item in tree["$tuple"])
    if "$mapping" in tree:
        return {_hashable(_decode(k, arrays)): _decode(v, arrays) for k, v in tree["$mapping"]}
    if "$diagnostics" in tree:
        cls = diagnostics_type(tree["$diagnostics"])
        if cls.__name__ != tree["$diagnostics"]:
            raise UndecodableData(f"unknown diagnostics type {tree['$diagnostics']!r} (import the plug-in defining it)")
        return cls(**_decode(tree["fields"], arrays))
    if "$data" in tree:
        cls = _TYPES.get(tree["$data"])
        if cls is None:
            raise UndecodableData(f"unknown data type {tree['$data']!r}")
        return cls(**_decode(tree["fields"], arrays))
    marked = [k for k in tree if isinstance(k, str) and k.startswith("$")]
    if marked:
        raise UndecodableData(f"unknown node {marked[0]!r}")  # encode writes such keys as a "$mapping"
    return {k: _decode(v, arrays) for k, v in tree.items()}


def _hashable(key: Any) -> Any:
    return tuple(_hashable(k) for k in key) if isinstance(key, (list, tuple)) else key
