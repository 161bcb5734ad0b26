"""Studies that outgrow one process: coverage and calibration as tasks with durable, verified results in a
study directory, run on any `concurrent.futures` executor (in-process, spawned processes, Dask), resumable,
merged exactly (docs/studies.md)."""

from .calibration import calibration_plan, calibration_study
from .coverage import coverage_plan, coverage_study
from .directory import Plan, PlanMismatch, StudyDirectory
from .executors import InProcessExecutor, dask_scheduler, local_cluster, open_executor, pin_threads, process_pool
from .runner import StudyError, StudyRun, run_plan, run_study
from .tasks import Task, make_task

__all__ = [
    "InProcessExecutor",
    "Plan",
    "PlanMismatch",
    "StudyDirectory",
    "StudyError",
    "StudyRun",
    "Task",
    "calibration_plan",
    "calibration_study",
    "coverage_plan",
    "coverage_study",
    "dask_scheduler",
    "local_cluster",
    "make_task",
    "open_executor",
    "pin_threads",
    "process_pool",
    "run_plan",
    "run_study",
]
