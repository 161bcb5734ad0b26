"""The command line's flags: each default is read from the class (or function) that owns it, and a flag means
one thing across every command (the old spellings of renamed flags are errors naming the new ones)."""

import argparse
import dataclasses
from collections import defaultdict

import pytest
from messages import mentions

import noiseaware as na
from noiseaware.cli import build_parser, main
from noiseaware.cli.common import NUTS_OPTIONS
from noiseaware.cli.options import RenamedFlag
from noiseaware.cli.record import SETTING_OPTIONS, USER_MODEL_REQUIRED
from noiseaware.evaluation.calibration_experiment import CalibrationDesign
from noiseaware.evaluation.coverage import CoverageDesign
from noiseaware.methods import GradientModelOptions, NutsOptions
from noiseaware.models.builtin import RESEARCH_COMMON
from noiseaware.recording.config import setting_names
from noiseaware.recording.settings import DEFAULT_DELTA
from noiseaware.tuning.design import TuningDesign
from noiseaware.util.defaults import WARM_START_WARMUP, WARMUP, field_default

OWNERS = [
    # (command, argparse destination, owner of the default, its name there)
    ("fit", "draws", GradientModelOptions, "draws"),
    ("fit", "burn_in", GradientModelOptions, "burn_in"),
    ("fit", "prior", GradientModelOptions, "prior"),
    ("coverage", "prior", GradientModelOptions, "prior"),
    ("calibrate", "prior", GradientModelOptions, "prior"),
    ("coverage", "simulations", CoverageDesign, "simulations"),
    ("coverage", "references", CoverageDesign, "references"),
    ("coverage", "samples", CoverageDesign, "samples"),
    ("coverage", "chunk", CoverageDesign, "chunk"),
    ("coverage", "delta", CoverageDesign, "delta"),
    ("tune", "trials", TuningDesign, "trials"),
    ("tune", "predictions", TuningDesign, "predictions"),
    ("tune", "simulations", TuningDesign, "simulations"),
    ("tune", "check_simulations", TuningDesign, "check_simulations"),
    ("tune", "curve_simulations", TuningDesign, "curve_simulations"),
    ("tune", "curve_epsilons", TuningDesign, "curve_epsilons"),
    ("preflight", "simulations", TuningDesign, "preflight_simulations"),
    ("calibrate", "runs", CalibrationDesign, "runs"),
    ("calibrate", "samples", CalibrationDesign, "samples"),
    ("calibrate", "bins", CalibrationDesign, "bins"),
    ("calibrate", "binning", CalibrationDesign, "binning"),
    ("calibrate", "chunk", CalibrationDesign, "chunk"),
    ("calibrate", "delta", CalibrationDesign, "delta"),
]


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def _action(command: str, dest: str) -> argparse.Action:
    (action,) = [a for a in _commands()[command]._actions if a.dest == dest]
    return action


@pytest.mark.parametrize("command, dest, owner, name", OWNERS)
def test_a_flag_default_is_its_owner_default(command, dest, owner, name):
    assert _action(command, dest).default == field_default(owner, name)


def test_the_research_dp_sgd_defaults_of_account_are_the_presets():
    assert _action("account", "steps").default == RESEARCH_COMMON["steps"]
    assert _action("account", "sampling_rate").default == RESEARCH_COMMON["sampling_rate"]
    assert na.models.get("gamma-exponential").dpvi_settings["steps"] == RESEARCH_COMMON["steps"]


@pytest.mark.parametrize("command, dest", [("fit", "start"), ("fit", "chains"), ("fit", "backend")])
def test_nuts_flags_leave_the_default_to_the_options_and_name_it(command, dest):
    action = _action(command, dest)
    assert action.default is None  # not given: NutsOptions' own default applies
    assert f"(default: {field_default(NutsOptions, dest)})" in action.help


@pytest.mark.parametrize("command", ["fit", "coverage", "calibrate"])
def test_the_warmup_flag_names_each_starts_default(command):
    action = _action(command, "warmup")
    assert action.default is None and field_default(NutsOptions, "warmup") is None  # the start's own applies
    mentions(action.help, "(default:", str(WARM_START_WARMUP), "nuts", "exact", str(WARMUP), "cold")


def test_record_setting_flags_are_dpvi_settings_left_to_the_preset():
    assert set(SETTING_OPTIONS) <= set(setting_names()) and set(USER_MODEL_REQUIRED) <= set(SETTING_OPTIONS)
    for name in SETTING_OPTIONS:
        assert _action("record", name).default is None  # not given: the preset's (or DPVISettings') value


def test_fit_nuts_flags_are_nuts_options():
    assert set(NUTS_OPTIONS) <= {f.name for f in dataclasses.fields(NutsOptions)}


def test_each_flag_means_one_thing_across_commands():
    meanings = defaultdict(set)
    for parser in _commands().values():
        for action in parser._actions:
            if not isinstance(action, RenamedFlag):
                for flag in action.option_strings:
                    meanings[flag].add(action.dest)
    assert {flag: dests for flag, dests in meanings.items() if len(dests) > 1} == {}
    assert meanings["--draws"] == {"draws"} and meanings["--samples"] == {"samples"}


@pytest.mark.parametrize(
    "command, old, new",
    [
        (["coverage", "--model", "M1", "--epsilon", "1"], "--repeats", "--references"),
        (["coverage", "--model", "M1", "--epsilon", "1"], "--draws", "--samples"),
        (["calibrate", "--epsilon", "1"], "--repeats", "--runs"),
        (["calibrate", "--epsilon", "1"], "--draws", "--samples"),
    ],
)
def test_a_renamed_flag_is_an_error_naming_the_new_one(command, old, new, tmp_path, capsys):
    assert main([*command, old, "5", "--out", str(tmp_path / "out")]) == 2
    mentions(capsys.readouterr().err, old, "renamed", new)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["record", "account", "tune", "coverage", "calibrate"])
def test_every_delta_flag_defaults_to_the_one_default_delta(command):
    assert _action(command, "delta").default == DEFAULT_DELTA
