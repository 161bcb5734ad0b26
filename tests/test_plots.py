"""Figures show what they say they show (issue 14, defects 9 and 10): densities on each site's own scale and
labelled so, μ_t labelled unconstrained, every coordinate up to a readable limit (what is left out is said
in the title and warned), titles and legends inside the figure, every `plots.plot_*`
function returning its Figure, and PNG, PDF and SVG files by the suffix."""

import dataclasses
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from matplotlib.figure import Figure
from messages import mentions

import noiseaware as na
from noiseaware import plots
from noiseaware.evaluation.calibration_result import CalibrationResult
from noiseaware.evaluation.result import CoverageResult
from noiseaware.plots.studies import coverage_width_figure
from noiseaware.trace.sites import SiteMap, SiteSpec

SITES = (SiteSpec("scale", (), "softplus"), SiteSpec("p", (3,), "alr"), SiteSpec("w", (2,), "identity"))
"""d = 1 + 2 + 2 = 5 unconstrained coordinates; 1 + 3 + 2 = 6 elements on the sites' own scales."""
ELEMENTS = ["scale", "p[0]", "p[1]", "p[2]", "w[0]", "w[1]"]
COORDINATES = ["scale", "p[0]", "p[1]", "w[0]", "w[1]"]
MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF", ".svg": b"<?xml"}


def make_trace(d: int, sites=None, steps: int = 200) -> na.Trace:
    rng = np.random.default_rng(0)
    params = np.concatenate([1.0 + np.cumsum(0.01 * rng.standard_normal((steps, d)), 0), np.full((steps, d), -2.0)], 1)
    return na.Trace.from_arrays(
        params,
        rng.standard_normal((steps, 2 * d)),
        noise_multiplier=1.0,
        clip=1.0,
        sampling_rate=0.1,
        n_examples=100,
        learning_rate=1e-3,
        sites=sites,
    )


def spread_posterior(trace: na.Trace) -> na.MixturePosterior:
    return na.MixturePosterior(
        optimum_chains=trace.params[None, -50:],
        hessian_chains=None,
        extra_noise_chains=None,
        method="spread",
        param_names=trace.param_names,
        sites=trace.sites,
    )


@pytest.fixture(scope="module")
def trace() -> na.Trace:
    return make_trace(5, SITES)


@pytest.fixture(scope="module")
def posteriors(trace):
    return {"spread": spread_posterior(trace), "naive": na.naive_posterior(trace)}


@pytest.fixture
def drawn(monkeypatch) -> list[Figure]:
    """The figures the `plots` functions build, kept as they are saved."""
    figures = []
    original = plots.draw_and_save

    def keep(build, path, **options):
        figure = original(build, path, **options)
        figures.append(figure)
        return figure

    monkeypatch.setattr(plots, "draw_and_save", keep)
    return figures


def panels(container) -> list:
    """The axes of a figure or subfigure that hold data."""
    return [axis for axis in container.get_axes() if axis.lines or axis.collections]


def title(figure: Figure) -> str:
    return " ".join(figure.get_suptitle().split())


def assert_inside(figure: Figure) -> None:
    """Everything drawn — the title, the legends, every panel's labels — lies inside the figure's frame, which
    is what a saved file holds: the tight box of the drawn artists against the figure's box (in inches)."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    width, height = figure.get_size_inches()
    tolerance = 1.0 / figure.dpi
    drawn = figure.get_tightbbox(renderer)
    assert drawn.x0 >= -tolerance and drawn.x1 <= width + tolerance, f"{drawn} leaves the {width:.2f} in wide figure"
    assert drawn.y0 >= -tolerance and drawn.y1 <= height + tolerance, f"{drawn} leaves the {height:.2f} in tall figure"
    texts = [figure._suptitle, *figure.legends]
    assert all(t is not None and figure.bbox.contains(*t.get_window_extent(renderer).min) for t in texts)
    assert all(figure.bbox.contains(*t.get_window_extent(renderer).max) for t in texts)


# ---------------------------------------------------------------- scales (defect 9)


def test_fit_plot_shows_densities_on_each_sites_own_scale_and_mu_unconstrained(trace, posteriors, tmp_path, drawn):
    truth = np.array([0.5, 0.1, -0.2, 1.0, 2.0])
    plots.plot_trace(trace, tmp_path / "fit.png", posteriors=posteriors, truth=truth, key=0)
    (figure,) = drawn
    left, right = figure.subfigs
    mu_axes, density_axes = panels(left), panels(right)
    assert [axis.get_ylabel() for axis in mu_axes] == [f"{n}\nμ_t (unconstrained)" for n in COORDINATES]
    assert [axis.get_xlabel() for axis in density_axes] == [f"{name} (constrained)" for name in ELEMENTS]
    assert "unconstrained" in left.get_suptitle() and "(constrained)" in right.get_suptitle()
    # the scale panel is of softplus(θ): its truth line sits at softplus(0.5), not 0.5
    truth_x = [line.get_xdata()[0] for line in density_axes[0].lines if line.get_linestyle() == "--"]
    assert truth_x == [pytest.approx(np.logaddexp(0.0, 0.5), rel=1e-6)]
    expected = SiteMap(SITES).constrain(jnp.asarray(truth))["p"]
    p_truths = [
        [line.get_xdata()[0] for line in axis.lines if line.get_linestyle() == "--"] for axis in density_axes[1:4]
    ]
    np.testing.assert_allclose(np.ravel(p_truths), expected, rtol=1e-6)
    low, high = density_axes[0].get_xlim()  # the density of softplus(θ) lies where the draws' values are
    values = posteriors["spread"].constrained_sample(0, 2000)["scale"]
    assert low < np.quantile(values, 0.01) and np.quantile(values, 0.99) < high and low > 0.3


def test_unconstrained_view_on_request_and_without_a_site_map(trace, posteriors, tmp_path, drawn):
    plots.plot_posteriors(posteriors, tmp_path / "u.png", key=0, scale="unconstrained")
    labels = [axis.get_xlabel() for axis in panels(drawn[0])]
    assert labels == [f"{name} (unconstrained)" for name in COORDINATES]
    bare = make_trace(3)
    figure = plots.plot_posteriors(spread_posterior(bare), key=0)
    assert all(axis.get_xlabel().endswith("(unconstrained)") for axis in panels(figure))
    assert "no site map" in title(figure)
    with pytest.raises(ValueError) as info:
        plots.plot_posteriors(spread_posterior(bare), key=0, scale="constrained")
    mentions(info, "scale='constrained'", "'spread'", "scale='unconstrained'")
    with pytest.raises(ValueError) as info:
        plots.plot_posteriors(posteriors["spread"], key=0, scale="model")
    mentions(info, "'model'")


# ---------------------------------------------------------------- what is shown (defect 10)


def test_twelve_coordinates_are_all_shown(tmp_path, drawn):
    trace = make_trace(12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.plot_trace(trace, tmp_path / "fit.png", posteriors={"spread": spread_posterior(trace)}, key=0)
    figure = drawn[0]
    assert [len(panels(column)) for column in figure.subfigs] == [12, 12]
    assert "showing" not in title(figure)


def test_panels_left_out_are_named_in_the_title_and_warned():
    trace = make_trace(20)
    with pytest.warns(UserWarning) as record:
        figure = plots.plot_trace(trace)
    mentions(record, "16", "20", "coordinates=")
    assert len(panels(figure)) == 16
    mentions(title(figure), "showing", "16", "20", "coordinates=")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chosen = plots.plot_trace(trace, coordinates=["theta[3]", 0, "theta[19]", -1])
    assert [axis.get_ylabel().split("\n")[0] for axis in panels(chosen)] == ["theta[3]", "theta[0]", "theta[19]"]
    mentions(title(chosen), "showing", "3", "20", "coordinates=")
    with pytest.raises(ValueError) as info:
        plots.plot_trace(trace, coordinates=["theta[20]"])
    mentions(info, "theta[20]", "'theta[0]'")


def test_a_site_name_chooses_all_its_elements(posteriors):
    figure = plots.plot_posteriors(posteriors["spread"], key=0, coordinates="p")
    assert [axis.get_xlabel() for axis in panels(figure)] == [
        "p[0] (constrained)",
        "p[1] (constrained)",
        "p[2] (constrained)",
    ]
    mentions(title(figure), "showing", "3", "6")


# ---------------------------------------------------------------- cropping (defect 10)


def coverage_result(d: int) -> CoverageResult:
    levels = np.linspace(0.0, 1.0, 21)
    curves = levels[None, :] ** np.array([[0.8], [1.2]])  # (R = 2, L)
    methods = ("exact", "naive", "dpvim-with-a-long-name")
    names = tuple(f"theta[{j}]" for j in range(d))
    return CoverageResult(
        levels=levels,
        curves={rule: {m: curves for m in methods} for rule in ("research", "trace")},
        marginal_curves={
            rule: {m: np.repeat(curves[..., None], d, -1) for m in methods} for rule in ("research", "trace")
        },
        failures={m: 0 for m in methods},
        seconds={m: 1.0 for m in methods},
        diagnostics={},
        theta_names=names,
        settings={"model": "gamma-exponential", "epsilon": 1.0, "noise_multiplier": 2.0, "simulations": 500},
        width_ratio={m: np.full((4, d), 1.0 + i) for i, m in enumerate(methods)},
    )


def calibration_result() -> CalibrationResult:
    rng = np.random.default_rng(1)
    methods = ("exact", "naive", "bs2019", "nonprivate")
    x = np.sort(rng.uniform(0, 1, (3, 10)), axis=1)
    return CalibrationResult(
        metrics={m: {"calibration_rmse": np.array([0.02, 0.03, 0.04])} for m in methods},
        curves={m: {"mean_predicted": x, "fraction_positive": x, "counts": np.full((3, 10), 10)} for m in methods},
        histograms={m: rng.integers(1, 100, (3, 20)) for m in methods},
        paired_methods=("exact", "naive"),
        failures={m: 0 for m in methods},
        seconds={},
        diagnostics={},
        settings={
            "dataset": "adult",
            "runs": 3,
            "bins": 10,
            "binning": "equal-count",
            "epsilon": 1.0,
            "noise_multiplier": 2.0,
        },
    )


def test_a_spike_beside_a_wide_density_is_cut_so_the_wide_one_stays_readable():
    """The naive posterior at small ε is a spike hundreds of times taller than the noise-aware density: the panel's
    top is 1.5 × the wide density's peak, and the spike's legend entry says how far above it reaches."""
    from noiseaware.plots.densities import _draw_density

    rng = np.random.default_rng(0)
    samples = {"noise-aware": rng.normal(4.2, 0.06, 20_000), "naive": rng.normal(4.37, 1e-4, 20_000)}
    axis = Figure().subplots()
    _draw_density(axis, samples, "rate (constrained)", 4.27)
    wide = max(line.get_ydata().max() for line in axis.lines if line.get_label() == "noise-aware")
    assert axis.get_ylim()[1] == pytest.approx(1.5 * wide)
    (spike,) = [line.get_label() for line in axis.lines if line.get_label().startswith("naive")]
    mentions(spike, "peak", "above")
    assert axis.get_xlabel() == "rate (constrained)"
    alike = {"a": rng.normal(0, 1, 5000), "b": rng.normal(0.5, 1.2, 5000)}
    axis = Figure().subplots()
    _draw_density(axis, alike, "x", None)
    assert {line.get_label() for line in axis.lines} == {"a", "b"}  # nothing cut where no curve dominates


def test_the_privacy_utility_title_says_how_many_simulations_each_level_had():
    from types import SimpleNamespace

    from noiseaware.plots.tuning import _simulations

    reports = [SimpleNamespace(simulations=n) for n in (40, 200, 40)]
    assert _simulations(reports, [0.3, 1.0, 3.0]) == "40 simulations per ε (200 at ε = 1)"
    assert _simulations(reports[:1] * 2, [0.3, 1.0]) == "40 simulations per ε"


def test_coverage_figure_holds_its_title_and_legend():
    figure = plots.plot_coverage(coverage_result(1))
    mentions(title(figure), "gamma-exponential:", "TARP")
    assert len(figure.legends) == 1 and len(panels(figure)) == 1
    assert_inside(figure)


def test_coverage_width_figure_has_a_point_per_method_and_level(tmp_path):
    """issue 28: coverage RMSE against the median interval width, one point per method and privacy level."""
    results = [coverage_result(2), dataclasses.replace(coverage_result(2), settings={"model": "m", "epsilon": 0.1})]
    plots.plot_coverage_width(results, tmp_path / "width.png")
    assert (tmp_path / "width.png").exists()
    figure = coverage_width_figure(results)
    (axis,) = panels(figure)
    offsets = [line.get_xydata() for line in axis.lines if len(line.get_xydata()) == 2 and line.get_marker() == "o"]
    assert sorted(x for points in offsets for x in points[:, 0]) == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    labels = sorted(text.get_text() for text in axis.texts)
    assert labels == ["ε = 1, 0.1"] * 3  # the two levels' points coincide: one label each, not two printed over
    mentions(title(figure), "coverage", "width")
    assert_inside(figure)


def test_coverage_figure_shows_every_marginal_or_says_what_it_left_out():
    assert len(panels(plots.plot_coverage(coverage_result(12)))) == 1 + 12
    with pytest.warns(UserWarning) as record:
        figure = plots.plot_coverage(coverage_result(20))
    mentions(record, "16", "20")
    assert len(panels(figure)) == 1 + 16
    mentions(title(figure), "showing", "16", "20", "marginal")
    assert_inside(figure)
    assert len(panels(plots.plot_coverage(coverage_result(20), coordinates=[2, "theta[7]"]))) == 1 + 2


def test_every_figure_holds_its_texts(trace, posteriors, tmp_path, drawn):
    plots.plot_trace(trace, tmp_path / "fit.png", posteriors=posteriors, key=0, title="a " + "long title " * 20)
    for figure in [
        *drawn,
        plots.plot_trace(trace),
        plots.plot_posteriors(posteriors["spread"], key=0),
        plots.plot_calibration(calibration_result()),
    ]:
        assert_inside(figure)


# ---------------------------------------------------------------- the methods and the files


def test_plot_functions_return_figures_and_write_png_pdf_svg(trace, posteriors, tmp_path):
    written = {
        "trace.svg": lambda path: plots.plot_trace(trace, path),
        "fit.png": lambda path: plots.plot_trace(trace, path, posteriors=posteriors, key=0),
        "post.pdf": lambda path: plots.plot_posteriors(posteriors["spread"], path, key=0),
        "coverage.png": lambda path: plots.plot_coverage(coverage_result(2), path),
        "calibration.svg": lambda path: plots.plot_calibration(calibration_result(), path),
    }
    for name, plot in written.items():
        assert isinstance(plot(tmp_path / name), Figure)
        assert (tmp_path / name).read_bytes().startswith(MAGIC[(tmp_path / name).suffix])
    plots.plot_posteriors(posteriors, tmp_path / "both.pdf", key=0)
    assert (tmp_path / "both.pdf").read_bytes().startswith(MAGIC[".pdf"])
    assert (
        len(panels(plots.plot_trace(trace))) == 5
        and len(panels(plots.plot_posteriors(posteriors["naive"], key=0))) == 6
    )
    with_densities = plots.plot_trace(trace, posteriors=posteriors, key=0)  # drawn, not saved, without a path
    assert [len(panels(column)) for column in with_densities.subfigs] == [5, 6]


def test_plot_files_are_checked_before_drawing_and_never_replaced_silently(trace, posteriors, tmp_path):
    existing = tmp_path / "post.png"
    existing.write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        plots.plot_posteriors(posteriors["spread"], existing, key=0)
    assert existing.read_bytes() == b"keep me"
    plots.plot_posteriors(posteriors["spread"], existing, key=0, overwrite=True)
    assert existing.read_bytes().startswith(MAGIC[".png"])
    with pytest.raises(ValueError) as info:
        plots.plot_trace(trace, tmp_path / "trace.jpg")
    mentions(info, ".jpg", ".png", ".pdf", ".svg")
    with pytest.raises(ValueError) as info:
        plots.plot_coverage(coverage_result(1), tmp_path / "missing" / "c.png")
    mentions(info, "missing")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["post.png"]
