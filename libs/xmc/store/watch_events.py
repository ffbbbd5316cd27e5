"""The push API's reads (decision 0043): the committed changes of experiments, in commit
order, from the tables they are written to anyway — ``work_unit_status_history`` (state
changes; a create or restart is the row that starts an execution), ``status_messages``
and ``experiment_events`` (an experiment created, its active or launch state changed).

Each row carries ``txid``, the writing transaction's id (migration 0011). A read is
bounded by a horizon (:data:`HORIZON_SQL`): every transaction below it that could write
here has ended, so the rows below it are final and ``(txid, source, id)`` never gains a row behind a
position already handed out (``xmc.model.watch``). Nothing here is on a write path but
:func:`insert_experiment_event`, called only when an experiment's state changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from xmc.model.watch import EventSource, Position, Scope, ScopeKind
from xmc.store.connection import Connection
from xmc.store.read_access import readable_experiments_sql


class StoredEvent(NamedTuple):
    """One change as read back; the columns' meaning depends on ``source``:

    - STATE: ``a``/``b`` = old/new state, ``time`` = state_update_time, ``text`` = writer;
    - MESSAGE: ``a`` = severity, ``text`` = field, ``content`` = the StructuredMessage;
    - EXPERIMENT: ``a``/``b`` = active/launch state, ``text`` = kind (created, state).
    """

    position: Position
    xid: int
    wid: int | None
    eid: int
    a: int
    b: int
    time: datetime
    text: str
    content: bytes | None
    record_time: datetime | None
    creator: str
    #: The experiment's readers when the event was read (decision 0048).
    readers: Sequence[str] | None = None


_UNION = f"""
    SELECT {EventSource.STATE:d} AS source, h.id, h.txid, h.xid, h.wid, h.eid,
           h.old_state AS a, h.new_state AS b, h.state_update_time AS time, h.writer AS text,
           NULL::bytea AS content, h.record_time
    FROM work_unit_status_history h WHERE h.txid >= $1 AND h.txid < $2 {{scope_h}}
    UNION ALL
    SELECT {EventSource.MESSAGE:d}, m.id, m.txid, m.xid, m.wid, m.eid, m.severity, 0,
           m.create_time, m.field, m.content, NULL
    FROM status_messages m WHERE m.txid >= $1 AND m.txid < $2 {{scope_m}}
    UNION ALL
    SELECT {EventSource.EXPERIMENT:d}, x.id, x.txid, x.xid, NULL, 0, x.active_state,
           x.launch_state, x.record_time, x.kind, NULL, x.record_time
    FROM experiment_events x WHERE x.txid >= $1 AND x.txid < $2 {{scope_x}}"""

_SELECT = """
    SELECT u.*, coalesce(e.creator, '') AS creator, e.readers
    FROM ({union}) u LEFT JOIN experiments e ON e.xid = u.xid
    {where}
    ORDER BY u.txid, u.source, u.id
    {limit}"""

#: The horizon of this database: the oldest transaction still running (as of the
#: statement's snapshot) that may write here, else the snapshot's xmax. Rows below it are
#: final. ``pg_snapshot_xmin`` alone would be the oldest running transaction of the whole
#: Postgres (xids are cluster-wide), so a long transaction of another database on the same
#: server would hold every watch back; a running xid is skipped only when
#: ``pg_stat_activity`` positively shows it as another database's (its ``backend_xid`` and
#: ``datname`` are shown to every role). Anything else — a transaction of this database,
#: one that ended between the snapshot and the read, a prepared transaction — holds the
#: horizon, which is only ever conservative. ``backend_xid`` is 32 bits: compared modulo.
HORIZON_SQL = """
    WITH snap AS (SELECT pg_current_snapshot() AS s)
    SELECT coalesce(
        (SELECT min(r.x) FROM (SELECT pg_snapshot_xip(s)::text::bigint AS x FROM snap) r
         WHERE NOT EXISTS (
             SELECT 1 FROM pg_stat_activity a
             WHERE a.backend_xid IS NOT NULL
               AND a.backend_xid::text::bigint = r.x % 4294967296
               AND a.datname IS DISTINCT FROM current_database())),
        (SELECT pg_snapshot_xmax(s)::text::bigint FROM snap)) AS horizon,
        (SELECT pg_snapshot_xmax(s)::text::bigint FROM snap) AS xmax,
        (SELECT s::text FROM snap) AS snapshot"""


def _scope_filters(scope: Scope, first_param: int) -> tuple[dict[str, str], list[Any]]:
    """Each branch's extra condition (the same for all three), and its parameters: the
    scope's kind, then what the caller may read (``readable_experiments_sql``)."""
    conditions: list[str] = []
    params: list[Any] = []
    if scope.kind is ScopeKind.EXPERIMENT:
        conditions.append(f"{{t}}.xid = ${first_param}")
        params.append(scope.xid)
    elif scope.kind is ScopeKind.CREATOR:
        conditions.append(
            f"{{t}}.xid IN (SELECT xid FROM experiments WHERE creator = ${first_param})"
        )
        params.append(scope.creator)
    readable, readable_params = readable_experiments_sql(
        scope.reads, xid_column="{t}.xid", first_param=first_param + len(params)
    )
    if readable_params:
        conditions.append(readable)
        params.extend(readable_params)
    where = "".join(f" AND {c}" for c in conditions)
    return {name: where.format(t=name[-1]) for name in ("scope_h", "scope_m", "scope_x")}, params


def _events(rows: Sequence[Any]) -> list[StoredEvent]:
    return [
        StoredEvent(
            Position(r["txid"], r["source"], r["id"]),
            r["xid"],
            r["wid"],
            r["eid"],
            r["a"],
            r["b"],
            r["time"],
            r["text"],
            r["content"],
            r["record_time"],
            r["creator"],
            r["readers"],
        )
        for r in rows
    ]


async def read_horizon(conn: Connection) -> tuple[int, int]:
    """(horizon, xmax): rows below the horizon are final; every transaction that had
    committed when the statement began is below xmax."""
    row = await conn.fetchrow(HORIZON_SQL)
    assert row is not None
    return row["horizon"], row["xmax"]


async def read_snapshot(conn: Connection) -> str:
    """The current snapshot as Postgres prints it (``xmc.model.watch.parse_snapshot``),
    with this database's horizon in place of the cluster's xmin: what a stream started now
    skips (everything below it, and what had ended between it and xmax) and where it
    starts. Both from one statement's snapshot."""
    row = await conn.fetchrow(HORIZON_SQL)
    assert row is not None
    _xmin, rest = str(row["snapshot"]).split(":", 1)
    return f"{row['horizon']}:{rest}"


async def read_window(conn: Connection, low: int, high: int) -> list[StoredEvent]:
    """Every event of transactions ``low <= txid < high`` (``high`` at most a horizon
    read before), in position order: what the shared poller fans out."""
    union = _UNION.format(scope_h="", scope_m="", scope_x="")
    rows = await conn.fetch(_SELECT.format(union=union, where="", limit=""), low, high)
    return _events(rows)


async def read_after(
    conn: Connection, after: Position, scope: Scope, *, limit: int
) -> tuple[list[StoredEvent], int]:
    """A watcher's catch-up: up to ``limit`` events of ``scope`` past ``after`` and below
    the current horizon, and that horizon. Fewer than ``limit`` events means every event
    of ``scope`` below the horizon has been returned."""
    horizon, _ = await read_horizon(conn)
    filters, params = _scope_filters(scope, 6)
    union = _UNION.format(**filters)
    sql = _SELECT.format(
        union=union,
        where="WHERE (u.txid, u.source, u.id) > ($3, $4, $5)",
        limit=f"LIMIT {int(limit)}",
    )
    rows = await conn.fetch(sql, after.txid, horizon, after.txid, after.source, after.id, *params)
    return _events(rows), horizon


async def insert_experiment_event(
    conn: Connection,
    xid: int,
    kind: str,
    *,
    active_state: int,
    launch_state: int,
    now: datetime,
) -> None:
    await conn.execute(
        """INSERT INTO experiment_events (xid, kind, active_state, launch_state, record_time)
           VALUES ($1, $2, $3, $4, $5)""",
        xid,
        kind,
        active_state,
        launch_state,
        now,
    )


async def delete_expired_experiment_events(conn: Connection, *, before: datetime) -> int:
    """The janitor's share (experiment events outlive every cursor by a day)."""
    status: str = await conn.execute("DELETE FROM experiment_events WHERE record_time < $1", before)
    return int(status.split()[-1])
