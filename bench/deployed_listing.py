"""Benchmark: one full pass of ``ListDeployedExecutions``'s store query (issue 23), the
cost the Reconciler's vanished-JobSet sweep pays per sweep.

``--live`` experiments x ``--per`` RUNNING work units whose create finished ``done``
(ACTIVE experiments), after ``--dead`` finished experiments x ``--dead-per`` COMPLETED
ones (INACTIVE): a pass must cost O(live work units), not O(all). Rows are inserted with
SQL, not through the API, to reach the sizes quickly. Figures only; asserts nothing.

    .venv/bin/python bench/deployed_listing.py [--live 200] [--per 25] [--dead 50] [--dead-per 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from xmc.store import deployed
from xmc.store.migrate import migrate

ADMIN_DSN = os.environ.get("XMC_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

_EXPERIMENTS = """
    INSERT INTO experiments (xid, create_time, update_time, launch_state, active_state,
                             status_update_time)
    SELECT g, now(), now(), 2, CASE WHEN g <= $1::int THEN 2 ELSE 1 END, now()
    FROM generate_series(1, $1::int + $2::int) g"""
_WORK_UNITS = """
    INSERT INTO work_units (xid, wid, create_time, update_time, eid, exec_create_time,
                            exec_update_time, state, state_update_time, status_update_time)
    SELECT x, w, now(), now(), 1, now(), now(), CASE WHEN x <= $1::int THEN 10 ELSE 4 END,
           now(), now()
    FROM generate_series(1, $1::int + $2::int) x,
         generate_series(1, CASE WHEN x <= $1::int THEN $4::int ELSE $3::int END) w"""
_CREATES = """
    INSERT INTO task_outbox (task_id, xid, wid, eid, kind, task, status, create_time,
                             finished_time, outcome)
    SELECT xid || '-' || wid, xid, wid, 1, 1, '\\x00', 'finished', now(),
           now() - interval '1 hour', 'done'
    FROM work_units"""


async def one_pass(conn: asyncpg.Connection, page: int) -> tuple[int, int, float]:
    started = time.perf_counter()
    after, listed, pages = (0, 0), 0, 0
    while True:
        found, upper = await deployed.list_deployed(conn, after=after, limit=page)
        listed, pages = listed + len(found), pages + 1
        if upper is None:
            return listed, pages, time.perf_counter() - started
        after = upper


async def main(args: argparse.Namespace) -> None:
    name = f"xmc_bench_deployed_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = urlunsplit(urlsplit(ADMIN_DSN)._replace(path=f"/{name}"))
    try:
        await migrate(dsn)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(_EXPERIMENTS, args.dead, args.live)
            await conn.execute(_WORK_UNITS, args.dead, args.live, args.per, args.dead_per)
            await conn.execute(_CREATES)
            await conn.execute("ANALYZE")
            total = await conn.fetchval("SELECT count(*) FROM work_units")
            # Same-run baseline: one plain read of every work unit's ids, which a pass that
            # scanned the whole table could not beat.
            started = time.perf_counter()
            await conn.fetch("SELECT xid, wid FROM work_units")
            print(f"baseline: SELECT of all {total} work units' ids in "
                  f"{time.perf_counter() - started:.3f} s")  # fmt: skip
            for page in (1000, 5000):
                listed, pages, seconds = await one_pass(conn, page)
                print(f"{total} work units, {listed} deployed listed, page {page}: "
                      f"{pages} pages in {seconds:.3f} s")  # fmt: skip
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--live", type=int, default=200, help="active experiments")
    parser.add_argument("--per", type=int, default=25, help="running units per active one")
    parser.add_argument("--dead", type=int, default=50, help="finished experiments")
    parser.add_argument("--dead-per", type=int, default=1000, help="completed units per one")
    asyncio.run(main(parser.parse_args()))
