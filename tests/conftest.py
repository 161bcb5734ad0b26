"""Shared fixtures, the suite's persistent compilation cache and its compilation effort per module."""

import os
from pathlib import Path

import jax
import pytest

from noiseaware.util.compilation import CACHE_ENV, use_compilation_cache

# One compilation cache for the whole suite: both xdist workers and every command-line subprocess the tests start
# (they inherit the variable) compile each program once, and a second `make test` finds them all compiled.
# $NOISEAWARE_JAX_CACHE, when set, names another folder (or "off").
SUITE_CACHE = Path(__file__).resolve().parent.parent / ".jax-cache" / f"jax-{jax.__version__}"
SUITE_MIN_COMPILE_SECONDS = 0.05
"""The suite's own folder keeps every program that compiles in over 50 ms (a program compiled by both workers, or by
a test and the command it starts, is compiled once): in one process, 5 % less CPU time than the product's 1 s
threshold. The folder has no size limit (`make clean` empties it), so JAX neither sums it nor locks it on each
write; a program read while the other worker writes it fails to read and is compiled again."""
os.environ.setdefault(CACHE_ENV, str(SUITE_CACHE))
if use_compilation_cache() == SUITE_CACHE:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", SUITE_MIN_COMPILE_SECONDS)
    jax.config.update("jax_compilation_cache_max_size", -1)


@pytest.fixture(scope="module", autouse=True)
def compilation_effort(request):
    """Compile with most XLA optimisations off, except in modules marked `full_optimisation`.

    Most tests compile many small programs and run each briefly, so their time goes to XLA's optimiser: on a
    fresh clone with 2 workers, test_methods took 30 s instead of 50 and test_expansion 28 instead of 44
    (2026-11-27, docs/benchmarks.md "The test suite"). Results are the same up to float
    rounding. Modules that run long programs (the tuner's DP-SGD scans, the README tours, the bootstrap) run
    them slower unoptimised (test_tuning 279 s instead of 184, the bootstrap 127 instead of 27): they say
    `pytestmark = pytest.mark.full_optimisation`.
    """
    fast = request.node.get_closest_marker("full_optimisation") is None
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", fast)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)
    # Every compiled XLA CPU program holds memory maps; a worker that keeps all of a run's programs passed the
    # kernel's vm.max_map_count (65 530 here) and died of a segmentation fault inside XLA (2026-11-28: 37 000 maps
    # in the other worker at 93 %). Programs a later module needs again come back from the persistent cache.
    jax.clear_caches()


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


# Files by time, heaviest first (seconds on this project's 2-core machine in a fresh clone's `make test`,
# 2026-11-27). `make test` runs with --dist loadfile --no-loadscope-reorder, so xdist hands out whole files in this
# order and then the rest in collection order: the longest files start first and the run does not end with one
# worker busy on a long file while the other idles (xdist's own order, most tests first, put the one-test README
# tours last). Only the order changes; a file missing here just runs later.
HEAVIEST_FIRST = (
    "test_tuning.py",  # 188
    "test_docs.py",  # 165 (every example of docs/*.md)
    "test_readme_cli.py",  # 149
    "test_studies.py",  # 88
    "test_bernstein_sheldon.py",  # 88
    "test_nuts.py",  # 74
    "test_readme.py",  # 68
    "test_coverage.py",  # 63
    "test_exact.py",  # 52
    "test_route_coverage.py",  # 50
    "test_families.py",  # 42
    "test_compilation.py",  # 33 (three fresh processes)
    "test_methods.py",  # 31
    "test_dpvi.py",  # 31
    "test_cli.py",  # 27
    "test_posterior.py",  # 27
    "test_expansion.py",  # 27
    "test_plots.py",  # 26
    "test_bernstein_sheldon_regression.py",  # 24
    "test_bootstrap.py",  # 23
)


def pytest_collection_modifyitems(items):
    """Put the heaviest files first (longest-processing-time-first scheduling of the files over the workers)."""
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


COMPILE_REPORT_ENV = "NOISEAWARE_COMPILE_REPORT"
"""Set to a path prefix to write, per test worker, each test's JAX compilation count and seconds (tab-separated)."""
_COMPILE_STAGES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
_compile_seconds: dict[str, float] = {}


def _on_duration(event: str, seconds: float, **_) -> None:
    stage = _COMPILE_STAGES.get(event)
    if stage is not None:
        _compile_seconds[stage] = _compile_seconds.get(stage, 0.0) + seconds
        _compile_seconds["count"] = _compile_seconds.get("count", 0) + (stage == "compile")


if os.environ.get(COMPILE_REPORT_ENV):
    jax.monitoring.register_event_duration_secs_listener(_on_duration)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        _compile_seconds.clear()
        yield
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = "\t".join(
            [item.nodeid, *(f"{_compile_seconds.get(k, 0):.2f}" for k in ("count", "trace", "lower", "compile"))]
        )
        with open(f"{os.environ[COMPILE_REPORT_ENV]}.{worker}.tsv", "a") as report:
            report.write(line + "\n")
