"""Checks of a message by the names it must hold, not by its sentence.

An error or a warning is tested by its type (`pytest.raises(ValueError) as info`, a `FitFailure`'s `reason`)
and by the short tokens the user needs from its message: the parameter or option it names, the bad value, the
file, the method or option of the fix. `mentions(info, "burn_in", "10", "8")` asserts each token appears in the
message; the wording around them may change.

A token is one word: an identifier, an option (`--force`), a number, a file name or suffix, a quoted value.
It matches where it stands alone: "10" is not found in "100", nor "key" in "keys", but ".nc" is in "x.nc".
"""

from __future__ import annotations

import re
import warnings

import pytest

__all__ = ["message_of", "mentions"]


def _pattern(token: str) -> re.Pattern:
    """`token` where it stands alone: not inside a longer word, a number not inside a longer number."""
    left = r"(?<![\w.])" if token[0].isdigit() else r"(?<!\w)" if re.match(r"\w", token) else ""
    right = r"(?!\w|\.\d)" if token[-1].isdigit() else r"(?!\w)" if re.search(r"\w$", token) else ""
    return re.compile(left + re.escape(token) + right)


def _texts(subject) -> list[str]:
    """The messages `subject` holds: one for an error or a text, one per warning of the expected type."""
    if isinstance(subject, pytest.ExceptionInfo):
        subject = subject.value
    if isinstance(subject, BaseException):
        return [str(subject)]
    if isinstance(subject, str):
        return [subject]
    if isinstance(subject, warnings.WarningMessage):
        return [str(subject.message)]
    expected = getattr(subject, "expected_warning", Warning)  # what `pytest.warns(W) as record` waits for
    return [str(w.message) for w in subject if issubclass(w.category, expected)]


def message_of(subject) -> str:
    """The message of an error, an `ExceptionInfo`, a warning or a text (the warnings' messages, one a line)."""
    return "\n".join(_texts(subject))


def mentions(subject, *required: str) -> None:
    """Assert that the message of `subject` holds every one of the `required` tokens.

    `subject`: an error, a `pytest.raises` info, a `pytest.warns` record or list of warnings (one warning of
    the expected type must hold them all), or a text (printed output, a report)."""
    assert required, "mentions() needs the tokens the message must hold"
    for token in required:
        assert isinstance(token, str) and token and not re.search(r"\s", token), (
            f"mentions() takes single tokens, not phrases: {token!r}"
        )
    texts = _texts(subject)
    assert texts, f"no message to check for {list(required)}: {subject!r}"
    lacking = [[token for token in required if not _pattern(token).search(text)] for text in texts]
    shown = "\n---\n".join(texts)
    assert any(not missing for missing in lacking), f"the message lacks {min(lacking, key=len)}:\n{shown}"
