"""Shared fixtures."""

import jax
import pytest


@pytest.fixture(scope="module")
def fast_compilation():
    """Compile with most XLA optimisations off while a module runs.

    Tests that compile many small programs and run each briefly spend most of their time in XLA's
    optimiser (about 40 % less CPU time without it); results are the same up to float rounding.
    Opt in per module with `pytestmark = pytest.mark.usefixtures("fast_compilation")`.
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
