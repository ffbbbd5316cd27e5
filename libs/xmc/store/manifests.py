"""``execution_manifests``: the JobSet each execution was created with (decision 0039).

Written once per task that created a JobSet, in the transaction that settles that task
(``finish_task``), so a manifest is stored exactly when the outcome "created" is; read by
``xmc.v1.SpecService``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from xmc.errors import NotFoundError
from xmc.model.manifest import KeptManifest
from xmc.names import execution_name
from xmc.store.connection import Connection


@dataclass(frozen=True)
class StoredManifest:
    kept: KeptManifest
    task_id: str
    record_time: datetime


async def record_manifest(
    conn: Connection,
    xid: int,
    wid: int,
    eid: int,
    kept: KeptManifest,
    *,
    task_id: str,
    now: datetime,
) -> None:
    """Store ``kept`` for execution ``eid``. A redelivery of the same task keeps the first
    row (the same manifest: it is built from the same task); another task of the same
    execution replaces it, since only a task that created the JobSet again gets here."""
    await conn.execute(
        """INSERT INTO execution_manifests
               (xid, wid, eid, manifest, size_bytes, task_id, record_time)
           VALUES ($1, $2, $3, $4, $5, $6, $7)
           ON CONFLICT (xid, wid, eid) DO UPDATE
           SET manifest = EXCLUDED.manifest, size_bytes = EXCLUDED.size_bytes,
               task_id = EXCLUDED.task_id, record_time = EXCLUDED.record_time
           WHERE execution_manifests.task_id <> EXCLUDED.task_id""",
        xid, wid, eid, kept.text, kept.size_bytes, task_id, now,
    )  # fmt: skip


async def fetch_manifest(conn: Connection, xid: int, wid: int, eid: int) -> StoredManifest:
    """The stored manifest of execution ``eid``; NOT_FOUND, saying which is missing, when
    the execution does not exist or has none."""
    name = execution_name(xid, wid, eid)
    row = await conn.fetchrow(
        """SELECT (u.eid = $3 OR EXISTS (
                      SELECT 1 FROM work_unit_executions e
                      WHERE e.xid = u.xid AND e.wid = u.wid AND e.eid = $3)) AS known,
                  m.manifest, m.size_bytes, m.task_id, m.record_time
           FROM work_units u
           LEFT JOIN execution_manifests m ON m.xid = u.xid AND m.wid = u.wid AND m.eid = $3
           WHERE u.xid = $1 AND u.wid = $2""",
        xid,
        wid,
        eid,
    )
    if row is None or not row["known"]:
        raise NotFoundError(f"name: {name} does not exist")
    if row["task_id"] is None:
        raise NotFoundError(
            f"{name} has no stored JobSet manifest: its JobSet is not created yet, its "
            "create failed, or it was created before XMC kept manifests"
        )
    return StoredManifest(
        KeptManifest(row["manifest"], row["size_bytes"]), row["task_id"], row["record_time"]
    )
