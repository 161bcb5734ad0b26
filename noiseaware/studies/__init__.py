"""Studies that outgrow one process: coverage, calibration and the other kinds as tasks with durable, verified
results (data, never pickles) in a study directory, run on any `concurrent.futures` executor (in-process, spawned
processes, Dask), resumable, merged exactly; kinds of study declared by one contract (`StudyKind`,
docs/studies.md), one module each in `studies/kinds/`, all imported here."""

import importlib
import pkgutil

from . import kinds
from .directory import (
    CorruptResultWarning,
    PlanMismatch,
    StudyDirectory,
    StudyFolderError,
    StudyLocked,
    UnsafeLink,
)
from .executors import InProcessExecutor, dask_scheduler, local_cluster, open_executor, pin_threads, process_pool
from .kind import KINDS, StudyKind, get_kind, register_kind
from .kinds.calibration import CALIBRATION, calibration_plan, calibration_study
from .kinds.coverage import COVERAGE, coverage_plan, coverage_study
from .plan import Plan, kind_plan, merge_record
from .runner import StudyError, StudyRun, TaskError, WorkersLost, run_plan, run_study
from .tasks import Task, make_task
from .verify import ResultMismatch

__all__ = [
    "CALIBRATION",
    "COVERAGE",
    "CorruptResultWarning",
    "KINDS",
    "InProcessExecutor",
    "Plan",
    "PlanMismatch",
    "ResultMismatch",
    "StudyDirectory",
    "StudyError",
    "StudyFolderError",
    "StudyKind",
    "StudyLocked",
    "StudyRun",
    "Task",
    "TaskError",
    "UnsafeLink",
    "WorkersLost",
    "calibration_plan",
    "calibration_study",
    "coverage_plan",
    "coverage_study",
    "dask_scheduler",
    "get_kind",
    "kind_plan",
    "local_cluster",
    "make_task",
    "merge_record",
    "open_executor",
    "pin_threads",
    "process_pool",
    "register_kind",
    "run_plan",
    "run_study",
]

for _module in pkgutil.iter_modules(kinds.__path__):  # each kind registers itself on import
    importlib.import_module(f"{kinds.__name__}.{_module.name}")
del _module
