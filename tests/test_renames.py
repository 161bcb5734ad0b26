"""Renamed public names: each old name is a deprecated alias for one release, warns with the new name and gives
what the new name gives."""

import dataclasses
import warnings

import pytest
from toy_results import calibration_result, coverage_result

from noiseaware.util.diagnostics import Diagnostics, MixingDiagnostics


def test_diagnostics_summarise_warns_and_aggregates():
    records = [MixingDiagnostics(max_rhat=1.0, min_ess=400.0), MixingDiagnostics(max_rhat=1.2, min_ess=90.0)]
    with pytest.warns(DeprecationWarning, match=r"MixingDiagnostics\.aggregate"):
        old = MixingDiagnostics.summarise(records)
    assert old == MixingDiagnostics.aggregate(records)
    assert old["simulations_rhat_above_1.01"] == 1


def test_a_subclass_that_defines_summarise_has_it_read_as_aggregate():
    with pytest.warns(DeprecationWarning, match=r"Counted\.aggregate"):

        @dataclasses.dataclass(frozen=True)
        class Counted(Diagnostics):
            n: int

            @classmethod
            def summarise(cls, records):
                return {"total": sum(r.n for r in records)}

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Counted.aggregate([Counted(2), Counted(3)]) == {"total": 5}


def test_result_summary_warns_and_gives_the_headline():
    for result in (coverage_result(), calibration_result()):
        with pytest.warns(DeprecationWarning, match=rf"{type(result).__name__}\.headline\(\)"):
            assert result.summary() == result.headline()


def test_study_kind_summary_warns_and_is_the_record():
    from noiseaware.studies import get_kind
    from noiseaware.studies.kind import StudyKind

    kind = get_kind("coverage")
    with pytest.warns(DeprecationWarning, match=r"StudyKind\.record"):
        assert kind.summary is kind.record
    fields = kind._asdict()
    fields["summary"] = fields.pop("record")
    with pytest.warns(DeprecationWarning, match=r"StudyKind\(record=…\)"):
        assert StudyKind(**fields) == kind


def test_plan_summaries_and_coverage_summary_warn_and_give_the_spec_records():
    import noiseaware as na
    from noiseaware.evaluation.coverage import coverage_record, coverage_spec, coverage_summary
    from noiseaware.studies.plan import Plan

    plan = Plan("coverage", {}, (), spec_records=({"model": "M1"},))
    with pytest.warns(DeprecationWarning, match=r"Plan\.spec_records"):
        assert plan.summaries == plan.spec_records
    spec = coverage_spec(na.models.get("M1"), key=0, noise_multiplier=10.0, simulations=4)
    with pytest.warns(DeprecationWarning, match="coverage_record"):
        assert coverage_summary(spec) == coverage_record(spec)


def test_the_windowed_traces_old_names_warn_and_are_the_new_ones():
    import noiseaware as na
    import noiseaware.trace as trace_module
    from noiseaware.adapters import optax as optax_adapter
    from noiseaware.adapters import summarizer, windowing

    pairs = [
        (na, "TraceSummary", na.WindowedTrace),
        (na, "summarize", na.windowed),
        (trace_module, "TraceSummary", na.WindowedTrace),
        (optax_adapter, "summarizing_aggregate", optax_adapter.windowing_aggregate),
        (optax_adapter, "summary_of_aggregate", optax_adapter.windowed_of_aggregate),
        (summarizer, "summarizing", windowing.windowing),
        (summarizer, "summary_of", windowing.windowed_of),
        (summarizer, "SummaryState", windowing.WindowingState),
    ]
    for module, old, new in pairs:
        with pytest.warns(DeprecationWarning, match=new.__name__):
            assert getattr(module, old) is new
    with pytest.raises(AttributeError):
        na.no_such_name  # noqa: B018


def test_record_dpvi_summary_warns_and_keeps_the_run_as_windows():
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    import noiseaware as na

    def model(x):
        rate = numpyro.sample("rate", dist.Gamma(2.0, 1.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("x", dist.Exponential(rate), obs=x)

    settings = dict(steps=40, sampling_rate=0.5, clip=5.0, learning_rate=1e-3, noise_multiplier=1.0, key=0)
    data = {"x": jnp.ones(20)}
    with pytest.warns(DeprecationWarning, match=r"windowed="):
        run = na.record_dpvi(model, data, summary=True, **settings)
    assert isinstance(run, na.WindowedTrace) and run.rows() is None
    assert run.sums.count.sum() == 40
