"""Benchmark: the ESS's write and read paths through gRPC beside the same SQL sent raw
(issue 14 point 4).

One ESS process (``xmc-ess serve``) on a fresh database; one experiment of 10,000 work
units with a JobSet executable, a detailed JobSet status and metadata. Each figure is the
median of ``--runs`` runs, each run measuring the ESS and its raw baseline back to back:

- ``UpdateWorkUnitExecutions``, batches of 100 Reconciler-shaped items (state + detailed
  status + metadata), one call in flight, vs **raw full SQL**: the very statements the
  store sends for those batches (lock SELECT, bulk UPDATE, history COPY, rollups), recorded
  once and replayed through asyncpg, one transaction per batch.
- ``ListWorkUnits`` page 100, walking every page of the experiment, one call in flight,
  vs the raw SELECT of each page (the statement the store sends) through asyncpg, and vs
  the SELECT of every column a WorkUnit is built from (what pages sent when issue 14 was
  filed).
- The **gRPC floor** of both: ``bench/bare_grpc.py``, a server in its own process that does
  no work, carrying requests and responses of the very sizes the ESS's had, in the same
  slices. A call costs at least the floor and then its SQL, so ``floor / (floor + raw)``
  is the highest ratio any grpc.aio server can reach against that baseline.

Requests are serialized before the clock starts and responses parsed after it stops, so
the client's protobuf work does not load the 2-core machine during the measurement.
``CreateWorkUnit`` at 64 clients is ``bench/ess_create.py``. Figures only: this asserts
nothing beyond the ESS doing the work.

    .venv/bin/python bench/ess_rpc.py [--runs 3] [--work-units 10000] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg
import grpc
from bench.bare_grpc import METHOD as BARE_METHOD
from bench.bare_grpc import sized_request
from bench.workloads import CYCLE, MASK, observation, work_unit

from tests.stack import create_database, drop_database
from xmc.model.audit import Actor
from xmc.model.fence import Fence
from xmc.model.merge import ExecutionUpdate
from xmc.names import experiment_name, work_unit_name
from xmc.store.backfill import backfill_wire
from xmc.store.executions import update_work_unit_executions
from xmc.store.experiments import insert_experiment
from xmc.store.listing import ListRequest, fetch_page
from xmc.store.migrate import migrate
from xmc.store.work_units import WORK_UNIT_LISTING, list_work_units, work_unit_doc
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.internal.v1 import executions_pb2

ADMIN_DSN = os.environ.get("XMC_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("XMC_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TOKEN = "bench-token"
SERVICE = "bench@example.com"
METADATA = (("authorization", f"Bearer {TOKEN}"),)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
BATCH = 100
PAGE = 100
UPDATE_METHOD = "/xmc.internal.v1.WorkUnitExecutionService/UpdateWorkUnitExecutions"
LIST_METHOD = "/cloud.xmanager.v1.ExperimentStateService/ListWorkUnits"


def update_request(xid: int, wids: range, round_: int) -> bytes:
    request = executions_pb2.UpdateWorkUnitExecutionsRequest(writer="bench")
    for wid in wids:
        update = request.updates.add(work_unit=work_unit_name(xid, wid), execution_id=1)
        update.execution.CopyFrom(observation(round_, xid, wid))
        update.update_mask.paths.extend(MASK)
    return request.SerializeToString()


async def seed(conn: Any, work_units: int) -> int:
    """One experiment of ``work_units`` work units in INITIALIZING (bulk SQL: setup only)."""
    experiment = await insert_experiment(conn, Experiment(), creator=SERVICE, now=T0)
    xid = int(experiment.name.split("/")[1])
    await conn.execute(
        """INSERT INTO work_units (xid, wid, create_time, update_time, doc, eid,
               exec_create_time, exec_update_time, state, state_update_time, status_update_time)
           SELECT $1, g, $2, $2, $4, 1, $2, $2, 1, $2, $2 FROM generate_series(1, $3) g""",
        xid,
        T0,
        work_units,
        work_unit_doc(work_unit()),
    )
    await backfill_wire(conn)  # the wire parts a create stores
    await conn.execute(
        """UPDATE experiments SET child_state_counts[2] = $2::bigint, next_wid = $2::bigint + 1
           WHERE xid = $1""",
        xid,
        work_units,
    )
    return xid


class Recorder:
    """A connection that records every statement it forwards, to be replayed raw."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.calls: list[tuple[str, str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, method: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((method, args[0], args[1:], kwargs))
            return await getattr(self.conn, method)(*args, **kwargs)

        return call


async def replay(
    conn: Any, calls: Sequence[tuple[str, str, tuple[Any, ...], dict[str, Any]]]
) -> None:
    for method, first, rest, kwargs in calls:
        await getattr(conn, method)(first, *rest, **kwargs)


async def record_updates(conn: Any, xid: int, work_units: int) -> list[list[list[Any]]]:
    """The store's statements for each round of one cycle of states (rounds 1, 2, 3:
    SCHEDULING → STARTING → RUNNING → SCHEDULING) over ``xid`` (its own experiment), one
    list of batches per round: the raw replay does what the ESS does in the same round
    (entering RUNNING opens runs, leaving it closes them: statements the other rounds do
    not have). Round 0 (INITIALIZING → SCHEDULING) only brings the rows to the cycle."""
    rounds = []
    for round_ in range(len(CYCLE) + 1):
        batches = []
        for start in range(1, work_units + 1, BATCH):
            wids = range(start, min(start + BATCH, work_units + 1))
            items = [ExecutionUpdate(xid, w, 1, observation(round_, xid, w), MASK) for w in wids]
            recorder = Recorder(conn)
            async with conn.transaction():
                await update_work_unit_executions(
                    recorder, items, writer=SERVICE, actor=Actor(SERVICE, "bench"), now=T0
                )
            batches.append(recorder.calls)
        rounds.append(batches)
    return rounds[1:]


#: Reads one page through a (recording) connection; returns the next page's token.
PageRead = Callable[[Any, int, ListRequest], Awaitable[str]]


async def store_page(conn: Any, xid: int, request: ListRequest) -> str:
    """The page as the store reads it."""
    data = await list_work_units(conn, xid, request)
    return api_pb2.ListWorkUnitsResponse.FromString(data).next_page_token


async def column_page(conn: Any, xid: int, request: ListRequest) -> str:
    """The same page's SELECT of every column a WorkUnit is built from (the statement
    pages sent before they were framed from stored bytes): a second reference."""
    _rows, token = await fetch_page(
        conn, WORK_UNIT_LISTING, request, where="w.xid = $1", params=[xid], scope=str(xid)
    )
    return token


async def record_pages(conn: Any, xid: int, read: PageRead = store_page) -> list[list[Any]]:
    """The statements of every page of ``xid``, page by page, as ``read`` sends them."""
    pages, token = [], ""
    while True:
        recorder = Recorder(conn)
        token = await read(recorder, xid, ListRequest(page_size=PAGE, page_token=token))
        pages.append(recorder.calls)
        if not token:
            return pages


#: Calls per slice: the ESS and its raw baseline take turns slice by slice, so both see
#: the same load from whatever else runs on the machine.
SLICE = 10


class Clocks:
    """Seconds spent by the ESS and by the raw baseline, slice by slice."""

    def __init__(self) -> None:
        self.ess = self.raw = 0.0


async def timed(calls: Sequence[Callable[[], Awaitable[Any]]]) -> tuple[float, list[Any]]:
    """Run the calls one after another (a gRPC call starts when it is made, so each is
    made only when the previous one is done)."""
    began = time.perf_counter()
    results = [await call() for call in calls]
    return time.perf_counter() - began, results


async def raw_batch(conn: Any, calls: list[Any]) -> None:
    async with conn.transaction():
        await replay(conn, calls)


async def floor_slice(
    bare: grpc.aio.Channel, requests: Sequence[bytes], responses: Sequence[bytes]
) -> float:
    """Seconds the bare server (``bench/bare_grpc.py``) takes to carry requests and
    responses of these sizes, one call in flight: the gRPC floor of the same slice."""
    call = bare.unary_unary(BARE_METHOD)
    sized = [
        sized_request(len(out), len(into)) for into, out in zip(requests, responses, strict=True)
    ]
    seconds, _ = await timed([partial(call, request) for request in sized])
    return seconds


async def measure_updates(
    conn: Any,
    channel: grpc.aio.Channel,
    bare: grpc.aio.Channel,
    recorded: list[list[Any]],
    requests: list[bytes],
    metadata: tuple[tuple[str, str], ...] = METADATA,
) -> tuple[float, float, float]:
    """(ESS items/s, raw items/s, gRPC floor items/s): each request, the recorded
    statements of a batch of the same size (one transaction per batch), and the bare
    server carrying the same bytes."""
    call = channel.unary_unary(UPDATE_METHOD)
    clocks, responses, floor = Clocks(), [], 0.0
    for start in range(0, len(requests), SLICE):
        chunk = range(start, min(start + SLICE, len(requests)))
        seconds, _ = await timed(
            [partial(raw_batch, conn, recorded[i % len(recorded)]) for i in chunk]
        )
        clocks.raw += seconds
        seconds, out = await timed([partial(call, requests[i], metadata=metadata) for i in chunk])
        clocks.ess += seconds
        floor += await floor_slice(bare, [requests[i] for i in chunk], out)
        responses += out
    changed = sum(
        r.state_changed
        for data in responses
        for r in executions_pb2.UpdateWorkUnitExecutionsResponse.FromString(data).results
    )
    assert changed == len(requests) * BATCH, "every observation must change the state"
    items = len(requests) * BATCH
    return items / clocks.ess, items / clocks.raw, items / floor


async def page_requests(
    channel: grpc.aio.Channel, xid: int, filter_text: str = "", order_by: str = ""
) -> list[bytes]:
    """Every page's request, tokens included, so the timed walk sends prepared bytes."""
    call = channel.unary_unary(LIST_METHOD)
    requests, token = [], ""
    while True:
        request = api_pb2.ListWorkUnitsRequest(
            parent=experiment_name(xid),
            page_size=PAGE,
            page_token=token,
            filter=filter_text,
            order_by=order_by,
        ).SerializeToString()
        requests.append(request)
        response = api_pb2.ListWorkUnitsResponse.FromString(await call(request, metadata=METADATA))
        token = response.next_page_token
        if not token:
            return requests


async def measure_pages(
    conn: Any,
    channel: grpc.aio.Channel,
    bare: grpc.aio.Channel,
    recorded: list[list[Any]],
    columns: list[list[Any]],
    requests: list[bytes],
) -> tuple[float, float, float, float]:
    """(ESS rows/s, raw rows/s, raw all-columns rows/s, gRPC floor rows/s) walking every
    page: the RPC vs the page's SELECT, vs the SELECT of every column the page's
    WorkUnits hold, and the bare server carrying the same bytes."""
    call = channel.unary_unary(LIST_METHOD)
    clocks, ess_rows, raw_rows, column_seconds, floor = Clocks(), 0, 0, 0.0, 0.0
    for start in range(0, len(requests), SLICE):
        chunk = range(start, min(start + SLICE, len(requests)))
        for source in (recorded, columns):
            selects = [source[i][0] for i in chunk]  # (method, query, args, kwargs)
            seconds, rows = await timed(
                [partial(conn.fetch, q, *args) for _m, q, args, _k in selects]
            )
            if source is recorded:
                clocks.raw += seconds
                raw_rows += sum(min(len(r), PAGE) for r in rows)  # the SELECT reads one more
            else:
                column_seconds += seconds
        seconds, out = await timed([partial(call, requests[i], metadata=METADATA) for i in chunk])
        clocks.ess += seconds
        floor += await floor_slice(bare, [requests[i] for i in chunk], out)
        ess_rows += sum(len(api_pb2.ListWorkUnitsResponse.FromString(d).work_units) for d in out)
    assert ess_rows == raw_rows, "the ESS and the raw SELECT must read the same rows"
    return ess_rows / clocks.ess, raw_rows / clocks.raw, raw_rows / column_seconds, ess_rows / floor


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_ess(
    dsn: str,
    port: int,
    profile: str = "",
    *,
    prefix: str = "",
    service: bool = True,
    extra_env: dict[str, str] | None = None,
) -> asyncio.subprocess.Process:
    """``xmc-ess serve`` on ``port`` (under cProfile into ``profile`` when given), its Redis
    keys under ``prefix`` (a fresh one by default); returns once it answers. The bench
    token's caller is a service account (UpdateWorkUnitExecutions needs one) unless
    ``service`` is False: a researcher, as CreateWorkUnit's callers are. ``extra_env``
    is set last (other tokens, admins)."""
    env = {
        **os.environ,
        "XMC_DATABASE_URL": dsn,
        "XMC_REDIS_URL": REDIS_URL,
        "XMC_ESS_LISTEN": f"127.0.0.1:{port}",
        "XMC_TASK_SIGNING_KEY": "bench-signing-key-of-at-least-32-bytes",
        "XMC_AUTH_STATIC_TOKENS": f"{TOKEN}={SERVICE}",
        "XMC_STREAM_PREFIX": prefix or f"bench-{uuid.uuid4().hex[:8]}:",
    }
    if service:
        env["XMC_AUTH_SERVICE_ACCOUNTS"] = SERVICE
    env.update(extra_env or {})
    exe = str(Path(sys.executable).with_name("xmc-ess"))
    command = [exe, "serve"]
    if profile:
        command = [sys.executable, "-m", "cProfile", "-o", profile, exe, "serve"]
    proc = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    await asyncio.wait_for(channel.channel_ready(), timeout=30)
    await channel.close()
    return proc


async def start_bare(port: int) -> asyncio.subprocess.Process:
    """``bench/bare_grpc.py`` on ``port``, its own process like the ESS; returns once it
    answers."""
    script = str(Path(__file__).with_name("bare_grpc.py"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, script, str(port),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    await asyncio.wait_for(channel.channel_ready(), timeout=30)
    await channel.close()
    return proc


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work-units", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2, help="update rounds per run")
    parser.add_argument("--walks", type=int, default=2, help="list walks per run")
    parser.add_argument("--profile", default="", help="run the ESS under cProfile into FILE")
    parser.add_argument("--only", choices=("update", "list"), default="", help="one figure")
    parser.add_argument(
        "--fence", action="store_true", help="updates carry a leader generation (decision 54)"
    )
    args = parser.parse_args()

    dsn = await create_database(ADMIN_DSN)
    proc = bare_proc = None
    try:
        await migrate(dsn)
        conn = await asyncpg.connect(dsn)
        xid = await seed(conn, args.work_units)
        raw_xid = await seed(conn, args.work_units)  # the raw loop's own rows and rollups
        await conn.execute("VACUUM ANALYZE")
        cycle = await record_updates(conn, raw_xid, args.work_units)
        pages = await record_pages(conn, raw_xid)
        column_pages = await record_pages(conn, raw_xid, column_page)
        port = free_port()
        proc = await start_ess(dsn, port, args.profile)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        bare_port = free_port()
        bare_proc = await start_bare(bare_port)
        bare = grpc.aio.insecure_channel(f"127.0.0.1:{bare_port}")
        figures: dict[str, list[float]] = {
            k: [] for k in ("ess_u", "raw_u", "cpu_u", "bare_u", "ess_l", "raw_l", "cpu_l")
        }
        figures["raw_c"], figures["bare_l"] = [], []
        pages_out = await page_requests(channel, xid)
        next_round = 1
        for _run in range(args.runs):
            if args.only != "list":
                rounds = range(next_round, next_round + args.rounds)
                requests = [
                    update_request(xid, range(start, min(start + BATCH, args.work_units + 1)), r)
                    for r in rounds
                    for start in range(1, args.work_units + 1, BATCH)
                ]
                # The raw replay of the same rounds' statements, request for request.
                batches = [batch for r in rounds for batch in cycle[(r - 1) % len(cycle)]]
                next_round += args.rounds
                cpu = cpu_seconds(proc.pid)
                fence = Fence("default/xmc-reconciler", 1).metadata() if args.fence else ()
                ess, raw, floor = await measure_updates(
                    conn, channel, bare, batches, requests, (*METADATA, *fence)
                )
                figures["cpu_u"].append((cpu_seconds(proc.pid) - cpu) / (len(requests) * BATCH))
                figures["ess_u"].append(ess)
                figures["raw_u"].append(raw)
                figures["bare_u"].append(floor)
            if args.only != "update":
                cpu = cpu_seconds(proc.pid)
                ess, raw, raw_columns, floor = await measure_pages(
                    conn,
                    channel,
                    bare,
                    pages * args.walks,
                    column_pages * args.walks,
                    pages_out * args.walks,
                )
                figures["raw_c"].append(raw_columns)
                figures["bare_l"].append(floor)
                walked = len(pages_out) * args.walks * PAGE
                figures["cpu_l"].append((cpu_seconds(proc.pid) - cpu) / walked)
                figures["ess_l"].append(ess)
                figures["raw_l"].append(raw)
        await channel.close()
        await bare.close()
        await conn.close()
        median = {k: statistics.median(v) for k, v in figures.items() if v}
        print(
            f"work units: {args.work_units} in one experiment; one call in flight;"
            f" median of {args.runs} runs (each: ESS and raw back to back)"
        )
        # Targets (decisions 25 and 26): Update >= 0.45x its raw replay, a floor that must not
        # regress; List >= 0.4x read against the SELECT of every column (the line below it).
        for label, key, unit, target in (
            ("UpdateWorkUnitExecutions batch 100", "u", "items/s", "floor >= 0.45x"),
            ("ListWorkUnits page 100", "l", "rows/s", "none against this baseline"),
        ):
            ess_key, raw_key = f"ess_{key}", f"raw_{key}"
            if not figures[ess_key]:
                continue
            ratios = [e / r for e, r in zip(figures[ess_key], figures[raw_key], strict=True)]
            print(
                f"{label:36} ESS {median[ess_key]:9,.0f} {unit}"
                f" | raw {median[raw_key]:9,.0f} {unit}"
                f" | {statistics.median(ratios):.2f}x raw (target: {target};"
                f" runs: {', '.join(f'{x:.2f}' for x in ratios)});"
                f" ESS CPU {median[f'cpu_{key}'] * 1e6:.0f} µs per {unit.split('/')[0][:-1]}"
            )
            # A call with no work but the gRPC floor and then the raw SQL, one after the other
            # as an RPC must: the most any grpc.aio server reaches against this baseline.
            bounds = [
                b / (b + r) for b, r in zip(figures[f"bare_{key}"], figures[raw_key], strict=True)
            ]
            bound = statistics.median(bounds)
            print(
                f"{'  gRPC floor (bare server, same bytes)':36}"
                f" {median[f'bare_{key}']:13,.0f} {unit}"
                f" | floor then raw SQL, nothing else: {bound:.2f}x raw, the most a grpc.aio"
                f" server reaches (runs: {', '.join(f'{x:.2f}' for x in bounds)})"
            )
        if figures["raw_c"]:
            ratios = [e / r for e, r in zip(figures["ess_l"], figures["raw_c"], strict=True)]
            print(
                f"{'  vs SELECT of every column':36} raw {median['raw_c']:9,.0f} rows/s"
                f" | {statistics.median(ratios):.2f}x (target >= 0.4x, decision 25: the"
                f" statement pages sent before issue 14)"
            )
    finally:
        for process in (proc, bare_proc):
            if process is not None:
                process.terminate()
                await process.wait()
        await drop_database(ADMIN_DSN, dsn)


if __name__ == "__main__":
    asyncio.run(main())
