"""Benchmark: ``CreateWorkUnit`` into one experiment through a real ESS (issue 3).

The ESS runs as its own process (``xmc-ess serve``; one per port: it refuses to share
one), against a fresh database and a private Redis prefix; a gRPC client drives it with 1,
16 and 64 concurrent callers.
Printed beside the raw baseline measured in the same run at the same concurrency: one
asyncpg transaction that inserts a row and updates one hot counter row, plus one XADD.
The ESS commits each task to the outbox and its relay publishes it; "publish lag" is the
time from a task's commit to its XADD (p50 / p99 over the point's tasks, both stamped by
the ESS), measured once the relay has drained. Last, the gRPC floor at each concurrency:
``bench/bare_grpc.py`` (its own process, no work) carrying requests and answers of the
create's sizes, so a p99 can be read against what gRPC alone costs on the machine that
day. Figures only: this is not a test and asserts nothing.

    .venv/bin/python bench/ess_create.py [--seconds 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg
import grpc
import redis.asyncio as aioredis
from bench.bare_grpc import METHOD as BARE_METHOD
from bench.bare_grpc import sized_request
from bench.ess_rpc import free_port, start_bare, start_ess
from bench.workloads import work_unit

from tests.stack import create_database, delete_prefixed_keys, drop_database
from xmc.store.migrate import migrate
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

ADMIN_DSN = os.environ.get("XMC_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("XMC_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TOKEN = "bench-token"
METADATA = (("authorization", f"Bearer {TOKEN}"),)
CONCURRENCY = (1, 16, 64)


async def measure(
    call: Callable[[], Awaitable[object]], *, clients: int, seconds: float
) -> tuple[float, float, float]:
    """Throughput (calls/s), p50 and p99 latency (ms) of ``clients`` concurrent loops."""
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds

    async def client() -> None:
        while loop.time() < end:
            began = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - began
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    return len(latencies) / elapsed, cuts[49] * 1000, cuts[98] * 1000


async def raw_baseline(
    dsn: str, clients: int, seconds: float, stream: str
) -> tuple[float, float, float]:
    pool = await asyncpg.create_pool(dsn, min_size=clients, max_size=clients)
    redis = aioredis.Redis.from_url(REDIS_URL)
    async with pool.acquire() as conn:
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS bench_rows (id bigserial PRIMARY KEY, payload bytea);
               CREATE TABLE IF NOT EXISTS bench_counter (id int PRIMARY KEY, n bigint);
               INSERT INTO bench_counter VALUES (1, 0) ON CONFLICT DO NOTHING"""
        )
    payload = work_unit().SerializeToString()

    async def call() -> None:
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("INSERT INTO bench_rows (payload) VALUES ($1)", payload)
            await conn.execute("UPDATE bench_counter SET n = n + 1 WHERE id = 1")
        await redis.xadd(stream, {"task": payload})

    try:
        return await measure(call, clients=clients, seconds=seconds)
    finally:
        await pool.close()
        await redis.aclose()


async def admin_seq(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT coalesce(max(seq), 0) FROM task_outbox"))
    finally:
        await conn.close()


async def publish_lag(dsn: str, *, after_seq: int) -> tuple[float, float]:
    """p50 and p99 (ms) of commit → XADD of the tasks after ``after_seq``, once the relay
    has published them all."""
    conn = await asyncpg.connect(dsn)
    try:
        pending = "SELECT count(*) FROM task_outbox WHERE status = 'pending'"
        while True:  # the relay is draining: poll until it is done
            if not await conn.fetchval(pending):
                break
            await asyncio.sleep(0.05)
        rows = await conn.fetch(
            """SELECT extract(epoch FROM published_time - create_time) * 1000 AS ms
               FROM task_outbox WHERE seq > $1""",
            after_seq,
        )
    finally:
        await conn.close()
    lags = [float(r["ms"]) for r in rows]
    if len(lags) < 2:
        return (lags or [0.0])[0], (lags or [0.0])[0]
    cuts = statistics.quantiles(lags, n=100)
    return cuts[49], cuts[98]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3, help="runs per point (median printed)")
    args = parser.parse_args()

    dsn = await create_database(ADMIN_DSN)
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    redis = aioredis.Redis.from_url(REDIS_URL)
    proc: asyncio.subprocess.Process | None = None
    bare_proc: asyncio.subprocess.Process | None = None
    try:
        await migrate(dsn)
        port = free_port()
        proc = await start_ess(dsn, port, prefix=prefix, service=False)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        api = api_pb2_grpc.ExperimentStateServiceStub(channel)
        experiment = await api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment(title="bench")), metadata=METADATA
        )
        request = api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=work_unit())

        async def create() -> None:
            await api.CreateWorkUnit(request, metadata=METADATA)

        # The gRPC floor: a bare server (its own process) carrying the same bytes.
        answer = await api.CreateWorkUnit(request, metadata=METADATA)
        bare_port = free_port()
        bare_proc = await start_bare(bare_port)
        bare_channel = grpc.aio.insecure_channel(f"127.0.0.1:{bare_port}")
        bare_call = bare_channel.unary_unary(BARE_METHOD)
        sized = sized_request(answer.ByteSize(), request.ByteSize())

        async def bare() -> None:
            await bare_call(sized, metadata=METADATA)

        print(
            f"one ESS process; {args.seconds:.0f} s per point; one experiment;"
            f" median of {args.runs} runs (each: ESS and raw back to back)"
        )
        header = ("clients", "ESS/s", "p50 ms", "p99 ms", "raw/s", "p50 ms", "p99 ms")
        print(
            "{:>8} {:>9} {:>8} {:>8} | {:>9} {:>8} {:>8} | ratio | publish lag p50/p99 ms".format(
                *header
            )
        )
        p99s: dict[int, float] = {}
        floors: dict[int, list[float]] = {}
        for clients in CONCURRENCY:
            runs: list[tuple[float, ...]] = []
            for _run in range(args.runs):
                first_seq = await admin_seq(dsn)
                rate, p50, p99 = await measure(create, clients=clients, seconds=args.seconds)
                lag50, lag99 = await publish_lag(dsn, after_seq=first_seq)
                raw, raw50, raw99 = await raw_baseline(dsn, clients, args.seconds, f"{prefix}raw")
                floors.setdefault(clients, []).append(
                    (await measure(bare, clients=clients, seconds=args.seconds))[2]
                )
                runs.append((rate, p50, p99, raw, raw50, raw99, rate / raw, lag50, lag99))
            rate, p50, p99, raw, raw50, raw99, ratio, lag50, lag99 = (
                statistics.median(column) for column in zip(*runs, strict=True)
            )
            print(
                f"{clients:>8} {rate:>9,.0f} {p50:>8.1f} {p99:>8.1f} | {raw:>9,.0f} {raw50:>8.1f}"
                f" {raw99:>8.1f} | {ratio:5.2f}x | {lag50:8.1f} / {lag99:.1f}"
                f"   (p99 per run: {', '.join(f'{r[2]:.0f}' for r in runs)} ms)"
            )
            p99s[clients] = p99
        print(f"CreateWorkUnit at 64 clients: p99 {p99s[64]:.1f} ms (target < 100 ms)")
        print(
            "gRPC floor, p99 of a bare grpc.aio server carrying the same bytes (no work):"
            + "".join(f" {c} clients {statistics.median(f):.1f} ms;" for c, f in floors.items())
        )
        await channel.close()
        await bare_channel.close()
    finally:
        for process in (proc, bare_proc):
            if process is not None:
                process.terminate()
                await process.wait()
        await delete_prefixed_keys(redis, prefix)
        await redis.delete(f"{prefix}raw")  # the raw baseline's stream
        await redis.aclose()
        await drop_database(ADMIN_DSN, dsn)


if __name__ == "__main__":
    asyncio.run(main())
