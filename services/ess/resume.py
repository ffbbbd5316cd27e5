"""The scheduling-resume worker (SPEC §9).

Triggered by entries on ``xmc-scheduling-resume-stream`` (``ResumeScheduling`` writes
one) and by a periodic sweep, so a lost trigger or a crash mid-run only delays a resume.
Each run claims unprocessed parked tasks in batches (joined with their work units;
``SKIP LOCKED`` keeps concurrent runs apart), decides each with ``should_skip_task``, and
in the same transaction soft-marks every task it read (``MarkProcessed``) and puts the
survivors back in the outbox, with the work unit as it is now; the outbox relay re-signs
and publishes them. A skipped task is finished there and its Operation closed (done,
nothing to do), so nobody waits for it. One transaction per batch: a run that crashes
midway leaves its batch unmarked and unqueued, and the retry does it once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import structlog
from redis.exceptions import ResponseError

from ess.metrics import TASKS_RESUMED
from xmc.model.audit import ESS
from xmc.model.resume import TaskKind, should_skip_task
from xmc.retry import sleep_or_stop
from xmc.store.transactions import (
    Connection,
    ParkedTask,
    Resolution,
    Store,
    claim_parked_tasks,
    fetch_scheduling_control,
    fetch_work_unit,
    finish_task,
    mark_orphaned_parked_tasks,
    mark_processed,
    rearm_task,
)
from xmc.streams import (
    REDIS_UNAVAILABLE,
    RESUME_GROUP,
    ReadFailure,
    StreamNames,
    classify_read_error,
    ensure_group,
)
from xmc_api.internal.v1.tasks_pb2 import Task

log = structlog.get_logger()

#: This worker as ``finish_task``'s writer (a skipped task writes no execution state).
WRITER: Final = "ess/resume"
#: Seconds to wait after a failed run (Redis or Postgres down) before the next.
ERROR_PAUSE_SECONDS: Final = 1.0


@dataclass(frozen=True)
class ResumeReport:
    run_id: str
    resumed: int
    skipped: int
    #: False when scheduling was paused, so nothing was done.
    ran: bool = True


def _newest_updates(tasks: list[ParkedTask]) -> set[int]:
    """Ids of the newest parked UPDATE per work unit in this batch; older ones are stale."""
    newest: dict[tuple[int, int], int] = {}
    for task in tasks:
        if task.kind == TaskKind.UPDATE:
            key = (task.xid, task.wid)
            newest[key] = max(newest.get(key, 0), task.id)
    return set(newest.values())


class ResumeWorker:
    def __init__(
        self,
        store: Store,
        redis: Any,
        names: StreamNames,
        *,
        clock: Callable[[], datetime],
        consumer: str,
        committed: Callable[[], None] = lambda: None,
        batch_size: int = 500,
        sweep_interval: float = 30.0,
    ) -> None:
        """``committed`` is told when resumed tasks wait in the outbox (the relay's wake)."""
        self._store = store
        self._redis = redis
        self._names = names
        self._committed = committed
        self._clock = clock
        self._consumer = consumer
        self._batch_size = batch_size
        self._sweep_interval = sweep_interval
        #: Whether the group is known to exist: created once, and again only when a read
        #: finds it gone (NOGROUP: Redis restarted without persistence, the key deleted)
        #: or the connection was lost. Creating it on every iteration made Redis count a
        #: failed command (BUSYGROUP) twice a second on an idle system.
        self._group_ready = False

    async def resume_once(self, run_id: str | None = None) -> ResumeReport:
        """One resume run over every unprocessed parked task."""
        run_id = run_id or uuid.uuid4().hex
        resumed = skipped = 0
        while True:
            async with self._store.transaction() as conn:
                control = await fetch_scheduling_control(conn)
                if control.paused:
                    return ResumeReport(run_id, resumed, skipped, ran=resumed + skipped > 0)
                await mark_orphaned_parked_tasks(conn, run_id=run_id, now=self._clock())
                tasks = await claim_parked_tasks(conn, limit=self._batch_size)
                if not tasks:
                    return ResumeReport(run_id, resumed, skipped)
                newest_updates = _newest_updates(tasks)
                marks: list[tuple[int, Resolution, str]] = []
                for parked in tasks:
                    decision = should_skip_task(
                        kind=TaskKind(parked.kind),
                        task_eid=parked.eid,
                        work_unit_eid=parked.work_unit_eid,
                        work_unit_state=parked.work_unit_state,
                        newer_update_parked=(
                            parked.kind == TaskKind.UPDATE and parked.id not in newest_updates
                        ),
                    )
                    resolution = Resolution.SKIPPED if decision.skip else Resolution.RESUMED
                    await self._resolve(conn, parked, resolution)
                    marks.append((parked.id, resolution, decision.reason.value))
                await mark_processed(conn, marks, run_id=run_id, now=self._clock())
            batch_resumed = sum(1 for _, r, _ in marks if r == Resolution.RESUMED)
            if batch_resumed:
                self._committed()
            resumed += batch_resumed
            skipped += len(marks) - batch_resumed
            TASKS_RESUMED.labels("resumed").inc(batch_resumed)
            TASKS_RESUMED.labels("skipped").inc(len(marks) - batch_resumed)

    async def _resolve(self, conn: Connection, parked: ParkedTask, resolution: Resolution) -> None:
        """Queue a resumed task again, built from the work unit as it is now (edits made
        while paused, a priority say, are not lost); finish a skipped one."""
        task = Task.FromString(parked.task)
        current = await fetch_work_unit(conn, parked.xid, parked.wid)
        now = self._clock()
        if resolution is Resolution.RESUMED:
            task.payload.work_unit.CopyFrom(current)
            await rearm_task(conn, task, now=now)
            return
        await finish_task(
            conn, task, outcome="skipped", writer=WRITER, actor=ESS, now=now, response=current
        )

    async def _next_triggers(self, block_ms: int) -> list[tuple[bytes, Any]]:
        # Our own unacked triggers first (a crash mid-run), then new ones.
        for start in ("0", ">"):
            try:
                reply = await self._redis.xreadgroup(
                    RESUME_GROUP,
                    self._consumer,
                    {self._names.resume: start},
                    count=16,
                    block=None if start == "0" else block_ms,
                )
            except ResponseError as exc:
                if classify_read_error(str(exc)) is not ReadFailure.GROUP_GONE:
                    raise
                self._group_ready = False  # the next iteration creates it again
                return []
            entries = [entry for _stream, items in reply or [] for entry in items]
            if entries:
                return entries
        return []

    async def run(self, stop: asyncio.Event) -> None:
        """Serve triggers and sweep periodically until ``stop`` is set."""
        loop = asyncio.get_running_loop()
        next_sweep = loop.time()
        while not stop.is_set():
            try:
                if not self._group_ready:
                    await ensure_group(self._redis, self._names.resume, RESUME_GROUP)
                    self._group_ready = True
                triggers = await self._next_triggers(block_ms=500)
                if triggers or loop.time() >= next_sweep:
                    report = await self.resume_once()
                    if report.resumed or report.skipped:
                        log.info(
                            "parked tasks processed",
                            run_id=report.run_id,
                            resumed=report.resumed,
                            skipped=report.skipped,
                        )
                    next_sweep = loop.time() + self._sweep_interval
                if triggers:
                    await self._redis.xack(
                        self._names.resume, RESUME_GROUP, *[entry_id for entry_id, _ in triggers]
                    )
            except REDIS_UNAVAILABLE as exc:
                # OSError is there for Redis's sockets, but a refused Postgres connection is
                # one too: name the error, not a store it may not be.
                self._group_ready = False  # a restarted Redis may have lost it
                log.warning(
                    "resume worker waiting for its stores",
                    error=str(exc),
                    error_type=type(exc).__name__,
                )
                await sleep_or_stop(stop, ERROR_PAUSE_SECONDS)
            except Exception:
                # Postgres down, say: this run failed, the worker must not die with it.
                log.exception("resume run failed; trying again")
                await sleep_or_stop(stop, ERROR_PAUSE_SECONDS)
