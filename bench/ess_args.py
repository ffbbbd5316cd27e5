"""Benchmark: ListWorkUnits filtered and sorted by an arg, beside the plain listing, through
gRPC and as the raw SQL of the same pages (issue 27 part 4).

One ESS process (``xmc-ess serve``) on a fresh database; one experiment of 10,000 work
units whose main container has the args of a sweep (``lr`` over five values plus a few
``auto`` and a few units without it, ``opt``, ``layers``, a constant ``seed``). Three
listings, each walked page by page (page 100, one call in flight), each beside the raw
SELECT of its pages (recorded once through the store, replayed through asyncpg) in the
same run, alternating walk by walk so both see the same machine:

- plain: no filter, the default order (``wid``);
- ``filter="args.lr > 0.01" order_by="args.lr"``;
- ``order_by="args.lr desc"`` over every unit (missing and text values included);
- ``order_by="runtime desc"`` and ``order_by="time_in_state"`` over every unit (decision
  0037: runtime is computed per row against the walk's start; time in state reads
  ``state_update_time`` backwards).

Also timed once: the backfill of the 10,000 rows' args (``xmc.store.backfill``, what
``migrate`` does after migration 0005) and the per-key spread query of the sweep table
(``xmc.store.arg_stats``), and the grouping by ``lr`` with state counts. Figures only: it
asserts nothing beyond each walk reading the rows its raw SELECTs read.

    .venv/bin/python bench/ess_args.py [--runs 3] [--work-units 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg
import grpc
from bench.ess_rpc import (
    ADMIN_DSN,
    LIST_METHOD,
    METADATA,
    PAGE,
    SERVICE,
    T0,
    Recorder,
    free_port,
    page_requests,
    start_ess,
    timed,
)
from bench.workloads import work_unit

from tests.stack import create_database, drop_database
from xmc.store.arg_stats import arg_groups, arg_spreads
from xmc.store.backfill import backfill_args, backfill_wire
from xmc.store.experiments import insert_experiment
from xmc.store.listing import ListRequest
from xmc.store.migrate import migrate
from xmc.store.work_units import list_work_units, work_unit_doc
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

LISTINGS = {
    "plain (no filter, by wid)": ("", ""),
    'filter="args.lr > 0.01" order_by="args.lr"': ("args.lr > 0.01", "args.lr"),
    'order_by="args.lr desc" (every unit)': ("", "args.lr desc"),
    'order_by="runtime desc" (every unit)': ("", "runtime desc"),
    'order_by="time_in_state" (every unit)': ("", "time_in_state"),
}
LRS = ["0.1", "0.05", "0.01", "0.005", "0.001"]


def sweep_doc(wid: int) -> bytes:
    unit = work_unit()
    args = unit.executable.jobset.jobs[0].spec.args
    args.clear()
    if wid % 50:  # every 50th unit has no lr, every 97th an lr that is not a number
        args["lr"] = "auto" if wid % 97 == 0 else LRS[wid % len(LRS)]
    args.update({"opt": ("adam", "sgd")[wid % 2], "layers": str(4 * (1 + wid % 3)), "seed": "1"})
    return work_unit_doc(unit)


async def seed(conn: Any, work_units: int) -> tuple[int, float]:
    """One experiment of sweep units (bulk SQL: setup only, args left to the backfill);
    its xid and the seconds the args backfill took."""
    experiment = await insert_experiment(conn, Experiment(), creator=SERVICE, now=T0)
    xid = int(experiment.name.split("/")[1])
    await conn.execute(
        """INSERT INTO work_units (xid, wid, create_time, update_time, doc, eid,
               exec_create_time, exec_update_time, state, state_update_time, status_update_time)
           SELECT $1, g, $2, $2, d, 1, $2, $2, 1, $2, $2
           FROM unnest($3::bigint[], $4::bytea[]) AS u(g, d)""",
        xid,
        T0,
        list(range(1, work_units + 1)),
        [sweep_doc(wid) for wid in range(1, work_units + 1)],
    )
    await backfill_wire(conn)
    began = time.perf_counter()
    await backfill_args(conn)
    return xid, time.perf_counter() - began


async def record_walk(conn: Any, xid: int, filter_text: str, order_by: str) -> list[Any]:
    """The page SELECT the store sends for each page of one listing."""
    selects, token = [], ""
    while True:
        recorder = Recorder(conn)
        request = ListRequest(filter_text, order_by, PAGE, token)
        data = await list_work_units(recorder, xid, request)
        selects.append(recorder.calls[0])  # (method, query, args, kwargs)
        token = api_pb2.ListWorkUnitsResponse.FromString(data).next_page_token
        if not token:
            return selects


async def walk(
    conn: Any, channel: grpc.aio.Channel, selects: list[Any], requests: list[bytes]
) -> tuple[float, float, int]:
    """(ESS seconds, raw seconds, rows) of one walk of every page, raw first."""
    call = channel.unary_unary(LIST_METHOD)
    raw_seconds, raw_pages = await timed([partial(conn.fetch, q, *a) for _m, q, a, _k in selects])
    ess_seconds, out = await timed([partial(call, r, metadata=METADATA) for r in requests])
    rows = sum(len(api_pb2.ListWorkUnitsResponse.FromString(d).work_units) for d in out)
    assert rows == sum(min(len(p), PAGE) for p in raw_pages), "ESS and raw read the same rows"
    return ess_seconds, raw_seconds, rows


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work-units", type=int, default=10_000)
    args = parser.parse_args()

    dsn = await create_database(ADMIN_DSN)
    proc = None
    try:
        await migrate(dsn)
        conn = await asyncpg.connect(dsn)
        xid, backfill_seconds = await seed(conn, args.work_units)
        await conn.execute("VACUUM ANALYZE")
        began = time.perf_counter()
        spreads, total = await arg_spreads(conn, xid)
        spread_seconds = time.perf_counter() - began
        began = time.perf_counter()
        groups, _ = await arg_groups(conn, xid, "lr", "")
        group_seconds = time.perf_counter() - began
        port = free_port()
        proc = await start_ess(dsn, port)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        prepared = {
            name: (
                await record_walk(conn, xid, *listing),
                await page_requests(channel, xid, *listing),
            )
            for name, listing in LISTINGS.items()
        }
        figures: dict[str, list[tuple[float, float, int]]] = {name: [] for name in LISTINGS}
        for _run in range(args.runs):
            for name, (selects, requests) in prepared.items():
                figures[name].append(await walk(conn, channel, selects, requests))
        await channel.close()
        await conn.close()
    finally:
        if proc is not None:
            proc.terminate()
            await proc.wait()
        await drop_database(ADMIN_DSN, dsn)

    print(
        f"work units: {args.work_units} in one experiment, page {PAGE}, one call in flight;"
        f" median of {args.runs} walks of every page (ESS and raw SQL back to back)"
    )
    for name, walks in figures.items():
        ess = statistics.median(w[0] for w in walks)
        raw = statistics.median(w[1] for w in walks)
        rows, pages = walks[0][2], len(prepared[name][1])
        print(
            f"  ListWorkUnits {name}: {rows} rows in {pages} pages;"
            f" ESS {ess / pages * 1000:.2f} ms/page ({rows / ess:,.0f} rows/s),"
            f" raw SQL {raw / pages * 1000:.2f} ms/page ({rows / raw:,.0f} rows/s)"
        )
    print(f"  args backfill of {args.work_units} rows: {backfill_seconds:.2f} s")
    print(
        f"  arg spreads ({len(spreads)} keys over {total} units, one SQL aggregate):"
        f" {spread_seconds * 1000:.1f} ms"
    )
    print(
        f"  arg groups by lr ({len(groups)} groups with state counts, one SQL aggregate):"
        f" {group_seconds * 1000:.1f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
