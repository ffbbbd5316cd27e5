"""Filling the wire parts of rows written before migration 0003 (``xmc.store.wire``).

Run by ``migrate`` right after migration 0003 (or 0004, its guard) is applied, once: a
walk of the whole table on every start would cost seconds at a million work units. A row
left without parts afterwards (a crash mid-walk, a writer of an older version, which
migration 0004's guard answers by dropping the part) is built from its columns when read,
until its next write stores the part again. It walks the primary key in batches (each batch
an index range, so the whole pass is linear in the table) and locks each batch's rows in
(xid, wid) order, the order every writer locks work units in; a row a writer changed
meanwhile is re-read under the lock, and one that already has both parts is passed over.
"""

from __future__ import annotations

from xmc.store.connection import Connection
from xmc.store.work_units import WORK_UNIT_COLUMNS, wire_parts

BATCH = 1000
#: The migrations after which the parts are filled (``migrate``).
WIRE_MIGRATIONS = frozenset({3, 4})

_SELECT = f"""
    SELECT {WORK_UNIT_COLUMNS} FROM work_units
    WHERE (xid, wid) > ($1, $2) AND (head IS NULL OR exec_wire IS NULL)
    ORDER BY xid, wid LIMIT $3
    FOR UPDATE"""

_UPDATE = """
    UPDATE work_units AS w SET head = u.head, exec_wire = u.exec_wire
    FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bytea[])
         AS u(xid, wid, head, exec_wire)
    WHERE w.xid = u.xid AND w.wid = u.wid"""


async def backfill_wire(conn: Connection, *, batch: int = BATCH) -> int:
    """Store ``head`` and ``exec_wire`` where either is missing; how many rows got them."""
    after, filled = (0, 0), 0
    while True:
        async with conn.transaction():
            rows = await conn.fetch(_SELECT, *after, batch)
            if not rows:
                return filled
            parts = [wire_parts(row) for row in rows]
            await conn.execute(
                _UPDATE,
                [row["xid"] for row in rows],
                [row["wid"] for row in rows],
                [head for head, _ in parts],
                [exec_wire for _, exec_wire in parts],
            )
        filled += len(rows)
        after = (rows[-1]["xid"], rows[-1]["wid"])
