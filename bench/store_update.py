"""Benchmark: ``Store.update_work_unit_executions`` throughput (issue 2).

10,000 work units in one experiment receive Reconciler-shaped observations (state change +
detailed JobSet status + metadata) in batches of 100 and 1,000. Printed beside the raw
speed of single-row UPDATE transactions through asyncpg on the same database in the same
run, as a ratio. Figures only: this is not a test and asserts nothing.

    .venv/bin/python bench/store_update.py [--items 50000] [--work-units 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg
from bench.workloads import CYCLE, MASK
from bench.workloads import observation as reconciler_observation

from xmc.model.merge import ExecutionUpdate
from xmc.store.migrate import apply_migrations
from xmc.store.repository import Store
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

ADMIN_DSN = os.environ.get("XMC_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def observation(xid: int, wid: int, round_: int) -> ExecutionUpdate:
    return ExecutionUpdate(xid, wid, 1, reconciler_observation(round_, xid, wid), MASK)


async def seed(dsn: str, work_units: int) -> int:
    """One experiment with ``work_units`` work units in INITIALIZING (bulk SQL: setup only)."""
    store = await Store.connect(dsn, min_size=1, max_size=1, clock=lambda: T0)
    xid = int((await store.create_experiment(Experiment(), creator="bench")).name.split("/")[1])
    await store.close()
    conn = await asyncpg.connect(dsn)
    await conn.execute(
        """INSERT INTO work_units (xid, wid, create_time, update_time, eid, exec_create_time,
               exec_update_time, state, state_update_time, status_update_time)
           SELECT $1, g, $2, $2, 1, $2, $2, 1, $2, $2 FROM generate_series(1, $3) g""",
        xid,
        T0,
        work_units,
    )
    await conn.execute(
        """UPDATE experiments SET child_state_counts[2] = $2::bigint, next_wid = $2::bigint + 1
           WHERE xid = $1""",
        xid,
        work_units,
    )
    await conn.execute("VACUUM ANALYZE")
    await conn.close()
    return xid


async def bench_store(
    dsn: str,
    xid: int,
    work_units: int,
    batch: int,
    items: int,
    first_round: int,
    writers: int,
) -> tuple[float, int]:
    """Items/s, and the next unused round (observation times must keep moving forward).

    ``writers`` concurrent callers (the UpdateBatcher's ``max_in_flight``) each own a
    disjoint set of work-unit ranges, as the Reconciler's per-work-unit slots guarantee.
    """
    store = await Store.connect(dsn, min_size=writers, max_size=writers)
    ranges = list(range(1, work_units + 1, batch))
    shards: list[list[list[ExecutionUpdate]]] = [[] for _ in range(writers)]
    count, round_ = 0, first_round
    while count < items:
        for index, start in enumerate(ranges):
            if count >= items:
                break
            wids = range(start, min(start + batch, work_units + 1))
            shards[index % writers].append([observation(xid, w, round_) for w in wids])
            count += len(wids)
        round_ += 1

    async def run(shard: list[list[ExecutionUpdate]]) -> int:
        changed = 0
        for items_ in shard:
            results = await store.update_work_unit_executions(items_, writer="bench")
            changed += sum(r.state_changed for r in results)
        return changed

    began = time.perf_counter()
    done = sum(await asyncio.gather(*(run(shard) for shard in shards)))
    elapsed = time.perf_counter() - began
    await store.close()
    assert done == count, "every observation must change the state"
    return done / elapsed, round_


async def bench_raw(dsn: str, xid: int, work_units: int, count: int) -> float:
    """Single-row UPDATE transactions: the floor any per-item design would pay."""
    conn = await asyncpg.connect(dsn)
    began = time.perf_counter()
    for i in range(count):
        async with conn.transaction():
            await conn.execute(
                """UPDATE work_units SET state = $3, state_update_time = $4,
                       exec_update_time = $4 WHERE xid = $1 AND wid = $2""",
                xid,
                i % work_units + 1,
                int(CYCLE[i % 3]),
                T0 + timedelta(hours=1, seconds=i),
            )
    elapsed = time.perf_counter() - began
    await conn.close()
    return count / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--work-units", type=int, default=10_000)
    parser.add_argument("--raw-count", type=int, default=10_000)
    args = parser.parse_args()

    name = f"xmc_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = urlunsplit(urlsplit(ADMIN_DSN)._replace(path=f"/{name}"))
    try:
        conn = await asyncpg.connect(dsn)
        await apply_migrations(conn)
        await conn.close()
        xid = await seed(dsn, args.work_units)
        # The raw loop gets its own experiment so it cannot disturb the rollups under test.
        raw = await bench_raw(
            dsn, await seed(dsn, args.work_units), args.work_units, args.raw_count
        )
        print(f"work units: {args.work_units} in one experiment; items per run: {args.items}")
        print(f"raw single-row UPDATE transactions (asyncpg): {raw:10,.0f} rows/s")
        next_round = 0
        for writers in (1, 2):
            for batch in (100, 1000):
                rate, next_round = await bench_store(
                    dsn, xid, args.work_units, batch, args.items, next_round, writers
                )
                print(
                    f"update_work_unit_executions batch={batch:5} writers={writers}:"
                    f" {rate:10,.0f} items/s = {rate / raw:5.2f}x raw"
                )
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
