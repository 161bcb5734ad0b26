"""Studies you can trust and share (issue 26): identity that sees code and settings, study folders that are data
(a crafted pickle never runs), one process per folder, and the study contract's registry. Cheap: plans are
prepared, not run, except for loose tasks of plain functions."""

import json
import os
import pickle
import subprocess
import sys
import types

import numpy as np
import optax
import pytest
from messages import mentions

import noiseaware as na
from noiseaware.cli import main
from noiseaware.studies import (
    KINDS,
    Plan,
    PlanMismatch,
    StudyDirectory,
    StudyLocked,
    coverage_plan,
    get_kind,
    make_task,
    run_plan,
    run_study,
)
from noiseaware.util.codec import UndecodableData, decode, encode
from noiseaware.util.fingerprint import Unfingerprintable, canonical, fingerprint

M2 = na.models.get("beta-bernoulli")
SMALL = dict(simulations=4, references=2, samples=100, steps=200, chunk=2)
LEVELS = [("noise_multiplier", 20.0)]


def make(constant):
    def shift(x):
        return x + constant

    return shift


def plugin(body: str, version: str | None = None) -> na.Method:
    """A plug-in method defined in a module of its own, as a user's file would define it (not installed)."""
    module = types.ModuleType("my_plugin")
    exec(compile(f"def fit_batch(batch, keys, options):\n    {body}\n", "my_plugin.py", "exec"), module.__dict__)
    return na.Method("mine", module.fit_batch, version=version)


class Marker:
    """A pickle payload that, if ever unpickled, leaves a marker file (what a crafted study file would do)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_closures_with_other_constants_and_optimizers_with_other_rates_get_other_fingerprints():
    assert fingerprint(make(1)) != fingerprint(make(2))
    assert fingerprint(make(1)) == fingerprint(make(1))
    assert fingerprint(optax.adam(1e-3)) != fingerprint(optax.adam(1e-1))
    assert fingerprint(optax.adam(1e-3)) == fingerprint(optax.adam(1e-3))
    with pytest.raises(Unfingerprintable) as info:
        canonical({"optimizer": object()})
    mentions(info, "value['optimizer']")


def test_a_changed_plug_in_body_is_a_new_study_and_resuming_into_the_old_folder_is_refused(tmp_path):
    old = coverage_plan(M2, levels=LEVELS, key=0, methods=("naive", plugin("return []")), **SMALL)
    new = coverage_plan(M2, levels=LEVELS, key=0, methods=("naive", plugin("return [None]")), **SMALL)
    again = coverage_plan(M2, levels=LEVELS, key=0, methods=("naive", plugin("return []")), **SMALL)
    assert old.id != new.id and old.id == again.id
    StudyDirectory(tmp_path).prepare(old)
    with pytest.raises(PlanMismatch) as info:
        run_plan(new, StudyDirectory(tmp_path))
    mentions(info, "fit_batch.code")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "tasks"]


def test_a_declared_version_names_a_method_instead_of_its_code():
    one = coverage_plan(M2, levels=LEVELS, key=0, methods=(plugin("return []", "1"),), **SMALL)
    same = coverage_plan(M2, levels=LEVELS, key=0, methods=(plugin("return [None]", "1"),), **SMALL)
    bumped = coverage_plan(M2, levels=LEVELS, key=0, methods=(plugin("return []", "2"),), **SMALL)
    assert one.id == same.id != bumped.id


def test_other_settings_and_other_noiseaware_code_are_other_tasks(monkeypatch):
    plan = coverage_plan(M2, levels=LEVELS, key=0, methods=("naive",), **SMALL)
    assert coverage_plan(M2, levels=LEVELS, key=0, methods=("naive",), **(SMALL | {"steps": 201})).id != plan.id
    monkeypatch.setitem(na.studies.tasks.VERSIONS, "noiseaware", "0.1.0+other-source")
    assert coverage_plan(M2, levels=LEVELS, key=0, methods=("naive",), **SMALL).id != plan.id


def test_the_study_folder_is_data_only(tmp_path):
    plan = coverage_plan(M2, levels=LEVELS, key=0, methods=("naive", "exact"), **SMALL)
    StudyDirectory(tmp_path).prepare(plan)
    record = json.loads((tmp_path / "plan.json").read_text())
    assert record["kind"] == "coverage" and record["plan"] == plan.id and len(record["tasks"]) == 2
    assert record["specs"][0]["summary"]["methods"] == {"naive": "trace", "exact": "trace"}
    assert not list(tmp_path.rglob("*.pkl"))


def test_a_crafted_pickle_in_a_study_folder_never_runs(tmp_path, capsys):
    marker = tmp_path / "marker"
    tasks = (make_task(abs, (-5,), {"abs": -5}, "abs"), make_task(abs, (-6,), {"abs": -6}, "abs 6"))
    plan = Plan("loose", {"what": "a test"}, tasks)
    study = tmp_path / "study"
    assert run_study(plan, study) == {tasks[0].id: 5, tasks[1].id: 6}
    payload = pickle.dumps(Marker(marker))
    StudyDirectory(study).result_path(tasks[0]).write_bytes(payload)  # a replaced task file
    np.savez(StudyDirectory(study).result_path(tasks[1]), record=np.array([Marker(marker)], dtype=object))
    assert main(["report", str(study)]) == 0
    assert "0 done" in capsys.readouterr().out and not marker.exists()
    assert run_study(plan, study) == {tasks[0].id: 5, tasks[1].id: 6}  # recomputed, the crafted files kept aside
    assert not marker.exists() and len(list(study.glob("tasks/*.corrupt"))) == 2
    (study / "plan.json").write_bytes(payload)  # a replaced plan
    assert main(["report", str(study)]) == 2 and not marker.exists()
    mentions(capsys.readouterr().err, str(study / "plan.json"), "plan")
    old = tmp_path / "old"
    old.mkdir()
    (old / "plan.pkl").write_bytes(payload)  # a folder of an older noiseaware: refused, never read
    with pytest.raises(PlanMismatch) as info:
        run_study(plan, old)
    mentions(info, str(old), "older")
    assert not marker.exists()


def test_decoding_builds_only_registered_data_types():
    tree, arrays = encode({"x": (1, 2.5), "y": np.ones(2)})
    assert decode(tree, arrays)["x"] == (1, 2.5)
    with pytest.raises(UndecodableData) as info:
        decode({"$data": "Popen", "fields": {"args": ["touch", "marker"]}}, {})
    mentions(info, "'Popen'")
    with pytest.raises(UndecodableData) as info:
        decode({"$warning": "os.system"}, {})
    mentions(info, "'$warning'")
    with pytest.raises(TypeError) as info:
        encode(na.methods.ExactOptions())
    mentions(info, "ExactOptions")


def test_a_second_process_is_refused_while_the_first_holds_the_study(tmp_path, capsys):
    tasks = (make_task(abs, (-5,), {"abs": -5}, "abs"),)
    plan = Plan("loose", {"what": "a test"}, tasks)
    run_study(plan, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "lock").write_text(json.dumps({"pid": holder.pid, "host": os.uname().nodename, "since": "now"}))
        before = sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
        with pytest.raises(StudyLocked) as info:
            run_study(plan, tmp_path)
        mentions(info, str(holder.pid))
        assert main(["report", str(tmp_path), "--write"]) == 2
        mentions(capsys.readouterr().err, "process", str(holder.pid))
        assert main(["report", str(tmp_path)]) == 0  # reading a running study is fine
        assert sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before  # nothing touched
    finally:
        holder.kill()
        holder.wait()
    assert run_study(plan, tmp_path) == {tasks[0].id: 5}  # its holder is gone: the lock is taken over
    assert not (tmp_path / "lock").exists()


def test_every_kind_is_registered_with_the_whole_contract():
    assert {"coverage", "calibration"} <= set(KINDS)
    functions = ("run_part", "record", "merge", "label", "render", "files", "save", "collect")
    for name, kind in KINDS.items():
        assert get_kind(name) is kind and all(callable(getattr(kind, f)) for f in functions)
        assert (kind.design is None) == (kind.plan is None), f"{name}: a design and its plan come together"
    with pytest.raises(KeyError) as info:
        get_kind("nope")
    mentions(info, "'nope'")


def test_a_model_whose_prior_changed_in_its_file_is_a_new_study(tmp_path, monkeypatch):
    import importlib.util

    def load(prior_scale: float) -> na.models.BenchmarkModel:
        (tmp_path / "mymod.py").write_text(
            "import numpyro\nimport numpyro.distributions as dist\n\n\n"
            "def model(x=None, n_examples=None):\n"
            f"    loc = numpyro.sample('loc', dist.Normal(0.0, {prior_scale}))\n"
            "    with numpyro.plate('data', n_examples):\n"
            "        numpyro.sample('x', dist.Normal(loc, 1.0), obs=x)\n"
        )
        spec = importlib.util.spec_from_file_location("mymod", tmp_path / "mymod.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return na.models.from_numpyro(module.model, n_examples=100, steps=200, sampling_rate=0.1, clip=2.0)

    first, changed, same = load(3.0), load(5.0), load(3.0)
    plan = coverage_plan(first, levels=LEVELS, key=0, methods=("naive",), **SMALL)
    assert coverage_plan(same, levels=LEVELS, key=0, methods=("naive",), **SMALL).id == plan.id
    StudyDirectory(tmp_path / "study").prepare(plan)
    other = coverage_plan(changed, levels=LEVELS, key=0, methods=("naive",), **SMALL)
    with pytest.raises(PlanMismatch) as info:
        StudyDirectory(tmp_path / "study").holds(other)
    mentions(info, "model", "code")


def test_the_only_unpickling_in_the_study_engine_is_the_worker_transport():
    """A study folder is read by code that never unpickles: the one `loads` is `execute`'s, on the bytes `pack`
    made and the executor handed over in memory (no file is opened there)."""
    import inspect
    import re
    from pathlib import Path

    from noiseaware.studies import tasks

    sources = {path.name: path.read_text() for path in Path(tasks.__file__).parent.glob("*.py")}
    loads = {name: len(re.findall(r"\b(?:cloud)?pickle\.loads?\(", text)) for name, text in sources.items()}
    assert {name: n for name, n in loads.items() if n} == {"tasks.py": 1}
    body = inspect.getsource(tasks.execute)
    assert "cloudpickle.loads(payload)" in body and "open(" not in body and "read_bytes" not in body


def test_execute_refuses_a_path_or_file_from_a_study_folder_before_reading_it(tmp_path):
    """The worker entry point takes only the bytes `pack` made: a crafted pickle handed over as a path or an open
    file is refused unread, while the in-memory bytes of a real task run."""
    from noiseaware.studies.tasks import execute, pack

    marker = tmp_path / "marker"
    crafted = tmp_path / "task.pkl"
    crafted.write_bytes(pickle.dumps(Marker(marker)))
    with pytest.raises(TypeError) as info:
        execute(crafted, str(tmp_path / "out.npz"))
    mentions(info, "unpickled")
    with crafted.open("rb") as handle, pytest.raises(TypeError) as info:
        execute(handle, str(tmp_path / "out.npz"))
    mentions(info, "unpickled")
    assert not marker.exists() and not (tmp_path / "out.npz").exists()
    task = make_task(abs, (-5,), {"abs": -5}, "abs")
    execute(pack(task), str(tmp_path / "out.npz"))
    assert (tmp_path / "out.npz").exists()
