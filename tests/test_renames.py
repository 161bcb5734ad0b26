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
