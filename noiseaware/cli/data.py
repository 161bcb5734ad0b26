"""Data files for `noiseaware record --data`: keyword arrays for a model from a .npz or a .csv.

A .npz holds arrays by keyword. A .csv names its columns in the header row; indexed columns `X[0]`, `X[1]`, …
(or `X.0`, `X.1`, …) are stacked in index order into one 2-D array `X` (N, k), without gaps in the numbering.
Given a built-in model, each array's per-example shape is checked against the data the model simulates (a
CSV short of `X[2]` for a model of 3 features is an error, not a 2-feature fit).
"""

from __future__ import annotations

import csv
import re
import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import jax
import numpy as np

from ..models import BenchmarkModel
from ..recording.contract import ModelError, inspect_model

__all__ = ["DataError", "check_shapes", "load_data", "read_csv", "read_npz"]

DATA_SUFFIXES = (".csv", ".npz")

_INDEXED_COLUMN = re.compile(r"^(?P<name>[A-Za-z_]\w*)(?:\[(?P<bracket>\d+)\]|\.(?P<dot>\d+))$")
_INTEGER = re.compile(r"^[+-]?\d+$")


class DataError(ValueError):
    """A data file that cannot be read into keyword arrays for a model."""


def load_data(path: str | Path, model: BenchmarkModel | None = None) -> dict[str, np.ndarray]:
    """Keyword arrays for a model from a .npz (arrays by name) or a .csv (see `read_csv`).

    model: a built-in (or any BenchmarkModel) the data are for; each array's shape is then checked against the
    model's own (`check_shapes`).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in DATA_SUFFIXES:
        raise DataError(f"--data {path}: a data file ends in .csv or .npz")
    if not path.is_file():
        raise DataError(f"--data {path}: no such file")
    data = read_csv(path) if suffix == ".csv" else read_npz(path)
    if model is not None:
        check_shapes(path, data, model)
    return data


def check_shapes(path: Path, data: Mapping[str, np.ndarray], model: BenchmarkModel) -> None:
    """A DataError for an array whose per-example shape (after the example axis) differs from that of the data
    `model` simulates: it names the array, both shapes, the latent sites it would resize and, for a matrix short
    of columns, the missing columns."""
    _, simulated = jax.eval_shape(model.simulate, jax.random.key(0))
    for name, expected in simulated.items():
        if name not in data:
            continue  # a missing keyword is the model contract's error
        want, got = tuple(expected.shape[1:]), np.shape(data[name])[1:]
        if got == want:
            continue
        if len(got) == len(want) == 1:
            columns = [f"{name}[{j}]" for j in range(min(got[0], want[0]), max(got[0], want[0]))]
            fix = f"the data lack {', '.join(columns)}" if got < want else f"drop {', '.join(columns)}"
            problem = f"{name} has {got[0]} columns but model {model.name} expects {want[0]}"
        else:
            fix = f"pass {name} with examples of shape {want}"
            problem = f"{name} has examples of shape {got} but model {model.name} expects {want}"
        raise DataError(f"{path}: {problem}{_resized_sites(model, data)}: {fix}")


def _resized_sites(model: BenchmarkModel, data: Mapping[str, np.ndarray]) -> str:
    """' (its site theta has shape (3,), not (2,))' for the latent sites these data would resize, where the model
    runs on them."""
    try:
        traced = {site.name: site.shape for site in inspect_model(model.model, data).site_map.sites}
    except ModelError:
        return ""
    changed = [
        f"{site.name} has shape {site.shape}, not {traced[site.name]}"
        for site in model.site_map.sites
        if traced.get(site.name, site.shape) != site.shape
    ]
    return f" (its site {'; site '.join(changed)})" if changed else ""


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a .npz archive by name (never unpickled); a DataError for an empty, truncated or damaged
    file, a single array, an archive without arrays or object arrays."""
    save = "save a dict of arrays with np.savez(path, x=..., y=...)"
    if path.stat().st_size == 0:
        raise DataError(f"{path} is empty (0 bytes): {save}")
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        # numpy's ValueError offers to unpickle the file: never; say what it is not instead
        detail = "not a zip archive of .npy arrays" if isinstance(error, ValueError) else str(error)
        raise DataError(f"{path} is not a readable .npz archive ({detail}): {save}") from error
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise DataError(f"{path} holds a single array; {save}")
    with archive:
        if not archive.files:
            raise DataError(f"{path} holds no arrays; {save}")
        try:
            return {name: archive[name] for name in archive.files}
        except ValueError as error:
            raise DataError(f"{path}: {error} (save numeric arrays, not object arrays)") from error
        except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
            raise DataError(f"{path} is damaged, its arrays cannot be read ({error}): {save}") from error


def read_csv(path: Path) -> dict[str, np.ndarray]:
    """Columns of a CSV file as arrays named by its header row.

    Integer-looking columns become int arrays, others float. Columns `X[0]`, `X[1]`, … (or `X.0`, `X.1`, …)
    are stacked in index order into one 2-D array `X` (N, k).
    """
    with open(path, newline="", encoding="utf-8-sig") as file:  # utf-8-sig: drop a spreadsheet's BOM
        lines = [(line, row) for line, row in _rows(path, csv.reader(file)) if row]
    if not lines:
        raise DataError(f"{path} is empty; the first row must name the columns")
    header = [name.strip() for name in lines[0][1]]
    body = lines[1:]
    if not body:
        raise DataError(f"{path} has a header but no data rows")
    for line, row in body:
        if len(row) != len(header):
            raise DataError(f"{path}, line {line}: {len(row)} field(s), but the header names {len(header)} columns")
    columns = {
        name: _parse_column(path, name, [(line, row[j]) for line, row in body])
        for j, name in enumerate(_check_header(path, header))
    }
    return _stack_indexed(path, columns)


def _rows(path: Path, reader) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each CSV record."""
    try:
        for row in reader:
            yield reader.line_num, row
    except csv.Error as error:
        raise DataError(f"{path}, line {reader.line_num}: {error}") from error


def _check_header(path: Path, header: Sequence[str]) -> Sequence[str]:
    for name in header:
        if not (name.isidentifier() or _INDEXED_COLUMN.match(name)):
            raise DataError(f"{path}: column name {name!r} is not a keyword name (or an indexed one like X[0])")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise DataError(f"{path}: columns {duplicates} appear more than once")
    return header


def _parse_column(path: Path, name: str, cells: Sequence[tuple[int, str]]) -> np.ndarray:
    """One column: int64 when every cell is an integer literal, else float64."""
    values = [cell.strip() for _, cell in cells]
    if all(_INTEGER.match(value) for value in values):
        return np.array([int(value) for value in values], dtype=np.int64)
    numbers = []
    for (line, _), value in zip(cells, values):
        try:
            numbers.append(float(value))
        except ValueError:
            raise DataError(f"{path}, line {line}, column {name!r}: {value!r} is not a number") from None
    return np.array(numbers, dtype=np.float64)


def _stack_indexed(path: Path, columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Plain columns as they are; indexed columns X[j] stacked into X (N, k), j = 0..k−1."""
    plain, indexed = {}, {}
    for name, column in columns.items():
        match = _INDEXED_COLUMN.match(name)
        if match is None:
            plain[name] = column
            continue
        group = indexed.setdefault(match.group("name"), {})
        index = int(match.group("bracket") or match.group("dot"))
        if index in group:
            raise DataError(f"{path}: column {match.group('name')}[{index}] appears more than once")
        group[index] = column
    both = sorted(set(plain) & set(indexed))
    if both:
        raise DataError(f"{path}: {both[0]} is both a column and a group of indexed columns; rename one")
    return {**plain, **{name: _stack(path, name, group) for name, group in indexed.items()}}


def _stack(path: Path, name: str, group: Mapping[int, np.ndarray]) -> np.ndarray:
    """Columns {j: column} with j = 0..k−1 → (N, k); int when every column is int."""
    missing = [f"{name}[{j}]" for j in range(max(group) + 1) if j not in group]
    if missing:
        raise DataError(
            f"{path}: columns of {name} have indices {sorted(group)}, so {', '.join(missing)} is missing: "
            "indexed columns are numbered 0, 1, …, k − 1 without gaps"
        )
    return np.stack([group[j] for j in range(len(group))], axis=1)
