"""Safe outputs in the Python API (issue 14, defect 1): no writer replaces an existing file unless
`overwrite=True`, `check_output` refuses an input even then, a failed write leaves nothing behind, and an
error names the target file, never the temporary one."""

import os
from pathlib import Path

import numpy as np
import pytest
from messages import mentions
from toy_results import calibration_result, coverage_result

import noiseaware as na
from noiseaware import plots
from noiseaware.baselines.sampled import GIBBS, GibbsDiagnostics, chain_mixing
from noiseaware.posteriors.draws import DrawsPosterior, save_draws
from noiseaware.trace.sites import SiteSpec
from noiseaware.util.files import atomic_write, check_output, check_output_directory, write_json

EXISTS = ("exists", "overwrite=True", "--force")  # what a refusal to overwrite names: the option and its flag


def small_trace() -> na.Trace:
    """A 200-step trace of d = 2 (two real sites), built in numpy."""
    rng = np.random.default_rng(0)
    return na.Trace.from_arrays(
        np.cumsum(0.01 * rng.standard_normal((200, 4)), axis=0),
        rng.standard_normal((200, 4)),
        noise_multiplier=1.0,
        clip=1.0,
        sampling_rate=0.1,
        n_examples=100,
        learning_rate=1e-3,
        epsilon=na.epsilon_spent(1.0, 1e-5, 0.1, 200),  # what σ = 1 spends over these 200 steps
        delta=1e-5,
        sites=[SiteSpec("a", (), "identity"), SiteSpec("b", (), "identity")],
    )


def gibbs_posterior() -> DrawsPosterior:
    chains = np.random.default_rng(1).normal(size=(2, 50, 2))
    diagnostics = GibbsDiagnostics(
        **chain_mixing(chains), released=np.zeros(2), release={"epsilon": 1.0}, fallbacks=0, redraws=0, sweeps=50
    )
    return DrawsPosterior(chains, "bs2018", names=("a", "b"), diagnostics=diagnostics, kind=GIBBS)


TRACE = small_trace()
NAIVE = na.naive_posterior(TRACE)
DRAWS = DrawsPosterior(np.random.default_rng(2).normal(size=(1, 50, 2)), "test")

WRITERS = {
    "Trace.save .nc": (".nc", lambda path, **kw: TRACE.save(path, **kw)),
    "Trace.save .npz": (".npz", lambda path, **kw: TRACE.save(path, **kw)),
    "MixturePosterior.save": (".nc", lambda path, **kw: NAIVE.save(path, key=0, **kw)),
    "DrawsPosterior.save": (".nc", lambda path, **kw: DRAWS.save(path, **kw)),
    "DrawsPosterior.save (Gibbs)": (".nc", lambda path, **kw: gibbs_posterior().save(path, **kw)),
    "save_draws": (".nc", lambda path, **kw: save_draws(path, np.zeros((1, 3, 1)), ["x"], {}, **kw)),
    "CoverageResult.to_json": (".json", lambda path, **kw: coverage_result().to_json(path, **kw)),
    "CoverageResult.to_csv": (".csv", lambda path, **kw: coverage_result().to_csv(path, **kw)),
    "CoverageResult.to_netcdf": (".nc", lambda path, **kw: coverage_result().to_netcdf(path, **kw)),
    "CalibrationResult.to_json": (".json", lambda path, **kw: calibration_result().to_json(path, **kw)),
    "CalibrationResult.to_netcdf": (".nc", lambda path, **kw: calibration_result().to_netcdf(path, **kw)),
    "write_json": (".json", lambda path, **kw: write_json(path, {"a": 1}, **kw)),
    "plot_trace": (".png", lambda path, **kw: plots.plot_trace(TRACE, path, **kw)),
    "plot_posteriors": (".png", lambda path, **kw: plots.plot_posteriors({"naive": NAIVE}, path, key=0, **kw)),
    "plot_coverage": (".png", lambda path, **kw: plots.plot_coverage(coverage_result(), path, **kw)),
    "plot_calibration": (".png", lambda path, **kw: plots.plot_calibration(calibration_result(), path, **kw)),
}


@pytest.mark.parametrize("name", WRITERS)
def test_every_writer_keeps_an_existing_file_unless_told_to_overwrite_it(tmp_path, name):
    suffix, write = WRITERS[name]
    path = tmp_path / f"out{suffix}"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError) as error:
        write(path)
    mentions(error, *EXISTS)
    assert str(path) in str(error.value)
    assert path.read_bytes() == b"precious" and os.listdir(tmp_path) == [path.name]
    write(path, overwrite=True)
    assert path.read_bytes() != b"precious" and os.listdir(tmp_path) == [path.name]


def test_overwrite_replaces_the_content(tmp_path):
    path = tmp_path / "t.nc"
    other = na.Trace.from_arrays(
        TRACE.params + 1.0, TRACE.grads, noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=100
    )
    other.save(path)
    TRACE.save(path, overwrite=True)
    np.testing.assert_array_equal(na.Trace.load(path).params, TRACE.params)


def test_atomic_write_does_not_replace_a_file_created_while_it_writes(tmp_path):
    target = tmp_path / "out.txt"

    def write(temporary: Path) -> None:
        target.write_text("another writer's")  # e.g. a second process, after the first check
        temporary.write_text("ours")

    with pytest.raises(FileExistsError) as info:
        atomic_write(target, write)
    mentions(info, *EXISTS)
    assert target.read_text() == "another writer's" and os.listdir(tmp_path) == ["out.txt"]


@pytest.mark.parametrize(
    "error",
    [
        lambda temporary: PermissionError(13, "Permission denied", str(temporary)),
        lambda temporary: OSError(f"Unable to create file (name = '{temporary}', errno = 28, No space left)"),
    ],
)
def test_a_write_error_names_the_target_not_the_temporary_file(tmp_path, error):
    target = tmp_path / "out.nc"
    seen = []

    def write(temporary: Path) -> None:
        seen.append(temporary)
        raise error(temporary)

    with pytest.raises(OSError) as raised:
        atomic_write(target, write)
    message = str(raised.value)
    assert message.startswith(f"cannot write {target}: ") and seen[0].name not in message
    assert type(raised.value) is type(error(seen[0]))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["Trace.save .nc", "MixturePosterior.save", "CoverageResult.to_json", "plot_trace"])
def test_a_read_only_directory_is_reported_with_the_target(read_only, name):
    suffix, write = WRITERS[name]
    target = read_only / f"x{suffix}"
    with pytest.raises(PermissionError) as raised:
        write(target)
    assert str(raised.value).startswith("cannot write ")
    mentions(raised, f"{target}:", "Permission", "denied")
    assert os.listdir(read_only) == []


def test_check_output_probes_the_directory(read_only):
    with pytest.raises(PermissionError) as info:
        check_output(read_only / "x.nc")
    mentions(info, str(read_only / "x.nc"))
    with pytest.raises(PermissionError) as info:
        check_output_directory(read_only / "new")
    mentions(info, str(read_only / "new"))
    assert os.listdir(read_only) == []


def test_check_output_refuses_a_missing_directory_a_directory_and_an_existing_file(tmp_path):
    (tmp_path / "old.nc").write_text("old")
    with pytest.raises(FileNotFoundError) as info:
        check_output(tmp_path / "missing" / "x.nc")
    mentions(info, "missing")
    with pytest.raises(IsADirectoryError) as info:
        check_output(tmp_path)
    mentions(info, str(tmp_path))
    with pytest.raises(FileExistsError) as raised:
        check_output(tmp_path / "old.nc")
    mentions(raised, *EXISTS)
    assert check_output(tmp_path / "old.nc", overwrite=True) == tmp_path / "old.nc"
    assert check_output(tmp_path / "new.nc") == tmp_path / "new.nc"
    assert sorted(os.listdir(tmp_path)) == ["old.nc"]  # the probe leaves nothing


def test_check_output_refuses_an_input_even_with_overwrite(tmp_path, monkeypatch):
    data = tmp_path / "d.npz"
    data.write_bytes(b"the user's data")
    (tmp_path / "link.npz").symlink_to(data)
    os.link(data, tmp_path / "hard.npz")
    monkeypatch.chdir(tmp_path)
    for output in (data, Path("d.npz"), tmp_path / "sub" / ".." / "d.npz", tmp_path / "link.npz", "hard.npz"):
        for overwrite in (False, True):
            with pytest.raises(ValueError) as info:
                check_output(output, overwrite=overwrite, inputs=[Path("d.npz")])
            mentions(info, "d.npz")
    assert check_output(tmp_path / "other.npz", inputs=[data]) == tmp_path / "other.npz"
    assert data.read_bytes() == b"the user's data"


def test_check_output_directory_creates_nothing(tmp_path):
    (tmp_path / "file").write_text("")
    assert check_output_directory(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert check_output_directory(tmp_path) == tmp_path
    with pytest.raises(NotADirectoryError) as info:
        check_output_directory(tmp_path / "file" / "sub")
    mentions(info, "file/sub")
    with pytest.raises(NotADirectoryError):
        check_output_directory(tmp_path / "file")
    assert os.listdir(tmp_path) == ["file"]


@pytest.mark.parametrize(("suffix", "magic"), [(".pdf", b"%PDF"), (".svg", b"<?xml"), (".png", b"\x89PNG")])
def test_plots_write_png_pdf_and_svg_by_the_suffix(tmp_path, suffix, magic):
    plots.plot_trace(TRACE, tmp_path / f"trace{suffix}")
    assert (tmp_path / f"trace{suffix}").read_bytes().startswith(magic)


def test_a_plot_of_an_unknown_format_is_refused_before_writing(tmp_path):
    with pytest.raises(ValueError) as info:
        plots.plot_trace(TRACE, tmp_path / "trace.gif")
    mentions(info, "trace.gif", ".png", ".pdf")
    assert os.listdir(tmp_path) == []
