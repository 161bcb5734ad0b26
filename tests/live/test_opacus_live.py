"""Opacus itself, end to end (`make test-adapters`, which installs torch and Opacus in their own environment; the
main suite skips this file): a mean-field DPVI of a logistic regression trained with `PrivacyEngine`, recorded by
`OpacusRecorder`, has the convention Opacus used, passes the trace checks (at the burn-in they propose), and its
noise-aware intervals for μ* cover the non-private optimum."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")

from opacus_logistic import D, MeanFieldLogistic, simulated_loader, train  # noqa: E402

import noiseaware as na  # noqa: E402
from noiseaware.adapters.opacus import OpacusRecorder  # noqa: E402

N, BATCH, STEPS, CLIP, LR = 2000, 100, 3000, 2.0, 0.05


def test_an_opacus_dpvi_run_recorded_by_the_adapter_fits_and_covers():
    torch.manual_seed(0)
    bm, data, loader = simulated_loader(N, BATCH)
    module = MeanFieldLogistic(N, rho_scale=10.0)
    sigma = na.privacy.noise_multiplier(1.0, 1e-5, BATCH / N, STEPS)
    engine = opacus.PrivacyEngine(accountant="prv")
    module, optimizer, loader = engine.make_private(
        module=module, optimizer=torch.optim.SGD(module.parameters(), lr=LR), data_loader=loader,
        noise_multiplier=sigma, max_grad_norm=CLIP, grad_sample_mode="functorch",
    )  # fmt: skip
    recorder = OpacusRecorder(optimizer)
    train(module, optimizer, loader, STEPS)
    scale = np.array([1.0] * D + [10.0] * D)
    # the run optimised ρ' = ρ/10: the trace of φ = s ⊙ φ' with grad_scale s
    trace = recorder.trace(n_examples=N, grad_scale=scale, learning_rate=LR * scale**2 / BATCH, sites=bm.site_map.sites)
    assert trace.convention.normaliser == "expected-batch" and trace.convention.producer.startswith("opacus ")
    assert trace.convention.batch_divisor == optimizer.expected_batch_size
    report = na.diagnose(trace)  # a transient left at the default burn-in is what the checks are for: take theirs
    burn_in = 0.2 if report.ok else report.proposed_burn_in
    assert burn_in is not None and na.diagnose(trace, burn_in=burn_in).ok, report.fired
    post = na.fit(trace, method="exact", key=1, burn_in=burn_in)
    reference = na.record_dpvi(bm.model, data, key=2, non_private=True, steps=4000, sampling_rate=1.0, clip=1e30,
                               optimizer=na.Optimizer("adam", 0.01, schedule="cosine-decay"), mc_draws=50)  # fmt: skip
    phi_hat = reference.params[-400:].mean(axis=0)
    low, high = post.optimum_interval(0.99)
    assert np.all((low[:D] <= phi_hat[:D]) & (phi_hat[:D] <= high[:D]))
