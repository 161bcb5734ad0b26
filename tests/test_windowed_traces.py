"""A run kept as its window sums and a sample of rows (`WindowedTrace`), accumulated in a training loop.

The moments of the windows after any window's burn-in are the direct sums of the kept rows (float64, random rows) and
the rows' own moments; the gradient model's moments from a windowed trace are the full trace's, and a fit from the
windowed trace is the full trace's fit
with the same key, up to float rounding, on M1, the 10D regression and the Adult model, with the model's prior (its
coupling through the cross moments) and without; the optax transformation leaves the aggregate's outputs bit for bit
and keeps the same sums in float32; files round-trip and refuse what is not theirs.
"""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from cli_helpers import run, single_error
from scipy import stats as scipy_stats

import noiseaware as na
from noiseaware.adapters import optax as optax_adapter
from noiseaware.inference.gradient_model import scale_coordinates
from noiseaware.inference.statistics import model_moments
from noiseaware.trace.moments import moments_of_rows, moments_of_windows
from noiseaware.trace.sums import window_bounds
from noiseaware.trace.windowed import accumulate


def _walk(seed: int, steps: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a random walk φ (T, 2d) far from 0 (float32 sums about 0 would lose digits) and noisy G (T, 2d)."""
    rng = np.random.default_rng(seed)
    params = 3.0 + np.cumsum(0.05 * rng.normal(size=(steps, 2 * dim)), axis=0)
    return params, rng.normal(size=(steps, 2 * dim)) - 0.3 * (params - 3.0)


@pytest.mark.parametrize("start", [0, 2, 9])
def test_the_windows_moments_are_the_kept_rows_sums(start):
    dim, steps, windows = 3, 1003, 10
    params, grads = _walk(0, steps, dim)
    bounds = window_bounds(steps, windows)
    with jax.enable_x64(True):
        starts = tuple(bounds[:-1].tolist())
        sums = accumulate(
            jnp.asarray(params), jnp.asarray(grads), starts=starts, scale_rows=slice(dim, 2 * dim), coupled=dim
        )
    pool = moments_of_windows(jax.tree.map(np.asarray, sums), start, int(bounds[start]))
    phi, grad = params[bounds[start] :], grads[bounds[start] :]
    x = phi - phi.mean(axis=0)
    np.testing.assert_allclose(pool.centre, phi.mean(axis=0), rtol=1e-14)
    for got, want in [(pool.sum_phiphi, x * x), (pool.sum_gphi, grad * x), (pool.sum_gg, grad * grad)]:
        np.testing.assert_allclose(got, want.sum(axis=0), rtol=1e-11)
    scale = np.log1p(np.exp(phi[:, dim:]))
    psi, weight = scale**2, 1.0 / (1.0 + np.exp(-phi[:, dim:])) / scale
    z = psi - psi.mean(axis=0)
    np.testing.assert_allclose(pool.psi_phiphi, np.sum(weight**2 * z**2, axis=0), rtol=1e-10)
    np.testing.assert_allclose(pool.psi_gphi, np.sum(grad[:, dim:] * weight * z, axis=0), rtol=1e-10, atol=1e-10)
    delta = x[:, :dim]
    np.testing.assert_allclose(pool.wander, np.einsum("tk,tj->kj", delta**2, delta), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pool.wander_g, np.einsum("tk,tj->kj", delta**2, grad[:, :dim]), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pool.wander2, np.einsum("tk,tl->kl", delta**2, delta**2), rtol=1e-10)
    np.testing.assert_array_equal(np.asarray(sums.growth), np.max(np.abs(params - params[0]), axis=0))
    np.testing.assert_allclose(pool.x3, np.sum(x**3, axis=0), rtol=1e-9)
    np.testing.assert_allclose(pool.x4, np.sum(x**4, axis=0), rtol=1e-10)
    np.testing.assert_allclose(pool.x2g, np.sum(x * x * grad, axis=0), rtol=1e-9)
    opening = np.isin(np.arange(bounds[start], steps)[1:], bounds)  # pairs across two windows are not kept
    np.testing.assert_allclose(pool.lag, np.sum((x[1:] * x[:-1])[~opening], axis=0), rtol=1e-10)
    rows = moments_of_rows(params, grads, int(bounds[start]), slice(dim, 2 * dim), cross=dim)
    for name in ("count", "start", "centre", "sum_phiphi", "sum_g", "sum_gg", "grad_ss", "sum_gphi", "psi_centre"):
        np.testing.assert_allclose(getattr(pool, name), getattr(rows, name), rtol=1e-9, atol=1e-9, err_msg=name)
    for name in ("psi_phi", "psi_phiphi", "psi_g", "psi_gphi", "psi_ww", "wander", "wander_g", "wander2", "x4"):
        np.testing.assert_allclose(getattr(pool, name), getattr(rows, name), rtol=1e-9, atol=1e-9, err_msg=name)


def _trace(name: str, steps: int) -> tuple[na.models.BenchmarkModel, na.Trace]:
    """A built-in model (Adult's on 2 000 examples: its 57 coefficients, at a test's cost) and a run of `steps`."""
    bm = na.models.get(name)
    if name == "adult-logistic":
        bm = na.models.from_numpyro(bm.model, n_examples=2000, covariates=bm.covariates, **bm.dpvi_settings)
    _, data = bm.simulate(jax.random.key(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", na.recording.settings.SettingsHint)
        return bm, na.record_dpvi(bm.model, data, key=4, epsilon=1.0, **(bm.dpvi_settings | {"steps": steps}))


@pytest.mark.parametrize("name", ["gamma-exponential", "linreg-10d", "adult-logistic"])
def test_a_fit_from_the_summary_is_the_fit_from_the_full_trace(name):
    bm, trace = _trace(name, 2000)
    summary = na.windowed(trace)
    model_prior = bm.optimum_prior()
    rows = scale_coordinates(trace)
    cases = [(None, None, False), (rows, None, False), (None, model_prior.coupling, False), (rows, None, True)]
    for scale_rows, coupling, partial in cases:  # the last: the Stein model's μ rows net of the others where coupled
        curvature = None if coupling is None else np.median(model_prior.curvature, axis=0)
        want = model_moments(trace, 0.2, scale_rows, coupling, curvature, partial=partial)
        got = model_moments(summary, 0.2, scale_rows, coupling, curvature, partial=partial)
        assert got.partial == want.partial
        for field in ("centre", "sum_g", "sum_gg", "sum_phiphi", "sum_gphi", "sum_ww"):
            np.testing.assert_allclose(getattr(got, field), getattr(want, field), rtol=1e-9, err_msg=field)
        if want.mu_phiphi is not None:
            np.testing.assert_allclose(got.mu_phiphi, want.mu_phiphi, rtol=1e-9)
            np.testing.assert_allclose(got.mu_gphi, want.mu_gphi, rtol=1e-9)
        # Σ φ̃ is 0 up to the rounding of T' values of the size of φ̄
        rounding = 1e-12 * want.count * np.maximum(1.0, np.abs(want.centre))
        np.testing.assert_array_less(np.abs(got.sum_phi - want.sum_phi), rounding)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model in (bm, None):
            full, kept = (na.fit(source, key=0, model=model) for source in (trace, summary))
            sd = full.optimum_chains.std(axis=(0, 1))
            assert np.max(np.abs(full.optimum_chains - kept.optimum_chains) / sd) < 1e-8
            assert kept.prior == full.prior


def _optax_run(first, steps=600, n=400, batch=40):
    """A DP-SGD run of a mean-field logistic regression (d = 2) through `first`, chained before sgd: (φ_T, state)."""
    key = jax.random.key(0)
    X = jax.random.normal(key, (n, 2))
    y = (X @ jnp.array([1.0, -0.5]) + jax.random.logistic(jax.random.key(1), (n,)) > 0).astype(jnp.float32)

    def loss(phi, x, y_i, eps):
        sd = jax.nn.softplus(phi["rho"])
        theta = phi["mu"] + sd * eps
        return jax.nn.softplus(-(2 * y_i - 1) * (theta @ x)) + 0.5 * theta @ theta / n - jnp.sum(jnp.log(sd)) / n

    per_example = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0, None))
    opt = optax.chain(first, optax.sgd(0.05))

    def step(carry, key):
        phi, state = carry
        pick, draw = jax.random.split(key)
        rows = jax.random.choice(pick, n, (batch,), replace=False)
        updates, state = opt.update(per_example(phi, X[rows], y[rows], jax.random.normal(draw, (2,))), state, phi)
        return (optax.apply_updates(phi, updates), state), None

    phi0 = {"mu": jnp.zeros(2), "rho": jnp.full(2, -1.0)}
    return jax.jit(lambda c, k: jax.lax.scan(step, c, k))((phi0, opt.init(phi0)), jax.random.split(key, steps))[0]


def test_the_optax_summary_leaves_the_aggregate_bit_for_bit_and_keeps_the_traces_sums():
    clip, sigma, key, steps = 1.0, 2.0, jax.random.key(7), 600
    plain, _ = _optax_run(optax.contrib.differentially_private_aggregate(clip, sigma, key))
    phi, recorded = _optax_run(optax_adapter.recording_aggregate(clip, sigma, key, steps=steps))
    summed, state = _optax_run(optax_adapter.windowing_aggregate(clip, sigma, key, steps=steps))
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(summed)):
        np.testing.assert_array_equal(a, b)
    settings = dict(clip=clip, noise_multiplier=sigma, sampling_rate=0.1, n_examples=400, final_params=phi)
    trace = optax_adapter.trace_of(recorded, **settings)
    summary = optax_adapter.windowed_of_aggregate(state, **settings)
    reference = na.windowed(trace)
    for name in ("y", "yy", "g", "gg", "gy", "gw", "gwv", "wwvv"):
        got, want = getattr(summary.sums, name), getattr(reference.sums, name)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-6 * np.max(np.abs(want)))
    np.testing.assert_array_equal(summary.sample.params, reference.sample.params)
    np.testing.assert_allclose(summary.sample.grads, reference.sample.grads, rtol=1e-6)
    assert summary.settings.convention == trace.convention
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full, kept = (na.fit(source, key=1, checks="off") for source in (trace, summary))
    assert np.max(np.abs(full.optimum_chains - kept.optimum_chains) / full.optimum_chains.std(axis=(0, 1))) < 1e-3


def test_a_run_of_another_length_than_the_summary_was_made_for_is_refused():
    _, state = _optax_run(optax_adapter.windowing_aggregate(1.0, 2.0, jax.random.key(7), steps=700))
    with pytest.raises(ValueError, match=r"600 updates.*steps=700"):
        optax_adapter.windowed_of_aggregate(state, clip=1.0, noise_multiplier=2.0, sampling_rate=0.1, n_examples=400)


def test_summary_files_round_trip_and_refuse_what_is_not_theirs(tmp_path):
    _, trace = _trace("linreg-10d", 1000)
    summary = na.windowed(trace, windows=5, rows=16)
    summary.save(tmp_path / "s.npz")
    loaded = na.WindowedTrace.load(tmp_path / "s.npz")
    for a, b in zip(jax.tree.leaves(summary.sums), jax.tree.leaves(loaded.sums)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(loaded.sample.params, summary.sample.params)
    assert (loaded.steps, loaded.windows, loaded.sample_steps.tolist()) == (1000, 5, summary.sample_steps.tolist())
    with pytest.raises(FileExistsError):
        summary.save(tmp_path / "s.npz")
    with pytest.raises(na.TraceError, match="read it with noiseaware.WindowedTrace.load"):
        na.Trace.load(tmp_path / "s.npz")
    trace.save(tmp_path / "t.npz")
    with pytest.raises(na.TraceError, match="it is a trace: read it with noiseaware.Trace.load"):
        na.WindowedTrace.load(tmp_path / "t.npz")
    with pytest.raises(na.TraceError, match="ends in .npz"):
        summary.save(tmp_path / "s.nc")
    fields = dict(np.load(tmp_path / "s.npz"))
    fields["sums_count"] = fields["sums_count"] + 1
    np.savez(tmp_path / "bad.npz", **fields)
    with pytest.raises(na.TraceError, match="bad.npz: the window counts"):
        na.WindowedTrace.load(tmp_path / "bad.npz")
    fields = dict(np.load(tmp_path / "s.npz"))
    fields["sums_gy"] = np.where(fields["sums_gy"] > 0, np.nan, fields["sums_gy"])
    np.savez(tmp_path / "nan.npz", **fields)
    with pytest.raises(na.TraceError, match=r"nan.npz: .*\bgy\b"):
        na.WindowedTrace.load(tmp_path / "nan.npz")
    fields = dict(np.load(tmp_path / "s.npz"))
    fields["sums_y"] = np.array([{"a": 1}], dtype=object)
    np.savez(tmp_path / "pickle.npz", **fields)
    with pytest.raises(na.TraceError, match="never unpickled"):
        na.WindowedTrace.load(tmp_path / "pickle.npz")


def test_sums_of_one_run_with_the_sample_rows_of_another_are_refused():
    """Two runs from the same start φ_0: the sums of one with the sample of the other pass the first-row check, and
    are refused by the rows the window sums pin down (each window's first and last step, T − 1 among them)."""
    _, trace = _trace("linreg-10d", 1000)
    rows = np.asarray(trace.params)
    shifted = np.concatenate([rows[:1], rows[1:] + 0.01 * np.std(rows, axis=0)]).astype(rows.dtype)
    other = dataclasses.replace(trace, params=shifted)
    summary, foreign = na.windowed(trace, windows=5, rows=16), na.windowed(other, windows=5, rows=16)
    with pytest.raises(na.TraceError, match="different runs"):
        dataclasses.replace(summary, sample=foreign.sample)


def test_a_windowed_trace_or_anything_but_a_trace_is_not_windowed_again():
    _, trace = _trace("gamma-exponential", 200)
    summary = na.windowed(trace, windows=4, rows=8)
    with pytest.raises(TypeError, match="already a windowed trace"):
        na.windowed(summary)
    with pytest.raises(TypeError, match="takes a Trace"):
        na.windowed(trace.params)


def test_what_a_summary_cannot_give_is_refused_with_what_to_do():
    _, trace = _trace("gamma-exponential", 1000)
    summary = na.windowed(trace)
    with pytest.raises(ValueError, match="burn_in=0.25 .* does not: use one of 0, 0.1, 0.2"):
        na.fit(summary, key=0, burn_in=0.25, checks="off")
    with pytest.raises(ValueError, match=r"'dpvim'.* exact, laplace, nuts"):
        na.fit(summary, "dpvim", key=0)
    with pytest.raises(ValueError, match="extra terms .* WindowedTrace does not keep"):
        na.fit(summary, key=0, prior="expanded", checks="off")
    post = na.fit(summary, key=0, checks="raise")
    assert post.iterates.shape == (len(summary.sample_steps), 1)
    assert post.checks.unchecked == ("autocorrelation", "clipping")


@pytest.mark.parametrize("name", ["gamma-exponential", "linreg-10d"])
def test_the_trace_checks_of_a_summary_are_the_traces(name):
    """Every statistic but the start offset (the summary's first kept window stands for the kept trace's first tenth)
    and the residuals' autocorrelation (no rows: not checked, and said so) is the full trace's; so are the verdicts."""
    _, trace = _trace(name, 3000)
    full, kept = na.diagnose(trace), na.diagnose(na.windowed(trace))
    assert kept.unchecked == ("autocorrelation", "clipping") and "not checked: autocorrelated residuals" in kept.verdict
    assert full.fired == kept.fired
    for statistic, value in full.statistics.items():
        if statistic not in ("start_offset", "p_autocorrelation"):
            np.testing.assert_allclose(kept.statistics[statistic], value, rtol=1e-9, atol=1e-12, err_msg=statistic)
    assert np.all(np.isnan(kept.statistics["p_autocorrelation"]))
    assert na.TraceDiagnosis.from_dict(kept.to_dict()).unchecked == ("autocorrelation", "clipping")


def test_noiseaware_record_keeps_a_summary_that_fit_reads_and_refuses_to_plot(tmp_path, capsys):
    record = ("record", "--model", "gamma-exponential", "--epsilon", "1", "--steps", "1000", "--windowed")
    assert ".npz" in single_error(capsys, *record, "--out", tmp_path / "run.nc")
    code, out, _ = run(capsys, *record, "--out", tmp_path / "run.npz")
    assert code == 0 and "windowed trace saved to" in out and "noiseaware windowed trace" in out
    code, out, _ = run(capsys, "fit", str(tmp_path / "run.npz"), "--seed", "1", "--out", str(tmp_path / "post.nc"))
    assert code == 0
    assert "not checked: autocorrelated residuals" in out
    assert "noise-aware posterior: method exact" in out and "naive 90%" in out
    assert na.load_posterior(tmp_path / "post.nc").info["steps"] == 1000
    error = single_error(capsys, "fit", str(tmp_path / "run.npz"), "--plot", str(tmp_path / "p.png"))
    assert "windowed" in error and "--plot" in error


def test_a_fit_in_blocks_of_coordinates_is_the_whole_fit():
    """The exact route in blocks of 5 of the 10D model's 24 coordinates (the last block padded): the grid's exact
    moments and evidence of every coordinate are the whole fit's; the draws are the blocks' own; the repair takes the
    same rows (whose moments are their draws')."""
    bm, trace = _trace("linreg-10d", 2000)
    summary = na.windowed(trace)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = na.fit(trace, key=0, model=bm, checks="off", repair=False)
        blocks = na.fit(summary, key=0, model=bm, checks="off", block=5, repair=False)
        repaired = [na.fit(s, key=0, model=bm, checks="off", block=b) for s, b in ((trace, 4096), (summary, 5))]
    notes = [[n for n in post.notes if "repaired" in n.kind] for post in repaired]
    assert notes[0] and notes[0] == notes[1]
    for name in ("optimum_mean", "optimum_sd", "hessian_mean", "log_evidence", "edge_mass"):
        np.testing.assert_allclose(blocks.diagnostics[name], whole.diagnostics[name], rtol=1e-9, err_msg=name)
    assert blocks.optimum_chains.shape == whole.optimum_chains.shape
    z = (blocks.optimum_chains.mean(axis=(0, 1)) - whole.diagnostics["optimum_mean"]) / whole.diagnostics["optimum_sd"]
    assert np.max(np.abs(z)) < 5 / np.sqrt(whole.optimum_chains.shape[1])  # the draws' Monte Carlo error
    with pytest.raises(ValueError, match="block"):
        na.fit(trace, key=0, block=0)


def test_record_dpvi_keeps_the_same_run_as_a_summary():
    """windowed=True runs the trace's steps (same keys) and keeps their sums in float32: the sample rows are the
    trace's bit for bit, the sums its float64 sums up to float32 rounding, with or without a progress bar."""
    bm = na.models.get("gamma-exponential")
    _, data = bm.simulate(jax.random.key(3))
    settings = bm.dpvi_settings | {"steps": 2000}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", na.recording.settings.SettingsHint)
        trace = na.record_dpvi(bm.model, data, key=4, epsilon=1.0, **settings)
        kept = [
            na.record_dpvi(bm.model, data, key=4, epsilon=1.0, windowed=True, progress=p, **settings) for p in (0, 1)
        ]
    reference = na.windowed(trace)
    np.testing.assert_array_equal(kept[0].sample.params, reference.sample.params)
    np.testing.assert_array_equal(kept[0].sample.grads, reference.sample.grads)
    np.testing.assert_array_equal(kept[0].final_iterate(), trace.final_iterate())
    for name in ("y", "yy", "g", "gg", "gy", "gwv", "lag", "yyg"):
        want = getattr(reference.sums, name)
        np.testing.assert_allclose(getattr(kept[0].sums, name), want, rtol=1e-4, atol=1e-5 * np.max(np.abs(want)))
    for a, b in zip(jax.tree.leaves(kept[0].sums), jax.tree.leaves(kept[1].sums)):
        np.testing.assert_array_equal(a, b)


def test_a_summary_reads_as_its_trace_in_text_and_in_a_full_rank_fit():
    """describe() is the trace's report under its own title; a full-rank run (no cross moments, its ρ block in ψ for the
    repair) is fitted from its summary as from its trace."""
    bm = na.models.get("linreg-10d")
    _, data = bm.simulate(jax.random.key(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = na.record_dpvi(bm.model, data, key=4, epsilon=1.0, **(bm.dpvi_settings | {"steps": 1000}))
        summary = na.windowed(trace)
        assert summary.describe().splitlines()[1:] == trace.describe().splitlines()[1:]
        assert summary.describe().startswith("noiseaware windowed trace")
        with pytest.deprecated_call():
            assert summary.summary() == summary.describe()
        with pytest.deprecated_call():
            assert trace.summary() == trace.describe()
        full = na.record_dpvi(
            bm.model, data, key=4, epsilon=1.0, family="full-rank", **(bm.dpvi_settings | {"steps": 1000})
        )
        kept = na.windowed(full)
        assert kept.sums.cross is None
        a, b = (na.fit(source, key=0, checks="off") for source in (full, kept))
    assert np.max(np.abs(a.optimum_chains - b.optimum_chains) / a.optimum_chains.std(axis=(0, 1))) < 1e-8


@pytest.mark.parametrize(
    "convention, reported",
    [
        (na.trace.Convention(normaliser="microbatches", clipping="microbatch", microbatch_size=2, sampling="fixed"), 8),
        (na.trace.Convention(normaliser="expected-batch", batch_divisor=5.0), 7),
        (na.trace.Convention(normaliser="sum"), 3),
    ],
)
def test_the_summary_of_a_loop_takes_its_producers_convention_as_the_trace_does(convention, reported):
    """The same loop recorded as a trace and kept as a summary, under a convention whose noisy sum is not the reported
    divisor times the release (microbatches: b·D_t/b; a constant divisor that the loop reports otherwise): the
    summary's sums are the trace's."""
    from noiseaware.adapters.recorder import recorded_trace, recording
    from noiseaware.adapters.windowing import windowed_of, windowing

    steps, key = 300, jax.random.key(5)
    sums = jax.random.normal(key, (steps, 4))  # stand-ins for the noisy sums the loop releases, one per step

    def loop(first):
        opt = optax.chain(first, optax.sgd(0.01))

        def step(carry, noisy):
            phi, state = carry
            updates, state = opt.update(noisy + 0.5 * phi, state, phi)
            return (optax.apply_updates(phi, updates), state), None

        phi0 = jnp.array([0.3, -0.2, -1.0, -2.0])
        return jax.lax.scan(step, (phi0, opt.init(phi0)), sums)[0]

    release, divisor = optax.scale(1.0 / reported), (lambda updates: float(reported))
    settings = dict(noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=50)
    phi, recorded = loop(recording(release, steps=steps, divisor=divisor))
    _, kept = loop(windowing(release, steps=steps, divisor=divisor, rows=8))
    trace = recorded_trace(recorded, convention=convention, final_params=phi, **settings)
    summary = windowed_of(kept, convention=convention, final_params=phi, **settings)
    reference = na.windowed(trace, rows=8)
    for name in ("g", "gg", "gy", "yyg", "gw", "gwv"):
        np.testing.assert_allclose(getattr(summary.sums, name), getattr(reference.sums, name), rtol=1e-4, atol=1e-5)


def test_a_summary_refuses_batch_sizes_that_vary_under_poisson_sampling():
    """A Poisson run's realised batch sizes are not DP-released: a summary that saw them vary is refused, whatever its
    sample rows show."""
    from noiseaware.adapters.windowing import windowed_of, windowing

    size = windowing(optax.identity(), steps=40, divisor=lambda u: 10.0 + (u[0] > 1.5), rows=2)  # B_t = 11 once
    opt = optax.chain(size, optax.sgd(0.01))
    phi = jnp.zeros(2)
    state = opt.init(phi)
    for t in range(40):
        updates, state = opt.update(jnp.array([1.0 + (t == 17), 1.0]), state, phi)
    poisson = na.trace.Convention(normaliser="realised-batch", sampling="poisson")
    with pytest.raises(na.TraceError, match="varied from 10 to 11 under Poisson sampling"):
        windowed_of(state, convention=poisson, noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=50)


def test_drift_of_unequal_windows_is_the_ar1_variance_of_their_means():
    """The drift test's sd of the last minus the first window's mean, for windows of 30 and 20 steps 70 apart, is
    √(aᵀ Σ a) with Σ_ts = γ₀ r^|t−s| (the stationary AR(1)) and a the two means' weights: z = 1.5 gives its p."""
    from noiseaware.checks.statistics import _drift

    n, u, v, r, gamma = 90, 30, 20, 0.6, 2.0
    t = np.arange(n)
    weights = np.where(t < u, -1.0 / u, np.where(t >= n - v, 1.0 / v, 0.0))
    sd = np.sqrt(weights @ (gamma * r ** np.abs(t[:, None] - t[None, :])) @ weights)
    windows = np.array([[[u], [0.0], [0.0]], [[40.0], [0.0], [0.0]], [[v], [1.5 * sd], [0.0]]])
    sums = moments_of_rows(np.zeros((n, 1)), np.zeros((n, 1)), 0, slice(1, 1))._replace(windows=windows)
    np.testing.assert_allclose(_drift(sums, np.array([[r]]), np.array([[gamma]])), 2 * scipy_stats.norm.sf(1.5))


def test_drift_of_coupled_rows_is_the_var1_variance_of_their_means():
    """For a coupled μ block (B, λ, residual variances R) the drift test's sd is √(aᵀ Σ a) with Σ_ts = (A^|t−s| Γ)_jj
    of the VAR(1) A = I − ΛB, Γ = AΓAᵀ + ΛRΛ, summed by brute force over the steps."""
    import scipy.linalg

    from noiseaware.checks.statistics import _ar_modes, _drift, _var_modes

    n, u, v = 90, 30, 20
    slopes, lam, residual = np.array([[1000.0, 900.0], [900.0, 1000.0]]), np.array([5e-4, 5e-4]), np.array([1.0, 2.0])
    transition = np.eye(2) - lam[:, None] * slopes
    gamma = scipy.linalg.solve_discrete_lyapunov(transition, np.diag(lam**2 * residual))
    t = np.arange(n)
    weights = np.where(t < u, -1.0 / u, np.where(t >= n - v, 1.0 / v, 0.0))
    powers = [np.linalg.matrix_power(transition, k) @ gamma for k in range(n)]
    lags = t[:, None] - t[None, :]
    sd = [
        np.sqrt(weights @ np.vectorize(lambda k, j=j: powers[abs(k)][j, j])(lags) @ weights) for j in range(2)
    ]  # (A^k Γ)_jj = (Γ A^kᵀ)_jj: the lag's sign does not matter on the diagonal
    windows = np.array(
        [[[u] * 2, [0.0] * 2, [0.0] * 2], [[40.0] * 2, [0.0] * 2, [0.0] * 2], [[v] * 2, 1.5 * np.array(sd), [0.0] * 2]]
    )
    sums = moments_of_rows(np.zeros((n, 2)), np.zeros((n, 2)), 0, slice(2, 2))._replace(windows=windows)
    modes = _var_modes(_ar_modes(np.full(2, 0.5), np.ones(2)), slopes, residual, lam)
    np.testing.assert_allclose(np.real(modes[1].sum(axis=0)), np.diag(gamma), rtol=1e-10)
    np.testing.assert_allclose(_drift(sums, *modes), 2 * scipy_stats.norm.sf(1.5), rtol=1e-8)


def test_burn_ins_and_windows_a_summary_cannot_check_say_so():
    """T = 90: a burn-in of 0.7 starts window 7 at step 63 although ⌊0.7·90⌋ = 62 (accepted); one kept window leaves
    the windows' agreement and the drift unchecked, and the report says so; summary() works without φ_T and with a
    window count that 0.2 does not divide."""
    bm = na.models.get("gamma-exponential")
    _, data = bm.simulate(jax.random.key(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", na.recording.settings.SettingsHint)
        trace = na.record_dpvi(bm.model, data, key=4, epsilon=1.0, **(bm.dpvi_settings | {"steps": 900}))
    summary = na.windowed(trace)
    assert summary.first_kept_window(0.7) == 7
    report = na.diagnose(summary, burn_in=0.9)
    assert set(report.unchecked) == {"autocorrelation", "windows", "drift", "clipping"}
    assert "not checked: autocorrelated residuals, windows disagree on φ*, drift" in report.verdict
    unknown = dataclasses.replace(trace, final_params=None, optimizer="adam")
    text = na.windowed(unknown, windows=4).describe()
    assert "φ_(T-1), φ_T unknown" in text and "mean μ last 75%" in text


def test_the_laplace_route_fits_a_summary_as_its_trace():
    """The Laplace route reads the same statistics: its fit of a summary is its fit of the trace, same key."""
    bm, trace = _trace("gamma-exponential", 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full, kept = (
            na.fit(source, "laplace", key=0, model=bm, checks="off") for source in (trace, na.windowed(trace))
        )
    assert np.max(np.abs(full.optimum_chains - kept.optimum_chains) / full.optimum_chains.std(axis=(0, 1))) < 1e-6


def test_the_models_prior_of_a_large_model_estimates_its_curvature(monkeypatch):
    """Above DENSE_CURVATURE the curvature comes from Hessian–vector probes, without coupling, and θ's moments from
    chunked sums: on the 10D regression (forced down that path) they are the dense path's within the estimate's
    error, and a fit with the model's prior runs without the coupling."""
    import noiseaware.models.benchmark as benchmark

    bm, trace = _trace("linreg-10d", 1000)
    dense = bm.optimum_prior()
    monkeypatch.setattr(benchmark, "DENSE_CURVATURE", 0)
    monkeypatch.setattr(benchmark, "_OPTIMUM_PRIORS", {})
    probed = bm.optimum_prior()
    assert probed.coupling is None and dense.coupling is not None
    np.testing.assert_allclose(probed.theta_mean, dense.theta_mean, atol=1e-4 * dense.theta_sd.max())
    np.testing.assert_allclose(probed.theta_sd, dense.theta_sd, rtol=1e-4)
    np.testing.assert_allclose(probed.curvature.mean(axis=0), dense.curvature.mean(axis=0), rtol=0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = na.fit(na.windowed(trace), key=0, model=bm, checks="off")
    assert post.info["optimum_prior"] == "model"


def test_draws_that_would_not_fit_in_memory_are_refused_before_any_work():
    """A fit whose draws of φ*, A and u would take over half the machine's memory names the draws that fit."""
    _, trace = _trace("gamma-exponential", 1000)
    with pytest.raises(ValueError, match=r"with draws=1000000000 would keep .* GB of draws.*pass draws=\d+ or fewer"):
        na.fit(na.windowed(trace), key=0, draws=10**9)
