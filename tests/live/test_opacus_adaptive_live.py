"""Opacus's adaptive clipping, end to end (`make test-adapters`; the main suite skips this file, and
tests/test_adapters.py runs the same order of operations without torch): a DPVI of a logistic regression trained
with `make_private(..., clipping="adaptive")` (AdaClipDPOptimizer) and recorded by `OpacusRecorder` holds the clip
norm each step's noise was drawn with, C_t, per step; its ε is accounted with the unclipped count's noise and is
no smaller than Opacus's own accountant's (which accounts the gradient alone, at the lowered σ); the gradient
model refuses the trace with the reason, and the naive baseline fits it."""

import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")
adaclip = pytest.importorskip("opacus.optimizers.adaclipoptimizer")

from messages import mentions  # noqa: E402
from opacus_logistic import MeanFieldLogistic, simulated_loader, train  # noqa: E402

import noiseaware as na  # noqa: E402
from noiseaware.adapters.opacus import OpacusRecorder  # noqa: E402
from noiseaware.util.errors import VARYING_SETTINGS  # noqa: E402

N, BATCH, STEPS, CLIP, LR, DELTA = 2000, 100, 400, 2.0, 0.05, 1e-5


def test_an_opacus_run_with_adaptive_clipping_is_recorded_per_step_accounted_and_refused_with_the_reason():
    torch.manual_seed(0)
    _, _, loader = simulated_loader(N, BATCH)
    module = MeanFieldLogistic(N)
    sigma = 1.5
    count_sd = BATCH / 20  # Andrew et al.'s heuristic; Opacus lowers σ to (σ⁻² − (2·count_sd)⁻²)^(−1/2)
    names = inspect.signature(adaclip.AdaClipDPOptimizer).parameters
    count_name = "fraction_std" if "fraction_std" in names else "unclipped_num_std"
    engine = opacus.PrivacyEngine(accountant="prv")
    module, optimizer, loader = engine.make_private(
        module=module, optimizer=torch.optim.SGD(module.parameters(), lr=LR), data_loader=loader,
        noise_multiplier=sigma, max_grad_norm=CLIP, clipping="adaptive", target_unclipped_quantile=0.5,
        clipbound_learning_rate=0.2, max_clipbound=10.0, min_clipbound=0.05, grad_sample_mode="functorch",
        **{count_name: count_sd},
    )  # fmt: skip
    assert isinstance(optimizer, adaclip.AdaClipDPOptimizer)
    recorder = OpacusRecorder(optimizer)
    train(module, optimizer, loader, STEPS)
    trace = recorder.trace(n_examples=N, delta=DELTA, learning_rate=LR / BATCH)
    assert trace.varying_settings == ("clip",) and trace.clip == pytest.approx(CLIP)
    assert np.unique(trace.step_clips).size > STEPS // 2 and np.all(trace.step_clips >= 0.05)
    assert trace.noise_multiplier == pytest.approx(float(optimizer.noise_multiplier))  # the lowered σ, constant
    combined = na.privacy.combined_noise_multiplier(trace.noise_multiplier, count_sd)
    assert trace.epsilon == na.privacy.epsilon_spent(float(combined), DELTA, BATCH / N, STEPS)
    assert trace.epsilon >= 0.99 * engine.get_epsilon(DELTA)  # Opacus's accountant: the gradient alone
    with pytest.raises(na.methods.FitFailure) as info:
        na.fit(trace, "exact", key=0, checks="off")
    assert info.value.reason == VARYING_SETTINGS
    mentions(info, "C_t")
    naive = na.fit(trace, "naive", key=0, checks="off")
    assert np.all(np.isfinite(naive.sample(0, 10)))
