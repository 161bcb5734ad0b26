"""The shared helpers of noiseaware.util: argument validators, numerics and JSON-ready values."""

import json
import math
from types import MappingProxyType

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from messages import mentions

from noiseaware.util.checks import choice, positive_float, positive_int, probability
from noiseaware.util.files import plain, write_json
from noiseaware.util.numerics import sigmoid, softplus, softplus_inverse


class DomainError(ValueError):
    """Stands for a module's own error type."""


NOT_NUMBERS = [True, False, np.bool_(True), None, "3", [3], (3,), np.array([3]), object()]
NOT_NUMBER_IDS = [f"{type(v).__name__}-{i}" for i, v in enumerate(NOT_NUMBERS)]
"""Stable test ids (an object's repr holds its address, which differs between pytest-xdist workers)."""

# ---------------------------------------------------------------- positive_int


@given(minimum=st.integers(-5, 5), offset=st.integers(0, 10**20))
def test_positive_int_returns_every_integer_from_the_minimum(minimum, offset):
    value = positive_int("n", minimum + offset, minimum=minimum)
    assert value == minimum + offset and type(value) is int


@given(minimum=st.integers(-5, 5), shortfall=st.integers(1, 10**6))
def test_positive_int_rejects_integers_below_the_minimum(minimum, shortfall):
    with pytest.raises(ValueError) as info:
        positive_int("n", minimum - shortfall, minimum=minimum)
    mentions(info, "n", f"n={minimum - shortfall}")


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_positive_int_rejects_every_float_even_integral_ones(value):
    with pytest.raises(ValueError) as info:
        positive_int("n", value)
    mentions(info, "n", "n=")


@pytest.mark.parametrize(
    "value", [*NOT_NUMBERS, np.float64(3.0), np.array(3.0)], ids=[*NOT_NUMBER_IDS, "float64-3.0", "array-3.0"]
)
def test_positive_int_rejects_non_integers_and_bools(value):
    with pytest.raises(ValueError) as info:
        positive_int("n", value)
    mentions(info, "n", "positive")


@pytest.mark.parametrize("value", [np.int64(3), np.uint8(3), np.array(3), jnp.asarray(3)], ids=repr)
def test_positive_int_accepts_numpy_and_jax_integers(value):
    assert positive_int("n", value) == 3 and type(positive_int("n", value)) is int


@pytest.mark.parametrize(
    ("minimum", "allowed"), [(0, ("non-negative", "integer")), (1, ("positive", "integer")), (4, ("integer", "≥", "4"))]
)
def test_positive_int_says_what_is_allowed(minimum, allowed):
    with pytest.raises(ValueError) as info:
        positive_int("draws", -1, minimum=minimum)
    mentions(info, "draws", *allowed, "draws=-1")


def test_a_hint_follows_the_message_and_error_picks_the_type():
    with pytest.raises(DomainError) as info:
        positive_int("steps", 2.5, hint="pass an int", error=DomainError)
    mentions(info, "steps", "steps=2.5", "int")


def test_a_numpy_scalar_is_shown_as_its_python_value():
    with pytest.raises(ValueError) as info:
        positive_int("steps", np.int64(0))
    mentions(info, "steps=0")


# ---------------------------------------------------------------- positive_float


@given(st.floats(min_value=0.0, exclude_min=True, allow_infinity=False))
def test_positive_float_returns_every_finite_positive_number(value):
    assert positive_float("x", value) == value


@given(st.floats(max_value=0.0) | st.just(math.inf) | st.just(math.nan))
def test_positive_float_rejects_zero_negatives_inf_and_nan(value):
    with pytest.raises(ValueError) as info:
        positive_float("x", value)
    mentions(info, "x", "x=")


@given(st.floats(min_value=0.0, max_value=1.0, exclude_min=True), st.floats(min_value=1.0, exclude_min=True))
def test_positive_float_with_a_maximum_includes_it_and_rejects_above(inside, above):
    assert positive_float("q", inside, maximum=1.0) == inside
    with pytest.raises(ValueError) as info:
        positive_float("q", above, maximum=1.0)
    mentions(info, "q", "1", "q=")


def test_positive_float_with_allow_zero_also_accepts_zero():
    assert positive_float("sigma", 0, allow_zero=True) == 0.0
    with pytest.raises(ValueError) as info:
        positive_float("sigma", -0.5, allow_zero=True)
    mentions(info, "sigma", "sigma=-0.5")


@pytest.mark.parametrize("value", NOT_NUMBERS, ids=NOT_NUMBER_IDS)
def test_positive_float_rejects_non_numbers_and_bools(value):
    with pytest.raises(ValueError) as info:
        positive_float("x", value)
    mentions(info, "x", "finite")


@pytest.mark.parametrize("value", [2, np.float32(2.0), np.int64(2), np.array(2.0), jnp.asarray(2.0)], ids=repr)
def test_positive_float_returns_a_python_float(value):
    assert positive_float("x", value) == 2.0 and type(positive_float("x", value)) is float


# ---------------------------------------------------------------- probability


@given(st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True))
def test_probability_returns_every_number_inside_the_open_interval(value):
    assert probability("p", value) == value


@given(st.floats(max_value=0.0) | st.floats(min_value=1.0) | st.just(math.nan))
def test_probability_rejects_the_ends_and_beyond(value):
    with pytest.raises(ValueError) as info:
        probability("p", value)
    mentions(info, "p", "(0", "1)", "p=")


@pytest.mark.parametrize("value", NOT_NUMBERS, ids=NOT_NUMBER_IDS)
def test_probability_rejects_non_numbers(value):
    with pytest.raises(ValueError) as info:
        probability("p", value)
    mentions(info, "p", "(0", "1)", "p=")


# ---------------------------------------------------------------- choice


@given(st.lists(st.text(min_size=1), min_size=1, unique=True), st.data())
def test_choice_returns_each_option(options, data):
    value = data.draw(st.sampled_from(options))
    assert choice("option", value, tuple(options)) is value


def test_choice_lists_the_options():
    with pytest.raises(ValueError) as info:
        choice("scaling", "minmax", ("zscore", "range"))
    mentions(info, "scaling", "'minmax'", "zscore", "range")
    with pytest.raises(DomainError) as info:
        choice("backend", "gpu", ("cpu",), hint="see the docs", error=DomainError)
    mentions(info, "backend", "'gpu'", "cpu", "docs")


# ---------------------------------------------------------------- numerics


@given(st.floats(min_value=1e-300, max_value=1e300))
def test_softplus_inverse_inverts_softplus_across_the_range(a):
    assert softplus(softplus_inverse(a)) == pytest.approx(a, rel=1e-12)


@given(st.floats(min_value=1e-3, max_value=30.0))
def test_softplus_inverse_matches_the_direct_formula_where_that_is_accurate(a):
    assert softplus_inverse(a) == pytest.approx(np.log(np.expm1(a)), rel=1e-12, abs=1e-12)


def test_softplus_inverse_keeps_the_shape_and_is_exact_for_large_values():
    a = np.array([[1, 2], [1000, 1e300]])  # integers become float64; log(expm1(1000)) would overflow
    out = softplus_inverse(a)
    assert out.shape == (2, 2) and out.dtype == np.float64
    assert out[1].tolist() == [1000.0, 1e300]


# ---------------------------------------------------------------- plain / write_json

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
)


@given(JSON_VALUES)
def test_plain_keeps_json_values(value):
    assert plain(value) == value


@given(
    hnp.arrays(
        hnp.floating_dtypes() | hnp.integer_dtypes(),
        hnp.array_shapes(min_dims=0, max_dims=3),
        elements={"allow_nan": False},
    )
)
def test_plain_turns_numpy_arrays_into_nested_lists(array):
    assert plain(array) == array.tolist()
    json.dumps(plain(array))


def test_plain_converts_numpy_jax_tuples_and_mappings_recursively():
    value = MappingProxyType({
        "scalar": np.float32(0.5), "count": np.int64(3), "flag": np.bool_(True), "name": np.str_("a"),
        "jax": jnp.arange(3), "pair": (np.float64(1.0), (2, "b")), 7: {"inner": np.zeros((2, 1))},
    })  # fmt: skip
    expected = {
        "scalar": 0.5, "count": 3, "flag": True, "name": "a", "jax": [0, 1, 2], "pair": [1.0, [2, "b"]],
        "7": {"inner": [[0.0], [0.0]]},
    }  # fmt: skip
    result = plain(value)
    assert result == expected
    assert type(result["count"]) is int and type(result["flag"]) is bool and type(result["jax"][0]) is int
    assert json.loads(json.dumps(result)) == expected


def test_plain_names_a_type_it_cannot_convert():
    with pytest.raises(TypeError) as info:
        plain({"a": [object()]})
    mentions(info, "JSON")


def test_write_json_writes_numpy_values(tmp_path):
    path = tmp_path / "result.json"
    write_json(path, {"coverage": np.float64(0.95), "bins": np.arange(3), "level": (0.5, 0.9)})
    assert json.loads(path.read_text()) == {"coverage": 0.95, "bins": [0, 1, 2], "level": [0.5, 0.9]}
    assert list(tmp_path.iterdir()) == [path]


@given(st.floats(-30.0, 30.0))
def test_softplus_and_sigmoid_match_their_definitions(x):
    assert softplus(x) == pytest.approx(np.log1p(np.exp(x)), rel=1e-12)
    assert sigmoid(x) == pytest.approx(1.0 / (1.0 + np.exp(-x)), rel=1e-12)
    assert softplus_inverse(softplus(x)) == pytest.approx(x, rel=1e-9, abs=1e-9)
