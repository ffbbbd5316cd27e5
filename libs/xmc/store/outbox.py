"""The task outbox (SPEC §6 "No intent is lost"; schema in ``0002_task_outbox.sql``).

Writers and what they do to a row:

* the ESS inserts it (``enqueue``) in the transaction of the intent the task carries;
* the relay (ESS) claims due rows, publishes them and marks them published
  (``mark_published``), checks published ones later (``check_later``), and re-drives
  what the stream lost;
* the Actuator settles it: ``finish`` (done, skipped, failed) or ``park`` (scheduling
  paused), in the transaction that closes the task's Operation;
* the resume worker (ESS) puts a parked task back to pending (``rearm``).

``finish`` and ``park`` are upserts: a task published before the outbox existed (an
upgrade) is recorded the first time the Actuator settles it, so a replay of it is refused
like any other.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from xmc.store.connection import Connection, Record, fetch_one
from xmc.tasks import DEFAULT_LEEWAY, DEFAULT_TTL, task_execution_id
from xmc_api.internal.v1.tasks_pb2 import Task

#: Finished rows are kept this long: longer than any token stays valid, so a replayed
#: entry always finds its row (and is refused) or has expired (and is refused).
OUTBOX_RETENTION = timedelta(days=7)
assert OUTBOX_RETENTION > DEFAULT_TTL + DEFAULT_LEEWAY


#: ``next_attempt`` of a task to publish now: due whatever the relay's clock says (the
#: writer's clock may be an Actuator's, ahead of the relay's ESS).
DUE_AT_ONCE = datetime.min.replace(tzinfo=UTC)


class OutboxStatus(enum.StrEnum):
    PENDING = "pending"
    PUBLISHED = "published"
    PARKED = "parked"
    FINISHED = "finished"


@dataclass(frozen=True)
class OutboxTask:
    """A row the relay claimed."""

    seq: int
    task_id: str
    xid: int
    wid: int
    kind: int
    task: bytes
    status: OutboxStatus
    publish_count: int
    #: Stream entry of the last publish (None before the first).
    entry_id: str | None
    published_time: datetime | None


_COLUMNS = "seq, task_id, xid, wid, kind, task, status, publish_count, entry_id, published_time"

_UPSERT = """
    INSERT INTO task_outbox (task_id, xid, wid, eid, kind, task, status, next_attempt,
                             create_time, finished_time, outcome)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
    ON CONFLICT (task_id) DO UPDATE SET
        task = EXCLUDED.task, status = EXCLUDED.status, next_attempt = EXCLUDED.next_attempt,
        finished_time = EXCLUDED.finished_time, outcome = EXCLUDED.outcome
    WHERE task_outbox.status <> 'finished'"""


def _row(row: Record) -> OutboxTask:
    return OutboxTask(
        seq=row["seq"],
        task_id=row["task_id"],
        xid=row["xid"],
        wid=row["wid"],
        kind=row["kind"],
        task=row["task"],
        status=OutboxStatus(row["status"]),
        publish_count=row["publish_count"],
        entry_id=row["entry_id"],
        published_time=row["published_time"],
    )


async def enqueue(
    conn: Connection,
    tasks: Sequence[Task],
    *,
    now: datetime,
    origin: str = "intent",
    due: datetime = DUE_AT_ONCE,
) -> None:
    """Record tasks to publish, in the caller's (the intent's) transaction; ``origin``
    "repair" marks the repair sweep's re-drives, "retry" an automatic retry, whose task is
    published no earlier than ``due`` (its backoff, on the ESS's clock)."""
    if not tasks:
        return
    await conn.execute(
        """INSERT INTO task_outbox (task_id, xid, wid, eid, kind, task, next_attempt,
                                    create_time, origin)
           SELECT t.task_id, t.xid, t.wid, t.eid, t.kind, t.task, $9, $7, $8
           FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::smallint[],
                       $6::bytea[]) AS t(task_id, xid, wid, eid, kind, task)""",
        [t.task_id for t in tasks],
        [t.xid for t in tasks],
        [t.wid for t in tasks],
        [task_execution_id(t) for t in tasks],
        [int(t.kind) for t in tasks],
        [t.SerializeToString(deterministic=True) for t in tasks],
        now,
        origin,
        due,
    )


async def claim_due(conn: Connection, *, now: datetime, limit: int) -> list[OutboxTask]:
    """Rows to publish or check, in commit order, locked for this transaction. Rows the
    Actuator is settling right now are skipped, not waited for."""
    rows = await conn.fetch(
        f"""SELECT {_COLUMNS} FROM task_outbox
            WHERE status IN ('pending', 'published') AND next_attempt <= $1
            ORDER BY seq LIMIT $2
            FOR UPDATE SKIP LOCKED""",
        now,
        limit,
    )
    return [_row(r) for r in rows]


async def mark_published(
    conn: Connection, published: Sequence[tuple[str, str, datetime]], *, now: datetime
) -> None:
    """(task id, stream entry id, when to check it) of each task just put on the stream."""
    if not published:
        return
    await conn.execute(
        """UPDATE task_outbox o SET status = 'published', entry_id = p.entry_id,
               next_attempt = p.check_at, publish_count = o.publish_count + 1,
               published_time = $4
           FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS p(task_id, entry_id, check_at)
           WHERE o.task_id = p.task_id AND o.status IN ('pending', 'published')""",
        [p[0] for p in published],
        [p[1] for p in published],
        [p[2] for p in published],
        now,
    )


async def check_later(conn: Connection, checks: Sequence[tuple[str, datetime]]) -> None:
    """(task id, next check) of published tasks that are still on their way."""
    if not checks:
        return
    await conn.execute(
        """UPDATE task_outbox o SET next_attempt = c.check_at
           FROM unnest($1::text[], $2::timestamptz[]) AS c(task_id, check_at)
           WHERE o.task_id = c.task_id AND o.status = 'published'""",
        [c[0] for c in checks],
        [c[1] for c in checks],
    )


async def oldest_unfinished_entry(conn: Connection) -> str | None:
    """The stream entry of the published, unfinished task published longest ago (entry
    ids order as (milliseconds, sequence) pairs, not as text); None when there is none.
    Scans the published rows only (the partial index ``task_outbox_due``)."""
    entry_id: str | None = await conn.fetchval(
        """SELECT entry_id FROM task_outbox
           WHERE status = 'published' AND entry_id IS NOT NULL
           ORDER BY split_part(entry_id, '-', 1)::bigint, split_part(entry_id, '-', 2)::bigint
           LIMIT 1"""
    )
    return entry_id


async def check_every_published_now(conn: Connection) -> int:
    """Make every published, unfinished task due for a check (Redis restarted: whatever
    it held is gone, however long ago it was published); returns how many."""
    status: str = await conn.execute(
        "UPDATE task_outbox SET next_attempt = $1 WHERE status = 'published'", DUE_AT_ONCE
    )
    return int(status.split()[-1])


async def _upsert(
    conn: Connection,
    task: Task,
    status: OutboxStatus,
    *,
    now: datetime,
    next_attempt: datetime | None = None,
    outcome: str | None = None,
) -> bool:
    """Set a task's row (inserting it if the task predates the outbox); False when the
    row was already finished, which nothing reopens."""
    result: str = await conn.execute(
        _UPSERT,
        task.task_id,
        task.xid,
        task.wid,
        task_execution_id(task),
        int(task.kind),
        task.SerializeToString(deterministic=True),
        str(status),
        next_attempt,
        now,
        now if status is OutboxStatus.FINISHED else None,
        outcome,
    )
    return result.endswith(" 1")


async def finish(conn: Connection, task: Task, *, outcome: str, now: datetime) -> bool:
    """The task is settled for good; False when it already was (a redelivery). One
    UPDATE by task id for a task of the outbox; the upsert only for one from before it."""
    status: str = await conn.execute(
        """UPDATE task_outbox SET status = 'finished', finished_time = $2, outcome = $3,
               next_attempt = NULL
           WHERE task_id = $1 AND status <> 'finished'""",
        task.task_id,
        now,
        outcome,
    )
    if status.endswith(" 1"):
        return True
    return await _upsert(conn, task, OutboxStatus.FINISHED, now=now, outcome=outcome)


async def park(conn: Connection, task: Task, *, now: datetime) -> None:
    """Scheduling is paused: the task waits in paused_tasks, not on the stream."""
    await _upsert(conn, task, OutboxStatus.PARKED, now=now)


async def rearm(conn: Connection, task: Task, *, now: datetime) -> None:
    """A resumed task (re-signed with its refreshed payload) is to be published again."""
    await _upsert(conn, task, OutboxStatus.PENDING, now=now, next_attempt=DUE_AT_ONCE)


async def fetch_status(conn: Connection, task_id: str) -> OutboxStatus | None:
    value = await conn.fetchval("SELECT status FROM task_outbox WHERE task_id = $1", task_id)
    return None if value is None else OutboxStatus(value)


async def delete_expired(conn: Connection, *, now: datetime) -> int:
    """TTL: drop rows finished more than ``OUTBOX_RETENTION`` ago."""
    status: str = await conn.execute(
        "DELETE FROM task_outbox WHERE status = 'finished' AND finished_time < $1",
        now - OUTBOX_RETENTION,
    )
    return int(status.split()[-1])


@dataclass(frozen=True)
class TaskFacts:
    """What the Actuator checks before acting on a task (``actuator.admission``)."""

    outbox_status: OutboxStatus | None
    #: The work unit's current execution and state; None when it does not exist.
    work_unit_eid: int | None
    work_unit_state: int | None


async def fetch_task_facts(conn: Connection, task: Task) -> TaskFacts:
    """The task's outbox row and its work unit's current execution, in one round trip."""
    row = await fetch_one(
        conn,
        """SELECT (SELECT status FROM task_outbox WHERE task_id = $3) AS outbox_status,
                  w.eid, w.state
           FROM (SELECT 1) AS one
           LEFT JOIN work_units w ON w.xid = $1 AND w.wid = $2""",
        task.xid,
        task.wid,
        task.task_id,
    )
    status = row["outbox_status"]
    return TaskFacts(
        outbox_status=None if status is None else OutboxStatus(status),
        work_unit_eid=row["eid"],
        work_unit_state=row["state"],
    )


@dataclass(frozen=True)
class ExecutionTasks:
    """An execution in a state XMC wrote, with the latest task written for it."""

    xid: int
    wid: int
    eid: int
    state: int
    state_update_time: datetime
    #: The latest task of this execution (None: none in the outbox).
    task_status: OutboxStatus | None
    task_finished_time: datetime | None
    #: Tasks the repair sweep already wrote for this execution.
    repairs: int


async def scan_intent_states(
    conn: Connection,
    *,
    after: tuple[int, int],
    limit: int,
    states: Sequence[int],
    older_than: datetime,
) -> tuple[list[ExecutionTasks], tuple[int, int] | None]:
    """One bounded step of a scan over all work units in primary-key order: of the next
    ``limit`` work units after ``after``, those in one of ``states`` since before
    ``older_than``, each with its latest task. Returns them and the key to continue
    after (None: the scan reached the end). A step reads at most ``limit`` work units,
    however many there are."""
    last = await conn.fetchrow(
        """SELECT xid, wid FROM work_units WHERE (xid, wid) > ($1, $2)
           ORDER BY xid, wid OFFSET $3 - 1 LIMIT 1""",
        after[0],
        after[1],
        limit,
    )
    upper = None if last is None else (last["xid"], last["wid"])
    rows = await conn.fetch(
        """SELECT w.xid, w.wid, w.eid, w.state, w.state_update_time,
                  t.status AS task_status, t.finished_time AS task_finished_time,
                  (SELECT count(*) FROM task_outbox r WHERE r.xid = w.xid AND r.wid = w.wid
                       AND r.eid = w.eid AND r.origin = 'repair') AS repairs
           FROM work_units w
           LEFT JOIN LATERAL (
               SELECT status, finished_time FROM task_outbox o
               WHERE o.xid = w.xid AND o.wid = w.wid AND o.eid = w.eid
               ORDER BY seq DESC LIMIT 1) t ON true
           WHERE (w.xid, w.wid) > ($1, $2)
             AND ($3::bigint IS NULL OR (w.xid, w.wid) <= ($3, $4))
             AND w.state = ANY($5::smallint[]) AND w.state_update_time < $6
           ORDER BY w.xid, w.wid""",
        after[0],
        after[1],
        None if upper is None else upper[0],
        None if upper is None else upper[1],
        list(states),
        older_than,
    )
    found = [
        ExecutionTasks(
            xid=r["xid"],
            wid=r["wid"],
            eid=r["eid"],
            state=r["state"],
            state_update_time=r["state_update_time"],
            task_status=None if r["task_status"] is None else OutboxStatus(r["task_status"]),
            task_finished_time=r["task_finished_time"],
            repairs=r["repairs"],
        )
        for r in rows
    ]
    return found, upper
