"""Studies that outgrow one process: coverage and calibration as tasks with durable, verified results (data,
never pickles) in a study directory, run on any `concurrent.futures` executor (in-process, spawned processes,
Dask), resumable, merged exactly; kinds of study declared by one contract (`StudyKind`, docs/studies.md)."""

from .calibration import CALIBRATION, calibration_plan, calibration_study
from .coverage import COVERAGE, coverage_plan, coverage_study
from .directory import PlanMismatch, StudyDirectory, StudyLocked
from .executors import InProcessExecutor, dask_scheduler, local_cluster, open_executor, pin_threads, process_pool
from .kinds import KINDS, StudyKind, get_kind, register_kind
from .plan import Plan, kind_plan, merge_record
from .runner import StudyError, StudyRun, TaskError, WorkersLost, run_plan, run_study
from .tasks import Task, make_task

__all__ = [
    "CALIBRATION",
    "COVERAGE",
    "KINDS",
    "InProcessExecutor",
    "Plan",
    "PlanMismatch",
    "StudyDirectory",
    "StudyError",
    "StudyKind",
    "StudyLocked",
    "StudyRun",
    "Task",
    "TaskError",
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
