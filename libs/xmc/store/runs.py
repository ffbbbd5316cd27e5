"""``execution_runs`` kept with the history (docs/usage.md, decision 0045): every history
insert (:func:`xmc.store.work_units.insert_history`) writes the runs its rows open and close
in the same transaction, one statement per batch that crosses the run states, none for a
batch that does not (most observation batches).

One statement: the UPDATE closing runs left open by earlier batches sees the table as it was
before the statement, so it never touches the runs the same statement inserts; a run this
batch both opens and closes is inserted closed (``xmc.model.runs``). A new run copies its
unit's resources (one primary-key probe of ``work_unit_resources``), so a usage read joins
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xmc.model.runs import run_changes
from xmc.store.connection import Connection

_WRITE_RUNS = """
    -- A data-modifying WITH runs to completion whether or not the INSERT reads it.
    WITH closed AS (
        UPDATE execution_runs r SET end_time = greatest(c.at, r.start_time)
        FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS c(xid, wid, at)
        WHERE r.xid = c.xid AND r.wid = c.wid AND r.end_time IS NULL
    )
    INSERT INTO execution_runs (xid, wid, eid, start_time, end_time, queue, cpu_millicores,
                                memory_bytes, gpus, tpu_chips, accelerators)
    SELECT o.xid, o.wid, o.eid, o.s, o.e, u.queue, u.cpu_millicores, u.memory_bytes,
           u.gpus, u.tpu_chips, u.accelerators
    FROM unnest($4::bigint[], $5::bigint[], $6::bigint[], $7::timestamptz[],
                $8::timestamptz[]) AS o(xid, wid, eid, s, e)
    LEFT JOIN work_unit_resources u ON u.xid = o.xid AND u.wid = o.wid"""


async def write_runs(conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """The runs ``rows`` (history rows, in write order) open and close."""
    changes = run_changes(rows)
    if not changes:
        return
    closes, runs = changes.closes, changes.runs
    await conn.execute(
        _WRITE_RUNS,
        [c[0] for c in closes], [c[1] for c in closes], [c[2] for c in closes],
        [r[0] for r in runs], [r[1] for r in runs], [r[2] for r in runs],
        [r[3] for r in runs], [r[4] for r in runs],
    )  # fmt: skip
