"""The README's tour runs as written, as a reader runs it: every ```python block in order, as one script
`python readme.py` in a fresh folder, in a process of its own (the ```sh blocks: tests/test_readme_cli.py).

Only the study sizes shrink, by the exact substitutions in tests/readme_tour.py's SHRINK (each must occur in the
README exactly once, so a README edit that drops one fails instead of silently running the full study): a
500-simulation coverage study or 20 Adult runs belong in benchmarks/, not in the test suite. The machinery
(tests/markdown_examples.py) is shared with tests/test_docs.py, which runs docs/*.md the same way.
"""

import pytest
from markdown_examples import python_examples, run_script
from readme_tour import shrunk_readme

pytestmark = pytest.mark.full_optimisation  # long DP-SGD runs: unoptimised XLA runs them slower


@pytest.mark.slow
def test_python_tour_runs_as_written(tmp_path):
    examples = python_examples(shrunk_readme())
    assert all(example.not_run is None for example in examples), "the README's tour runs whole"
    run_script(tmp_path, "readme.py", examples)
    assert (tmp_path / "m1.nc").exists() and (tmp_path / "m1-posterior.nc").exists()
