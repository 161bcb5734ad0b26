"""Fenced examples of the project's Markdown files, for the tests that run them (test_readme, test_readme_cli,
test_docs): the blocks of a language, the study sizes shrunk by exact substitutions, and the Python examples
marked as not run.

An example that is deliberately not runnable in the test suite (it needs a cluster, or minutes of compute that
no substitution can shrink) says so in the Markdown, on the line right before its fence:

    <!-- not run: needs a Slurm cluster (dask_jobqueue) -->

The tests skip it and report the reason; every other example runs.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[1]
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>[^\n]*?) -->\n\Z")
"""The marker, at the end of the text before a fence."""


@dataclass(frozen=True)
class Example:
    """A fenced ```python block: its code and, when marked as not run, why (None: it runs)."""

    code: str
    not_run: str | None


def shrunk(path: Path, substitutions: Mapping[str, str]) -> str:
    """The text of `path` with each substitution made; each must occur exactly once, so an edit that drops
    one fails instead of silently running the full study."""
    text = path.read_text()
    for full, small in substitutions.items():
        assert text.count(full) == 1, f"{path.relative_to(ROOT)} should contain {full!r} exactly once"
        text = text.replace(full, small)
    return text


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def python_examples(text: str) -> list[Example]:
    """The ```python blocks in order, each with the reason it is not run, if it is marked so."""
    examples = []
    for match in re.finditer(r"^```python\n(.*?)```", text, flags=re.DOTALL | re.MULTILINE):
        marker = NOT_RUN.search(text[: match.start()])
        reason = None if marker is None else marker["reason"].strip()
        assert reason != "", "a `<!-- not run: … -->` marker must say why"
        examples.append(Example(match[1], reason))
    return examples
