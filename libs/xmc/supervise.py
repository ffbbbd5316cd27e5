"""Supervision of each service's long-lived tasks, the way kopf's ``run_tasks`` does it.

A service is a handful of tasks that should run until SIGTERM (watchers, a batcher, a
consumer, a relay). One that ends early — a crash, or a loop that returned — leaves the
process looking healthy while it no longer does its job, which is the worst failure an
operator can get. So every service waits on all of its tasks at once: the first one to end
while the service is not stopping ends the process with a non-zero code and a log line
naming it, and the kubelet (or ``make run``) restarts it.

Periodic work is the opposite case: one bad iteration (a 500 from the API server, a lost
connection) must not end the loop. :func:`every` logs the failure, counts it and goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog
from prometheus_client import Counter

log = structlog.get_logger()

LOOP_ITERATION_FAILURES_TOTAL = Counter(
    "xmc_loop_iteration_failures_total",
    "Iterations of a periodic loop that raised; the loop goes on.",
    ["loop"],
)

#: Exit code of a process whose long-lived task ended unexpectedly.
EXIT_TASK_ENDED = 1


class TaskEnded(Exception):
    """A long-lived task ended while its service was not stopping."""

    def __init__(self, name: str, cause: BaseException | None) -> None:
        how = f"failed: {type(cause).__name__}: {cause}" if cause else "returned"
        super().__init__(f"task {name!r} ended unexpectedly ({how})")
        self.name = name
        self.cause = cause


def ended_unexpectedly(task: asyncio.Task[Any], *, stopping: bool) -> TaskEnded | None:
    """Why a finished task ends the service, or None when its end was asked for (pure)."""
    if stopping and (task.cancelled() or task.exception() is None):
        return None
    if task.cancelled():
        return TaskEnded(task.get_name(), None)
    error = task.exception()
    if isinstance(error, TaskEnded):
        return error  # a nested supervisor already named the task
    return TaskEnded(task.get_name(), error)


async def supervise(tasks: Iterable[asyncio.Task[Any]], *, stopping: asyncio.Event) -> None:
    """Wait until ``stopping`` is set (return) or one of ``tasks`` ends (raise
    :class:`TaskEnded` naming it). The tasks are left running either way: the service's
    ``stop()`` ends them in its own order (flush, then release)."""
    watched = list(tasks)
    waiter = asyncio.create_task(stopping.wait(), name="stopping")
    try:
        done, _ = await asyncio.wait([*watched, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
    for task in watched:
        if task in done:
            ended = ended_unexpectedly(task, stopping=stopping.is_set())
            if ended is not None:
                raise ended


async def finish(tasks: Iterable[asyncio.Task[Any]], *, within: float) -> None:
    """Wait up to ``within`` seconds for tasks told to stop, cancel the stragglers; never
    raises, so a stop after a crash still closes every client (the crash itself was
    raised by :func:`supervise`; one only seen here is logged)."""
    pending = [task for task in tasks if not task.done()]
    if not pending:
        return
    done, late = await asyncio.wait(pending, timeout=within)
    for task in late:
        log.warning("task did not stop in time; cancelled", task=task.get_name())
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.error("task failed while stopping", task=task.get_name(),
                      error=repr(task.exception()))  # fmt: skip


async def every(
    name: str,
    interval: float,
    step: Callable[[], Awaitable[object]],
    *,
    stopping: asyncio.Event,
    first_after: float | None = None,
) -> None:
    """Run ``step`` every ``interval`` seconds until ``stopping``; an iteration that raises
    is logged and counted, and the next one runs on time."""
    delay = interval if first_after is None else first_after
    while not stopping.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=delay)
        if stopping.is_set():
            return
        delay = interval
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception:
            LOOP_ITERATION_FAILURES_TOTAL.labels(name).inc()
            log.exception(f"{name} failed; trying again in {interval:g}s", loop=name)


def run_service(serve: Callable[[asyncio.Event], Awaitable[None]], *, service: str) -> None:
    """``asyncio.run`` a service: SIGTERM/SIGINT set the event ``serve`` stops on; a
    :class:`TaskEnded` or any other failure exits non-zero after one log line naming it."""

    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        await serve(stopping)

    try:
        asyncio.run(main())
    except TaskEnded as ended:
        log.error(f"{service} exiting: {ended}", task=ended.name, service=service)
        sys.exit(EXIT_TASK_ENDED)
    except Exception as error:
        log.exception(f"{service} exiting: {type(error).__name__}: {error}", service=service)
        sys.exit(EXIT_TASK_ENDED)
