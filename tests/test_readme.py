"""The README's tour runs as written: every ```python block in order, in one namespace, in a scratch directory
(the ```sh blocks: tests/test_readme_cli.py).

Only the study sizes shrink, by the exact substitutions in tests/readme_tour.py's SHRINK (each must occur in the
README exactly once, so a README edit that drops one fails instead of silently running the full study): a
500-simulation coverage study or 20 Adult runs belong in benchmarks/, not in the test suite. The machinery
(tests/markdown.py) is shared with tests/test_docs.py, which runs docs/*.md the same way.
"""

import pytest
from markdown_examples import python_examples
from readme_tour import shrunk_readme

pytestmark = pytest.mark.full_optimisation  # long DP-SGD runs: unoptimised XLA runs them slower


@pytest.mark.slow
def test_python_tour_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    examples = python_examples(shrunk_readme())
    assert all(example.not_run is None for example in examples), "the README's tour runs whole"
    for number, example in enumerate(examples):
        exec(compile(example.code, f"README.md python block {number}", "exec"), namespace)
    assert (tmp_path / "m1.nc").exists() and (tmp_path / "m1-posterior.nc").exists()
