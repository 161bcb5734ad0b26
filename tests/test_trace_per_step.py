"""Settings that vary per step in a trace (schema version 4): σ_t, C_t and s_t kept per step only when they vary,
validated, saved and loaded in both formats, summarised, the noise sd per step, and the refusal of one noise sd."""

import numpy as np
import pytest

from noiseaware.trace import Trace, TraceError
from noiseaware.trace.data import TraceData

T, P = 60, 4


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(T, P)), rng.normal(size=(T, P))


def _trace(**settings):
    base = dict(noise_multiplier=1.0, clip=1.0, sampling_rate=0.1, n_examples=100)
    return Trace.from_arrays(*_arrays(), **(base | settings))


def test_per_step_settings_are_kept_only_when_they_vary():
    constant = _trace(noise_multiplier=np.full(T, 1.3), clip=[2.0] * T, grad_scale=np.ones((T, P)))
    assert constant.varying_settings == () and constant.noise_multiplier == 1.3 and constant.clip == 2.0
    np.testing.assert_array_equal(constant.noise_sd, np.full(P, 1.3 * 2.0))
    sigma, clip = np.linspace(1.0, 2.0, T), np.geomspace(1.0, 0.5, T)
    varying = _trace(noise_multiplier=sigma, clip=clip)
    assert varying.varying_settings == ("noise_multiplier", "clip")
    assert varying.noise_multiplier == 1.0 and varying.clip == 1.0  # the first step's values
    np.testing.assert_array_equal(varying.step_noise_multipliers, sigma)
    np.testing.assert_allclose(varying.step_noise_sd, np.repeat((sigma * clip)[:, None], P, axis=1), rtol=1e-15)
    start = 12
    np.testing.assert_allclose(varying.mean_noise_sd(start), np.full(P, np.sqrt(np.mean((sigma * clip)[start:] ** 2))))
    with pytest.raises(TraceError, match="the noise multiplier σ_t and the clip norm C_t of this trace vary"):
        _ = varying.noise_sd


def test_a_scale_per_step_divides_the_noise_sd_per_coordinate():
    scale = np.outer(np.linspace(1.0, 3.0, T), [1.0, 1.0, 10.0, 10.0])
    trace = _trace(noise_multiplier=2.0, clip=0.5, grad_scale=scale)
    assert trace.varying_settings == ("grad_scale",)
    np.testing.assert_array_equal(trace.grad_scale, scale[0])
    np.testing.assert_allclose(trace.step_noise_sd, 2.0 * 0.5 / scale)


@pytest.mark.parametrize("suffix", [".npz", ".nc"])
def test_per_step_settings_survive_a_file_and_constant_ones_write_version_3(tmp_path, suffix):
    trace = _trace(noise_multiplier=np.linspace(1.0, 2.0, T), grad_scale=np.outer(np.arange(1, T + 1), np.ones(P)))
    trace.save(tmp_path / f"t{suffix}")
    loaded = Trace.load(tmp_path / f"t{suffix}")
    for name in ("step_noise_multipliers", "step_grad_scales"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(trace, name))
    assert loaded.step_clips is None and loaded.varying_settings == trace.varying_settings
    _trace().save(tmp_path / f"c{suffix}")
    assert Trace.load(tmp_path / f"c{suffix}").varying_settings == ()
    if suffix == ".npz":
        for name, version in (("t", 4), ("c", 3)):
            with np.load(tmp_path / f"{name}.npz") as archive:
                assert int(archive["schema_version"]) == version
                assert (name == "t") == ("step_noise_multipliers" in archive.files)


def test_the_summary_shows_the_range_of_a_varying_setting():
    text = _trace(clip=np.linspace(1.0, 3.0, T)).describe()
    assert "σ = 1, C = 1 … 3 (varies per step)" in text and "v4" in text
    assert "v3" in _trace().describe()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"noise_multiplier": np.ones(T - 1)}, r"noise_multiplier has 59 per-step values but the trace has T = 60"),
        ({"clip": np.r_[np.ones(T - 1), np.nan]}, r"step_clips is nan at step 59; the clip norm C_t must be a finite"),
        ({"noise_multiplier": np.r_[1.0, 0.0, np.ones(T - 2)]}, r"step_noise_multipliers is 0.0 at step 1"),
        ({"noise_multiplier": np.r_[1.0, -1.0, np.ones(T - 2)]}, r"step_noise_multipliers is -1.0 at step 1"),
        ({"grad_scale": np.ones((T, P - 1))}, r"grad_scale has shape \(60, 3\); a scale per step needs shape \(T, P\)"),
        ({"grad_scale": np.ones((T, P), np.int64)}, r"^grad_scale has dtype int64"),
        ({"noise_multiplier": []}, r"noise_multiplier has 0 per-step values"),
    ],
)
def test_bad_per_step_settings_fail_with_one_clear_error(settings, message):
    with pytest.raises(TraceError, match=message):
        _trace(**settings)


def test_the_constant_field_must_be_the_first_steps_value():
    params, grads = _arrays()
    with pytest.raises(TraceError, match=r"step_clips starts at 2.0 but clip is 1.0; clip holds the first step's"):
        TraceData(params, grads, 1.0, 1.0, 0.1, 100, step_clips=np.linspace(2.0, 3.0, T))


def test_noiseaware_fit_refuses_a_varying_trace_before_any_work(tmp_path, capsys, monkeypatch):
    """The CLI's routes all fit the gradient model: a trace whose C_t varies is refused with the reason before its
    checks run or anything is fitted."""
    from noiseaware.cli import main

    path = tmp_path / "varying.npz"
    _trace(clip=np.linspace(1.0, 2.0, T)).save(path)
    monkeypatch.setattr("noiseaware.cli.fit.run_checks", lambda *a, **k: pytest.fail("checks ran"))
    assert main(["fit", str(path)]) == 2
    err = capsys.readouterr().err
    assert "clip norm" in err and "varies" in err and "naive, dpvim, random-scaling" in err
