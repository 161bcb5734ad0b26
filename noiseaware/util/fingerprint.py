"""Fingerprints: a stable name for everything that determines a computation (a study's tasks are named by it).

    canonical(value)  → plain JSON data, the same in every process and session for equal inputs
    fingerprint(value) = sha256(json(canonical(value)))[:16]

What each value becomes:

* None, bools, ints, strings: themselves; floats every bit (repr); lists and tuples lists; mappings sorted dicts;
* arrays: dtype, shape and values (large ones the sha256 of their bytes); PRNG keys are refused (pass key_data);
* dataclasses (frozen settings and options, models, data sets) and named tuples: type and fields (those that take
  part in equality: a data set's `source`, how it was read, does not);
* functions: their qualified name, with their defaults and closure values, and, for code outside installed
  packages (a plug-in, a notebook's model), the hash of their byte code and of the globals they read, so a
  changed body or a changed constant is a new fingerprint; a global that is a module outside installed packages
  (`import myconsts` … `myconsts.SHAPE`) adds the values of its attributes that the code names, so a changed
  constant in another file of the user's is a new fingerprint too; code of an installed package is named with
  the package's version, and noiseaware's own code by the digest of its source (`source_digest`);
* classes: their qualified name (and, outside installed packages, their methods as functions and their other
  class attributes, e.g. `Config.SHAPE`, as values; a dataclass also its fields with their types and defaults,
  and only the methods written in its body, not those `dataclass` generates from the fields, whose closures hold
  bookkeeping such as `__repr__`'s recursion guard);
* an object with a `__fingerprint__()` method: what it returns (e.g. a Method with a declared `version`).

Anything else raises `Unfingerprintable`, naming where in the value it sits and what to do: a cache or a
resumable study is only as good as its key, so nothing is ever named by its type alone.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import inspect
import json
import sys
import sysconfig
import types
from collections.abc import Mapping
from functools import cache
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path
from typing import Any

import numpy as np

from .errors import UserError

__all__ = ["Unfingerprintable", "canonical", "fingerprint", "source_digest"]

LARGE = 10_000
"""Arrays with more elements are named by the sha256 of their bytes (a data set), smaller ones by their values."""
OWN = "noiseaware"


class Unfingerprintable(TypeError, UserError):
    """A value whose identity cannot be written down: give it as data, or declare its identity (a user error: the
    command line prints its message, which names where the value sits and what to pass instead)."""


def canonical(value: Any) -> Any:
    """Plain JSON data standing for `value` (module doc): equal inputs give equal data in any process."""
    return _Canonical().of(value, "value")


def fingerprint(value: Any) -> str:
    """16 hex digits of sha256 over the canonical JSON of `value`."""
    return digest(canonical(value))[:16]


def digest(data: Any) -> str:
    """The sha256 (hex) of plain JSON data, written with sorted keys and no spaces."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@cache
def source_digest() -> str:
    """noiseaware's version and the sha256 of its source files (every .py under the package, by relative path):
    any change to the code that computes a result changes the name of that result."""
    root = Path(__file__).resolve().parents[1]
    hasher = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        hasher.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{version(OWN)}+{hasher.hexdigest()[:16]}"


class _Canonical:
    """One walk of a value; `seen` breaks the cycles of recursive functions and mutually referring globals."""

    def __init__(self):
        self.seen: set[int] = set()

    def of(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, enum.Enum):
            return f"{_name(type(value))}.{value.name}"
        if hasattr(value, "__fingerprint__") and not isinstance(value, type):
            return {"type": _name(type(value)), "identity": self.of(value.__fingerprint__(), where)}
        if isinstance(value, Mapping):
            items = sorted(value.items(), key=lambda kv: str(kv[0]))
            return {str(key): self.of(item, f"{where}[{key!r}]") for key, item in items}
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple: its type and fields
            return {"type": _name(type(value)), "fields": self.of(value._asdict(), where)}
        if isinstance(value, (list, tuple)):
            return [self.of(item, f"{where}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, (np.generic, np.ndarray)) or hasattr(value, "__array__") and hasattr(value, "dtype"):
            return _array(value, where)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.compare}
            return {"type": _name(type(value)), "fields": self.of(fields, where)}
        if isinstance(value, functools.partial):
            parts = {"function": value.func, "args": value.args, "keywords": value.keywords}
            return {"partial": self.of(parts, where)}
        if isinstance(value, types.MethodType):
            return {"method": self.of(value.__func__, where), "of": self.of(value.__self__, where)}
        if isinstance(value, types.FunctionType):
            return self._function(value, where)
        if hasattr(value, "__wrapped__") and callable(value):  # jax.jit, functools.wraps
            return {"wrapping": self.of(value.__wrapped__, where)}
        if isinstance(value, type):
            return self._class(value, where)
        if isinstance(value, (types.BuiltinFunctionType, np.ufunc)):
            return f"{getattr(value, '__module__', None) or 'builtins'}:{value.__name__}"
        if isinstance(value, types.ModuleType):
            return {"module": value.__name__, "origin": _origin(value.__name__)}
        raise Unfingerprintable(
            f"{where}: cannot fingerprint a {_name(type(value))}, so a study could not tell two of them apart; give "
            "it as data (numbers, strings, arrays, frozen dataclasses, e.g. na.Optimizer('adam', learning_rate=…) "
            "for an optax optimizer), or give it a __fingerprint__() method (a Method: its version)"
        )

    def _function(self, function: types.FunctionType, where: str) -> Any:
        """Name, origin, defaults and closure values; for code outside installed packages also its byte code and
        the globals it reads."""
        name = f"{function.__module__}:{function.__qualname__}"
        if id(function) in self.seen:
            return {"function": name, "recursive": True}
        self.seen.add(id(function))
        try:
            origin = _origin(function.__module__)
            closure = {
                variable: _cell(cell)
                for variable, cell in zip(function.__code__.co_freevars, function.__closure__ or ())
            }
            out = {
                "function": name,
                "origin": origin,
                "defaults": self.of(function.__defaults__ or (), f"{where} ({name} defaults)"),
                "kwdefaults": self.of(function.__kwdefaults__ or {}, f"{where} ({name} defaults)"),
                "closure": self.of(closure, f"{where} ({name} closure)"),
            }
            if origin == "code":
                out["code"] = _code(function.__code__)
                names = _global_names(function.__code__)
                read = sorted(names & set(function.__globals__))
                out["globals"] = {
                    variable: self._global(function.__globals__[variable], names, f"{where} ({name} reads {variable})")
                    for variable in read
                }
            return out
        finally:
            self.seen.discard(id(function))

    def _global(self, value: Any, names: set[str], where: str) -> Any:
        """A global a function reads: a module outside installed packages with the values of its attributes
        among `names` (what the code may read as `module.NAME`), anything else as itself."""
        if not isinstance(value, types.ModuleType) or _origin(value.__name__) != "code":
            return self.of(value, where)
        if id(value) in self.seen:
            return {"module": value.__name__, "recursive": True}
        self.seen.add(id(value))
        try:
            attributes = {
                attribute: self._global(getattr(value, attribute), names, f"{where}.{attribute}")
                for attribute in sorted(names & set(vars(value)))
            }
            return {"module": value.__name__, "origin": "code", "attributes": attributes}
        finally:
            self.seen.discard(id(value))

    def _tolerant(self, value: Any, where: str) -> Any:
        """`value` as a class attribute, which the code may never read; one that cannot be fingerprinted (e.g. a
        cache) by its type, so that it does not stop the whole study. A module attribute the code names is
        fingerprinted like any global (`_global`): refused when it cannot be."""
        try:
            return self.of(value, where)
        except Unfingerprintable:
            return {"unfingerprintable": _name(type(value))}

    def _class(self, cls: type, where: str) -> Any:
        name = _name(cls)
        origin = _origin(cls.__module__)
        if origin != "code" or id(cls) in self.seen:
            return {"class": name, "origin": origin}
        self.seen.add(id(cls))
        try:
            members = {
                key: member
                for key, member in vars(cls).items()
                if isinstance(member, (types.FunctionType, staticmethod, classmethod, property))
                and not _generated(cls, key, member)
            }
            bodies = {key: self.of(_unwrap(member), f"{where} ({name}.{key})") for key, member in members.items()}
            constants = {
                key: self._tolerant(value, f"{where} ({name}.{key})")
                for key, value in vars(cls).items()
                if key not in members
                and not (key.startswith("__") and key.endswith("__"))
                and not isinstance(value, (types.FunctionType, staticmethod, classmethod, property))
            }
            out = {"class": name, "origin": origin, "bases": [_name(b) for b in cls.__bases__], "members": bodies}
            out["attributes"] = constants
            if dataclasses.is_dataclass(cls):
                out["fields"] = {f.name: self._field(f, f"{where} ({name}.{f.name})") for f in dataclasses.fields(cls)}
            return out
        finally:
            self.seen.discard(id(cls))

    def _field(self, field: dataclasses.Field, where: str) -> dict[str, Any]:
        """A dataclass field as data: its annotation (as written), default or default factory, and flags."""
        out = {"type": field.type if isinstance(field.type, str) else repr(field.type), "compare": field.compare}
        if field.default is not dataclasses.MISSING:
            out["default"] = self.of(field.default, where)
        if field.default_factory is not dataclasses.MISSING:
            out["default_factory"] = self.of(field.default_factory, where)
        return out


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


GENERATED = frozenset(
    (
        "__init__",
        "__repr__",
        "__eq__",
        "__hash__",
        "__setattr__",
        "__delattr__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__getstate__",
        "__setstate__",
        "__replace__",
    )
)
"""The methods `dataclasses.dataclass` may write into a class: named by the class's fields, not by their code."""


def _generated(cls: type, key: str, member) -> bool:
    """Whether `member` of `cls` is one `dataclass` generated (its code compiled from a string), not the user's."""
    if key not in GENERATED or not dataclasses.is_dataclass(cls):
        return False
    code = getattr(inspect.unwrap(_unwrap(member)), "__code__", None)
    return code is not None and code.co_filename == "<string>"


def _unwrap(member):
    """The function behind a staticmethod, classmethod or property (its getter)."""
    if isinstance(member, property):
        return member.fget
    return getattr(member, "__func__", member)


def _array(value, where: str) -> dict[str, Any]:
    array = np.asarray(value)
    if array.dtype.kind in "OV" or str(array.dtype).startswith("key"):
        raise Unfingerprintable(
            f"{where}: an array of {array.dtype} (pass PRNG keys as their key_data, objects as data)"
        )
    if array.size > LARGE:
        digest_ = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
        return {"dtype": str(array.dtype), "shape": list(array.shape), "sha256": digest_}
    return {"dtype": str(array.dtype), "shape": list(array.shape), "values": array.tolist()}


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a closure variable not yet bound
        return None


def _code(code: types.CodeType) -> str:
    """sha256 of a code object's byte code, names and constants (nested functions' code included)."""
    hasher = hashlib.sha256(code.co_code)
    hasher.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_argcount)).encode())
    for constant in code.co_consts:
        hasher.update(_code(constant).encode() if isinstance(constant, types.CodeType) else repr(constant).encode())
    return hasher.hexdigest()[:16]


def _global_names(code: types.CodeType) -> set[str]:
    """The names a code object (and the functions it defines) may read from its globals."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _global_names(constant)
    return names


@cache
def _origin(module: str | None) -> str:
    """Where code comes from: "noiseaware <version+source digest>", "<distribution> <version>" for an installed
    package (site-packages or the standard library), or "code" for anything else (hashed by its byte code)."""
    top = (module or "").partition(".")[0]
    if top == OWN:
        return f"{OWN} {source_digest()}"
    if top in sys.stdlib_module_names or top == "builtins":
        return f"python {sys.version.split()[0]}"
    loaded = sys.modules.get(top)
    path = getattr(loaded, "__file__", None)
    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    if path and any(parent in installed for parent in Path(path).resolve().parents):
        for distribution in packages_distributions().get(top, [top]):
            try:
                return f"{distribution} {version(distribution)}"
            except PackageNotFoundError:
                continue
    return "code"
