"""Reads behind the business metrics (docs/metrics.md, decision 0050)."""

from __future__ import annotations

from collections.abc import Sequence

from xmc.model.business import Transition
from xmc.model.states import EXECUTION_TERMINAL_STATES, ActiveState, WorkUnitState
from xmc.store.connection import Connection

_FIRST_STARTS = """
    SELECT h.xid, h.wid, h.eid
    FROM work_unit_status_history h
    JOIN unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS c(xid, wid, eid)
      ON h.xid = c.xid AND h.wid = c.wid AND h.eid = c.eid
    WHERE h.new_state = $4
    GROUP BY h.xid, h.wid, h.eid
    HAVING count(*) = 1"""


async def confirm_first_starts(
    conn: Connection, candidates: Sequence[Transition]
) -> set[tuple[int, int, int]]:
    """Of the executions that just entered RUNNING (their history rows written in this
    transaction), those for which it is the only RUNNING in the history: the first start,
    not a return after a preemption. One indexed read per batch that has candidates,
    touching only their work units' rows (``work_unit_status_history_wu``)."""
    if not candidates:
        return set()
    rows = await conn.fetch(
        _FIRST_STARTS,
        [t.xid for t in candidates],
        [t.wid for t in candidates],
        [t.eid for t in candidates],
        int(WorkUnitState.RUNNING),
    )
    return {(row["xid"], row["wid"], row["eid"]) for row in rows}


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
