"""A study's identity sees what a user writes (issue 40): the plug-in of docs/methods.md, with its options
dataclass, runs as a study, and a model that reads a constant from another module of the user's is a new study
when that constant changes (`import myconsts` … `myconsts.SHAPE`, and `from myconsts import SHAPE`)."""

import dataclasses
import sys
import types

import pytest
from messages import mentions

import noiseaware as na
from noiseaware.studies import InProcessExecutor, PlanMismatch, StudyDirectory, coverage_plan, coverage_study
from noiseaware.util.fingerprint import canonical, fingerprint

M2 = na.models.get("beta-bernoulli")
LEVELS = [("noise_multiplier", 20.0)]
SMALL = dict(simulations=4, references=2, samples=100, steps=200, chunk=2)


@dataclasses.dataclass(frozen=True)
class TailOptions:
    fraction: float = 0.2  # the share of the last iterates used as draws of φ*


def tail_iterates(trace, key, options):
    """φ* drawn from the last `fraction` of the iterates (docs/methods.md's worked plug-in)."""
    start = int((1.0 - options.fraction) * trace.steps)
    return na.posteriors.MixturePosterior(
        trace.params[None, start:], None, None, "tail", trace.param_names, trace.sites
    )


TAIL = na.per_trace("tail", tail_iterates, options=TailOptions)


def test_the_documented_plug_in_with_its_options_dataclass_runs_as_a_study(tmp_path):
    options = {"tail": {"fraction": 0.1}}
    result = coverage_study(
        M2,
        levels=LEVELS,
        key=3,
        out=tmp_path,
        executor=InProcessExecutor(),
        methods=("naive", TAIL),
        method_options=options,
        **SMALL,
    )[LEVELS[0]]
    direct = na.coverage(M2, noise_multiplier=20.0, key=3, methods=("naive", TAIL), method_options=options, **SMALL)
    assert list(result.methods) == ["naive", "tail"] == list(direct.methods)
    assert result.rmse == direct.rmse  # the study's numbers are na.coverage's
    again = coverage_study(
        M2, levels=LEVELS, key=3, out=tmp_path, methods=("naive", TAIL), method_options=options, **SMALL
    )
    assert again[LEVELS[0]].rmse == direct.rmse  # resumed from the folder: the same plug-in is the same study


def test_a_dataclass_is_named_by_its_fields_and_their_defaults_not_by_its_generated_methods():
    def options(default: float, extra: bool = False):
        namespace = {"dataclasses": dataclasses, "__name__": "user_options"}
        body = f"    fraction: float = {default}\n" + ("    keep: int = 1\n" if extra else "")
        exec(compile(f"@dataclasses.dataclass(frozen=True)\nclass Opts:\n{body}", "opts.py", "exec"), namespace)
        return namespace["Opts"]

    assert fingerprint(options(0.2)) == fingerprint(options(0.2))
    assert fingerprint(options(0.2)) != fingerprint(options(0.3))  # another default
    assert fingerprint(options(0.2)) != fingerprint(options(0.2, extra=True))  # another field
    assert canonical(TailOptions(0.1))["fields"] == {"fraction": "0.1"}
    assert fingerprint(TailOptions(0.1)) != fingerprint(TailOptions(0.2))


@pytest.fixture
def user_modules(monkeypatch):
    """A module `myconsts_<n>` with SHAPE, and a model module reading it either way; both are the user's code."""
    made = []

    def make(shape: float, style: str):
        consts = types.ModuleType(f"myconsts_{len(made)}")
        consts.SHAPE = shape
        monkeypatch.setitem(sys.modules, consts.__name__, consts)
        reads = "myconsts.SHAPE" if style == "module" else "SHAPE"
        source = (
            f"import {consts.__name__} as myconsts\nfrom {consts.__name__} import SHAPE\n"
            "import numpyro\nimport numpyro.distributions as dist\n\n\n"
            "def model(x=None, n_examples=None):\n"
            f"    rate = numpyro.sample('rate', dist.Gamma({reads}, 2.0))\n"
            "    with numpyro.plate('data', n_examples):\n"
            "        numpyro.sample('x', dist.Poisson(rate), obs=x)\n"
        )
        module = types.ModuleType(f"mymodel_{len(made)}")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        exec(compile(source, f"{module.__name__}.py", "exec"), module.__dict__)
        made.append(module)
        return consts, na.models.from_numpyro(module.model, n_examples=100, steps=200, sampling_rate=0.1, clip=2.0)

    return make


@pytest.mark.parametrize("style", ["module", "name"])
def test_a_constant_read_from_another_user_module_is_part_of_the_study(user_modules, tmp_path, style):
    consts, bm = user_modules(2.0, style)
    plan = coverage_plan(bm, levels=LEVELS, key=0, methods=("naive",), **SMALL)
    StudyDirectory(tmp_path).prepare(plan)
    if style == "module":  # the module's attribute changed in place (an edited myconsts.py, reimported)
        consts.SHAPE = 5.0
        changed = bm
    else:  # `from myconsts import SHAPE` binds the value in the model's own module when it is (re)imported
        _, changed = user_modules(5.0, style)
    other = coverage_plan(changed, levels=LEVELS, key=0, methods=("naive",), **SMALL)
    assert other.id != plan.id
    with pytest.raises(PlanMismatch) as info:
        StudyDirectory(tmp_path).holds(other)
    mentions(info, "SHAPE")


def test_a_class_constant_of_the_user_s_is_part_of_the_identity(monkeypatch):
    config = types.ModuleType("myconfig_class")
    exec(
        compile("class Config:\n    SHAPE = 2.0\n    cache = {object()}\n", "myconfig_class.py", "exec"),
        config.__dict__,
    )
    monkeypatch.setitem(sys.modules, config.__name__, config)
    reader = types.ModuleType("myreader_class")
    source = "from myconfig_class import Config\n\n\ndef prior_shape():\n    return Config.SHAPE\n"
    exec(compile(source, "myreader_class.py", "exec"), reader.__dict__)
    monkeypatch.setitem(sys.modules, reader.__name__, reader)
    before = fingerprint(reader.prior_shape)
    config.Config.SHAPE = 5.0
    assert fingerprint(reader.prior_shape) != before  # the set it never reads is named by its type, not refused


def test_a_module_attribute_the_code_reads_that_cannot_be_fingerprinted_is_refused(monkeypatch):
    """A value read as `mymodule.CFG` is part of the identity like any global: one that cannot be fingerprinted
    is refused with the place named, never named by its type alone (which would reuse stale results)."""
    from noiseaware.util.fingerprint import Unfingerprintable

    consts = types.ModuleType("myconsts_slots")
    exec(compile("class Box:\n    __slots__ = ('v',)\n\n\nCFG = Box()\nCFG.v = 1\n", "myconsts_slots.py", "exec"),
         consts.__dict__)  # fmt: skip
    monkeypatch.setitem(sys.modules, consts.__name__, consts)
    reader = types.ModuleType("myreader_slots")
    source = "import myconsts_slots\n\n\ndef value():\n    return myconsts_slots.CFG.v\n"
    exec(compile(source, "myreader_slots.py", "exec"), reader.__dict__)
    monkeypatch.setitem(sys.modules, reader.__name__, reader)
    with pytest.raises(Unfingerprintable, match="CFG"):
        fingerprint(reader.value)
