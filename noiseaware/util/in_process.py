"""InProcessExecutor: the `concurrent.futures` interface without parallelism (a study's default executor)."""

from __future__ import annotations

from concurrent.futures import Executor, Future

__all__ = ["InProcessExecutor"]


class InProcessExecutor(Executor):
    """Runs each task when it is submitted, in this process; its result or exception is in the returned future."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args, **kwargs))
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a task's failure belongs to its future, as in any executor
            future.set_exception(error)
        return future
