"""Benchmark: the push API (``xmc.v1.WatchService``, docs/watch.md) under a sweep.

One ESS process (``xmc-ess serve``) on a fresh database; two experiments of 2,000 work
units each (bulk SQL, INITIALIZING). The same workload runs twice, once per experiment:
the Reconciler's shape, ``UpdateWorkUnitExecutions`` batches of 100, every unit moving
state each round (STARTING, RUNNING, SCHEDULING: 3 rounds, 6,000 state changes), one call
in flight and ``--gap`` seconds between calls.

1. **Without watchers**: the ESS's CPU for the workload.
2. **With 200 watchers** of the experiment (``--watchers``; spread over 8 channels, as
   many browsers and CLIs would be): the ESS's CPU for the workload and for delivering
   every event to every watcher, and each event's **delay** — from the moment the
   ``UpdateWorkUnitExecutions`` that wrote it returned (its transaction had committed) to
   the moment a watcher received it. The watchers run in this process, so their own
   parsing on this 2-core machine is in the delay too.

Figures only: this asserts nothing beyond every event reaching every watcher.

    .venv/bin/python bench/watch_bench.py [--watchers 200] [--work-units 2000] [--gap 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg
import grpc
from bench.ess_rpc import (
    ADMIN_DSN,
    BATCH,
    METADATA,
    UPDATE_METHOD,
    cpu_seconds,
    free_port,
    seed,
    start_ess,
    update_request,
)
from bench.workloads import CYCLE

from tests.stack import create_database, drop_database
from xmc.names import experiment_name
from xmc.store.migrate import migrate
from xmc_api.xmc.v1 import watch_pb2

WATCH_METHOD = "/xmc.v1.WatchService/WatchExperiments"
ROUNDS = (1, 2, 3)
CHANNELS = 8

#: (wid, state the round moved it to) -> perf_counter() when its Update call returned.
Commits = dict[tuple[int, int], float]


async def drive(channel: grpc.aio.Channel, xid: int, work_units: int, gap: float) -> Commits:
    """The sweep's rounds, one batch in flight; when each unit's change was committed."""
    update = channel.unary_unary(UPDATE_METHOD)
    committed: Commits = {}
    for round_ in ROUNDS:
        state = int(CYCLE[round_ % len(CYCLE)])
        for start in range(1, work_units + 1, BATCH):
            wids = range(start, min(start + BATCH, work_units + 1))
            await update(update_request(xid, wids, round_), metadata=METADATA)
            now = time.perf_counter()
            committed.update(((wid, state), now) for wid in wids)
            await asyncio.sleep(gap)
    return committed


class Watcher:
    """One stream; the receive time of each state change, by (wid, state)."""

    def __init__(self, channel: grpc.aio.Channel, xid: int) -> None:
        request = watch_pb2.WatchRequest(experiment=experiment_name(xid)).SerializeToString()
        self.call = channel.unary_stream(WATCH_METHOD)(request, metadata=METADATA)
        self.received: list[tuple[float, int, int]] = []
        self.synced = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        parse = watch_pb2.WatchEvents.FromString
        async for raw in self.call:
            now = time.perf_counter()
            for event in parse(raw).events:
                if event.HasField("state_change"):
                    change = event.state_change
                    wid = int(change.work_unit.rsplit("/", 1)[1])
                    self.received.append((now, wid, int(change.to_state)))
                else:
                    self.synced.set()

    async def close(self) -> None:
        self.call.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await self.task


async def delivered(watchers: list[Watcher], expected: int, *, stall: float = 20.0) -> None:
    """Until every watcher has ``expected`` changes, or nothing arrived for ``stall`` s."""
    loop = asyncio.get_running_loop()
    last, since = -1, loop.time()
    while True:
        total = sum(len(w.received) for w in watchers)
        if total >= expected * len(watchers):
            return
        if total != last:
            last, since = total, loop.time()
        elif loop.time() - since > stall:
            return
        await asyncio.sleep(0.1)  # a bench waiting on another process, not a test


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--watchers", type=int, default=200)
    parser.add_argument("--work-units", type=int, default=2000)
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between Update calls")
    args = parser.parse_args()

    dsn = await create_database(ADMIN_DSN)
    proc = None
    try:
        await migrate(dsn)
        conn = await asyncpg.connect(dsn)
        quiet_xid = await seed(conn, args.work_units)
        watched_xid = await seed(conn, args.work_units)
        await conn.execute("VACUUM ANALYZE")
        await conn.close()
        port = free_port()
        proc = await start_ess(dsn, port)
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(CHANNELS)]
        writer = grpc.aio.insecure_channel(f"127.0.0.1:{port}")

        # 1. Without watchers.
        began, cpu = time.perf_counter(), cpu_seconds(proc.pid)
        await drive(writer, quiet_xid, args.work_units, args.gap)
        quiet_cpu, quiet_wall = cpu_seconds(proc.pid) - cpu, time.perf_counter() - began

        # 2. With watchers, every one of them open (its Sync received) before the first write.
        watchers = [Watcher(channels[i % CHANNELS], watched_xid) for i in range(args.watchers)]
        await asyncio.wait_for(asyncio.gather(*(w.synced.wait() for w in watchers)), 60)
        began, cpu = time.perf_counter(), cpu_seconds(proc.pid)
        committed = await drive(writer, watched_xid, args.work_units, args.gap)
        await delivered(watchers, len(committed))
        watched_cpu, watched_wall = cpu_seconds(proc.pid) - cpu, time.perf_counter() - began
        delays = [
            max(0.0, at - committed[(wid, state)])
            for w in watchers
            for at, wid, state in w.received
            if (wid, state) in committed
        ]
        got = sum(len(w.received) for w in watchers)
        await asyncio.gather(*(w.close() for w in watchers))
        for channel in (*channels, writer):
            await channel.close()

        changes = len(committed)
        print(
            f"sweep: {args.work_units} work units, {len(ROUNDS)} rounds of batches of {BATCH}"
            f" ({changes} state changes), {args.gap * 1000:.0f} ms between calls"
        )
        print(
            f"without watchers: ESS CPU {quiet_cpu:.2f} s over {quiet_wall:.1f} s"
            f" ({quiet_cpu / changes * 1e6:.0f} µs per change)"
        )
        print(
            f"with {args.watchers} watchers: ESS CPU {watched_cpu:.2f} s over {watched_wall:.1f} s"
            f" ({watched_cpu / changes * 1e6:.0f} µs per change);"
            f" extra {watched_cpu - quiet_cpu:+.2f} s"
            f" ({(watched_cpu - quiet_cpu) / max(1, got) * 1e6:.1f} µs per delivered event)"
        )
        print(
            f"delivered {got:,} of {changes * args.watchers:,} events"
            f" ({'all' if got == changes * args.watchers else 'MISSING SOME'})"
        )
        if delays:
            print(
                f"event delay (Update returned -> watcher received): p50"
                f" {statistics.median(delays) * 1000:.0f} ms, p99"
                f" {percentile(delays, 0.99) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms"
            )
    finally:
        if proc is not None:
            proc.terminate()
            await proc.wait()
        await drop_database(ADMIN_DSN, dsn)


if __name__ == "__main__":
    asyncio.run(main())
