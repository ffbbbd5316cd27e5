"""Accounting reads and writes (docs/usage.md, decision 0045): each unit's requested
resources, written at create (by ``xmc.store.creation``, with the unit), and usage over a
time range from ``execution_runs``, which migration 0012's trigger keeps from the status
history.

Aggregates are computed in SQL: a week of a busy cluster is ~10^5 runs, and one query that
finds them through the GiST range index and answers a few rows beats shipping them all.
Its clipping is ``xmc.model.usage.clipped`` restated (tests check the two agree): a run
counts from max(start, since) to min(end or now, until), never below zero. The
per-execution listing ships the runs instead and uses ``clipped`` itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from xmc.errors import NotFoundError
from xmc.model.usage import Requested, Run, Usage, Window
from xmc.names import experiment_name
from xmc.store.connection import Connection, Record

#: The key of a group, per grouping, as SQL over ``r`` (runs per execution) and ``e``
#: (experiments).
_KEYS: Final = {
    "user": "e.creator",
    "experiment": "'experiments/' || r.xid",
    "queue": "coalesce(r.queue, '')",
    "work_unit": "'experiments/' || r.xid || '/workUnits/' || r.wid",
}


class GroupBy(StrEnum):
    USER = "user"
    EXPERIMENT = "experiment"
    QUEUE = "queue"
    WORK_UNIT = "work_unit"
    EXECUTION = "execution"


def requested_from_row(row: Record) -> Requested | None:
    """What a run or unit row asked for; None when its resources are unknown."""
    if row["queue"] is None:
        return None
    return Requested(
        row["cpu_millicores"],
        row["memory_bytes"],
        row["gpus"],
        row["tpu_chips"],
        json.loads(row["accelerators"]),
    )


async def require_experiment(conn: Connection, xid: int) -> None:
    """NOT_FOUND naming the ``experiment`` filter when no such experiment exists: usage of
    a mistyped id is an error, not zero hours."""
    if await conn.fetchval("SELECT 1 FROM experiments WHERE xid = $1", xid) is None:
        raise NotFoundError(f"experiment: {experiment_name(xid)} does not exist")


#: What a run asked for, as ``execution_runs`` holds it (copied from the unit's row).
_RESOURCES: Final = "queue, cpu_millicores, memory_bytes, gpus, tpu_chips, accelerators"
_RUN_RESOURCES: Final = "r." + _RESOURCES.replace(", ", ", r.")
#: Runs overlapping [$1, $2) (the GiST span index), optionally of experiment $4, and only
#: of experiments whose readers meet the text[] ${readers} (NULL: the caller reads all;
#: restricted reads, decision 0048).
_OVERLAPPING: Final = """
    FROM execution_runs r
    WHERE tstzrange(r.start_time, r.end_time, '[)') && tstzrange($1, $2, '[)')
      AND ($4::bigint IS NULL OR r.xid = $4)
      AND (${readers}::text[] IS NULL OR r.xid IN (
          SELECT e.xid FROM experiments e WHERE e.readers && ${readers}::text[]))"""
#: One row per execution: its runs clipped (``clipped``; $3 is now) and summed.
_RUNS: Final = f"""
    SELECT r.xid, r.wid, r.eid, {_RUN_RESOURCES},
           sum(extract(epoch FROM greatest(
               least(coalesce(r.end_time, $3), $2) - greatest(r.start_time, $1),
               interval '0'))::float8) AS s
    {_OVERLAPPING.replace("${readers}", "$6")}
    GROUP BY r.xid, r.wid, r.eid, {_RUN_RESOURCES}"""

#: Usage columns over rows of ``k`` (s: seconds, the resource columns; unknown resources
#: are NULL columns, which sum() passes over).
_SUMS: Final = """
    sum(k.s) AS runtime,
    sum(k.s * k.cpu_millicores) / 1000 AS cpu,
    sum(k.s * k.memory_bytes) AS memory,
    sum(k.s * k.gpus) AS gpu,
    sum(k.s * k.tpu_chips) AS tpu,
    coalesce(sum(k.s) FILTER (WHERE k.queue IS NULL), 0) AS unknown,
    count(*) FILTER (WHERE k.s > 0) AS executions"""


def _grouped_query(key: str, *, by_creator: bool) -> str:
    """Per group and, as the row whose ``total`` is true, over everything (GROUPING SETS):
    the total first, then the groups by GPU-seconds; $5 limits the groups."""
    return f"""
    WITH runs AS ({_RUNS}),
    k AS (
        SELECT {key} AS key, r.s, {_RUN_RESOURCES}
        FROM runs r
        {"JOIN experiments e ON e.xid = r.xid" if by_creator else ""}
    ),
    sums AS (
        SELECT k.key, grouping(k.key) = 1 AS total, {_SUMS}
        FROM k GROUP BY GROUPING SETS ((k.key), ())
    ),
    kinds AS (
        SELECT key, total, jsonb_object_agg(kind, seconds) AS accelerators
        FROM (SELECT k.key, grouping(k.key) = 1 AS total, a.key AS kind,
                     sum(k.s * a.value::float8) AS seconds
              FROM k CROSS JOIN LATERAL jsonb_each_text(k.accelerators) a
              GROUP BY GROUPING SETS ((k.key, a.key), (a.key))) per_kind
        GROUP BY key, total
    )
    SELECT s.*, kinds.accelerators
    FROM sums s LEFT JOIN kinds ON kinds.total = s.total
        AND kinds.key IS NOT DISTINCT FROM s.key
    ORDER BY s.total DESC, s.gpu DESC NULLS LAST, s.runtime DESC, s.key
    LIMIT $5 + 2"""


async def _no_jit(conn: Connection) -> None:
    """No JIT compilation for the rest of the caller's transaction: the planner prices the
    per-run buckets (``generate_series``, 1,000 rows to it) and the aggregates of 10^5 runs
    above ``jit_above_cost``, and compiling then cost 0.6 s of a 0.75 s query that runs in
    0.15 s without it (20,000 executions, measured with EXPLAIN ANALYZE)."""
    await conn.execute("SET LOCAL jit = off")


def usage_from_row(row: Record) -> Usage:
    return Usage(
        runtime_seconds=float(row["runtime"] or 0),
        cpu_seconds=float(row["cpu"] or 0),
        memory_byte_seconds=float(row["memory"] or 0),
        gpu_seconds=float(row["gpu"] or 0),
        tpu_chip_seconds=float(row["tpu"] or 0),
        accelerator_seconds=json.loads(row["accelerators"]) if row["accelerators"] else {},
        unknown_runtime_seconds=float(row["unknown"] or 0),
    )


@dataclass(frozen=True)
class Grouped:
    """Usage per group (largest GPU-seconds first, at most the limit) and in total."""

    groups: list[tuple[str, Usage, int]]
    total: Usage
    total_executions: int
    truncated: bool


async def fetch_grouped_usage(
    conn: Connection,
    group_by: GroupBy,
    window: Window,
    *,
    now: datetime,
    xid: int | None,
    limit: int,
    readers: Sequence[str] | None = None,
) -> Grouped:
    """Usage per user, experiment, queue or work unit (not per execution: see
    :func:`fetch_execution_runs`)."""
    await _no_jit(conn)
    rows = await conn.fetch(
        _grouped_query(_KEYS[group_by.value], by_creator=group_by is GroupBy.USER),
        window.since,
        window.until,
        now,
        xid,
        limit,
        readers,
    )
    total_row = rows[0] if rows and rows[0]["total"] else None
    groups = [r for r in rows if not r["total"]]
    return Grouped(
        groups=[(r["key"], usage_from_row(r), r["executions"]) for r in groups[:limit]],
        total=usage_from_row(total_row) if total_row is not None else Usage(),
        total_executions=total_row["executions"] if total_row is not None else 0,
        truncated=len(groups) > limit,
    )


@dataclass(frozen=True)
class ExecutionRuns:
    xid: int
    wid: int
    eid: int
    runs: list[Run]
    requested: Requested | None


async def fetch_execution_runs(
    conn: Connection, window: Window, *, xid: int | None, readers: Sequence[str] | None = None
) -> list[ExecutionRuns]:
    """The runs overlapping ``window``, per execution, with the unit's resources."""
    rows = await conn.fetch(
        f"""SELECT r.xid, r.wid, r.eid, array_agg(r.start_time ORDER BY r.id) AS starts,
                   array_agg(r.end_time ORDER BY r.id) AS ends, {_RESOURCES}
            {_OVERLAPPING.replace("$4", "$3").replace("${readers}", "$4")}
            GROUP BY r.xid, r.wid, r.eid, {_RESOURCES}""",
        window.since,
        window.until,
        xid,
        readers,
    )
    return [
        ExecutionRuns(
            r["xid"],
            r["wid"],
            r["eid"],
            [Run(s, e) for s, e in zip(r["starts"], r["ends"], strict=True)],
            requested_from_row(r),
        )
        for r in rows
    ]


async def fetch_series(
    conn: Connection,
    window: Window,
    width: timedelta,
    *,
    now: datetime,
    xid: int | None,
    readers: Sequence[str] | None = None,
) -> list[tuple[datetime, Usage, int]]:
    """Usage per bucket of ``width`` (aligned to the epoch), oldest first; buckets in which
    nothing ran are left out. Each run is cut at the bucket edges it spans."""
    await _no_jit(conn)
    rows = await conn.fetch(
        f"""WITH runs AS (
                SELECT r.xid, r.wid, r.eid, greatest(r.start_time, $1) AS a,
                       least(coalesce(r.end_time, $3), $2) AS b, {_RUN_RESOURCES}
                {_OVERLAPPING.replace("${readers}", "$6")}
            ), pieces AS (
                SELECT bucket, runs.xid, runs.wid, runs.eid,
                       extract(epoch FROM least(runs.b, bucket + $5) - greatest(runs.a, bucket))
                           ::float8 AS s,
                       runs.queue, runs.cpu_millicores, runs.memory_bytes, runs.gpus,
                       runs.tpu_chips
                FROM runs
                CROSS JOIN LATERAL generate_series(
                    date_bin($5, runs.a, 'epoch'), runs.b - interval '1 microsecond', $5
                ) bucket
                WHERE runs.b > runs.a
            ), k AS (
                -- Per execution and bucket first: a preempted execution with two runs in a
                -- bucket is one execution of it (two hash aggregates, not a sort per DISTINCT).
                SELECT bucket, sum(s) AS s, queue, cpu_millicores, memory_bytes, gpus, tpu_chips
                FROM pieces
                GROUP BY bucket, xid, wid, eid, queue, cpu_millicores, memory_bytes, gpus,
                         tpu_chips
            )
            SELECT bucket, {_SUMS}, NULL::jsonb AS accelerators
            FROM k GROUP BY bucket ORDER BY bucket""",
        window.since,
        window.until,
        now,
        xid,
        width,
        readers,
    )
    return [(r["bucket"], usage_from_row(r), r["executions"]) for r in rows]


@dataclass(frozen=True)
class ClosedRun:
    """A run that ended and is not yet in the Prometheus counters."""

    seconds: float
    queue: str | None
    requested: Requested | None


async def claim_closed_runs(conn: Connection, *, limit: int) -> list[ClosedRun]:
    """Mark up to ``limit`` ended runs as metered and return them: each is claimed by one
    ESS replica (``SKIP LOCKED``), so the replicas' counters add up to the truth."""
    rows: list[Any] = await conn.fetch(
        f"""UPDATE execution_runs SET metered = true
            WHERE end_time IS NOT NULL AND NOT metered
              AND id IN (SELECT id FROM execution_runs
                         WHERE end_time IS NOT NULL AND NOT metered
                         ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
            RETURNING extract(epoch FROM end_time - start_time) AS s, {_RESOURCES}""",
        limit,
    )
    return [ClosedRun(float(r["s"]), r["queue"], requested_from_row(r)) for r in rows]
