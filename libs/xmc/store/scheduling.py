"""Global scheduling pause (SPEC §7.3, §9): the durable flag and the parked tasks.

Parked tasks are soft-marked when the resume worker has dealt with them
(``MarkProcessed``) and expire 7 days after ``processed_time``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from xmc.model.states import WorkUnitState
from xmc.store.connection import Connection, fetch_one

#: Processed paused tasks are kept this long after ``processed_time`` (SPEC §9).
PAUSED_TASK_RETENTION = timedelta(days=7)


@dataclass(frozen=True)
class SchedulingControl:
    paused: bool
    reason: str
    updated_by: str
    update_time: datetime
    #: Parked tasks not yet processed by a resume.
    paused_task_count: int


class Resolution(enum.StrEnum):
    RESUMED = "RESUMED"
    SKIPPED = "SKIPPED"


@dataclass(frozen=True)
class ParkedTask:
    """A paused task joined with its work unit's current state (SPEC §9)."""

    id: int
    task_id: str
    xid: int
    wid: int
    eid: int
    kind: int
    task: bytes
    #: The work unit now; tasks of deleted work units drop out of the join.
    work_unit_eid: int
    work_unit_state: WorkUnitState
    #: When it was (last) parked: a task parked twice is published once per parking.
    paused_time: datetime


async def fetch_scheduling_control(conn: Connection) -> SchedulingControl:
    row = await fetch_one(
        conn,
        """SELECT paused, reason, updated_by, update_time,
                  (SELECT count(*) FROM paused_tasks WHERE processed_time IS NULL) AS parked
           FROM scheduling_control""",
    )
    return SchedulingControl(
        paused=row["paused"],
        reason=row["reason"],
        updated_by=row["updated_by"],
        update_time=row["update_time"],
        paused_task_count=row["parked"],
    )


async def set_paused(
    conn: Connection, *, paused: bool, reason: str, updated_by: str, now: datetime
) -> SchedulingControl:
    await conn.execute(
        """UPDATE scheduling_control SET paused = $1, reason = $2, updated_by = $3,
               update_time = $4""",
        paused,
        reason,
        updated_by,
        now,
    )
    return await fetch_scheduling_control(conn)


async def park_task(
    conn: Connection,
    *,
    task_id: str,
    xid: int,
    wid: int,
    eid: int,
    kind: int,
    task: bytes,
    now: datetime,
) -> bool:
    """Write a task to PausedTasks; False when it is already parked (a redelivery).

    A task that was parked and processed before (resumed, then paused again before it
    ran) is parked anew: its row is reset so the next resume sees it again."""
    status: str = await conn.execute(
        """INSERT INTO paused_tasks (task_id, xid, wid, eid, kind, task, paused_time)
           VALUES ($1, $2, $3, $4, $5, $6, $7)
           ON CONFLICT (task_id) DO UPDATE SET paused_time = EXCLUDED.paused_time,
               task = EXCLUDED.task, resolution_status = NULL, resolution_reason = NULL,
               processed_time = NULL, resumption_run_id = NULL
           WHERE paused_tasks.processed_time IS NOT NULL""",
        task_id,
        xid,
        wid,
        eid,
        kind,
        task,
        now,
    )
    return status.endswith(" 1")


async def claim_parked_tasks(conn: Connection, *, limit: int) -> list[ParkedTask]:
    """The next unprocessed parked tasks, oldest first, locked for this transaction.

    ``SKIP LOCKED`` lets two resume runs work side by side without taking the same task.
    """
    rows = await conn.fetch(
        """SELECT p.id, p.task_id, p.xid, p.wid, p.eid, p.kind, p.task, p.paused_time,
                  w.eid AS work_unit_eid, w.state AS work_unit_state
           FROM paused_tasks p JOIN work_units w USING (xid, wid)
           WHERE p.processed_time IS NULL
           ORDER BY p.id
           LIMIT $1
           FOR UPDATE OF p SKIP LOCKED""",
        limit,
    )
    return [
        ParkedTask(
            id=r["id"],
            task_id=r["task_id"],
            xid=r["xid"],
            wid=r["wid"],
            eid=r["eid"],
            kind=r["kind"],
            task=r["task"],
            work_unit_eid=r["work_unit_eid"],
            work_unit_state=WorkUnitState(r["work_unit_state"]),
            paused_time=r["paused_time"],
        )
        for r in rows
    ]


async def mark_orphaned_parked_tasks(conn: Connection, *, run_id: str, now: datetime) -> int:
    """Tasks whose work unit is gone drop out of the join; mark them so they expire."""
    status: str = await conn.execute(
        """UPDATE paused_tasks p SET resolution_status = 'SKIPPED',
               resolution_reason = 'work unit no longer exists', processed_time = $2,
               resumption_run_id = $1
           WHERE p.processed_time IS NULL
             AND NOT EXISTS (SELECT 1 FROM work_units w WHERE w.xid = p.xid AND w.wid = p.wid)""",
        run_id,
        now,
    )
    return int(status.split()[-1])


async def mark_processed(
    conn: Connection,
    marks: Sequence[tuple[int, Resolution, str]],
    *,
    run_id: str,
    now: datetime,
) -> None:
    """``MarkProcessed``: (id, resolution, reason) for each task this run dealt with."""
    if not marks:
        return
    ids, resolutions, reasons = zip(*marks, strict=True)
    await conn.execute(
        """UPDATE paused_tasks p SET resolution_status = m.resolution,
               resolution_reason = m.reason, processed_time = $4, resumption_run_id = $5
           FROM unnest($1::bigint[], $2::text[], $3::text[]) AS m(id, resolution, reason)
           WHERE p.id = m.id""",
        list(ids),
        [str(r) for r in resolutions],
        list(reasons),
        now,
        run_id,
    )


async def delete_expired_paused_tasks(conn: Connection, *, now: datetime) -> int:
    status: str = await conn.execute(
        "DELETE FROM paused_tasks WHERE processed_time < $1", now - PAUSED_TASK_RETENTION
    )
    return int(status.split()[-1])
