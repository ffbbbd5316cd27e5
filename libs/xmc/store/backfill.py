"""Filling columns that a migration added and only Python can compute, in rows written
before it: the wire parts of migration 0003 (``xmc.store.wire``), the args of 0005
(``xmc.model.args``) and the experiments' readers of 0015 (``xmc.model.read_access``).

The wire parts are filled by ``migrate`` right after migration 0003 (or 0004, their guard)
is applied, once: a walk of the whole table on every start would cost seconds at a million
work units. A row left without parts afterwards (a crash mid-walk, a writer of an older
version, which migration 0004's guard answers by dropping the part) is built from its
columns when read, until its next write stores the part again. The args are filled by every
``migrate``: migration 0005's partial index holds just the rows still without args, so
finding none costs an empty index scan, and a row an ESS older than 0005 created during a
rolling upgrade (it matches no ``args.*`` filter meanwhile) is filled at the next. The walk goes
along the primary key in batches (each batch an index range, so the whole pass is linear in
the table) and locks each batch's rows in (xid, wid) order, the order every writer locks
work units in; a row a writer changed meanwhile is re-read under the lock, and one already
filled is passed over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from xmc.model.args import arg_numbers_json, work_unit_args
from xmc.model.read_access import experiment_readers
from xmc.store.connection import Connection, Record
from xmc.store.experiments import experiment_doc_acls
from xmc.store.work_units import WORK_UNIT_COLUMNS, wire_parts
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

BATCH = 1000
#: The migrations after which the parts are filled (``migrate``).
WIRE_MIGRATIONS = frozenset({3, 4})

_SELECT_WIRE = f"""
    SELECT {WORK_UNIT_COLUMNS} FROM work_units
    WHERE (xid, wid) > ($1, $2) AND (head IS NULL OR exec_wire IS NULL)
    ORDER BY xid, wid LIMIT $3
    FOR UPDATE"""

_UPDATE_WIRE = """
    UPDATE work_units AS w SET head = u.head, exec_wire = u.exec_wire
    FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::bytea[])
         AS u(xid, wid, head, exec_wire)
    WHERE w.xid = u.xid AND w.wid = u.wid"""

_SELECT_ARGS = """
    SELECT xid, wid, doc FROM work_units
    WHERE (xid, wid) > ($1, $2) AND args IS NULL
    ORDER BY xid, wid LIMIT $3
    FOR UPDATE"""

_UPDATE_ARGS = """
    UPDATE work_units AS w SET args = u.args, arg_numbers = u.numbers
    FROM unnest($1::bigint[], $2::bigint[], $3::jsonb[], $4::jsonb[]) AS u(xid, wid, args, numbers)
    WHERE w.xid = u.xid AND w.wid = u.wid"""


async def _walk(
    conn: Connection,
    select: str,
    update: str,
    columns: Callable[[Sequence[Record]], Sequence[list[Any]]],
    batch: int,
) -> int:
    """Run ``update`` with the keys and ``columns(rows)`` of each batch ``select`` finds;
    how many rows were filled."""
    after, filled = (0, 0), 0
    while True:
        async with conn.transaction():
            rows = await conn.fetch(select, *after, batch)
            if not rows:
                return filled
            keys = [[row["xid"] for row in rows], [row["wid"] for row in rows]]
            await conn.execute(update, *keys, *columns(rows))
        filled += len(rows)
        after = (rows[-1]["xid"], rows[-1]["wid"])


def _wire_columns(rows: Sequence[Record]) -> list[list[Any]]:
    parts = [wire_parts(row) for row in rows]
    return [[head for head, _ in parts], [exec_wire for _, exec_wire in parts]]


def _args_columns(rows: Sequence[Record]) -> list[list[Any]]:
    args = [work_unit_args(WorkUnit.FromString(row["doc"] or b"")) for row in rows]
    return [[json.dumps(a) for a in args], [arg_numbers_json(a) for a in args]]


async def backfill_wire(conn: Connection, *, batch: int = BATCH) -> int:
    """Store ``head`` and ``exec_wire`` where either is missing; how many rows got them."""
    return await _walk(conn, _SELECT_WIRE, _UPDATE_WIRE, _wire_columns, batch)


async def backfill_args(conn: Connection, *, batch: int = BATCH) -> int:
    """Store ``args`` and ``arg_numbers`` where missing, from the stored executable."""
    return await _walk(conn, _SELECT_ARGS, _UPDATE_ARGS, _args_columns, batch)


async def backfill_readers(conn: Connection, *, batch: int = BATCH) -> int:
    """Fill ``readers`` where it is NULL, from the creator and the ACL in ``doc``: the rows
    migration 0015 could not fill in SQL (an ACL is protobuf bytes), and any an ESS older
    than 0015 created during a rolling upgrade. Run by every ``migrate``; a partial index
    holds just the unfilled rows, so finding none is an empty index scan. How many were
    filled."""
    filled, after = 0, 0
    while True:
        async with conn.transaction():
            rows = await conn.fetch(
                """SELECT xid, creator, doc FROM experiments
                   WHERE readers IS NULL AND xid > $1 ORDER BY xid LIMIT $2 FOR UPDATE""",
                after,
                batch,
            )
            if not rows:
                return filled
            await conn.executemany(
                "UPDATE experiments SET readers = $2 WHERE xid = $1",
                [(row["xid"], _row_readers(row)) for row in rows],
            )
        filled += len(rows)
        after = rows[-1]["xid"]


def _row_readers(row: Any) -> list[str]:
    return experiment_readers(row["creator"], experiment_doc_acls(row["doc"]))
