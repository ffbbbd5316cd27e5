"""The outbox relay (SPEC §6 "No intent is lost"): ``task_outbox`` → ``xmc-tasks-stream``.

One pass, in one Postgres transaction:

1. Take the relay lock (``pg_try_advisory_xact_lock``): with several ESS replicas one
   relays at a time, so tasks reach the stream in the order their intents committed; a
   replica that finds the lock taken tries again shortly.
2. Claim the due rows (pending ones, and published ones whose check is due), in commit
   order, ``SKIP LOCKED`` past rows the Actuator is settling right now.
3. Look up the stream entries of the published ones and decide each
   (``xmc.model.outbox``): wait, re-drive, or abandon.
4. Publish what is to be published in one pipelined round trip, each (task, attempt) at
   most once (``TaskPublisher.publish_attempts``), then record it.

Every ``trim_seconds`` a pass also trims the stream of the entries finished tasks left
(``trim_point``), before claiming, so the stream holds the work in flight, not every task
ever published.

Every ``redis_restart_check_seconds`` a pass also compares the run id of the server
holding the stream with the one stamped in the stream's data (``stream_data_suspect``): a
restart or a failover (Sentinel, Redis Cluster) may have lost entries the relay published
and the replica never received, so every published task is checked at once and what is
gone is re-driven. The stamp is written after that pass commits (decision 0052).

A pass that fails (Redis or Postgres down) rolls back and changes nothing; the loop backs
off and tries again, so a Redis outage delays tasks and loses none. A crash after the
XADD and before the commit republishes the same attempt, which Redis answers with the
entry it already has.

The loop runs whenever this process commits tasks (``wake``), and every
``poll_seconds`` for other replicas' leftovers and for checks that came due.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import grpc
import structlog
from redis.exceptions import ResponseError

from ess.metrics import (
    RELAY_PASS_FAILURES,
    TASK_STREAM_TRIMMED,
    TASKS_ABANDONED,
    TASKS_ENQUEUED,
    TASKS_REDRIVEN,
)
from xmc.failure_metrics import count_decided_failure
from xmc.model.audit import ESS
from xmc.model.business import FailureReason
from xmc.model.outbox import (
    EntryState,
    RelayAction,
    RelayDecision,
    RelaySettings,
    classify_entry,
    decide_pending,
    decide_published,
    stream_data_suspect,
    trim_point,
)
from xmc.model.resume import TaskKind
from xmc.redis_client import server_run_id
from xmc.retry import sleep_or_stop
from xmc.store.transactions import (
    Connection,
    OutboxStatus,
    OutboxTask,
    Store,
    check_every_published_now,
    check_later,
    claim_due,
    failed_execution_write,
    finish_task,
    mark_published,
    oldest_unfinished_entry,
    try_transaction_lock,
)
from xmc.streams import ACTUATOR_GROUP, REDIS_UNAVAILABLE, StreamNames, TaskPublisher, text
from xmc_api.internal.v1.tasks_pb2 import Task

log = structlog.get_logger()

#: Arbitrary but fixed, like the migration lock; one relay at a time per database.
RELAY_LOCK_KEY: Final = 0x584D43_0002
#: The ``writer`` of an abandoned task's FAILED write in the status history.
WRITER: Final = "ess/relay"
#: Seconds a replica that found the lock taken waits before trying again.
_BUSY_RETRY = 0.05

# Where each entry is, in one call: 0 gone, 1 in the stream, 2 in the stream and pending in
# the group. Only those small numbers come back: a check of 500 tasks used to be 1,000
# pipelined commands whose replies carried every entry's task (~1 KB each) to be parsed
# here, which held the ESS's event loop for milliseconds under create load.
# KEYS: the tasks stream. ARGV: the group, then the entry ids.
_WHERE = """
local places = {}
for i = 2, #ARGV do
  local found = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i], 'COUNT', 1)
  if #found == 0 then
    places[#places + 1] = 0
  else
    -- NOGROUP (the Actuator has not created the group yet): nothing is pending.
    local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
    if type(pending) == 'table' and not pending.err and #pending > 0 then
      places[#places + 1] = 2
    else
      places[#places + 1] = 1
    end
  end
end
return places
"""
_GONE, _PENDING = 0, 2


@dataclass(frozen=True)
class RelayReport:
    published: int = 0
    redriven: int = 0
    waiting: int = 0
    abandoned: int = 0
    #: Another replica held the relay lock; nothing was done.
    busy: bool = False

    @property
    def claimed(self) -> int:
        return self.published + self.redriven + self.waiting + self.abandoned


class OutboxRelay:
    def __init__(
        self,
        store: Store,
        redis: Any,
        names: StreamNames,
        publisher: TaskPublisher,
        *,
        clock: Callable[[], datetime],
        settings: RelaySettings | None = None,
    ) -> None:
        self._store = store
        self._redis = redis
        self._names = names
        self._publisher = publisher
        self._clock = clock
        self.settings = settings or RelaySettings()
        self._wake = asyncio.Event()
        self._run_id_checked = -float("inf")
        self._trimmed = -float("inf")
        self._where = redis.register_script(_WHERE)

    def wake(self) -> None:
        """Tasks were committed: relay them now rather than at the next poll."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set; a failed pass is logged and retried with backoff."""
        failures = 0
        while not stop.is_set():
            self._wake.clear()
            try:
                report = await self.relay_once()
                failures = 0
            except Exception as exc:
                RELAY_PASS_FAILURES.inc()
                failures += 1
                delay = self.settings.error_backoff.after(failures)
                log.warning(
                    "outbox relay pass failed; will retry", error=str(exc), attempt=failures,
                    delay=delay, error_type=type(exc).__name__,
                )  # fmt: skip
                await sleep_or_stop(stop, delay)
                continue
            if report.busy:
                await sleep_or_stop(stop, _BUSY_RETRY)
            elif report.claimed < self.settings.batch_size:
                await sleep_or_stop(stop, self.settings.poll_seconds, wake=self._wake)

    async def relay_once(self) -> RelayReport:
        """One pass (see the module docstring)."""
        now = self._clock()
        async with self._store.transaction() as conn:
            if not await try_transaction_lock(conn, RELAY_LOCK_KEY):
                return RelayReport(busy=True)
            stamp = await self._check_all_if_suspect(conn)
            report = await self._relay(conn, now)
        if stamp is not None:
            await self._stamp(stamp)
        return report

    async def _relay(self, conn: Connection, now: datetime) -> RelayReport:
        await self._trim_when_due(conn)
        rows = await claim_due(conn, now=now, limit=self.settings.batch_size)
        if not rows:
            return RelayReport()
        decisions = await self._decide(rows, now=now)
        publish = [(r, d) for r, d in decisions if d.action is RelayAction.PUBLISH]
        entry_ids = await self._publisher.publish_attempts(
            [(Task.FromString(row.task), row.publish_count) for row, _ in publish]
        )
        await mark_published(
            conn,
            [
                (row.task_id, entry_id, decision.check_at or now)
                for (row, decision), entry_id in zip(publish, entry_ids, strict=True)
            ],
            now=now,
        )
        await check_later(
            conn,
            [
                (row.task_id, decision.check_at or now)
                for row, decision in decisions
                if decision.action is RelayAction.CHECK_LATER
            ],
        )
        abandoned = [(r, d) for r, d in decisions if d.action is RelayAction.ABANDON]
        for row, decision in abandoned:
            await self._abandon(conn, Task.FromString(row.task), decision.reason, now=now)
        return self._report(publish, decisions, len(abandoned))

    async def _check_all_if_suspect(self, conn: Connection) -> str | None:
        """A Redis restarted without persistence lost every entry; a replica promoted by a
        failover lacks what its master had not replicated. A task published long ago would
        otherwise wait up to ``max_check_seconds`` for its next check. At most every
        ``redis_restart_check_seconds``: compare the run id of the node holding the stream
        with the one stamped in its data (``stream_data_suspect``); if the data is suspect,
        make every published task due in this transaction and return the run id to stamp
        once it commits. Stamped before the commit, a pass that rolled back would leave
        the tasks on their old schedule and the stamp vouching for them; a kill between
        the commit and the stamp only checks everything once more."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._run_id_checked < self.settings.redis_restart_check_seconds:
            return None
        try:
            run_id = await server_run_id(self._redis, self._names.tasks)
            served_by = await self._redis.get(self._names.served_by_key)
        except REDIS_UNAVAILABLE:
            return None  # publishing will fail and retry; nothing to learn here
        self._run_id_checked = loop.time()
        if not stream_data_suspect(None if served_by is None else text(served_by), run_id):
            return None
        count = await check_every_published_now(conn)
        log.warning(
            "Redis restarted or failed over: checking every published task now",
            tasks=count, run_id=run_id,
        )  # fmt: skip
        return run_id

    async def _stamp(self, run_id: str) -> None:
        """Vouch that the node ``run_id`` serves the stream since every published task was
        made due. A failure leaves the data suspect: the next check does it again."""
        try:
            await self._redis.set(self._names.served_by_key, run_id)
        except REDIS_UNAVAILABLE as exc:
            log.warning("could not stamp the task stream's server; will check again",
                        error=str(exc))  # fmt: skip
            self._run_id_checked = -float("inf")

    async def _trim_when_due(self, conn: Connection) -> None:
        """Every ``trim_seconds``, under the relay lock: drop the stream's entries no task
        needs any more (``trim_point``), approximately (whole stream nodes, which is cheap
        for Redis). Redis failing here only postpones the trim; the pass goes on."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._trimmed < self.settings.trim_seconds:
            return
        try:
            newest = await self._redis.xrevrange(self._names.tasks, count=1)
            oldest = await oldest_unfinished_entry(conn)
            point = trim_point(oldest, text(newest[0][0]) if newest else None)
            if point is not None:
                TASK_STREAM_TRIMMED.inc(
                    await self._redis.xtrim(self._names.tasks, minid=point, approximate=True)
                )
        except REDIS_UNAVAILABLE as exc:
            log.warning("could not trim the task stream; will retry", error=str(exc))
            return
        self._trimmed = loop.time()

    async def _decide(
        self, rows: Sequence[OutboxTask], *, now: datetime
    ) -> list[tuple[OutboxTask, RelayDecision]]:
        published = [r for r in rows if r.status is OutboxStatus.PUBLISHED and r.entry_id]
        entries = await self.entry_states([r.entry_id for r in published if r.entry_id])
        decisions = []
        for row in rows:
            if row.status is OutboxStatus.PUBLISHED and row.entry_id:
                decision = decide_published(
                    entries[row.entry_id],
                    publish_count=row.publish_count,
                    published_time=row.published_time or now,
                    now=now,
                    settings=self.settings,
                )
            else:
                decision = decide_pending(now=now, settings=self.settings)
            decisions.append((row, decision))
        return decisions

    async def entry_states(self, entry_ids: Sequence[str]) -> dict[str, EntryState]:
        """Where each entry is: in the stream? in the group's pending list? delivered?

        The group's last-delivered id is read *before* the pending lists: it only grows,
        so an entry the Actuator reads between the two reads is then seen undelivered
        (WAITING), never as delivered yet absent from the pending list — which is what
        an acknowledged entry looks like (SETTLED), and an unfinished task whose entry is
        settled is re-driven. Read the other way round, a busy Actuator's reads had the
        relay re-drive creates it was about to carry out (the replay was skipped, but
        logged as a re-drive and counted against ``max_publishes``)."""
        if not entry_ids:
            return {}
        last_delivered = await self._last_delivered()
        places = await self._where(keys=[self._names.tasks], args=[ACTUATOR_GROUP, *entry_ids])
        return {
            entry_id: classify_entry(
                entry_id,
                exists=place != _GONE,
                pending=place == _PENDING,
                last_delivered=last_delivered,
            )
            for entry_id, place in zip(entry_ids, places, strict=True)
        }

    async def _last_delivered(self) -> str | None:
        try:
            groups = await self._redis.xinfo_groups(self._names.tasks)
        except ResponseError:
            return None  # no stream: nothing was delivered
        for group in groups:
            name = group.get("name")
            if text(name) == ACTUATOR_GROUP:
                value = group.get("last-delivered-id")
                return value.decode() if isinstance(value, bytes) else str(value)
        return None

    async def _abandon(self, conn: Connection, task: Task, reason: str, *, now: datetime) -> None:
        """Nobody will ever carry the task out: close its Operation with an error and, for
        a create or restart, fail the execution, so neither waits forever."""
        kind = TaskKind(task.kind)
        text = f"XMC could not deliver the {kind.name.lower()} request to the Actuator: {reason}"
        log.error("task abandoned", task_id=task.task_id, xid=task.xid, wid=task.wid,
                  task_kind=kind.name, reason=reason)  # fmt: skip
        failed = None
        if kind in (TaskKind.CREATE, TaskKind.RESTART):
            failed = failed_execution_write(task, text)
        written = await finish_task(
            conn,
            task,
            outcome="abandoned",
            writer=WRITER,
            actor=ESS,
            now=now,
            state=failed,
            error=(grpc.StatusCode.UNAVAILABLE.value[0], text),
        )
        # Counted before the commit: a rolled-back pass is abandoned again, and counted
        # again; rare enough (an undeliverable task) for a metric to live with.
        count_decided_failure(written, FailureReason.UNDELIVERABLE)

    @staticmethod
    def _report(
        publish: Sequence[tuple[OutboxTask, RelayDecision]],
        decisions: Sequence[tuple[OutboxTask, RelayDecision]],
        abandoned: int,
    ) -> RelayReport:
        redriven = 0
        for row, decision in publish:
            kind = _kind_label(row.kind)
            if row.status is OutboxStatus.PUBLISHED:
                redriven += 1
                TASKS_REDRIVEN.labels(kind).inc()
                log.warning("task re-driven", task_id=row.task_id, xid=row.xid, wid=row.wid,
                            task_kind=kind, reason=decision.reason)  # fmt: skip
            else:
                TASKS_ENQUEUED.labels(kind).inc()
        if abandoned:
            TASKS_ABANDONED.inc(abandoned)
        waiting = sum(1 for _r, d in decisions if d.action is RelayAction.CHECK_LATER)
        return RelayReport(len(publish) - redriven, redriven, waiting, abandoned)


def _kind_label(kind: int) -> str:
    with contextlib.suppress(ValueError):
        return TaskKind(kind).name.lower()
    return "unknown"
