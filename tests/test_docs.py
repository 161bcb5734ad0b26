"""Every fenced ```python example of docs/*.md runs as written, as a reader runs it: a document's examples in
order as one script, `python docs-NAME.py`, in a fresh folder, in a process of its own that compiles into the
suite's cache (tests/markdown_examples.py; the README's: tests/test_readme.py). The `noiseaware …` lines of the
documents in CLI then run in the same folder, each in a fresh process, as typed.

A document's examples are one script because they are one session: a later example uses what an earlier one
made (`bm`, `trace`), as a reader who runs the page top to bottom has it. An example that is a file the reader
saves (`# mymodels.py` on its first line) is written into the folder, and the examples after it import it.

Only study sizes shrink, by the exact substitutions in SHRINK (each must occur in its document exactly once;
a list of methods shrinks to fewer, where other tests run the ones it drops);
the files an example reads as a user's own (a trace from `noiseaware record`) are given by GIVEN. An example
that cannot run here says so in the Markdown (`<!-- not run: why -->` before its fence) and is reported as
skipped with its reason.
"""

import re

import pytest
from markdown_examples import ROOT, blocks, commands, python_examples, run_command, run_script, shrunk

import noiseaware as na
from noiseaware.cli import build_parser

DOCS = ROOT / "docs"
STUDY = "simulations=4, references=2, samples=400"
SHRINK = {
    "baselines-implementation.md": {
        "noise_multiplier=360.0, key=0,": f"noise_multiplier=360.0, key=0, {STUDY}, steps=200,",
        '"chains": 4, "warmup": 1000}': '"chains": 1, "warmup": 50, "draws": 100}',
        "gibbs=GibbsSettings())": "gibbs=GibbsSettings(chains=1, warmup=50, draws=100))",
        "gibbs=RegressionGibbs(), prior": "gibbs=RegressionGibbs(chains=1, warmup=20, draws=50), prior",
    },
    "calibration.md": {
        '"exact", "nuts", "laplace", "naive", "dpvim"), epsilon=1.0': '"exact", "naive"), epsilon=1.0',
        "runs=20, samples=4000, key=0)": "runs=2, samples=100, key=0, steps=100)",
    },
    "coverage.md": {
        '"exact", "nuts", "laplace", "naive", "dpvim"), epsilon=0.1': '"exact", "laplace", "naive"), epsilon=0.1',
        "simulations=500, references=20, samples=20_000, key=0)": f"{STUDY}, key=0, steps=400)",
        "simulations=500,": "simulations=4,",
        "[0], **bm.dpvi_settings)": '[0], **bm.dpvi_settings | {"steps": 400})',
        "references=20, samples=20_000, key=key)": "references=2, samples=400, key=key)",
        "epsilon=0.3, key=0)": f"epsilon=0.3, key=0, {STUDY}, steps=400)",
    },
    "methods.md": {
        "simulations=10, references=5, samples=1000,": f"{STUDY},",
        "steps=2000, key=3": "steps=400, key=3",
        "steps=500, key=4)": "steps=100, key=4)",
    },
    "models.md": {
        "**bm.dpvi_settings)     # real data": '**bm.dpvi_settings | {"steps": 100})     # real data',
        "steps=10_000, sampling_rate": "steps=1000, sampling_rate",
    },
    "recording.md": {
        "2 * 20)": "2 * 2)",
        "keys[:20]": "keys[:2]",
        "keys=keys[20:]": "keys=keys[2:]",
        "noise_multiplier=37.81, **bm.dpvi_settings)": 'noise_multiplier=37.81, **bm.dpvi_settings | {"steps": 1000})',
        "jax.random.key(3), 8))": "jax.random.key(3), 2))",
        "for m in range(8)]": "for m in range(2)]",
    },
    # one spawned Dask worker instead of two: still a real worker process, which imports the script (so the example's
    # `if __name__ == "__main__":` is tested; without it the worker fails to start)
    "studies.md": {"simulations=500)": f"{STUDY}, steps=400)", "open_executor(workers=2)": "open_executor(workers=1)"},
}
GIVEN = {"diagnostics.md": "m1-trace.nc", "gradient-model.md": "m1-trace.nc"}
"""The trace file a document reads as the reader's own (here: an M1 trace of 1000 steps at ε = 1)."""
CLI = {"models.md": {"--steps 10000 --sampling-rate": "--steps 1000 --sampling-rate"}}
"""The documents whose ```sh `noiseaware …` lines run after their examples, in the same folder (they read the
files the examples wrote), with their substitutions; each must occur in the document's text exactly once. The
other documents' command lines run in the README's tour (tests/test_readme_cli.py) or are too long for the suite
(a study at the research sizes); docs/catalogue.md lists each one and how it was checked."""
EXAMPLES = {path.name: python_examples(path.read_text()) for path in sorted(DOCS.glob("*.md"))}
"""As written: which documents have examples, and which of them are marked as not run."""
NOT_RUN = [
    (name, number, example.not_run)
    for name, examples in EXAMPLES.items()
    for number, example in enumerate(examples)
    if example.not_run is not None
]


@pytest.fixture(scope="module")
def m1_trace() -> na.Trace:
    bm = na.models.get("M1")
    _, data = bm.simulate(0)
    return na.record_dpvi(bm.model, data, epsilon=1.0, key=1, **(bm.dpvi_settings | {"steps": 1000}))


WORKED_PLUG_IN = """
# --- the test's checks: docs/methods.md's worked plug-in ran in fit, coverage and calibration, and stayed out of
# the registry (`result` is the last study of the example) ---
import numpy as _np
assert result.failures["tail"] == 0 and _np.all(_np.isfinite(result.metrics["tail"]["calibration_rmse"]))
assert post.method == "tail" and "tail" not in na.DEFAULT_REGISTRY
"""


def worked_plug_in_printed(printed: str) -> None:
    assert printed.count("tail") >= 3 and "naive" in printed  # the fit summary and both tables


AFTER = {"methods.md": (WORKED_PLUG_IN, worked_plug_in_printed)}
"""What a document's examples must have done: code run after them in their script, and a check of what they
printed."""


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, examples in EXAMPLES.items() if examples])
def test_the_examples_of_a_document_run_as_written(name, tmp_path, m1_trace):
    if name in GIVEN:
        m1_trace.save(tmp_path / GIVEN[name])
    text = shrunk(DOCS / name, SHRINK.get(name, {}) | CLI.get(name, {}))
    epilogue, check = AFTER.get(name, ("", None))
    printed = run_script(tmp_path, f"docs-{name.removesuffix('.md')}.py", python_examples(text), epilogue)
    if check is not None:
        check(printed)
    if name in CLI:
        lines = [argv for block in blocks(text, "sh") for argv in commands(block)]
        assert lines, f"docs/{name} has no noiseaware command line to run"
        for argv in lines:
            run_command(tmp_path, argv)


@pytest.mark.parametrize(("name", "number", "reason"), NOT_RUN, ids=[f"{n}-{i}" for n, i, _ in NOT_RUN])
def test_an_example_marked_as_not_run_is_reported(name, number, reason):
    pytest.skip(f"docs/{name} python block {number} is not run: {reason}")


def test_every_shrunk_document_exists():
    assert set(SHRINK) | set(GIVEN) | set(CLI) <= set(EXAMPLES)


DOCUMENTS = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
COMMAND_LINES = [
    (path.name, argv)
    for path in DOCUMENTS
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", path.read_text(), flags=re.DOTALL | re.MULTILINE)
    for argv in commands(block)
]
"""Every `noiseaware …` line of every fenced block (```sh or unlabelled) of the README and docs/*.md."""


def test_every_documented_command_line_parses():
    """Each flag a document types exists and takes what it is given (the runs: test_readme_cli, CLI above)."""
    parser = build_parser()
    assert len(COMMAND_LINES) >= 30
    for name, argv in COMMAND_LINES:
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{name}: noiseaware {' '.join(argv)} does not parse")


def test_every_module_of_yours_a_command_names_is_written_in_the_docs():
    """`--model mymodels:regression` and the like name a file and a function that an example saves (a block whose
    first line is `# mymodels.py`), so a reader can make them."""
    files = {
        example.file: example.code
        for path in DOCUMENTS
        for example in python_examples(path.read_text())
        if example.file is not None
    }
    named = {value for _, argv in COMMAND_LINES for value in argv if re.fullmatch(r"\w+:\w+", value)}
    assert named, "the docs show a model of the reader's own on the command line"
    for module, function in (value.split(":") for value in sorted(named)):
        assert f"{module}.py" in files, f"no example writes {module}.py"
        assert f"\ndef {function}(" in files[f"{module}.py"], f"{module}.py of the docs defines no {function}"
