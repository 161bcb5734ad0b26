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
