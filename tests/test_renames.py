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
