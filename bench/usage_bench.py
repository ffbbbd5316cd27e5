"""Benchmark: usage over 100,000 executions (docs/usage.md, decision 0045), through
``xmc.v1.UsageService.GetUsage`` beside the raw SQL of the same query, in the same run.

One ESS process (``xmc-ess serve``) on a fresh database, seeded with COPY: 200 experiments
of 50 users, 100,000 work units (one execution each) in 4 queues, each unit's requested
resources, and the status history of the last 30 days (≈5 rows per execution; 5 % of the
executions preempted once, 1 % still running). The history goes in through
``insert_history``, as every writer's does: COPY, and ``execution_runs`` written from the
same rows (the seed's time is printed).

Four queries, each timed ``--runs`` times alternately through gRPC (one call in flight) and
as the raw SQL the store sends for it (recorded once, replayed through asyncpg); p50 and
p99 of each, side by side:

- by user over the last 7 days (a quarter of the runs);
- by queue over one hour ten days ago (a narrow range: ~0.2 % of the runs);
- by experiment over 30 days with a series per day (every run);
- by execution over the last hour (the per-execution path: runs shipped to the ESS).

The narrow query's statement is also timed alone, with index scans on and off alternately
(off: what it would cost without the GiST index on the runs' spans, a walk of the whole
table), and its plan's first index is printed. Figures only: it asserts that each RPC
answered with run time.

    .venv/bin/python bench/usage_bench.py [--runs 50] [--executions 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg
import grpc
from bench.ess_rpc import ADMIN_DSN, METADATA, Recorder, free_port, start_ess
from google.protobuf.timestamp_pb2 import Timestamp

from tests.stack import create_database, drop_database
from xmc.model.states import WorkUnitState as S
from xmc.model.usage import BUCKETS, Window
from xmc.store.migrate import migrate
from xmc.store.usage import GroupBy, fetch_execution_runs, fetch_grouped_usage, fetch_series
from xmc.store.work_units import insert_history
from xmc_api.xmc.v1 import usage_pb2

METHOD = "/xmc.v1.UsageService/GetUsage"
EXPERIMENTS, USERS = 200, 50
QUEUES = ["gpu-a100", "gpu-h100", "tpu-v5e", "cpu"]
DAYS = 30


def history(wid_base: int, xid: int, count: int, now: datetime, rng: random.Random) -> list[Any]:
    """The history rows of ``count`` units of one experiment, one execution each."""
    rows: list[Any] = []
    span = DAYS * 86400
    for wid in range(wid_base + 1, wid_base + count + 1):
        created = now - timedelta(seconds=rng.uniform(0, span))
        started = created + timedelta(seconds=rng.uniform(10, 600))
        ran = timedelta(seconds=rng.uniform(600, 12 * 3600))
        changes = [(0, S.INITIALIZING, created), (S.INITIALIZING, S.SCHEDULING, created)]
        changes.append((S.SCHEDULING, S.RUNNING, started))
        kind = rng.random()
        if kind < 0.05:  # preempted once, re-queued for ten minutes
            out = started + ran / 2
            back = out + timedelta(minutes=10)
            changes += [
                (S.RUNNING, S.DESCHEDULING, out),
                (S.DESCHEDULING, S.SCHEDULING, out),
                (S.SCHEDULING, S.RUNNING, back),
            ]
            started = back - ran / 2
        end = started + ran
        if kind > 0.99 or end > now:  # still running
            pass
        else:
            changes.append((S.RUNNING, S.COMPLETED, end))
        rows += [(xid, wid, 1, int(a), int(b), t, "bench", t, "bench", "") for a, b, t in changes]
    return rows


async def seed(conn: Any, executions: int, now: datetime) -> float:
    """The experiments, units, resources and history (COPY); seconds the history took."""
    rng = random.Random(7)
    per = executions // EXPERIMENTS
    await conn.execute(
        """INSERT INTO experiments (xid, creator, create_time, update_time, launch_state,
               active_state, status_update_time)
           SELECT g, 'user' || (g % $2) || '@example.com', $3, $3, 0, 0, $3
           FROM generate_series(1, $1) g""",
        EXPERIMENTS,
        USERS,
        now - timedelta(days=DAYS),
    )
    await conn.execute(
        """INSERT INTO work_units (xid, wid, create_time, update_time, eid, exec_create_time,
               exec_update_time, state, state_update_time, status_update_time)
           SELECT x, w, $3, $3, 1, $3, $3, 4, $3, $3
           FROM generate_series(1, $1) x, generate_series(1, $2) w""",
        EXPERIMENTS,
        per,
        now - timedelta(days=DAYS),
    )
    resources = []
    for xid in range(1, EXPERIMENTS + 1):
        queue = QUEUES[xid % len(QUEUES)]
        for wid in range(1, per + 1):
            gpus = 0 if queue == "cpu" else (1, 2, 4, 8)[wid % 4]
            kinds = {queue.removeprefix("gpu-"): gpus} if gpus else {}
            chips = gpus if queue == "tpu-v5e" else 0
            resources.append(
                (xid, wid, queue, 4000, 16 << 30, gpus - chips, chips, json.dumps(kinds))
            )
    await conn.copy_records_to_table(
        "work_unit_resources",
        records=resources,
        columns=[
            "xid",
            "wid",
            "queue",
            "cpu_millicores",
            "memory_bytes",
            "gpus",
            "tpu_chips",
            "accelerators",
        ],
    )
    began = time.perf_counter()
    for xid in range(1, EXPERIMENTS + 1):
        rows = history(0, xid, per, now, rng)
        async with conn.transaction():
            await insert_history(conn, rows)  # COPY, and the runs the rows open and close
    return time.perf_counter() - began


def stamp(value: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(value)
    return ts


async def record(conn: Any, query: str, window: Window, now: datetime) -> list[Any]:
    """The statements the store sends for one of the benchmark's queries."""
    recorder = Recorder(conn)
    if query == "execution":
        await fetch_execution_runs(recorder, window, xid=None)
    elif query == "series":
        await fetch_grouped_usage(
            recorder, GroupBy.EXPERIMENT, window, now=now, xid=None, limit=100
        )
        await fetch_series(recorder, window, BUCKETS["day"], now=now, xid=None)
    else:
        await fetch_grouped_usage(recorder, GroupBy(query), window, now=now, xid=None, limit=100)
    return recorder.calls


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--executions", type=int, default=100_000)
    args = parser.parse_args()

    now = datetime.now(UTC).replace(microsecond=0)
    queries = {
        "by user, last 7 days": (
            "user",
            usage_pb2.USER,
            Window(now - timedelta(days=7), now),
            usage_pb2.USAGE_BUCKET_UNSPECIFIED,
        ),
        "by queue, one hour 10 days ago": (
            "queue",
            usage_pb2.QUEUE,
            Window(now - timedelta(days=10), now - timedelta(days=10) + timedelta(hours=1)),
            usage_pb2.USAGE_BUCKET_UNSPECIFIED,
        ),
        "by experiment + per-day series, 30 days": (
            "series",
            usage_pb2.EXPERIMENT,
            Window(now - timedelta(days=DAYS), now),
            usage_pb2.DAY,
        ),
        "by execution, last hour": (
            "execution",
            usage_pb2.EXECUTION,
            Window(now - timedelta(hours=1), now),
            usage_pb2.USAGE_BUCKET_UNSPECIFIED,
        ),
    }
    dsn = await create_database(ADMIN_DSN)
    proc = None
    figures: dict[str, tuple[list[float], list[float]]] = {}
    try:
        await migrate(dsn)
        conn = await asyncpg.connect(dsn)
        seed_seconds = await seed(conn, args.executions, now)
        await conn.execute("VACUUM ANALYZE")
        runs = await conn.fetchval("SELECT count(*) FROM execution_runs")
        history_rows = await conn.fetchval("SELECT count(*) FROM work_unit_status_history")
        port = free_port()
        proc = await start_ess(dsn, port)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        call = channel.unary_unary(METHOD)
        for name, (kind, group_by, window, bucket) in queries.items():
            calls = await record(conn, kind, window, now)
            request = usage_pb2.GetUsageRequest(
                group_by=group_by, since=stamp(window.since), until=stamp(window.until),
                bucket=bucket, limit=100,
            ).SerializeToString()  # fmt: skip
            rpc_times: list[float] = []
            raw_times: list[float] = []
            for _ in range(args.runs):
                began = time.perf_counter()
                async with conn.transaction():  # as the ESS reads it (SET LOCAL jit)
                    for method, query, rest, kwargs in calls:
                        await getattr(conn, method)(query, *rest, **kwargs)
                raw_times.append(time.perf_counter() - began)
                began = time.perf_counter()
                answer = await call(request, metadata=METADATA)
                rpc_times.append(time.perf_counter() - began)
            report = usage_pb2.UsageReport.FromString(answer)
            assert report.total.runtime_hours > 0, name
            figures[name] = (rpc_times, raw_times)
        narrow_query = await record(
            conn, "queue", queries["by queue, one hour 10 days ago"][2], now
        )
        _, query, rest, _ = next(c for c in narrow_query if c[0] == "fetch")
        plan = await conn.fetch("EXPLAIN " + query, *rest)
        index = next((r[0].strip() for r in plan if "Index" in r[0]), "no index")
        indexed: list[float] = []
        unindexed: list[float] = []
        for _ in range(max(5, args.runs // 5)):
            for scans, times in (("on", indexed), ("off", unindexed)):
                async with conn.transaction():
                    await conn.execute("SET LOCAL jit = off")
                    await conn.execute(f"SET LOCAL enable_indexscan = {scans}")
                    await conn.execute(f"SET LOCAL enable_bitmapscan = {scans}")
                    began = time.perf_counter()
                    await conn.fetch(query, *rest)
                    times.append(time.perf_counter() - began)
        await channel.close()
        await conn.close()
    finally:
        if proc is not None:
            proc.terminate()
            await proc.wait()
        await drop_database(ADMIN_DSN, dsn)

    print(
        f"usage over {args.executions:,} executions ({runs:,} runs, {history_rows:,} history "
        f"rows; history COPY with its runs: {seed_seconds:.1f} s); {args.runs} calls "
        "each, one in flight, RPC and raw SQL alternately"
    )
    for name, (rpc, raw) in figures.items():
        print(
            f"  {name}: RPC p50 {statistics.median(rpc) * 1000:.1f} ms p99"
            f" {percentile(rpc, 0.99) * 1000:.1f} ms | raw SQL p50"
            f" {statistics.median(raw) * 1000:.1f} ms p99 {percentile(raw, 0.99) * 1000:.1f} ms"
        )
    print(
        f"  the narrow range's query alone (raw SQL, p50): {statistics.median(indexed) * 1000:.1f}"
        f" ms through the span index ({index}), {statistics.median(unindexed) * 1000:.1f} ms"
        " with index scans off (a scan of every run)"
    )


if __name__ == "__main__":
    asyncio.run(main())
