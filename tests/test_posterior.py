"""MixturePosterior: the θ mixture against its closed forms, files, ArviZ export; fit's errors and warnings."""

import dataclasses
import re
import warnings

import jax
import numpy as np
import pytest
from messages import mentions
from ou import CLIP, SIGMA, N, Q, ou_trace
from scipy import stats

import noiseaware as na
from noiseaware.posteriors.mixture import DPVIM, NAIVE, NOISE_AWARE, mixture_quantile
from noiseaware.posteriors.summary import comparison_table
from noiseaware.trace.sites import SiteSpec
from noiseaware.util.diagnostics import Diagnostics, NoDiagnostics


@dataclasses.dataclass(frozen=True)
class ToyDiagnostics(Diagnostics):
    """A diagnostics record of a made-up route: a float and an array, as a file must bring them back."""

    max_rhat: float
    ess: np.ndarray


def posterior(seed=0, k=500, d=2, sites=None):
    rng = np.random.default_rng(seed)
    optimum = np.concatenate([rng.normal(1.0, 0.5, (1, k, d)), rng.normal(-1.0, 0.3, (1, k, d))], axis=-1)
    names = tuple(f"mu:t[{i}]" for i in range(d)) + tuple(f"rho:t[{i}]" for i in range(d))
    return na.MixturePosterior(
        optimum,
        rng.uniform(1, 2, optimum.shape),
        rng.uniform(0, 1, optimum.shape),
        "test",
        names,
        sites=sites,
        prior="default",
        diagnostics=ToyDiagnostics(max_rhat=1.002, ess=np.array([10.0, 20.0])),
        info={"epsilon": 1.0, "steps": 100},
    )


def test_theta_moments_are_the_mixture_closed_forms_and_match_samples():
    post = posterior()
    mu, rho = post.optimum_draws[:, :2], post.optimum_draws[:, 2:]
    np.testing.assert_allclose(post.theta_mean, mu.mean(axis=0))
    np.testing.assert_allclose(post.theta_sd**2, mu.var(axis=0) + np.mean(np.log1p(np.exp(rho)) ** 2, axis=0))
    theta = post.sample(0, 200_000)
    assert theta.shape == (200_000, 2)
    se = post.theta_sd / np.sqrt(theta.shape[0])
    assert np.all(np.abs(theta.mean(axis=0) - post.theta_mean) < 4 * se)
    np.testing.assert_allclose(theta.std(axis=0), post.theta_sd, rtol=0.01)
    with jax.enable_x64(True):
        in_x64 = post.sample(4, 10)
    np.testing.assert_array_equal(in_x64, post.sample(4, 10))  # the same key gives the same θ either way


def test_mixture_quantiles_invert_the_mixture_cdf():
    post = posterior(1)
    means, sds = post.optimum_draws[:, :2], np.log1p(np.exp(post.optimum_draws[:, 2:]))
    for p in (0.05, 0.5, 0.95):
        q = mixture_quantile(means, sds, p)
        np.testing.assert_allclose(np.mean(stats.norm.cdf((q - means) / sds), axis=0), p, atol=1e-12)
    low, high = post.interval(0.9)
    theta = post.sample(3, 200_000)
    np.testing.assert_allclose(low, np.quantile(theta, 0.05, axis=0), atol=0.02)
    np.testing.assert_allclose(high, np.quantile(theta, 0.95, axis=0), atol=0.02)


def test_one_component_is_the_gaussian():
    trace = ou_trace(steps=200)
    naive = na.naive_posterior(trace)
    final = trace.final_iterate()
    sd = np.log1p(np.exp(final[2:]))
    low, high = naive.interval(0.9)
    np.testing.assert_allclose(low, final[:2] - stats.norm.ppf(0.95) * sd, rtol=1e-9)
    np.testing.assert_allclose(high, final[:2] + stats.norm.ppf(0.95) * sd, rtol=1e-9)
    assert naive.hessian_draws is None and naive.optimum_draws.shape == (1, 4)
    np.testing.assert_allclose(naive.theta_sd, sd)


def test_save_load_round_trip_and_arviz_groups(tmp_path):
    sites = (SiteSpec("t", (2,), "softplus"),)
    post = posterior(sites=sites)
    post.save(tmp_path / "p.nc", key=0)
    loaded = na.load_posterior(tmp_path / "p.nc")
    np.testing.assert_array_equal(loaded.optimum_chains, post.optimum_chains)
    np.testing.assert_array_equal(loaded.hessian_chains, post.hessian_chains)
    np.testing.assert_array_equal(loaded.extra_noise_chains, post.extra_noise_chains)
    assert loaded.sites == sites and loaded.method == "test" and loaded.param_names == post.param_names
    assert loaded.prior == post.prior and loaded.info == post.info
    # the typed record comes back as its own type, its array as an array
    assert type(loaded.diagnostics) is ToyDiagnostics and loaded.kind == post.kind
    assert loaded.diagnostics.max_rhat == 1.002 and loaded.diagnostics["max_rhat"] == 1.002
    np.testing.assert_array_equal(loaded.diagnostics["ess"], [10.0, 20.0])
    assert isinstance(loaded.diagnostics.ess, np.ndarray) and set(loaded.diagnostics) == {"max_rhat", "ess"}
    tree = post.to_arviz(key=0)
    assert tree["posterior"]["t"].shape == (1, 500, 2)
    # θ[k] is drawn from the k-th component: its mean over draws of (θ − μ*)/softplus(ρ*) is standard normal
    z = (np.log(np.expm1(tree["posterior"]["t"].values[0])) - post.optimum_draws[:, :2]) / np.log1p(
        np.exp(post.optimum_draws[:, 2:])
    )
    assert abs(z.mean()) < 4 / np.sqrt(z.size) and abs(z.std() - 1) < 0.1
    assert np.all(tree["posterior"]["t"].values > 0)  # softplus: the model's own (positive) space
    assert tree["gradient_model"]["optimum"].dims == ("chain", "draw", "param")
    named = post.constrained_sample(0, 10)
    assert named["t"].shape == (10, 2) and named["t"].dtype == np.float64


@pytest.mark.parametrize(("damage", "tokens"), [("method", ("lacks", "'method'")), ("info", ("JSON", "damaged"))])
def test_a_posterior_file_missing_a_part_or_holding_bad_json_is_one_clear_error(tmp_path, damage, tokens):
    """A file of version 1 (before files carried a checksum) with a part missing or damaged: one error naming it."""
    import h5netcdf

    path = tmp_path / "p.nc"
    posterior().save(path, key=0)
    with h5netcdf.File(path, "a") as file:
        file.attrs["schema_version"] = 1
        del file.attrs["checksum"]
        if damage == "method":
            del file.attrs["method"]
        else:
            file.attrs["info"] = "{not json"
    with pytest.raises(ValueError) as info:
        na.load_posterior(path)
    mentions(info, str(path), *tokens, "again")


@pytest.mark.parametrize("save", ["mixture", "draws"])
def test_a_posterior_file_edited_after_it_was_written_is_refused_by_its_checksum(tmp_path, save):
    """Every posterior file carries the checksum of what is read back: an edited draw or attribute, or the checksum
    deleted, is refused naming the file; a file as written, and one whose ArviZ-only group was edited, loads."""
    import h5netcdf

    post = posterior() if save == "mixture" else na.posteriors.DrawsPosterior(posterior().sample(0, 50)[None], "ref")
    group, variable = ("gradient_model", "optimum") if save == "mixture" else ("posterior", "theta")
    edits = {
        "a draw": lambda file: file[group][variable].__setitem__((0, 0, 0), 9.0),
        "an attribute": lambda file: file.attrs.__setitem__("method", "exact"),
    }
    for name, edit in edits.items():
        path = tmp_path / f"{name.replace(' ', '-')}.nc"
        post.save(path, key=0) if save == "mixture" else post.save(path)
        before = na.load_posterior(path)
        assert type(before) is type(post)
        with h5netcdf.File(path, "a") as file:
            edit(file)
        with pytest.raises(ValueError) as info:
            na.load_posterior(path)
        mentions(info, str(path), "checksum", "changed", "again")
    with h5netcdf.File(path, "a") as file:
        del file.attrs["checksum"]
    with pytest.raises(ValueError) as info:
        na.load_posterior(path)
    mentions(info, "lacks", "checksum")


def test_bad_files_and_paths_give_clear_errors(tmp_path):
    post = posterior()
    with pytest.raises(ValueError) as info:
        post.save(tmp_path / "p.npz", key=0)
    mentions(info, ".nc", "p.npz")
    with pytest.raises(ValueError) as info:
        post.save(tmp_path / "missing" / "p.nc", key=0)
    mentions(info, "missing")
    with pytest.raises(ValueError) as info:
        na.load_posterior(tmp_path / "nothing.nc")
    mentions(info, "nothing.nc")
    na.Trace.from_arrays(
        np.zeros((10, 2)) + np.arange(10)[:, None],
        np.ones((10, 2)),
        noise_multiplier=1.0,
        clip=1.0,
        sampling_rate=0.1,
        n_examples=10,
    ).save(tmp_path / "trace.nc")
    with pytest.raises(ValueError) as info:
        na.load_posterior(tmp_path / "trace.nc")
    mentions(info, "trace.nc")
    with pytest.raises(ValueError) as info:
        post.constrained_sample(0, 5)
    mentions(info, "constrained_sample", "sites=...", "Trace.from_arrays")
    with pytest.raises(ValueError, match="non-finite"):
        na.MixturePosterior(np.full((1, 3, 2), np.nan), None, None, "x", ("mu:a", "rho:a"))
    with pytest.raises(TypeError) as info:  # a plain dict is not a diagnostics record
        na.MixturePosterior(np.zeros((1, 3, 2)), None, None, "x", ("mu:a", "rho:a"), diagnostics={"a": 1.0})
    mentions(info, "Diagnostics")


def test_the_kinds_say_what_they_are(tmp_path):
    """One mixture type told apart by its kind: each summary opens with its kind, the diagnostics give the
    description's details, and a saved file keeps both; without diagnostics a posterior has NoDiagnostics."""
    trace = ou_trace(steps=200)
    posts = [
        na.MixturePosterior(np.zeros((1, 3, 4)), None, None, "x", trace.param_names),
        na.naive_posterior(trace),
        na.dpvim_posterior(trace, key=0, draws=50),
    ]
    assert [post.kind for post in posts] == [NOISE_AWARE, NAIVE, DPVIM] and posts[0].diagnostics == NoDiagnostics()
    mentions(posts[1].describe(), "DP", "noise")
    mentions(posts[2].describe(), "50", "φ:")
    for m, post in enumerate(posts):
        assert isinstance(post, na.Posterior) and str(post.summary(key=0)).startswith(post.describe())
        post.save(tmp_path / f"{m}.nc", key=0)
        assert na.load_posterior(tmp_path / f"{m}.nc").describe() == post.describe()


def test_fit_rejects_short_traces_and_unknown_methods():
    trace = ou_trace(steps=60)
    with pytest.raises(ValueError) as info:
        na.fit(trace, key=0)
    mentions(info, "50")
    with pytest.raises(ValueError) as info:
        na.fit(ou_trace(steps=500), "mcmc", key=0)
    mentions(info, "['mcmc']", "exact", "laplace", "nuts")
    with pytest.raises(TypeError, match="key"):  # the draws depend on the key: there is no default
        na.fit(ou_trace(steps=500), "exact")
    with pytest.raises(ValueError) as info:
        na.fit(ou_trace(steps=500), "bs2018", key=0)
    mentions(info, "bs2018")
    with pytest.raises(ValueError) as info:
        na.fit(ou_trace(steps=500), "exact", key=0, style="paper")
    mentions(info, "'exact'", "'style'")
    with pytest.raises(na.TraceError, match="finite"):
        params = ou_trace(steps=100).params.copy()
        params[5, 0] = np.nan
        na.Trace.from_arrays(
            params, np.ones_like(params), noise_multiplier=SIGMA, clip=CLIP, sampling_rate=Q, n_examples=N
        )


@pytest.mark.slow
def test_gradients_without_signal_warn_and_widen_the_interval():
    """Gradients that ignore φ (pure DP noise): the slope is ~0, fit warns, and the optimum's interval is
    as wide as its prior allows instead of a confident wrong answer."""
    rng = np.random.default_rng(0)
    params = np.cumsum(rng.normal(0, 0.01, (3000, 2)), axis=0)
    grads = rng.normal(0, SIGMA * CLIP, (3000, 2))
    phi, g = params[600:] - params[600:].mean(axis=0), grads[600:]
    grads[600:] = g - phi * np.sum(g * phi, axis=0) / np.sum(phi * phi, axis=0)  # slope exactly 0
    trace = na.Trace.from_arrays(params, grads, noise_multiplier=SIGMA, clip=CLIP, sampling_rate=Q, n_examples=N)
    prior_width = 2 * stats.norm.ppf(0.95)  # φ* ~ N(φ̄, 1)
    for method in ("exact", "laplace"):
        with pytest.warns(UserWarning) as record:
            post = na.fit(trace, method, key=0)
        mentions(record, "mu:theta[0]", "rho:theta[0]")
        low, high = post.optimum_interval(0.9)
        assert np.all(np.isfinite(post.optimum_draws)) and np.all(high - low > 0.3 * prior_width), method


@pytest.mark.slow
def test_fit_on_a_well_identified_trace_does_not_warn_and_compares():
    trace = ou_trace(steps=4000, optimum=(0.5, -1.0, -3.0, -2.0), hessian=(400.0, 400.0, 20.0, 20.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        post = na.fit(trace, key=0)
    table = comparison_table({"noise-aware": post, "naive": na.naive_posterior(trace)}, truth=[0.5, -1.0], key=0)
    assert "noise-aware 90%" in table and "truth" in table
    assert post.info["burn_in"] == 0.2 and post.method == "exact" and post.prior == "default"


@pytest.mark.slow
def test_fit_batch_counts_warnings_and_refuses_traces_of_two_models():
    """A warning raised by some traces comes back once, with their number (the batch-key convention itself is
    tests/test_method_contract.py's)."""
    rng = np.random.default_rng(0)
    params = np.cumsum(rng.normal(0, 0.01, (3000, 4)), axis=0)
    silent = na.Trace.from_arrays(
        params,
        rng.normal(0, SIGMA * CLIP, (3000, 4)),
        noise_multiplier=SIGMA,
        clip=CLIP,
        sampling_rate=Q,
        n_examples=N,
        grad_scale=np.array([1.0, 1.0, 50.0, 50.0]),
    )
    traces = [ou_trace(steps=2000, seed=1), silent, ou_trace(steps=2000, seed=2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        na.fit_batch(traces, key=7)
    texts = [str(w.message) for w in caught if not str(w.message).startswith("trace check")]
    # the silent trace's ρ gradients vary 50× more than its recorded DP noise: the trace checks say so, once
    checks = [str(w.message) for w in caught if str(w.message).startswith("trace check")]
    assert checks and all(re.search(r"\b1 of 3\b", c) for c in checks)  # in 1 of 3 traces
    # one line: the silent trace's μ coordinates and the OU traces' weakly identified coordinate 0, with counts
    assert len(texts) == 1 and texts[0].startswith("weak identification"), texts  # the note's kind
    mentions(texts[0], "3", "mu:theta[0]", "mu:theta[1]")
    assert re.search(r"\b3 of 3\b", texts[0]) and texts[0].index("mu:theta[0]") < texts[0].index("mu:theta[1]")
    assert "mu:theta[1] in 1" in texts[0]
    # traces of two models in one batch are a wrong request, not a failed fit: a TypeError at once, which
    # on_error="skip" does not turn into skipped traces
    other_model = na.Trace.from_arrays(
        params[:, :2], params[:, :2], noise_multiplier=SIGMA, clip=CLIP, sampling_rate=Q, n_examples=N
    )
    for on_error in ("raise", "skip"):
        with pytest.raises(TypeError) as info:
            na.fit_batch([traces[0], other_model], key=0, on_error=on_error)
        mentions(info, "parameters")


@pytest.mark.slow
def test_fit_batch_nuts_vmapped_in_padded_chunks_agrees_with_exact():
    """Vmapped blackjax NUTS over 3 traces in chunks of 2 (the last padded): every trace gets its own
    draws, whose means agree with the exact route's within 5 Monte Carlo standard errors."""
    traces = [ou_trace(steps=2000, seed=s) for s in (3, 4, 5)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch = na.fit_batch(traces, "nuts", key=2, draws=1000, warmup=300, chunk=2)
        exact = na.fit_batch(traces, "exact", key=2)
    assert len(batch) == 3 and not np.array_equal(batch[1].optimum_draws, batch[2].optimum_draws)
    for post, reference in zip(batch, exact):
        assert post.method == "nuts" and post.diagnostics["backend"] == "blackjax"
        mcse = reference.diagnostics["optimum_sd"] / np.sqrt(post.diagnostics["ess_bulk"]["optimum"])
        error = np.abs(post.optimum_draws.mean(axis=0) - reference.diagnostics["optimum_mean"])
        assert np.all(error < 5 * mcse), error / mcse


@pytest.mark.slow
def test_fit_batch_skips_failed_fits_on_request():
    """A trace whose exact fit fails is None under on_error='skip' (with a warning naming it) and raises,
    naming the trace, under the default."""
    good = ou_trace(steps=2000, seed=1)
    bad = dataclasses.replace(good, grads=np.where(np.arange(good.steps)[:, None] == 1500, 1e300, good.grads))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = na.fit_batch([good, bad], key=0, on_error="skip")
    assert out[0] is not None and out[1] is None
    mentions(caught, "1", "2", "fits", "trace")
    with pytest.raises(ValueError) as info:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            na.fit_batch([good, bad], key=0)
    mentions(info, "trace", "1")
    with pytest.raises(ValueError) as info:
        na.fit_batch([good], key=0, on_error="ignore")
    mentions(info, "on_error", "'raise'", "'skip'", "'ignore'")


def test_a_posterior_of_draws_saves_and_loads_back_whole(tmp_path):
    """`save_draws` files (the non-private reference, DP-SGLD, the bootstrap, the data baselines) load back as a
    `DrawsPosterior`: the same draws, names, method, diagnostics and sites, so its summaries on the sites' own
    scale are the same; a file is never replaced unasked."""
    sites = (SiteSpec("rate", (), "exp"), SiteSpec("w", (2,), "identity", ("age", "hours")))
    chains = np.random.default_rng(4).normal(size=(2, 30, 3))
    post = na.posteriors.DrawsPosterior(chains, "tail", sites=sites)
    post.save(tmp_path / "draws.nc")
    loaded = na.load_posterior(tmp_path / "draws.nc")
    assert isinstance(loaded, na.posteriors.DrawsPosterior) and loaded.method == "tail"
    np.testing.assert_array_equal(loaded.chains, chains)
    assert loaded.sites == sites and loaded.theta_names == post.theta_names
    np.testing.assert_array_equal(loaded.constrained_sample(1, 10)["rate"], post.constrained_sample(1, 10)["rate"])
    with pytest.raises(FileExistsError):
        post.save(tmp_path / "draws.nc")
    unknown = na.posteriors.DrawsPosterior(chains[..., :1], "ref")
    unknown.save(tmp_path / "unknown.nc")
    assert na.load_posterior(tmp_path / "unknown.nc").sites is None


def test_older_and_newer_files_of_draws(tmp_path):
    """A file of draws written before such files had a schema or sites loads; one of a later schema version is
    refused with the reason, not read wrongly."""
    import xarray as xr

    theta = np.random.default_rng(5).normal(size=(1, 20, 2))
    posterior = xr.Dataset(
        {"theta": (("chain", "draw", "theta_dim"), theta)},
        coords={"chain": [0], "draw": np.arange(20), "theta_dim": ["a", "b"]},
    )
    old = {"kind": "DrawsPosterior", "method": "ref", "diagnostics_type": "NoDiagnostics", "diagnostics": "{}"}
    xr.DataTree.from_dict({"/": xr.Dataset(attrs=old), "posterior": posterior}).to_netcdf(
        tmp_path / "old.nc", engine="h5netcdf"
    )
    loaded = na.load_posterior(tmp_path / "old.nc")
    np.testing.assert_array_equal(loaded.chains, theta)
    assert loaded.method == "ref" and loaded.theta_names == ("a", "b") and loaded.sites is None
    newer = old | {"schema": "noiseaware-draws-posterior", "schema_version": 3}
    xr.DataTree.from_dict({"/": xr.Dataset(attrs=newer), "posterior": posterior}).to_netcdf(
        tmp_path / "newer.nc", engine="h5netcdf"
    )
    with pytest.raises(ValueError) as info:
        na.load_posterior(tmp_path / "newer.nc")
    mentions(info, "3", "1", "2")
