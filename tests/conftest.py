"""Shared fixtures, and the suite's persistent compilation cache."""

import os
from pathlib import Path

import jax
import pytest

from noiseaware.util.compilation import CACHE_ENV, use_compilation_cache

# One compilation cache for the whole suite: both xdist workers and every command-line subprocess the tests start
# (they inherit the variable) compile each program once, and a second `make test` finds them all compiled.
# $NOISEAWARE_JAX_CACHE, when set, names another folder (or "off").
os.environ.setdefault(CACHE_ENV, str(Path(__file__).resolve().parent.parent / ".jax-cache" / f"jax-{jax.__version__}"))
use_compilation_cache()


@pytest.fixture(scope="module")
def fast_compilation():
    """Compile with most XLA optimisations off while a module runs.

    Tests that compile many small programs and run each briefly spend most of their time in XLA's
    optimiser (about 40 % less CPU time without it); results are the same up to float rounding.
    Opt in per module with `pytestmark = pytest.mark.usefixtures("fast_compilation")`, after measuring: modules
    that run long programs get slower (unoptimised XLA runs them slower: test_methods took twice the CPU time,
    the README tours 50 % more, test_tuning 15 % more).
    """
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)


@pytest.fixture
def read_only(tmp_path):
    """A directory without write permission; skips where permissions do not bind (root, unless it runs
    without CAP_DAC_OVERRIDE, e.g. `setpriv --bounding-set=-dac_override,-dac_read_search`)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").touch()
    except PermissionError:
        yield folder
    else:
        (folder / "probe").unlink()
        pytest.skip("this process writes into read-only directories (root)")
    finally:
        folder.chmod(0o755)


# Files by CPU time, heaviest first (seconds on this project's 2-core machine, 2026-11-26). `make test` runs
# with --dist loadfile --no-loadscope-reorder, so xdist hands out whole files in this order and then the rest
# in collection order: the longest files start first and the run does not end with one worker busy on a
# long file while the other idles (xdist's own order, most tests first, put the one-test README tours last).
# Only the order changes; a file missing here just runs later.
HEAVIEST_FIRST = (
    "test_tuning.py",  # 219
    "test_docs.py",  # ≈ 200 (every example of docs/*.md)
    "test_readme_cli.py",  # 156
    "test_readme.py",  # 137
    "test_bernstein_sheldon.py",  # 102
    "test_studies.py",  # 92
    "test_methods.py",  # 70
    "test_coverage.py",  # 70
    "test_nuts.py",  # 66
    "test_route_coverage.py",  # 64
    "test_exact.py",  # 57
    "test_families.py",  # 50
    "test_expansion.py",  # 40
    "test_cli.py",  # 41
    "test_reference_fit.py",  # 40
    "test_posterior.py",  # 53
    "test_dpvi.py",  # 34
    "test_bernstein_sheldon_regression.py",  # 30
    "test_diagnostics.py",  # 23
    "test_cli_outputs.py",  # 23
)


def pytest_collection_modifyitems(items):
    """Put the heaviest files first (longest-processing-time-first scheduling of the files over the workers)."""
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
