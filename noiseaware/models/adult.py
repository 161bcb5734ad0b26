"""The UCI Adult design's schema: its columns and feature names (docs/calibration.md), shared by the
`adult-logistic` model, which names its coefficients by them, and `na.datasets.adult()`, which builds the
design. A vocabulary, not data: the column names and category values of the UCI documentation (adult.names).

The design is [5 continuous columns | one-hot columns per category level | bias], d = 5 + 51 + 1 = 57. The
one-hot levels are those that occur in the complete training rows, in alphabetical order: every value of
the vocabulary except workclass Never-worked, whose rows all lack their occupation and are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "ADULT_CATEGORIES",
    "ADULT_FEATURE_NAMES",
    "ADULT_LEVELS",
    "ADULT_N",
    "CONTINUOUS",
    "VOCABULARY",
    "feature_names",
]

CONTINUOUS = ("age", "fnlwgt", "capital-gain", "capital-loss", "hours-per-week")
VOCABULARY = {
    "workclass": (
        "Private",
        "Self-emp-not-inc",
        "Self-emp-inc",
        "Federal-gov",
        "Local-gov",
        "State-gov",
        "Without-pay",
        "Never-worked",
    ),
    "education": (
        "Bachelors",
        "Some-college",
        "11th",
        "HS-grad",
        "Prof-school",
        "Assoc-acdm",
        "Assoc-voc",
        "9th",
        "7th-8th",
        "12th",
        "Masters",
        "1st-4th",
        "10th",
        "Doctorate",
        "5th-6th",
        "Preschool",
    ),
    "marital-status": (
        "Married-civ-spouse",
        "Divorced",
        "Never-married",
        "Separated",
        "Widowed",
        "Married-spouse-absent",
        "Married-AF-spouse",
    ),
    "occupation": (
        "Tech-support",
        "Craft-repair",
        "Other-service",
        "Sales",
        "Exec-managerial",
        "Prof-specialty",
        "Handlers-cleaners",
        "Machine-op-inspct",
        "Adm-clerical",
        "Farming-fishing",
        "Transport-moving",
        "Priv-house-serv",
        "Protective-serv",
        "Armed-Forces",
    ),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "sex": ("Female", "Male"),
}
"""The one-hot encoded columns and their UCI vocabulary (adult.names); any other value is an error."""
_UNSEEN_IN_TRAINING = {"workclass": ("Never-worked",)}
"""Vocabulary values without a complete training row in the UCI original, hence without a column."""
ADULT_LEVELS = {
    column: tuple(sorted(set(values) - set(_UNSEEN_IN_TRAINING.get(column, ()))))
    for column, values in VOCABULARY.items()
}
"""The one-hot levels of the UCI original's design, per column, alphabetically (7, 16, 7, 14, 5, 2 of them)."""


def feature_names(levels: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """The design's column names (d,): the continuous columns, 'column=level' per one-hot level, 'bias'."""
    return CONTINUOUS + tuple(f"{column}={level}" for column, values in levels.items() for level in values) + ("bias",)


ADULT_FEATURE_NAMES = feature_names(ADULT_LEVELS)
"""The 57 column names of the UCI original's design: 'age', …, 'workclass=Federal-gov', …, 'bias'."""
ADULT_CATEGORIES = tuple(len(values) for values in ADULT_LEVELS.values())
ADULT_N = 30_162
"""Complete training rows of the UCI original."""
