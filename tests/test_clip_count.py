"""Clipping made visible: a DP-released count of clipped examples per step, accounted with the run, kept in traces,
windowed traces and their files, and read by the clipping check (`checks.clipping`, docs/diagnostics.md).

The count's exactness against a slow reference loop is in test_dpvi; here: the split of one ε, the check's interval
by simulation, the check on runs that clip and runs that do not (record_dpvi and a user's optax loop), the files, the
windowed forms, and the refusals.
"""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from messages import mentions
from ou import ou_trace

import noiseaware as na
from noiseaware.adapters import optax as optax_adapter
from noiseaware.checks.clipping import CLIPPED_LIMIT, clipped_fraction
from noiseaware.recording.settings import SettingsHint, _privacy
from noiseaware.trace import TraceError
from noiseaware.trace.run import ClipCounts


def test_one_epsilon_split_between_the_gradient_and_the_count_is_the_same_mechanism():
    for combined, share in ((1.3, 0.01), (7.0, 0.2), (0.4, 0.5)):
        sigma, count = na.privacy.split_noise_multiplier(combined, share)
        assert sigma == pytest.approx(combined / math.sqrt(1 - share), rel=1e-14)
        assert count == pytest.approx(combined / math.sqrt(share), rel=1e-14)
        assert float(na.privacy.combined_noise_multiplier(sigma, count)) == pytest.approx(combined, rel=1e-12)
    with pytest.raises(ValueError) as error:
        na.privacy.split_noise_multiplier(1.0, 0.7)
    mentions(str(error.value), "clip_count_share", "0.5")


def _m1(steps, key=1, **options):
    """M1 recorded at ε = 1 with 5 % of it on the clipped count (its preset's settings, `options` in their place)."""
    bm = na.models.get("m1")
    _, data = bm.simulate(jax.random.key(0))
    settings = dict(bm.dpvi_settings) | {"steps": steps, "clip_count_share": 0.05}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SettingsHint)
        return na.record_dpvi(bm.model, data, key=key, epsilon=1.0, **(settings | options))


def test_a_calibrated_run_with_a_count_spends_exactly_its_epsilon():
    trace = _m1(300)
    q, steps = trace.sampling_rate, trace.steps
    combined = na.privacy.noise_multiplier(1.0, 1e-5, q, steps)
    assert trace.noise_multiplier == pytest.approx(combined / math.sqrt(0.95), rel=1e-12)
    assert float(na.privacy.combined_noise_multiplier(trace.noise_multiplier, trace.count_noise_multiplier)) == (
        pytest.approx(combined, rel=1e-12)
    )
    assert trace.epsilon == 1.0 and na.privacy.epsilon_spent(combined, 1e-5, q, steps) <= 1.0
    assert trace.clipped_counts.shape == (steps,)


def test_a_given_noise_multiplier_is_the_gradients_exactly():
    """noise_multiplier=σ with a count: the gradient keeps σ to the last bit (σ√(1 − r)/√(1 − r) need not be σ in
    floating point: 0.7 at r = 0.01, 2.9 at r = 0.2), σ_b = σ√((1 − r)/r), and ε is accounted at σ√(1 − r)."""
    for sigma, share in ((0.7, 0.01), (2.9, 0.2), (11.85, 0.05)):
        settings = na.DPVISettings(steps=100, sampling_rate=0.01, clip=1.0, clip_count_share=share)
        got, count, epsilon, _, _ = _privacy(None, 1e-5, sigma, False, settings, True)
        assert got == sigma
        assert count == pytest.approx(sigma * math.sqrt((1 - share) / share), rel=1e-12)
        assert epsilon == na.privacy.epsilon_spent(sigma * math.sqrt(1 - share), 1e-5, 0.01, 100)


def _counts(key, fraction, batch, noise, steps):
    """Released counts c̃_t = Binomial(B, f) + N(0, σ_b²), (steps,)."""
    k_count, k_noise = jax.random.split(key)
    clipped = jax.random.binomial(k_count, batch, fraction, (steps,))
    return np.asarray(clipped + noise * jax.random.normal(k_noise, (steps,)), np.float64)


def _sums(counts, noise):
    return ClipCounts(counts.size, float(counts.sum()), float(np.square(counts).sum()), noise)


def test_the_clipped_fractions_interval_covers_the_truth_as_often_as_it_says():
    """400 runs of 200 steps, B = 100, f = 0.1, σ_b = 20: the 90 % interval covers f in 0.9 ± 3 se of the runs."""
    keys = jax.random.split(jax.random.key(5), 400)
    results = [clipped_fraction(_sums(_counts(k, 0.1, 100, 20.0, 200), 20.0), 100.0, 0.05) for k in keys]
    covered = np.mean([r.lower <= 0.1 <= r.upper for r in results])
    assert abs(covered - 0.9) < 3 * math.sqrt(0.09 / 400), covered
    assert np.mean([r.bound > 0.1 for r in results]) < 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)


def test_the_check_fires_where_clipping_is_active_and_not_where_it_is_not():
    quiet = [
        clipped_fraction(_sums(_counts(jax.random.key(k), 0.0, 100, 30.0, 500), 30.0), 100.0, 0.05) for k in range(40)
    ]
    busy = [
        clipped_fraction(_sums(_counts(jax.random.key(k), 0.15, 100, 30.0, 500), 30.0), 100.0, 0.05) for k in range(40)
    ]
    assert not any(r.active for r in quiet) and all(r.active for r in busy)
    assert str(busy[0]).startswith(f"{busy[0].fraction:.1%} of examples clipped after the burn-in (90% interval")


@pytest.fixture(scope="module")
def clipped_runs():
    """M1 recorded with a count at its preset's clip and at a clip far below the gradient norms."""
    return {clip: _m1(2000, clip=clip) for clip in (2.0, 0.05)}


def test_record_dpvi_and_the_check_tell_a_clipped_run_from_a_clean_one(clipped_runs):
    preset, tight = (na.diagnose(clipped_runs[clip]) for clip in (2.0, 0.05))
    assert "clipping" not in preset.fired and preset.clipping.fraction < CLIPPED_LIMIT
    assert "clipping" not in preset.unchecked
    assert str(preset).splitlines()[1] == f"  clipping: {preset.clipping}"  # measured, and said, where it passes
    assert "clipping" in tight.fired and tight.clipping.lower > 0.5
    finding = next(f for f in tight.findings if f.check == "clipping")
    mentions(str(finding), "clipped", "burn-in", "larger", "clip")
    assert na.TraceDiagnosis.from_dict(tight.to_dict()).clipping == tight.clipping


def test_clipped_counts_survive_both_file_formats_and_the_windowed_forms(clipped_runs, tmp_path):
    trace = clipped_runs[0.05]
    for suffix in (".nc", ".npz"):
        trace.save(tmp_path / f"t{suffix}")
        back = na.Trace.load(tmp_path / f"t{suffix}")
        np.testing.assert_array_equal(back.clipped_counts, trace.clipped_counts)
        assert back.count_noise_multiplier == trace.count_noise_multiplier
    with np.load(tmp_path / "t.npz") as archive:
        assert int(archive["schema_version"]) == 5
    mentions(trace.describe(), "clip", "count", "released", f"{trace.count_noise_multiplier:.4g}")
    mentions(ou_trace(steps=60).describe(), "not", "released", "clip_count_share=0.01")
    kept = na.windowed(trace)
    for burn_in in (0.2, 0.5):
        got, want = kept.clip_counts(burn_in), trace.clip_counts(burn_in)
        assert got.steps == want.steps and got.total == pytest.approx(want.total, rel=1e-12)
        assert got.squares == pytest.approx(want.squares, rel=1e-12)
    kept.save(tmp_path / "w.npz")
    assert na.WindowedTrace.load(tmp_path / "w.npz").clip_counts() == kept.clip_counts()
    assert na.diagnose(kept).clipping == pytest.approx(na.diagnose(trace).clipping)


def test_a_windowed_recording_keeps_the_same_counts_as_the_trace():
    trace, kept = (_m1(400, key=2, clip=0.5, windowed=windowed) for windowed in (False, True))
    np.testing.assert_array_equal(kept.sample.clipped_counts, trace.clipped_counts[kept.sample_steps])
    got, want = kept.clip_counts(0.2), trace.clip_counts(0.2)
    assert got.steps == want.steps and got.total == pytest.approx(want.total, rel=1e-4)


def test_a_trace_refuses_counts_without_their_noise_and_the_other_way_round():
    trace = ou_trace(steps=60)
    arrays = dict(noise_multiplier=trace.noise_multiplier, clip=trace.clip, sampling_rate=0.1, n_examples=100)
    counts = np.zeros(60)
    for extra, words in (
        ({"clipped_counts": counts}, ("clipped_counts", "count_noise_multiplier", "both")),
        ({"count_noise_multiplier": 3.0}, ("count_noise_multiplier", "clipped_counts")),
        ({"clipped_counts": counts[:10], "count_noise_multiplier": 3.0}, ("clipped_counts", "(60,)")),
        ({"clipped_counts": counts, "count_noise_multiplier": 0.0}, ("count_noise_multiplier", "private")),
    ):
        with pytest.raises(TraceError) as error:
            na.Trace.from_arrays(trace.params, trace.grads, **arrays, **extra)
        mentions(str(error.value), *words)
    with pytest.raises(ValueError) as error:
        na.DPVISettings(steps=10, sampling_rate=0.1, clip=1.0, clip_count_share=0.9)
    mentions(str(error.value), "clip_count_share", "0.5")


N, B, T = 400, 40, 200


def _loss(phi, xi):
    return 0.5 * (xi - phi[0]) ** 2 + 0.5 * phi[1] ** 2


def _user_loop(clip, sigma, count_sigma, aggregate=optax_adapter.recording_aggregate):
    """A user's optax loop on fixed-size batches through `aggregate` (the recording or the windowing one): its
    released updates and the aggregate's state."""
    x = jax.random.normal(jax.random.key(0), (N,)) + 1.0
    opt = optax.chain(
        aggregate(clip, sigma, jax.random.key(3), steps=T, count_noise_multiplier=count_sigma), optax.sgd(1e-3)
    )

    def step(carry, key):
        phi, state = carry
        batch = jax.random.choice(key, N, (B,), replace=False)
        updates, state = opt.update(jax.vmap(jax.grad(_loss), (None, 0))(phi, x[batch]), state, phi)
        return (phi + updates, state), updates

    start = jnp.array([0.0, -2.0])
    (_, state), updates = jax.lax.scan(step, (start, opt.init(start)), jax.random.split(jax.random.key(4), T))
    return updates, state


def test_the_optax_adapter_counts_without_touching_the_run():
    """σ_b = 0 (a non-private run): each count is exactly the batch's number of examples over the clip; the updates
    are those of the run without a count, bit for bit."""
    for clip, expected in ((1e-6, B), (1e6, 0)):
        updates, state = _user_loop(clip, 0.0, 0.0)
        plain, _ = _user_loop(clip, 0.0, None)
        np.testing.assert_array_equal(updates, plain)
        trace = optax_adapter.trace_of(
            state, clip=clip, noise_multiplier=0.0, sampling_rate=B / N, n_examples=N, epsilon=math.inf
        )
        np.testing.assert_array_equal(trace.clipped_counts, np.full(T, expected, np.float32))
        assert trace.count_noise_multiplier == 0.0


def test_the_optax_adapters_counts_feed_the_check():
    sigma, count_sigma = na.privacy.split_noise_multiplier(1.0, 0.05)
    for clip, fires in ((0.05, True), (100.0, False)):
        _, state = _user_loop(clip, sigma, count_sigma)
        trace = optax_adapter.trace_of(state, clip=clip, noise_multiplier=sigma, sampling_rate=B / N, n_examples=N)
        assert trace.count_noise_multiplier == pytest.approx(count_sigma, rel=1e-6)
        assert ("clipping" in na.diagnose(trace).fired) == fires
    with pytest.raises(ValueError) as error:
        optax_adapter.trace_of(
            state, clip=clip, noise_multiplier=sigma, sampling_rate=B / N, n_examples=N, count_noise_multiplier=1.0
        )
    mentions(str(error.value), "count_noise_multiplier", "σ_b")


def test_the_optax_windowing_aggregate_keeps_the_counts_as_window_sums():
    """The same loop kept as a windowed trace: its window sums of the counts are the trace's (same key, same run)."""
    sigma, count_sigma = na.privacy.split_noise_multiplier(1.0, 0.05)
    _, state = _user_loop(0.05, sigma, count_sigma)
    trace = optax_adapter.trace_of(state, clip=0.05, noise_multiplier=sigma, sampling_rate=B / N, n_examples=N)
    _, state = _user_loop(0.05, sigma, count_sigma, optax_adapter.windowing_aggregate)
    run = optax_adapter.windowed_of_aggregate(
        state, clip=0.05, noise_multiplier=sigma, sampling_rate=B / N, n_examples=N
    )
    got, want = run.clip_counts(0.2), trace.clip_counts(0.2)
    assert got.steps == want.steps and got.total == pytest.approx(want.total, rel=1e-5)
    np.testing.assert_allclose(run.sample.clipped_counts, trace.clipped_counts[run.sample_steps], rtol=1e-6)
    assert "clipping" in na.diagnose(run).fired
