"""Benchmark: what restricted reads (decision 0048) cost in Postgres, beside the same reads
without them, in one run on one fresh database.

``--experiments`` experiments (default 100,000) are written straight into the table, with
readers as the ESS writes them: each one's creator (one of 1,000 users), one experiment in
ten shared with one of 20 groups, one in a hundred with everyone. Each figure is the median
of ``--runs`` timings of one statement through asyncpg:

- the experiment listing's first page of 100 (``list_experiments``), newest first: **raw**,
  as without restricted reads, vs restricted for a user who reads ~1 % of the rows (its
  own, its group's, the public ones), and for one who reads only its own 0.1 % (an admin
  reads with no predicate: the raw statement);
- the same listing with a filter on ``title`` that few rows pass (the case where the GIN
  index, not the order, has to find the rows);
- the read gate's one extra query per RPC (``fetch_readers`` by primary key) beside the
  experiment read it guards (``fetch_experiment``).

Figures only: nothing is asserted.

    .venv/bin/python bench/read_auth_bench.py [--runs 5] [--experiments 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg

from tests.servers import ADMIN_DSN
from tests.stack import create_database, drop_database
from xmc.model.read_access import READS_EVERYTHING, ReadScope, caller_principals
from xmc.store.experiments import fetch_experiment, list_experiments
from xmc.store.listing import ListRequest
from xmc.store.migrate import migrate
from xmc.store.read_access import fetch_readers

FILL = """
    INSERT INTO experiments (title, creator, create_time, update_time, launch_state,
                             active_state, status_update_time, readers)
    SELECT 'sweep ' || i, 'user' || (i % 1000) || '@example.com',
           now() - make_interval(secs => i), now(), 1, 1, now(),
           ARRAY['user' || (i % 1000) || '@example.com']
             || CASE WHEN i % 10 = 0 THEN ARRAY['group:team' || (i % 20)] ELSE '{}' END
             || CASE WHEN i % 100 = 7 THEN ARRAY['allAuthenticatedUsers'] ELSE '{}' END
    FROM generate_series(1, $1) AS i"""


async def median_ms(runs: int, call: Callable[[], Awaitable[Any]]) -> float:
    await call()  # warm the plan and the cache
    timings = []
    for _ in range(runs):
        began = time.perf_counter()
        await call()
        timings.append((time.perf_counter() - began) * 1000)
    return statistics.median(timings)


async def measure(conn: asyncpg.Connection, runs: int) -> None:
    user = ReadScope(caller_principals("user1@example.com", ["team1"]))
    own_only = ReadScope(frozenset({"user1@example.com"}))  # 0.1 %: no group, no public
    readable = await conn.fetchval(
        "SELECT count(*) FROM experiments WHERE readers && $1::text[]", user.sorted_principals()
    )
    total = await conn.fetchval("SELECT count(*) FROM experiments")
    print(f"{total} experiments; the user reads {readable} ({100 * readable / total:.2f} %)")
    for label, request in (
        ("first page of 100, newest first", ListRequest(page_size=100)),
        ("page of 100, title filter", ListRequest(page_size=100, filter='title = "sweep 1*"')),
    ):

        def listing(request: ListRequest = request, reads: ReadScope = READS_EVERYTHING) -> Any:
            return list_experiments(conn, request, reads)

        raw = await median_ms(runs, listing)
        restricted = await median_ms(runs, lambda: listing(reads=user))
        own = await median_ms(runs, lambda: listing(reads=own_only))
        print(
            f"{label}: raw {raw:.2f} ms | restricted user "
            f"{restricted:.2f} ms ({restricted / raw:.2f}x raw) | own rows only "
            f"{own:.2f} ms ({own / raw:.2f}x raw)"
        )
    xid = await conn.fetchval("SELECT max(xid) FROM experiments")
    experiment = await median_ms(runs * 20, lambda: fetch_experiment(conn, xid))
    gate = await median_ms(runs * 20, lambda: fetch_readers(conn, xid))
    print(f"read gate: fetch_readers {gate:.3f} ms beside fetch_experiment {experiment:.3f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--experiments", type=int, default=100_000)
    args = parser.parse_args()
    dsn = await create_database(ADMIN_DSN)
    try:
        await migrate(dsn)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(FILL, args.experiments)
            await conn.execute("VACUUM ANALYZE experiments")
            await measure(conn, args.runs)
        finally:
            await conn.close()
    finally:
        await drop_database(ADMIN_DSN, dsn)


if __name__ == "__main__":
    asyncio.run(main())
