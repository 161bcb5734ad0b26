"""tests/messages.py: `mentions` finds each token standing alone, and fails naming the ones a message lacks."""

import warnings

import pytest
from messages import mentions


def test_each_token_must_stand_alone_in_the_message():
    mentions("the trace has 10 steps, leaving 8 after burn_in=0.2", "burn_in", "10", "8", "0.2", "burn_in=0.2")
    mentions("write it to x.nc or pass --force.", ".nc", "x.nc", "--force")
    for text, token in [("100 steps", "10"), ("3.5", "3"), ("0.10", "10"), ("keys", "key"), ("burn_in2", "burn_in")]:
        with pytest.raises(AssertionError) as info:
            mentions(text, token)
        assert repr(token) in str(info.value) and text in str(info.value)  # names what is missing, shows the text


def test_errors_raised_errors_and_warnings_are_read_by_their_message():
    with pytest.raises(ValueError) as info:
        raise ValueError("draws must be positive, got draws=0")
    mentions(info, "draws", "draws=0")
    mentions(info.value, "draws=0")
    with pytest.warns(UserWarning) as record:
        warnings.warn("first: a", stacklevel=1)
        warnings.warn("second: b", stacklevel=1)
    mentions(record, "second:", "b")
    with pytest.raises(AssertionError):
        mentions(record, "a", "b")  # one warning must hold them all


def test_a_phrase_or_nothing_to_look_for_is_refused():
    with pytest.raises(AssertionError) as info:
        mentions("a b", "a b")
    assert "single tokens" in str(info.value)
    with pytest.raises(AssertionError):
        mentions("anything")
