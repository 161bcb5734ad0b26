"""Failures as data (issue 26): a fit's statistical failure is a typed `FitFailure` value that a study counts;
a bug in a method propagates with its traceback; the command line tells a user error from a bug."""

import pickle
import re
import traceback

import numpy as np
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.cli import main
from noiseaware.methods.base import Batch, failure_reasons, fit_problems
from noiseaware.posteriors.mixture import NAIVE
from noiseaware.recording.settings import check_delta
from noiseaware.tuning.preflight import findings
from noiseaware.tuning.score import Score
from noiseaware.util.errors import DIVERGED, NO_OPTIMUM, FitFailure

M1 = na.models.get("gamma-exponential", preset="research")
TINY = {"simulations": 2, "references": 2, "samples": 100, "steps": 100, "chunk": 2}


@pytest.fixture(scope="module")
def traces():
    """Two short M1 traces."""
    _, data = M1.simulate(0)
    settings = M1.dpvi_settings | {"steps": 100}
    return tuple(na.record_dpvi(M1.model, data, noise_multiplier=5.0, key=k, **settings) for k in (1, 2))


def test_a_failure_is_plain_data_that_pickles_and_compares():
    failure = FitFailure(NO_OPTIMUM, "Newton's method reached no stationary point: coordinates [1]")
    assert isinstance(failure, ValueError) and str(failure) == failure.message
    assert failure.as_data() == {"reason": NO_OPTIMUM, "message": failure.message}
    assert FitFailure.from_data(failure.as_data()) == failure
    assert pickle.loads(pickle.dumps(failure)) == failure
    assert failure != FitFailure(DIVERGED, failure.message)
    assert failure.within("trace 3") == FitFailure(NO_OPTIMUM, f"trace 3: {failure.message}")
    with pytest.raises(TypeError) as info:
        FitFailure("", "no reason")
    mentions(info, "FitFailure")


def test_a_returned_or_raised_failure_is_counted_and_anything_else_propagates(traces):
    batch = Batch(traces)
    keys = na.methods.base.split_keys(0, 2)
    failure = FitFailure(DIVERGED, "the sampler diverged")
    returned = na.Method("returned", lambda b, k, o: [failure, na.naive_posterior(b.traces[1])])
    raised = na.Method("raised", lambda b, k, o: (_ for _ in ()).throw(failure))
    outcomes = fit_problems(returned, batch, keys, na.methods.NoOptions())
    assert outcomes[0] is failure and outcomes[1].kind == NAIVE
    assert fit_problems(raised, batch, keys, na.methods.NoOptions()) == [failure, failure]

    untyped = na.Method("untyped", lambda b, k, o: [ValueError("a bug's message")] * 2)
    with pytest.raises(TypeError) as caught:
        fit_problems(untyped, batch, keys, na.methods.NoOptions())
    mentions(caught, "'untyped'", "ValueError", "0")
    assert isinstance(caught.value.__cause__, ValueError)


def test_fit_raises_the_failure_and_fit_batch_names_the_trace_or_skips_it(traces):
    def fail_first(trace, key, options):
        if trace is traces[0]:
            return FitFailure(NO_OPTIMUM, "no mode")
        return na.naive_posterior(trace)

    method = na.per_trace("fail-first", fail_first)
    with pytest.raises(FitFailure) as raised:
        na.fit(traces[0], method, key=0, checks="off")
    assert raised.value == FitFailure(NO_OPTIMUM, "no mode")  # the method's own failure, as it was
    with pytest.raises(FitFailure) as raised:
        na.fit_batch(traces, method, key=0, checks="off")
    assert raised.value.reason == NO_OPTIMUM and str(raised.value).endswith("no mode")
    mentions(raised, "trace", "0:")  # which trace failed
    assert raised.value.__cause__ == FitFailure(NO_OPTIMUM, "no mode")  # chained to the method's own failure
    with pytest.warns(UserWarning) as record:
        skipped = na.fit_batch(traces, method, key=0, checks="off", on_error="skip")
    mentions(record, "1", "2")
    assert skipped[0] is None and skipped[1].kind == NAIVE


def _bug(problem, key, options):
    """A plug-in with a bug: it indexes past the end of its trace's parameters."""
    return problem.trace.param_names[99]


def _statistical(problem, key, options):
    """A plug-in whose fit fails for a statistical reason on the first simulation."""
    if problem.index == 0:
        raise FitFailure(DIVERGED, "the sampler diverged on this simulation")
    return na.naive_posterior(problem.trace)


def test_a_bug_in_a_method_stops_coverage_with_its_traceback_and_a_failure_is_counted():
    with pytest.raises(IndexError) as raised:
        na.coverage(M1, methods=(na.per_problem("buggy", _bug),), epsilon=1.0, key=0, **TINY)
    assert "_bug" in [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]

    def untyped(problem, key, options):
        raise ValueError("an untyped ValueError is a bug too")

    with pytest.raises(ValueError) as info:
        na.coverage(M1, methods=(na.per_problem("untyped", untyped),), epsilon=1.0, key=0, **TINY)
    mentions(info, "ValueError")

    result = na.coverage(M1, methods=(na.per_problem("flaky", _statistical),), epsilon=1.0, key=0, **TINY)
    assert result.failures == {"flaky": 1}


def test_failed_fits_are_counted_by_reason_and_a_preflight_finding_names_the_reasons():
    outcomes = [FitFailure(DIVERGED, "a"), 1.0, FitFailure(NO_OPTIMUM, "b"), FitFailure(DIVERGED, "c")]
    assert failure_reasons(outcomes) == {DIVERGED: 2, NO_OPTIMUM: 1}
    z = np.zeros((4, 1))
    z[0] = np.nan  # the failed fit's row
    half = Score(z, np.zeros((4, 2)), np.ones((4, 1)), np.zeros(4), np.zeros((4, 2)), {"traces": 4, "any": 0},
                 failure_reasons={NO_OPTIMUM: 1})  # fmt: skip
    score = half + half
    assert score.failure_reasons == {NO_OPTIMUM: 2} and score.failures == 2
    (found,) = findings(score, 0.0, ("mu",))
    assert found.startswith("fits failed: ")
    mentions(found, "2", "8")
    assert f"({NO_OPTIMUM} 2)" in found  # each reason with its count


# ---------------------------------------------------------------- the command line


def _account(*more):
    return ["account", "--epsilon", "1", *more]


@pytest.mark.parametrize(
    "raise_it",
    [
        lambda: [][1],  # an IndexError
        lambda: np.reshape(np.zeros(3), (2,)),  # a ValueError raised inside numpy
        lambda: dict(FitFailure(NO_OPTIMUM, "x").as_data(), more=1)["less"],  # a KeyError
        lambda: na.methods.base.Batch.problem(None, 0),  # an AttributeError inside noiseaware
    ],
    ids=["IndexError", "numpy ValueError", "KeyError", "AttributeError"],
)
def test_an_unexpected_error_prints_its_traceback_and_says_it_is_a_bug(capsys, monkeypatch, raise_it):
    monkeypatch.setattr("noiseaware.cli.account.noise_multiplier", lambda *args, **scheme: raise_it())
    status = main(_account())
    err = capsys.readouterr().err
    assert status == 1, err
    assert err.startswith("Traceback (most recent call last):") and "error:" not in err
    mentions(err.rstrip().splitlines()[-1], "bug", "report", "traceback")


@pytest.mark.parametrize(
    ("raise_it", "message"),
    [
        (lambda: check_delta(0.6), "error: delta=0.6 is no privacy guarantee"),  # noiseaware's own input check
        (lambda: open("/nonexistent/folder/file"), "error: .*No such file"),
        (lambda: (_ for _ in ()).throw(FitFailure(NO_OPTIMUM, "no mode")), "error: no mode"),
    ],
    ids=["ValueError of a check", "OSError", "FitFailure"],
)
def test_a_user_error_prints_one_error_line(capsys, monkeypatch, raise_it, message):
    monkeypatch.setattr("noiseaware.cli.account.noise_multiplier", lambda *args, **scheme: raise_it())
    status = main(_account())
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert re.match(message, err), err
