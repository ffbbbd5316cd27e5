"""Reads behind the business metrics (docs/metrics.md, decision 0050)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from xmc.model.states import EXECUTION_TERMINAL_STATES, ActiveState, WorkUnitState
from xmc.store.connection import Connection

_FIRST_RUNNING = """
    SELECT DISTINCT ON (h.xid, h.wid, h.eid) h.xid, h.wid, h.eid, h.state_update_time
    FROM work_unit_status_history h
    JOIN unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS c(xid, wid, eid)
      ON h.xid = c.xid AND h.wid = c.wid AND h.eid = c.eid
    WHERE h.new_state = $4
    ORDER BY h.xid, h.wid, h.eid, h.id"""


async def fetch_first_running(
    conn: Connection, executions: Sequence[tuple[int, int, int]]
) -> dict[tuple[int, int, int], datetime]:
    """When each execution first entered RUNNING (its first such history row's time):
    a change into RUNNING stamped with that time is the execution's first start, not a
    return after a preemption. One indexed read (``work_unit_status_history_wu``) for
    all of them, touching only their work units' rows."""
    if not executions:
        return {}
    rows = await conn.fetch(
        _FIRST_RUNNING,
        [e[0] for e in executions],
        [e[1] for e in executions],
        [e[2] for e in executions],
        int(WorkUnitState.RUNNING),
    )
    return {(r["xid"], r["wid"], r["eid"]): r["state_update_time"] for r in rows}


_LIVE_UNITS = """
    SELECT e.creator AS owner, coalesce(r.queue, '') AS queue, w.state, count(*) AS units
    FROM experiments e
    JOIN work_units w ON w.xid = e.xid
    LEFT JOIN work_unit_resources r ON r.xid = w.xid AND r.wid = w.wid
    WHERE e.active_state = $1 AND NOT (w.state = ANY($2::smallint[]))
    GROUP BY 1, 2, 3"""


async def count_live_units(conn: Connection) -> list[tuple[str, str, WorkUnitState, int]]:
    """Live (non-terminal) work units by experiment owner, queue and state.

    Only ACTIVE experiments are read — an experiment is ACTIVE exactly while it has a live
    unit — so the cost follows the work in flight, not every unit ever created."""
    rows = await conn.fetch(
        _LIVE_UNITS,
        int(ActiveState.ACTIVE),
        sorted(int(state) for state in EXECUTION_TERMINAL_STATES),
    )
    return [(r["owner"], r["queue"], WorkUnitState(r["state"]), r["units"]) for r in rows]
