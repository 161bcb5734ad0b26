"""Where a study's tasks run: any executor with the `concurrent.futures` interface.

    InProcessExecutor()   one task at a time in this process (the default)
    process_pool(n)       n spawned processes (`ProcessPoolExecutor`, spawn context: JAX does not survive fork)
    local_cluster(n)      a Dask `LocalCluster` of n worker processes, one thread each (`Client.get_executor`)
    dask_scheduler(addr)  the workers of a running Dask scheduler (e.g. started by dask-jobqueue on Slurm)

Each context manager yields (executor, slots): slots is how many tasks run at once, and the study keeps that
many in flight, so a study killed midway loses at most `slots` tasks. Local workers pin their XLA threads
(`pin_threads`): worker i of n runs on its own cores/n of this machine's cores, claimed before its first
computation, so workers × threads never oversubscribe the cores. (XLA sizes its CPU thread pool from the
process's CPU affinity when JAX's backend starts; XLA_FLAGS thread options are ignored on CPU.) Every worker,
local or a scheduler's, keeps its compiled programs in the persistent compilation cache
(`util.compilation`; local workers share the caller's folder), so a program is compiled once per machine,
not once per worker.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager

from ..util.compilation import shared_cache_directory, use_compilation_cache
from ..util.in_process import InProcessExecutor

__all__ = ["InProcessExecutor", "dask_scheduler", "local_cluster", "open_executor", "pin_threads", "process_pool"]


def pin_threads(index: int, workers: int) -> list[int]:
    """Pin this process to worker `index`'s share of the cores it may use (cores/workers each, at least one).

    Call before the process's first JAX computation: XLA sizes its thread pool from the CPU affinity then.
    Returns the cores chosen.
    """
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // workers)
    first = (index * share) % len(cores)
    chosen = cores[first : first + share] or cores[:share]
    os.sched_setaffinity(0, chosen)
    return chosen


def _claim_cores(counter, workers: int, cache) -> None:
    """ProcessPoolExecutor initializer: take the next worker index from the shared counter and pin to it, then
    open the compilation cache `cache` (a folder, or None: off)."""
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    pin_threads(index, workers)
    if cache is not None:
        use_compilation_cache(cache)


@contextmanager
def process_pool(workers: int) -> Iterator[tuple[Executor, int]]:
    """`workers` spawned processes, each pinned to its share of the cores."""
    context = multiprocessing.get_context("spawn")
    counter = context.Value("i", 0)
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_claim_cores, initargs=(counter, workers, shared_cache_directory())
    ) as pool:
        yield pool, workers


class _WorkerSetup:
    """Dask worker plugin: a LocalCluster worker named i pins itself to worker i's share of the cores (workers:
    None for a scheduler's workers, which are not pinned), then opens the compilation cache `cache` (a folder;
    None: the worker's own default, `default_cache_directory`)."""

    def __init__(self, workers: int | None, cache):
        self.workers = workers
        self.cache = cache

    def setup(self, worker) -> None:
        if self.workers is not None and isinstance(worker.name, int):
            pin_threads(worker.name, self.workers)
        use_compilation_cache(self.cache)


def _dask():
    try:
        import distributed
    except ImportError:
        raise ImportError(
            "Dask is not installed: pip install 'noiseaware[dask]' (or use process_pool / --workers without Dask)"
        ) from None
    return distributed


@contextmanager
def local_cluster(workers: int) -> Iterator[tuple[Executor, int]]:
    """A Dask LocalCluster of `workers` processes with one thread each, pinned to their share of the cores."""
    distributed = _dask()
    cluster = distributed.LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
    )
    with cluster, distributed.Client(cluster) as client:
        setup = _as_worker_plugin(distributed, workers, shared_cache_directory())
        client.register_plugin(setup, name="noiseaware-worker-setup")
        yield client.get_executor(pure=False), workers


@contextmanager
def dask_scheduler(address: str) -> Iterator[tuple[Executor, int]]:
    """The workers of a running Dask scheduler at `address` (tcp://host:port, or a scheduler file path).

    The workers were started elsewhere (dask-jobqueue, `dask worker`), so they are not pinned here: start each
    with one thread (`--nthreads 1`, one worker process per core with `--nworkers`; docs/studies.md). numpyro's
    handler stack is one list per process and not thread-safe (pyro-ppl/numpyro#494), so two tasks on two threads
    of one worker could trace each other's models: a worker with more threads is refused before any task is sent.
    slots: the workers in all.
    """
    distributed = _dask()
    connect = {"scheduler_file": address} if os.path.isfile(address) else {"address": address}
    with distributed.Client(**connect, timeout=30) as client:
        threads = client.nthreads()
        crowded = sorted(worker for worker, count in threads.items() if count > 1)
        if crowded:
            raise ValueError(
                f"the Dask workers {', '.join(crowded[:3])}{' …' if len(crowded) > 3 else ''} run "
                f"{max(threads.values())} threads each: numpyro traces models through one process-wide handler "
                "stack that threads would share (pyro-ppl/numpyro#494), so a study needs one thread per worker; "
                "start them with `dask worker … --nthreads 1 --nworkers <cores>`"
            )
        slots = max(1, len(threads))
        client.register_plugin(_as_worker_plugin(distributed, None, None), name="noiseaware-worker-setup")
        yield client.get_executor(pure=False), slots


def _as_worker_plugin(distributed, workers: int | None, cache):
    """_WorkerSetup as a distributed.WorkerPlugin (made here, so the module imports without Dask)."""

    class WorkerSetup(_WorkerSetup, distributed.WorkerPlugin):
        pass

    return WorkerSetup(workers, cache)


@contextmanager
def open_executor(
    workers: int | None = None, scheduler: str | None = None, engine: str = "dask"
) -> Iterator[tuple[Executor, int]]:
    """The executor of a study run: in-process (neither given), `workers` local processes (engine "dask": a
    LocalCluster, "processes": a ProcessPoolExecutor), or a running Dask scheduler."""
    if workers is not None and scheduler is not None:
        raise ValueError("give workers or a scheduler address, not both")
    if engine not in ("dask", "processes"):
        raise ValueError(f"engine must be 'dask' or 'processes'; got {engine!r}")
    if scheduler is not None:
        with dask_scheduler(scheduler) as opened:
            yield opened
    elif workers is None or workers == 0:
        yield InProcessExecutor(), 1
    elif engine == "dask":
        with local_cluster(workers) as opened:
            yield opened
    else:
        with process_pool(workers) as opened:
            yield opened
