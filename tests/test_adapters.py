"""Adapters for other DP-SGD libraries: each against the library's own aggregation (or a reimplementation of its
order of operations), the conventions they record, and the refusals (correlated noise, private batch sizes)."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optax.contrib import differentially_private_aggregate

import noiseaware as na
from noiseaware.adapters import d3p, jax_privacy, opacus, tf_privacy
from noiseaware.adapters import optax as optax_adapter
from noiseaware.trace import Convention, Trace, TraceError
from noiseaware.trace.convention import ConventionError

CLIP, SIGMA, STEPS = 1.5, 2.0, 6


def _params():
    return {"mu": jnp.array([0.3, -0.2]), "rho": jnp.array([-1.0, -1.5])}


def _per_example(key, batch):
    return jax.tree.map(lambda p: jax.random.normal(jax.random.fold_in(key, p.size), (batch, *p.shape)), _params())


def test_optax_recorder_passes_the_aggregate_through_and_records_the_sums():
    """The recorded transformation's outputs equal optax's aggregate's bit for bit; the trace holds φ_t and
    B·G̃_t (the noisy sums) with convention realised-batch and B_t, and the producer's version."""
    key = jax.random.key(0)
    plain = optax.chain(differentially_private_aggregate(CLIP, SIGMA, key), optax.sgd(0.1))
    recorded = optax.chain(optax_adapter.recording_aggregate(CLIP, SIGMA, key, steps=STEPS), optax.sgd(0.1))
    params_a = params_b = _params()
    state_a, state_b = plain.init(params_a), recorded.init(params_b)
    released, seen = [], []
    for t in range(STEPS):
        batch = 8 if t % 2 else 12  # padded batches of two sizes: B_t is what optax divided by
        grads = _per_example(jax.random.key(t + 1), batch)
        updates_a, state_a = plain.update(grads, state_a, params_a)
        updates_b, state_b = recorded.update(grads, state_b, params_b)
        jax.tree.map(np.testing.assert_array_equal, updates_a, updates_b)
        released.append(updates_b)
        seen.append((params_b, batch))
        params_a, params_b = optax.apply_updates(params_a, updates_a), optax.apply_updates(params_b, updates_b)
    trace = optax_adapter.trace_of(
        state_b, clip=CLIP, noise_multiplier=SIGMA, sampling_rate=0.01, n_examples=1000, final_params=params_b
    )
    assert trace.convention.normaliser == "realised-batch" and trace.convention.producer.startswith("optax ")
    np.testing.assert_array_equal(trace.batch_sizes, [12, 8, 12, 8, 12, 8])
    for t, ((params, batch), update) in enumerate(zip(seen, released)):
        np.testing.assert_array_equal(trace.params[t], np.concatenate([params["mu"], params["rho"]]))
        g_tilde = -np.concatenate([update["mu"], update["rho"]]) / 0.1  # sgd: update = −λ G̃
        np.testing.assert_allclose(trace.grads[t], batch * g_tilde, rtol=1e-5)
    np.testing.assert_array_equal(trace.final_params, np.concatenate([params_b["mu"], params_b["rho"]]))


def test_the_recorder_says_when_the_run_outgrew_it():
    opt = optax_adapter.recording_aggregate(CLIP, SIGMA, jax.random.key(0), steps=2)
    state = opt.init(_params())
    for t in range(3):
        _, state = opt.update(_per_example(jax.random.key(t), 4), state, _params())
    with pytest.raises(ValueError, match="took 3 steps but the recorder holds 2"):
        optax_adapter.trace_of(state, clip=CLIP, noise_multiplier=SIGMA, sampling_rate=0.01, n_examples=400)


class _Tensor:
    """A stand-in for a torch parameter: .data, .grad and requires_grad (numpy inside)."""

    def __init__(self, value):
        self.data, self.grad, self.requires_grad = np.asarray(value, np.float64), None, True


class _DPOptimizer:
    """Opacus's DPOptimizer.pre_step order, reimplemented in numpy (zero_grad folded into the end of step):
    clip_and_accumulate (each per-sample gradient
    clipped to C by its joint norm over parameters, then summed), add_noise (N(0, σ²C²)), scale_grad (÷
    expected_batch_size × accumulated_iterations when loss_reduction="mean"), step_hook(self), then the wrapped SGD.
    `used` logs the (σ, C) each add_noise drew with."""

    def __init__(self, params, *, lr, loss_reduction="mean", expected_batch_size=10):
        self.param_groups = [{"params": params}]
        self.noise_multiplier, self.max_grad_norm = SIGMA, CLIP
        self.expected_batch_size, self.loss_reduction = expected_batch_size, loss_reduction
        self.lr, self.step_hook, self.hook_calls, self.used, self.grad_samples = lr, None, 0, [], None
        self.rng = np.random.default_rng(0)

    @property
    def accumulated_iterations(self):
        """As Opacus's: counted from the per-sample gradients, an error while there are none (before the first
        step, after zero_grad)."""
        if self.grad_samples is None:
            raise ValueError("Unexpected grad_sample type: <class 'NoneType'>")
        return 1

    @property
    def params(self):
        return self.param_groups[0]["params"]

    def clip_and_accumulate(self, per_sample):
        norms = np.sqrt(sum(np.sum(g.reshape(len(g), -1) ** 2, axis=1) for g in per_sample))
        factor = np.minimum(1.0, self.max_grad_norm / (norms + 1e-6))
        for p, g in zip(self.params, per_sample):
            p.summed_grad = np.tensordot(factor, g, axes=1)
        return factor

    def add_noise(self):
        self.used.append((self.noise_multiplier, self.max_grad_norm))
        for p in self.params:
            p.grad = p.summed_grad + self.rng.normal(0.0, self.noise_multiplier * self.max_grad_norm, p.data.shape)

    def scale_grad(self):
        if self.loss_reduction == "mean":
            for p in self.params:
                p.grad = p.grad / (self.expected_batch_size * self.accumulated_iterations)

    def step(self, per_sample):
        """per_sample: one (B, *shape) array per parameter; returns (the clipped sum, the released p.grad) per
        parameter."""
        self.grad_samples = per_sample
        self.clip_and_accumulate(per_sample)
        self.add_noise()
        self.scale_grad()
        released = [(p.summed_grad, p.grad.copy()) for p in self.params]
        if self.step_hook is not None:
            self.step_hook(self)
        for p in self.params:
            p.data = p.data - self.lr * p.grad
        self.grad_samples = None  # zero_grad
        return released


class _AdaClipDPOptimizer(_DPOptimizer):
    """Opacus's AdaClipDPOptimizer (adaptive clipping, Andrew et al. 2021) on top of the same order: the noise
    multiplier is lowered once to (σ⁻² − (2·fraction_std)⁻²)^(−1/2); clip_and_accumulate also counts the unclipped
    examples, add_noise adds N(0, fraction_std²) to that count, and scale_grad moves C ← C·exp(−η (unclipped
    fraction − target)), clamped to [min_clipbound, max_clipbound], before the step hook runs."""

    def __init__(self, params, *, lr, fraction_std, target=0.5, eta=0.2, bounds=(0.1, 10.0), **kwargs):
        super().__init__(params, lr=lr, **kwargs)
        self.noise_multiplier = (SIGMA**-2 - (2 * fraction_std) ** -2) ** -0.5
        self.fraction_std, self.target, self.eta, self.bounds = fraction_std, target, eta, bounds

    def clip_and_accumulate(self, per_sample):
        factor = super().clip_and_accumulate(per_sample)
        self.sample_size, self.unclipped_num = len(factor), float(np.sum(factor >= 1))

    def add_noise(self):
        super().add_noise()
        self.unclipped_num += self.rng.normal(0.0, self.fraction_std)

    def scale_grad(self):
        fraction = self.unclipped_num / self.sample_size
        self.max_grad_norm = float(
            np.clip(self.max_grad_norm * np.exp(-self.eta * (fraction - self.target)), *self.bounds)
        )
        super().scale_grad()


def _accountant_hook(optimizer):
    optimizer.hook_calls += 1


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_opacus_recorder_chains_the_accountant_hook_and_records_the_released_gradient(reduction):
    """The recorder keeps the accountant's hook (called once per step, first), records θ_t before the step and
    p.grad after pre_step, and its trace holds the noisy sums: G̃ × expected_batch_size for "mean", G̃ for "sum"."""
    params = [_Tensor([0.1, 0.2]), _Tensor([-0.3, 0.4])]
    optimizer = _DPOptimizer(params, lr=0.05, loss_reduction=reduction)
    optimizer.step_hook = _accountant_hook
    recorder = opacus.OpacusRecorder(optimizer)
    rng = np.random.default_rng(1)
    before, sums = [], []
    for _ in range(STEPS):
        before.append(np.concatenate([p.data for p in params]))
        released = optimizer.step([rng.normal(size=(10, 2)), rng.normal(size=(10, 2))])
        sums.append(np.concatenate([g for g, _ in released]))
    assert optimizer.hook_calls == STEPS
    trace = recorder.trace(n_examples=200)
    assert trace.sampling_rate == pytest.approx(10 / 200) and trace.noise_multiplier == SIGMA
    np.testing.assert_allclose(trace.params, np.stack(before))
    residual = trace.grads - np.stack(sums)  # the noise alone, in sum units: sd σC whatever the reduction
    assert residual.std() == pytest.approx(SIGMA * CLIP, rel=0.35)
    assert trace.convention.normaliser == ("expected-batch" if reduction == "mean" else "sum")
    assert not hasattr(recorder, "summed_grad") and "grad_sample" not in vars(recorder)


def test_opacus_recorder_needs_a_dp_optimizer():
    with pytest.raises(TypeError, match="has no 'noise_multiplier'"):
        opacus.OpacusRecorder(object())


def test_correlated_noise_is_refused_before_anything_is_built():
    banded = np.eye(5) + 0.5 * np.eye(5, k=-1)
    with pytest.raises(jax_privacy.CorrelatedNoiseError, match="correlated across steps"):
        jax_privacy.recording_privatizer(stddev=1.0, prng_key=0, steps=3, noising_matrix=banded)
    jax_privacy.check_noising_matrix(np.eye(4))
    with pytest.raises(ConventionError, match="correlated"):
        Convention(noise="correlated")


def test_jax_privacy_recorder_matches_its_gaussian_privatizer_and_refuses_a_streaming_bandmf():
    noise_addition = pytest.importorskip("jax_privacy.noise_addition")
    streaming = pytest.importorskip("jax_privacy.matrix_factorization.streaming_matrix")
    jax_privacy.check_noising_matrix(streaming.identity())
    with pytest.raises(jax_privacy.CorrelatedNoiseError):
        jax_privacy.check_noising_matrix(streaming.prefix_sum())
    stddev, n = 0.3, 10.0
    plain = noise_addition.gaussian_privatizer(stddev=stddev, prng_key=jax.random.key(3))
    recorded = jax_privacy.recording_privatizer(stddev=stddev, prng_key=jax.random.key(3), steps=STEPS, normalize_by=n)
    params = _params()
    state_a, state_b = plain.init(params), recorded.init(params)
    outputs = []
    for t in range(STEPS):
        clipped_mean = jax.tree.map(lambda p, t=t: jnp.full_like(p, 0.1 * t), params)
        out_a, state_a = plain.update(clipped_mean, state_a, params)
        out_b, state_b = recorded.update(clipped_mean, state_b, params)
        jax.tree.map(np.testing.assert_array_equal, out_a, out_b)
        outputs.append(np.concatenate([out_b["mu"], out_b["rho"]]))
    trace = jax_privacy.trace_of(state_b, clip=CLIP, stddev=stddev, normalize_by=n, sampling_rate=0.01, n_examples=1000)
    assert trace.noise_multiplier == pytest.approx(n * stddev / CLIP)
    np.testing.assert_allclose(trace.grads, n * np.stack(outputs), rtol=1e-6)
    np.testing.assert_array_equal(trace.batch_sizes, np.full(STEPS, 10))


def test_d3p_and_tf_privacy_arrays_convert_to_noisy_sums():
    """d3p: G = q·G̃ (its gradient is scaled to the population); TF Privacy with b examples per microbatch:
    G = b·(B/b)·G̃ and the noise sd in sum units is σ·b·C."""
    rng = np.random.default_rng(0)
    params, released = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    trace = d3p.from_d3p(params, released, noise_multiplier=1.0, clip=2.0, sampling_rate=0.02, n_examples=1000)
    np.testing.assert_allclose(trace.grads, 0.02 * released)
    trace = tf_privacy.from_tf_privacy(
        params, released, noise_multiplier=1.0, l2_norm_clip=2.0, batch_size=32, num_microbatches=8, n_examples=3200
    )
    np.testing.assert_allclose(trace.grads, 4 * 8 * released)
    np.testing.assert_allclose(trace.noise_sd, 1.0 * 4 * 2.0)


def test_varying_batch_sizes_of_a_poisson_sample_never_enter_a_trace():
    rng = np.random.default_rng(0)
    params, grads = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    with pytest.raises(TraceError, match="not DP-released"):
        Trace.from_arrays(
            params, grads, noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=100,
            convention=Convention(normaliser="realised-batch"), batch_sizes=[9, 11, 10],
        )  # fmt: skip
    fixed = Trace.from_arrays(
        params, grads, noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=100,
        convention=Convention(normaliser="realised-batch", sampling="fixed"), batch_sizes=[10, 10, 4],
    )  # fmt: skip
    np.testing.assert_allclose(fixed.grads, grads * np.array([10, 10, 4])[:, None])


def test_the_convention_survives_a_file_and_older_files_read_with_the_default(tmp_path):
    rng = np.random.default_rng(0)
    convention = Convention(normaliser="expected-batch", batch_divisor=48.0, producer="opacus 1.5.2")
    trace = Trace.from_arrays(
        rng.normal(size=(4, 2)), rng.normal(size=(4, 2)), noise_multiplier=1.0, clip=1.0, sampling_rate=0.05,
        n_examples=1000, convention=convention,
    )  # fmt: skip
    for suffix in (".npz", ".nc"):
        trace.save(tmp_path / f"t{suffix}")
        loaded = Trace.load(tmp_path / f"t{suffix}")
        assert loaded.convention == convention
        np.testing.assert_array_equal(loaded.grads, trace.grads)  # stored as sums: not converted twice
    with np.load(tmp_path / "t.npz") as archive:
        fields = {k: archive[k] for k in archive.files if not k.startswith("convention_")}
    fields["schema_version"] = np.asarray(2)
    np.savez(tmp_path / "v2.npz", **fields)
    assert Trace.load(tmp_path / "v2.npz").convention == Convention()


def test_a_divisor_the_trace_does_not_record_is_named_by_the_noise_check():
    """Released grads divided by 1.5 (e.g. a batch padded to 1.5 × its size) but recorded as sums: the noise check
    fires and its advice gives the divisor the data imply (≈ 1.5) and the realised-batch convention."""
    from ou import ou_trace

    trace = ou_trace(seed=5)
    padded = dataclasses.replace(trace, grads=trace.grads / 1.5)
    finding = next(f for f in na.diagnose(padded).findings if f.check == "noise")
    assert "realised-batch" in finding.advice
    implied = float(finding.advice.split("divided by ≈ ")[1].split(",")[0])
    assert implied == pytest.approx(1.5, rel=0.1)


def _quadratic_run(optimizer, params, steps, *, between=None):
    """`steps` DP-SGD steps of the per-example gradients φ − x_i (x_i ~ N(1, 1), 20 per batch), with `between(t)`
    called after each (a scheduler); returns the clipped sums (T, P) in the order recorded."""
    rng = np.random.default_rng(2)
    sums = []
    for t in range(steps):
        x = rng.normal(1.0, 1.0, size=(20, 2))
        phi = np.concatenate([p.data for p in params])
        released = optimizer.step([phi[None, :1] - x[:, :1], phi[None, 1:] - x[:, 1:]])
        sums.append(np.concatenate([g for g, _ in released]))
        if between is not None:
            between(t)
    return np.stack(sums)


@pytest.mark.slow
def test_opacus_adaptive_clipping_is_recorded_per_step_accounted_and_refused_by_the_gradient_model():
    """AdaClipDPOptimizer moves C after the noise and before the hook: the trace holds the C_t each step's noise was
    drawn with (not the C_(t+1) the hook sees), σ once (it does not vary), noise of sd σ·C_t in sum units, and ε of
    the gradient combined with the unclipped count (noise sd fraction_std) per step. The gradient model and the
    bootstrap refuse it with the reason; the checks and the baselines that do not model the noise run."""
    params = [_Tensor([0.0]), _Tensor([0.0])]
    optimizer = _AdaClipDPOptimizer(params, lr=0.5, fraction_std=2.0, expected_batch_size=20)
    recorder = opacus.OpacusRecorder(optimizer)
    sums = _quadratic_run(optimizer, params, 300)
    sigma, clips = np.array(optimizer.used).T
    assert np.unique(clips).size > 100 and np.unique(sigma).size == 1  # C moved every step, σ did not
    trace = recorder.trace(n_examples=400, delta=1e-5, learning_rate=0.5 / 20)
    np.testing.assert_array_equal(trace.step_clips, clips)
    assert trace.step_noise_multipliers is None and trace.noise_multiplier == sigma[0] and trace.clip == clips[0]
    assert trace.varying_settings == ("clip",)
    z = (trace.grads - sums) / (sigma[0] * clips[:, None])  # the noise alone, standardised per step
    assert z.std() == pytest.approx(1.0, rel=0.1)
    np.testing.assert_allclose(trace.step_noise_sd, sigma[0] * clips[:, None] * np.ones((1, 2)))
    combined = float(na.privacy.combined_noise_multiplier(sigma[0], 2.0))
    assert (
        combined == pytest.approx((sigma[0] ** -2 + 2.0**-2) ** -0.5, rel=1e-12) and combined < SIGMA
    )  # accounting the count with sensitivity 1 is more cautious than Opacus's factor 2
    assert trace.epsilon == na.privacy.epsilon_spent(combined, 1e-5, 20 / 400, 300) and trace.accountant == "pld"
    assert "C = " in trace.describe() and "(varies per step)" in trace.describe()
    with pytest.raises(na.methods.FitFailure, match="the clip norm C_t of this trace varies from step to step"):
        na.fit(trace, "exact", key=0, checks="off")
    with pytest.raises(TraceError, match="varies from step to step"):
        _ = trace.noise_sd
    from noiseaware.baselines.bootstrap import replay_settings

    with pytest.raises(na.methods.FitFailure, match="the bootstrap replays the run with one σ, C and s"):
        replay_settings(trace)
    assert na.diagnose(trace).param_names == trace.param_names
    for method in ("naive", "dpvim", "random-scaling"):
        assert np.all(np.isfinite(na.fit(trace, method, key=0, checks="off").sample(jax.random.key(0), 10)))


def test_opacus_noise_schedules_need_to_be_public_and_moved_clip_norms_need_their_count_noise():
    """A noise_multiplier that changes between steps is recorded per step only when the user says the schedule was
    public (PrivacyEngineAdaptiveClipping derives it from the realised Poisson batch size); ε is then accounted over
    the σ_t. A clip norm that moved without a known count noise cannot be accounted here (ε from the user is kept)."""
    params = [_Tensor([0.0]), _Tensor([0.0])]
    optimizer = _DPOptimizer(params, lr=0.5, expected_batch_size=20)
    recorder = opacus.OpacusRecorder(optimizer)

    def schedule(t):
        optimizer.noise_multiplier = SIGMA * 0.9 ** (t // 30)

    _quadratic_run(optimizer, params, 60, between=schedule)
    with pytest.raises(ValueError, match="noise_multiplier changed between steps .* public_noise_schedule=True"):
        recorder.trace(n_examples=400)
    trace = recorder.trace(n_examples=400, public_noise_schedule=True, delta=1e-5)
    sigmas = np.array(optimizer.used)[:, 0]
    np.testing.assert_array_equal(trace.step_noise_multipliers, sigmas)
    assert trace.epsilon == na.privacy.epsilon_spent_per_step(sigmas, 1e-5, 20 / 400)

    params = [_Tensor([0.0]), _Tensor([0.0])]
    optimizer = _DPOptimizer(params, lr=0.5, expected_batch_size=20)
    recorder = opacus.OpacusRecorder(optimizer)
    _quadratic_run(optimizer, params, 5, between=lambda t: setattr(optimizer, "max_grad_norm", CLIP * (1 + t)))
    with pytest.raises(ValueError, match="pass count_noise_multiplier= its noise sd"):
        recorder.trace(n_examples=400, delta=1e-5)
    assert recorder.trace(n_examples=400, delta=1e-5, epsilon=2.0).epsilon == 2.0
    np.testing.assert_array_equal(recorder.trace(n_examples=400).step_clips, CLIP * np.array([1, 1, 2, 3, 4]))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"expected_batch_size": None}, r"expected_batch_size is None; with loss_reduction='mean'"),
        ({"expected_batch_size": 0}, r"expected_batch_size is 0"),
        ({"loss_reduction": "avg"}, r"loss_reduction is 'avg'; Opacus takes 'mean' or 'sum'"),
    ],
)
def test_opacus_settings_that_cannot_be_recorded_fail_before_training_in_opacus_words(change, message):
    optimizer = _DPOptimizer([_Tensor([0.0])], lr=0.1)
    vars(optimizer).update(change)
    with pytest.raises(ValueError, match=message):
        opacus.OpacusRecorder(optimizer)


def test_opacus_trace_errors_name_opacus_settings():
    params = [_Tensor([0.0]), _Tensor([0.0])]
    optimizer = _DPOptimizer(params, lr=0.5, expected_batch_size=20)
    recorder = opacus.OpacusRecorder(optimizer)
    _quadratic_run(optimizer, params, 3, between=lambda t: setattr(optimizer, "max_grad_norm", math.nan))
    with pytest.raises(ValueError, match=r"max_grad_norm was nan at step 1"):
        recorder.trace(n_examples=400)
    recorder.settings = [(SIGMA, CLIP, math.nan, 1.0)] * 3
    with pytest.raises(
        ValueError, match=r"expected batch size 20 .* is not in \(0, n_examples = 10\]: .*len\(data_loader"
    ):
        recorder.trace(n_examples=10)
    with pytest.raises(ValueError, match=r"grad_scale has shape \(3,\), but the run has P = 2 parameters"):
        recorder.trace(n_examples=400, grad_scale=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"n_examples must be a positive integer"):
        recorder.trace(n_examples=0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_microbatches": 0}, r"num_microbatches must be a positive integer, got num_microbatches=0"),
        ({"num_microbatches": 3}, r"batch_size 32 is not a multiple of num_microbatches 3: TF Privacy splits"),
        ({"batch_size": -32}, r"batch_size must be a positive integer"),
        ({"l2_norm_clip": 0.0}, r"l2_norm_clip must be positive and finite"),
        ({"noise_multiplier": math.nan}, r"noise_multiplier must be non-negative and finite"),
        ({"n_examples": 16}, r"batch_size 32 exceeds n_examples 16"),
    ],
)
def test_tf_privacy_refuses_settings_it_cannot_have_run_with_in_its_own_words(change, message):
    rng = np.random.default_rng(0)
    settings = dict(noise_multiplier=1.0, l2_norm_clip=2.0, batch_size=32, num_microbatches=8, n_examples=3200)
    with pytest.raises(ValueError, match=message):
        tf_privacy.from_tf_privacy(rng.normal(size=(5, 4)), rng.normal(size=(5, 4)), **(settings | change))


def test_tf_privacy_without_microbatches_clips_each_example():
    rng = np.random.default_rng(0)
    released = rng.normal(size=(5, 4))
    trace = tf_privacy.from_tf_privacy(
        rng.normal(size=(5, 4)), released, noise_multiplier=1.0, l2_norm_clip=2.0, batch_size=32,
        num_microbatches=None, n_examples=3200,
    )  # fmt: skip
    np.testing.assert_allclose(trace.grads, 32 * released)
    np.testing.assert_allclose(trace.noise_sd, 2.0)


def test_optax_arguments_are_checked_in_optax_words_before_any_work():
    with pytest.raises(ValueError, match=r"steps must be a positive integer, got steps=0"):
        optax_adapter.recording_aggregate(CLIP, SIGMA, jax.random.key(0), steps=0)
    with pytest.raises(ValueError, match=r"l2_norm_clip must be positive and finite, got l2_norm_clip=-1.0"):
        optax_adapter.recording_aggregate(-1.0, SIGMA, jax.random.key(0), steps=3)
    with pytest.raises(ValueError, match=r"noise_multiplier must be non-negative and finite, got noise_multiplier=nan"):
        optax_adapter.recording_aggregate(CLIP, math.nan, jax.random.key(0), steps=3)
    opt = optax_adapter.recording_aggregate(CLIP, SIGMA, jax.random.key(0), steps=2)
    state = opt.init(_params())
    _, state = opt.update(_per_example(jax.random.key(1), 4), state, _params())
    with pytest.raises(ValueError, match=r"grad_scale has shape \(3,\), but the run has P = 4 parameters"):
        optax_adapter.trace_of(
            state, clip=CLIP, noise_multiplier=SIGMA, sampling_rate=0.01, n_examples=400, grad_scale=[1.0, 2.0, 3.0]
        )


def _jax_privacy_state(outputs, normalize_by):
    """A recorder's state after the privatizer released `outputs` (T, P) (the recording, without jax-privacy)."""
    inner = optax.GradientTransformation(lambda params: (), lambda updates, state, params=None: (updates, state))
    opt = optax.chain(
        optax_adapter.recording(inner, steps=len(outputs), divisor=lambda updates: jnp.asarray(normalize_by))
    )
    state = opt.init(jnp.zeros(outputs.shape[1]))
    for row in outputs:
        _, state = opt.update(jnp.asarray(row), state, jnp.zeros(outputs.shape[1]))
    return state


def test_jax_privacy_per_step_scale_is_undone_and_kept_and_a_fractional_normaliser_is_not_rounded():
    """scale_then_privatize: the privatizer saw s_t ⊙ g, so the trace holds n·G̃_t ⊘ s_t with s_t per step (the
    gradient model refuses it). A normalize_by of 12.5 (an expected batch size q·N) stays 12.5, not 12 or 13."""
    rng = np.random.default_rng(0)
    outputs, scales = rng.normal(size=(4, 2)), rng.uniform(0.5, 2.0, size=(4, 2))
    state = _jax_privacy_state(outputs, 12.5)
    settings = dict(clip=CLIP, stddev=0.1, normalize_by=12.5, sampling_rate=0.01, n_examples=1250)
    trace = jax_privacy.trace_of(state, **settings, scales=scales)
    assert trace.convention.normaliser == "expected-batch" and trace.convention.batch_divisor == 12.5
    np.testing.assert_allclose(trace.grads, 12.5 * outputs / scales, rtol=1e-6)
    np.testing.assert_array_equal(trace.step_grad_scales, scales)
    np.testing.assert_allclose(trace.step_noise_sd, 12.5 * 0.1 / scales, rtol=1e-12)  # σC/s_t, σ = n·stddev/C
    assert trace.varying_settings == ("grad_scale",)
    with pytest.raises(ValueError, match=r"scales has shape \(3, 2\), but the recorder holds 4 steps of 2 parameters"):
        jax_privacy.trace_of(state, **settings, scales=scales[:3])
    with pytest.raises(ValueError, match=r"normalize_by must be positive and finite, got normalize_by=0"):
        jax_privacy.trace_of(state, **(settings | {"normalize_by": 0}))
    with pytest.raises(ValueError, match=r"stddev must be non-negative and finite, got stddev=nan"):
        jax_privacy.trace_of(state, **(settings | {"stddev": math.nan}))
