"""Accounting reads and writes (docs/usage.md, decision 0045): each unit's requested
resources, written at create, and usage over a time range from ``execution_runs``, which
migration 0012's trigger keeps from the status history.

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

from xmc.model.usage import Requested, Run, Usage, Window
from xmc.store.connection import Connection, Record

#: The key of a group, per grouping, as SQL over ``r`` (runs), ``u`` (resources) and
#: ``e`` (experiments).
_KEYS: Final = {
    "user": "e.creator",
    "experiment": "'experiments/' || r.xid",
    "queue": "coalesce(u.queue, '')",
    "work_unit": "'experiments/' || r.xid || '/workUnits/' || r.wid",
}


class GroupBy(StrEnum):
    USER = "user"
    EXPERIMENT = "experiment"
    QUEUE = "queue"
    WORK_UNIT = "work_unit"
    EXECUTION = "execution"


@dataclass(frozen=True)
class NewResources:
    xid: int
    wid: int
    queue: str
    requested: Requested


async def insert_resources(conn: Connection, rows: Sequence[NewResources]) -> None:
    """Store what the units just created asked for (in the create transaction)."""
    if not rows:
        return
    await conn.execute(
        """INSERT INTO work_unit_resources
               (xid, wid, queue, cpu_millicores, memory_bytes, gpus, tpu_chips, accelerators)
           SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[],
                                $5::bigint[], $6::bigint[], $7::bigint[], $8::jsonb[])""",
        [r.xid for r in rows],
        [r.wid for r in rows],
        [r.queue for r in rows],
        [r.requested.cpu_millicores for r in rows],
        [r.requested.memory_bytes for r in rows],
        [r.requested.gpus for r in rows],
        [r.requested.tpu_chips for r in rows],
        [json.dumps(dict(r.requested.accelerators)) for r in rows],
    )


def requested_from_row(row: Record) -> Requested | None:
    """The resources of a row joined to ``work_unit_resources``; None when it has none."""
    if row["queue"] is None:
        return None
    return Requested(
        row["cpu_millicores"],
        row["memory_bytes"],
        row["gpus"],
        row["tpu_chips"],
        json.loads(row["accelerators"]),
    )


#: Runs overlapping [$1, $2), optionally of experiment $4, each clipped (``clipped``);
#: $3 is now. One row per execution: its clipped seconds summed.
_RUNS: Final = """
    SELECT r.xid, r.wid, r.eid,
           sum(extract(epoch FROM greatest(
               least(coalesce(r.end_time, $3), $2) - greatest(r.start_time, $1),
               interval '0'))) AS s
    FROM execution_runs r
    WHERE tstzrange(r.start_time, r.end_time, '[)') && tstzrange($1, $2, '[)')
      AND ($4::bigint IS NULL OR r.xid = $4)
    GROUP BY r.xid, r.wid, r.eid"""

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
        SELECT {key} AS key, r.s, u.queue, u.cpu_millicores, u.memory_bytes, u.gpus,
               u.tpu_chips, u.accelerators
        FROM runs r
        {"JOIN experiments e ON e.xid = r.xid" if by_creator else ""}
        LEFT JOIN work_unit_resources u ON u.xid = r.xid AND u.wid = r.wid
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
) -> Grouped:
    """Usage per user, experiment, queue or work unit (not per execution: see
    :func:`fetch_execution_runs`)."""
    rows = await conn.fetch(
        _grouped_query(_KEYS[group_by.value], by_creator=group_by is GroupBy.USER),
        window.since,
        window.until,
        now,
        xid,
        limit,
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
    conn: Connection, window: Window, *, xid: int | None
) -> list[ExecutionRuns]:
    """The runs overlapping ``window``, per execution, with the unit's resources."""
    rows = await conn.fetch(
        """SELECT r.xid, r.wid, r.eid, array_agg(r.start_time ORDER BY r.id) AS starts,
                  array_agg(r.end_time ORDER BY r.id) AS ends, u.queue, u.cpu_millicores,
                  u.memory_bytes, u.gpus, u.tpu_chips, u.accelerators
           FROM execution_runs r
           LEFT JOIN work_unit_resources u ON u.xid = r.xid AND u.wid = r.wid
           WHERE tstzrange(r.start_time, r.end_time, '[)') && tstzrange($1, $2, '[)')
             AND ($3::bigint IS NULL OR r.xid = $3)
           GROUP BY r.xid, r.wid, r.eid, u.xid, u.wid""",
        window.since,
        window.until,
        xid,
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
    conn: Connection, window: Window, width: timedelta, *, now: datetime, xid: int | None
) -> list[tuple[datetime, Usage, int]]:
    """Usage per bucket of ``width`` (aligned to the epoch), oldest first; buckets in which
    nothing ran are left out. Each run is cut at the bucket edges it spans."""
    rows = await conn.fetch(
        f"""WITH runs AS (
                SELECT r.xid, r.wid, r.eid, greatest(r.start_time, $1) AS a,
                       least(coalesce(r.end_time, $3), $2) AS b
                FROM execution_runs r
                WHERE tstzrange(r.start_time, r.end_time, '[)') && tstzrange($1, $2, '[)')
                  AND ($4::bigint IS NULL OR r.xid = $4)
            ), k AS (
                SELECT bucket, runs.xid, runs.wid, runs.eid,
                       extract(epoch FROM least(runs.b, bucket + $5) - greatest(runs.a, bucket))
                           AS s,
                       u.queue, u.cpu_millicores, u.memory_bytes, u.gpus, u.tpu_chips
                FROM runs
                CROSS JOIN LATERAL generate_series(
                    date_bin($5, runs.a, 'epoch'), runs.b - interval '1 microsecond', $5
                ) bucket
                LEFT JOIN work_unit_resources u ON u.xid = runs.xid AND u.wid = runs.wid
                WHERE runs.b > runs.a
            )
            SELECT bucket, {
            _SUMS.replace(
                "count(*) FILTER (WHERE k.s > 0)", "count(DISTINCT (k.xid, k.wid, k.eid))"
            )
        },
                   NULL::jsonb AS accelerators
            FROM k GROUP BY bucket ORDER BY bucket""",
        window.since,
        window.until,
        now,
        xid,
        width,
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
        """WITH claimed AS (
               UPDATE execution_runs r SET metered = true
               WHERE r.id IN (SELECT id FROM execution_runs
                              WHERE end_time IS NOT NULL AND NOT metered
                              ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
               RETURNING r.xid, r.wid, extract(epoch FROM r.end_time - r.start_time) AS s)
           SELECT c.s, u.queue, u.cpu_millicores, u.memory_bytes, u.gpus, u.tpu_chips,
                  u.accelerators
           FROM claimed c
           LEFT JOIN work_unit_resources u ON u.xid = c.xid AND u.wid = c.wid""",
        limit,
    )
    return [ClosedRun(float(r["s"]), r["queue"], requested_from_row(r)) for r in rows]
