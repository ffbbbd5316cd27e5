"""Reads of ``work_unit_status_history`` for timelines (docs/timelines.md).

A unit's timeline is a handful of rows, read whole and shaped by ``xmc.model.timeline``.
An experiment's timings are aggregated in SQL instead: an experiment of 10,000 units has
tens of thousands of history rows, and one query that walks the ``(xid, wid, id)`` index
and answers a few numbers costs far less than shipping them all to Python. The SQL's phase
rules are ``xmc.model.timeline.phases_of`` restated (tests/integration/test_timelines.py
checks the two agree): ordered by ``id``, measured with ``state_update_time``, a negative
difference clamped to zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from xmc.errors import NotFoundError
from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState
from xmc.model.timeline import ADMITTED_STATES, RUN_STATES, Change
from xmc.names import experiment_name, work_unit_name
from xmc.store.connection import Connection, Record, fetch_one


@dataclass(frozen=True)
class PhaseStatistics:
    """Median and p90 over ``count`` durations (``ongoing`` of them measured to now)."""

    median: timedelta | None
    p90: timedelta | None
    count: int
    ongoing: int


@dataclass(frozen=True)
class StuckUnit:
    wid: int
    eid: int
    state: WorkUnitState
    since: datetime


@dataclass(frozen=True)
class Timings:
    work_units: int
    queue_wait: PhaseStatistics
    startup: PhaseStatistics
    run: PhaseStatistics
    stuck: list[StuckUnit]


async def fetch_unit_history(conn: Connection, xid: int, wid: int) -> list[tuple[int, Change]]:
    """Every (eid, change) of the unit in commit order; NOT_FOUND if it does not exist."""
    rows = await conn.fetch(
        """SELECT h.eid, h.old_state, h.new_state, h.state_update_time, h.writer,
                  h.record_time, h.principal, h.request_id
           FROM work_units u
           LEFT JOIN work_unit_status_history h ON h.xid = u.xid AND h.wid = u.wid
           WHERE u.xid = $1 AND u.wid = $2 ORDER BY h.id""",
        xid,
        wid,
    )
    if not rows:
        raise NotFoundError(f"name: {work_unit_name(xid, wid)} does not exist")
    return [
        (
            r["eid"],
            Change(
                WorkUnitState(r["old_state"]),
                WorkUnitState(r["new_state"]),
                r["state_update_time"],
                r["writer"],
                r["record_time"],
                r["principal"] or "",
                r["request_id"] or "",
            ),
        )
        for r in rows
        if r["eid"] is not None
    ]


def _states(states: frozenset[WorkUnitState]) -> str:
    return ", ".join(str(int(s)) for s in sorted(states))


def _phase(name: str, start: str, end: str) -> str:
    """``_phase`` of xmc.model.timeline in SQL: the duration (NULL: no such phase) and
    whether it is ongoing. ``ended`` is the execution's first terminal change, $2 now."""
    return f"""
        CASE WHEN {start} IS NULL THEN NULL
             WHEN {end} IS NOT NULL THEN greatest({end} - {start}, interval '0')
             WHEN ended IS NULL THEN greatest($2 - {start}, interval '0')
        END AS {name},
        {start} IS NOT NULL AND {end} IS NULL AND ended IS NULL AS {name}_ongoing"""


def _statistics(name: str) -> str:
    return f"""
        percentile_cont(ARRAY[0.5, 0.9]) WITHIN GROUP (ORDER BY {name}) AS {name}_p,
        count({name}) AS {name}_count,
        count(*) FILTER (WHERE {name}_ongoing) AS {name}_ongoing"""


_TERMINAL = _states(EXECUTION_TERMINAL_STATES)

_TIMINGS = f"""
    WITH current AS (
        SELECT wid, eid FROM work_units WHERE xid = $1
    ), marks AS (
        SELECT h.wid,
               (array_agg(h.state_update_time ORDER BY h.id))[1] AS created,
               (array_agg(h.state_update_time ORDER BY h.id)
                   FILTER (WHERE h.new_state IN ({_states(ADMITTED_STATES)})))[1] AS admitted,
               (array_agg(h.state_update_time ORDER BY h.id)
                   FILTER (WHERE h.new_state IN ({_states(RUN_STATES)})))[1] AS running,
               (array_agg(h.state_update_time ORDER BY h.id)
                   FILTER (WHERE h.new_state IN ({_TERMINAL})))[1] AS ended
        FROM work_unit_status_history h
        JOIN current c ON c.wid = h.wid AND c.eid = h.eid
        WHERE h.xid = $1
        GROUP BY h.wid
    ), phases AS (
        SELECT {_phase("queue_wait", "created", "admitted")},
               {_phase("startup", "admitted", "running")},
               {_phase("run", "running", "ended")}
        FROM marks
    )
    SELECT (SELECT count(*) FROM current) AS work_units,
           {_statistics("queue_wait")}, {_statistics("startup")}, {_statistics("run")}
    FROM phases"""


def _statistics_of(row: Record, name: str) -> PhaseStatistics:
    percentiles = row[f"{name}_p"]
    median, p90 = percentiles if percentiles is not None else (None, None)
    return PhaseStatistics(median, p90, row[f"{name}_count"], row[f"{name}_ongoing"])


async def fetch_timings(conn: Connection, xid: int, *, now: datetime, stuck: int) -> Timings:
    """The experiment's timings over each unit's current execution (docs/timelines.md)."""
    if await conn.fetchval("SELECT 1 FROM experiments WHERE xid = $1", xid) is None:
        raise NotFoundError(f"name: {experiment_name(xid)} does not exist")
    row = await fetch_one(conn, _TIMINGS, xid, now)
    stuck_rows = await conn.fetch(
        f"""SELECT wid, eid, state, state_update_time FROM work_units
            WHERE xid = $1 AND state NOT IN ({_TERMINAL})
            ORDER BY state_update_time, wid LIMIT $2""",
        xid,
        stuck,
    )
    return Timings(
        work_units=row["work_units"],
        queue_wait=_statistics_of(row, "queue_wait"),
        startup=_statistics_of(row, "startup"),
        run=_statistics_of(row, "run"),
        stuck=[
            StuckUnit(r["wid"], r["eid"], WorkUnitState(r["state"]), r["state_update_time"])
            for r in stuck_rows
        ],
    )
