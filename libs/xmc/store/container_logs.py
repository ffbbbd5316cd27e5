"""``container_logs``: the container log tails XMC keeps (docs/logs.md, decision 0041).

A capture is written in one transaction with the experiment's byte count
(``experiment_log_bytes``), so the cap is checked against a number, not a sum over the
experiment's rows. Past the cap the oldest rows of the experiment lose their text (and
keep their exit code, reason and the fact they were evicted): the newest output — the
failures a researcher is reading now — is what stays.

The byte-count row is the experiment's lock for this: two captures of one experiment
serialize on it, and captures of different experiments never wait for each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from xmc.errors import NotFoundError
from xmc.model.container_logs import (
    Capture,
    Evictable,
    Merge,
    keep_tail,
    merge,
    partial_note,
    pick_evictions,
)
from xmc.names import work_unit_name
from xmc.store.connection import Connection, fetch_one

#: Rows read per eviction step; a capture evicts a few rows at most in the steady state.
_EVICTION_BATCH = 200


@dataclass(frozen=True)
class StoredLog:
    """One stored container run; ``text`` is empty when evicted or unavailable."""

    id: int
    eid: int
    pod_name: str
    pod_uid: str
    container: str
    run: int
    terminated: bool
    exit_code: int | None
    reason: str
    finished_at: datetime | None
    text: bytes
    truncated: bool
    evicted: bool
    unavailable: str
    capture_time: datetime


async def _existing_units(conn: Connection, captures: Sequence[Capture]) -> set[tuple[int, int]]:
    pairs = sorted({(c.key.xid, c.key.wid) for c in captures})
    rows = await conn.fetch(
        """SELECT u.xid, u.wid FROM work_units u
           JOIN unnest($1::bigint[], $2::bigint[]) AS k(xid, wid)
             ON u.xid = k.xid AND u.wid = k.wid""",
        [x for x, _ in pairs],
        [w for _, w in pairs],
    )
    return {(r["xid"], r["wid"]) for r in rows}


async def _write_one(conn: Connection, capture: Capture, tail_limit: int, now: datetime) -> int:
    """Insert or replace one capture; the change in the experiment's stored bytes."""
    key = capture.key
    text, cut = keep_tail(capture.text, tail_limit)
    stored = await conn.fetchrow(
        """SELECT id, terminated, unavailable <> '' AS unavailable,
                  CASE WHEN evicted THEN 0 ELSE octet_length(text) END AS bytes
           FROM container_logs
           WHERE xid = $1 AND wid = $2 AND eid = $3 AND pod_uid = $4 AND container = $5
             AND run = $6 FOR UPDATE""",
        key.xid, key.wid, key.eid, key.pod_uid, key.container, key.run,
    )  # fmt: skip
    values = (
        capture.pod_name, capture.terminated, capture.exit_code, capture.reason,
        capture.finished_at, text, capture.truncated or cut, capture.unavailable, now,
    )  # fmt: skip
    if stored is None:
        await conn.execute(
            """INSERT INTO container_logs (xid, wid, eid, pod_uid, container, run, pod_name,
                   terminated, exit_code, reason, finished_at, text, truncated, unavailable,
                   capture_time)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)""",
            key.xid, key.wid, key.eid, key.pod_uid, key.container, key.run, *values,
        )  # fmt: skip
        return len(text)
    decision = merge(stored["terminated"], stored["unavailable"], capture)
    if decision is Merge.KEEP:
        return 0
    if decision is Merge.END_ONLY:
        await conn.execute(
            """UPDATE container_logs SET terminated = $2, exit_code = $3, reason = $4,
                   finished_at = $5, capture_time = $6, unavailable = $7
               WHERE id = $1""",
            stored["id"], capture.terminated, capture.exit_code, capture.reason,
            capture.finished_at, now, partial_note(capture.unavailable),
        )  # fmt: skip
        return 0
    await conn.execute(
        """UPDATE container_logs SET pod_name = $2, terminated = $3, exit_code = $4,
               reason = $5, finished_at = $6, text = $7, truncated = $8, unavailable = $9,
               capture_time = $10, evicted = false
           WHERE id = $1""",
        stored["id"], *values,
    )  # fmt: skip
    return len(text) - int(stored["bytes"])


async def _evict(conn: Connection, xid: int, excess: int) -> int:
    """Drop the text of the experiment's oldest rows until ``excess`` bytes are freed;
    the bytes freed."""
    freed = 0
    while freed < excess:
        rows = await conn.fetch(
            """SELECT id, octet_length(text) AS bytes FROM container_logs
               WHERE xid = $1 AND NOT evicted ORDER BY id LIMIT $2""",
            xid,
            _EVICTION_BATCH,
        )
        ids = pick_evictions((Evictable(r["id"], r["bytes"]) for r in rows), excess - freed)
        if not ids:
            break
        freed += await conn.fetchval(
            """WITH gone AS (
                   SELECT id, octet_length(text) AS bytes FROM container_logs
                   WHERE id = ANY($1::bigint[]))
               UPDATE container_logs c SET text = '', evicted = true
               FROM gone WHERE c.id = gone.id
               RETURNING (SELECT coalesce(sum(bytes), 0) FROM gone)""",
            ids,
        )
    return freed


async def record_captures(
    conn: Connection,
    captures: Sequence[Capture],
    *,
    tail_limit: int,
    experiment_limit: int,
    now: datetime,
) -> list[bool]:
    """Store ``captures`` (in the caller's transaction); per capture, whether its unit
    exists (a capture of a unit that does not is dropped: nothing could ever read it).

    Each capture's text is cut to ``tail_limit`` again here: the ESS, not the sender,
    decides what it stores. After the writes each experiment is brought back under
    ``experiment_limit`` by evicting its oldest text.
    """
    known = await _existing_units(conn, captures)
    deltas: dict[int, int] = {}
    for capture in sorted(captures, key=lambda c: (c.key.xid, c.key.wid)):
        if (capture.key.xid, capture.key.wid) in known:
            delta = await _write_one(conn, capture, tail_limit, now)
            deltas[capture.key.xid] = deltas.get(capture.key.xid, 0) + delta
    for xid in sorted(deltas):
        total = await fetch_one(
            conn,
            """INSERT INTO experiment_log_bytes (xid, bytes) VALUES ($1, greatest($2, 0))
               ON CONFLICT (xid) DO UPDATE
                 SET bytes = greatest(experiment_log_bytes.bytes + $2, 0)
               RETURNING bytes""",
            xid,
            deltas[xid],
        )
        if total["bytes"] > experiment_limit:
            freed = await _evict(conn, xid, total["bytes"] - experiment_limit)
            await conn.execute(
                "UPDATE experiment_log_bytes SET bytes = greatest(bytes - $2, 0) WHERE xid = $1",
                xid,
                freed,
            )
    return [(c.key.xid, c.key.wid) in known for c in captures]


_COLUMNS = """id, eid, pod_name, pod_uid, container, run, terminated, exit_code, reason,
              finished_at, text, truncated, evicted, unavailable, capture_time"""


async def fetch_logs(conn: Connection, xid: int, wid: int, eid: int | None) -> list[StoredLog]:
    """A unit's stored logs (one execution's when ``eid`` is given), in capture order."""
    rows = await conn.fetch(
        f"""SELECT {_COLUMNS} FROM container_logs
            WHERE xid = $1 AND wid = $2 AND ($3::bigint IS NULL OR eid = $3)
            ORDER BY eid, id""",
        xid,
        wid,
        eid,
    )
    return [StoredLog(**dict(row)) for row in rows]


async def experiment_log_bytes(conn: Connection, xid: int) -> int:
    """Bytes of log text the experiment holds now."""
    value = await conn.fetchval("SELECT bytes FROM experiment_log_bytes WHERE xid = $1", xid)
    return int(value or 0)


async def fetch_current_execution(conn: Connection, xid: int, wid: int) -> tuple[int, int]:
    """The unit's current (eid, state); NOT_FOUND if the unit does not exist."""
    row = await conn.fetchrow("SELECT eid, state FROM work_units WHERE xid = $1 AND wid = $2",
                              xid, wid)  # fmt: skip
    if row is None:
        raise NotFoundError(f"name: {work_unit_name(xid, wid)} does not exist")
    return int(row["eid"]), int(row["state"])
