"""A trace states the privacy its sampling scheme spent: a run of fixed-size batches accounted as Poisson is
relabelled with the fixed-size accountant's ε, on building, on reading and when kept as a windowed trace."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.privacy import PrivacyWarning
from noiseaware.trace import Convention, Trace
from noiseaware.trace.windowed import windowed

N, B, T, DELTA = 2000, 100, 400, 1e-5
FIXED = Convention(sampling="fixed", neighbouring="replace")


def _arrays():
    rng = np.random.default_rng(0)
    return rng.normal(size=(T, 2)), rng.normal(size=(T, 2))


def _fixed_epsilon(sigma: float, steps: int = T) -> float:
    return na.epsilon_spent(sigma, DELTA, B / N, steps, sampling="fixed", dataset_size=N)


def test_a_fixed_size_run_stating_the_poisson_epsilon_is_relabelled_with_both_numbers():
    params, grads = _arrays()
    poisson = na.noise_multiplier(1.0, DELTA, B / N, T)
    with pytest.warns(PrivacyWarning) as caught:
        trace = Trace.from_arrays(
            params, grads, noise_multiplier=poisson, clip=1.0, sampling_rate=B / N, n_examples=N,
            epsilon=1.0, delta=DELTA, convention=FIXED,
        )  # fmt: skip
    spent = _fixed_epsilon(poisson)
    assert spent > 3.0 and trace.epsilon == spent and trace.accountant == "rdp-fixed"
    mentions(str(caught[0].message), "relabelled", f"{spent:.3g}", "stated", "sampling='fixed'", "dataset_size=N")


def test_runs_calibrated_for_their_scheme_keep_their_epsilon():
    params, grads = _arrays()
    sigma = na.noise_multiplier(1.0, DELTA, B / N, T, sampling="fixed", dataset_size=N)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        trace = Trace.from_arrays(
            params, grads, noise_multiplier=sigma, clip=1.0, sampling_rate=B / N, n_examples=N,
            epsilon=1.0, delta=DELTA, convention=FIXED,
        )  # fmt: skip
        poisson = Trace.from_arrays(
            params, grads, noise_multiplier=na.noise_multiplier(0.5, DELTA, B / N, T), clip=1.0, sampling_rate=B / N,
            n_examples=N, epsilon=0.5, delta=DELTA,
        )  # fmt: skip
        looser = Trace.from_arrays(  # another accountant's upper bound (RDP's, Opacus's) is larger: kept
            params, grads, noise_multiplier=1.0, clip=1.0, sampling_rate=B / N, n_examples=N,
            epsilon=1.2 * na.epsilon_spent(1.0, DELTA, B / N, T), delta=DELTA,
        )  # fmt: skip
    assert trace.epsilon == 1.0 and trace.accountant == "rdp-fixed"
    assert poisson.epsilon == 0.5 and poisson.accountant is None and looser.accountant is None


def test_a_poisson_run_stating_less_than_its_settings_spend_is_relabelled():
    """σ = 1 at q = 0.05 over T = 400 steps spends ε ≈ 6.7 (PLD, δ = 10⁻⁵): a trace stating 0.5 for it states an
    ε far below what the run spent; it is relabelled with both numbers and what to check."""
    params, grads = _arrays()
    spent = na.epsilon_spent(1.0, DELTA, B / N, T)
    with pytest.warns(PrivacyWarning) as caught:
        trace = Trace.from_arrays(
            params, grads, noise_multiplier=1.0, clip=1.0, sampling_rate=B / N, n_examples=N, epsilon=0.5, delta=DELTA
        )
    assert spent > 1.0 and trace.epsilon == spent and trace.accountant == "pld"
    mentions(str(caught[0].message), "relabelled", "Poisson", f"{spent:.3g}", "0.5", "na.noise_multiplier(ε,")


def test_a_file_that_understates_its_epsilon_is_relabelled_on_reading(tmp_path):
    params, grads = _arrays()
    plain = Trace.from_arrays(
        params, grads, noise_multiplier=10.0, clip=1.0, sampling_rate=B / N, n_examples=N, convention=FIXED
    )
    understated = dataclasses.replace(plain, epsilon=0.5, delta=DELTA, accountant="pld")  # as another tool wrote it
    path = tmp_path / "run.nc"
    understated.save(path)
    with pytest.warns(PrivacyWarning, match="relabelled"):
        loaded = Trace.load(path)
    assert loaded.epsilon == _fixed_epsilon(10.0) and loaded.accountant == "rdp-fixed"
    labelled = dataclasses.replace(plain, epsilon=0.5, delta=DELTA, accountant="rdp-fixed")  # a label is no proof
    labelled.save(tmp_path / "labelled.nc")
    with pytest.warns(PrivacyWarning, match="relabelled"):
        assert Trace.load(tmp_path / "labelled.nc").epsilon == _fixed_epsilon(10.0)


def test_a_windowed_trace_accounts_every_step_of_the_run_not_its_sample_rows():
    params, grads = _arrays()
    plain = Trace.from_arrays(
        params, grads, noise_multiplier=10.0, clip=1.0, sampling_rate=B / N, n_examples=N, convention=FIXED
    )
    understated = dataclasses.replace(plain, epsilon=0.5, delta=DELTA)
    with pytest.warns(PrivacyWarning, match="relabelled"):
        run = windowed(understated, rows=20)
    assert run.sample.epsilon == _fixed_epsilon(10.0, T) > _fixed_epsilon(10.0, 20)


def test_a_fixed_size_trace_whose_batch_is_not_a_whole_number_of_examples_is_refused():
    params, grads = _arrays()
    with pytest.raises(na.trace.TraceError) as caught:
        Trace.from_arrays(
            params, grads, noise_multiplier=10.0, clip=1.0, sampling_rate=0.0503, n_examples=N,
            epsilon=1.0, delta=DELTA, convention=FIXED,
        )  # fmt: skip
    mentions(str(caught.value), "sampling='fixed'", "whole", "sampling_rate=B/N")
