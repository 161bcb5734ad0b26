"""Adapters for other DP-SGD libraries: each against the library's own aggregation (or a reimplementation of its
order of operations), the conventions they record, and the refusals (correlated noise, private batch sizes)."""

import dataclasses

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
    """Opacus's DPOptimizer.pre_step order, reimplemented in numpy: clip each per-sample gradient (joint norm over
    parameters) to C, sum, add N(0, σ²C²), divide by expected_batch_size × accumulated_iterations when
    loss_reduction="mean", call step_hook(self), then step the wrapped SGD."""

    def __init__(self, params, *, lr, loss_reduction="mean", expected_batch_size=10):
        self.param_groups = [{"params": params}]
        self.noise_multiplier, self.max_grad_norm = SIGMA, CLIP
        self.expected_batch_size, self.loss_reduction, self.accumulated_iterations = (
            expected_batch_size,
            loss_reduction,
            1,
        )
        self.lr, self.step_hook, self.hook_calls = lr, None, 0
        self.rng = np.random.default_rng(0)

    def step(self, per_sample):
        """per_sample: one (B, *shape) array per parameter; returns the released gradients (what p.grad holds)."""
        norms = np.sqrt(sum(np.sum(g.reshape(len(g), -1) ** 2, axis=1) for g in per_sample))
        factor = np.minimum(1.0, self.max_grad_norm / (norms + 1e-6))
        released = []
        for p, g in zip(self.param_groups[0]["params"], per_sample):
            summed = np.tensordot(factor, g, axes=1)
            p.grad = summed + self.rng.normal(0.0, self.noise_multiplier * self.max_grad_norm, p.data.shape)
            if self.loss_reduction == "mean":
                p.grad = p.grad / (self.expected_batch_size * self.accumulated_iterations)
            released.append((summed, p.grad.copy()))
        if self.step_hook is not None:
            self.step_hook(self)
        for p in self.param_groups[0]["params"]:
            p.data = p.data - self.lr * p.grad
        return released


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
