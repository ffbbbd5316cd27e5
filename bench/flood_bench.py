"""Benchmark: a bystander's GetExperiment while another user floods creates, without and
with a quota (docs/quotas.md, decision 0049; issue 29: one client's 20,000 creates in
56 s took a bystander's GetExperiment p99 from 6.7 to 31.7 ms).

One ESS process (``xmc-ess serve``) on a fresh database. The bystander, in this process,
reads its own experiment with ``GetExperiment``, one call in flight and ``--gap`` seconds
between calls, for ``--seconds`` in each of three phases:

1. **baseline**: nobody else calls;
2. **throttled**: a flooder (a process of its own, so its CPU is not this one's) runs
   ``--callers`` concurrent loops of ``CreateWorkUnit`` into its experiment, as fast as
   answers come, after an admin set its quota to ``--rate`` creates per second (burst
   the same). A refused caller tries again at once (the worst client: it ignores
   retry-after), so this is the cost of refusing;
3. **flood**: the same flood with no quota (last: it leaves thousands of tasks for the
   relay to publish, which a phase after it would measure).

Printed: the bystander's p50/p99 in each phase beside the baseline, and the flooder's
creates and refusals per second. The target: the throttled p99 within 2x the baseline.

Phases 1 and 2 are two windows one after the other, so a shared machine's drift between
them counts as the flood's cost. A fourth line pairs them in time instead: the throttled
flooder is paused (SIGSTOP) and resumed every ``--window`` seconds for ``2 * --seconds``,
and the bystander's calls in paused windows are the baseline of those in running ones
(the first ``SETTLE`` seconds of each window are left out: calls the flooder had in
flight are still being answered). Figures only: this asserts nothing.

    .venv/bin/python bench/flood_bench.py [--seconds 8] [--callers 16] [--rate 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc
from bench.ess_rpc import ADMIN_DSN, free_port, start_ess
from bench.workloads import work_unit

from tests.stack import create_database, drop_database
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.xmc.v1 import quota_pb2, quota_pb2_grpc

TOKENS = {"flooder": "flooder@example.com", "bystander": "bob@example.com", "admin": "root@x.com"}


def who(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer token-{name}"),)


async def bystander(
    stub: api_pb2_grpc.ExperimentStateServiceStub, name: str, args: argparse.Namespace
) -> list[float]:
    """GetExperiment latencies (ms) for ``args.seconds``."""
    request = api_pb2.GetExperimentRequest(name=name)
    latencies: list[float] = []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        began = time.perf_counter()
        await stub.GetExperiment(request, metadata=who("bystander"))
        latencies.append((time.perf_counter() - began) * 1000)
        await asyncio.sleep(args.gap)
    return latencies


async def flood(port: int, parent: str, seconds: float, callers: int) -> None:
    """The flooder's process: ``callers`` loops of CreateWorkUnit; prints its counts."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = api_pb2_grpc.ExperimentStateServiceStub(channel)
    request = api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit())
    counts = {"created": 0, "refused": 0}
    end = time.perf_counter() + seconds

    async def caller() -> None:
        while time.perf_counter() < end:
            try:
                await stub.CreateWorkUnit(request, metadata=who("flooder"))
                counts["created"] += 1
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                counts["refused"] += 1

    await asyncio.gather(*(caller() for _ in range(callers)))
    await channel.close()
    print(json.dumps(counts))


async def start_flooder(
    args: argparse.Namespace, flood_parent: str, seconds: float
) -> asyncio.subprocess.Process:
    """The flooder's process, under way (a second in) when this returns."""
    flooder = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--flood", flood_parent, "--port", str(args.port),
        "--seconds", str(seconds), "--callers", str(args.callers),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await asyncio.sleep(1.0)  # the flood is under way before measuring
    return flooder


async def phase(
    stub: api_pb2_grpc.ExperimentStateServiceStub,
    name: str,
    args: argparse.Namespace,
    flood_parent: str | None,
) -> tuple[list[float], dict[str, int]]:
    flooder = None
    if flood_parent is not None:
        flooder = await start_flooder(args, flood_parent, args.seconds + 1)
    latencies = await bystander(stub, name, args)
    counts: dict[str, int] = {}
    if flooder is not None:
        out, _ = await flooder.communicate()
        counts = json.loads(out.decode().strip().splitlines()[-1])
    return latencies, counts


#: Seconds at the start of each paired window whose calls are not counted.
SETTLE = 1.5


async def paired(
    stub: api_pb2_grpc.ExperimentStateServiceStub,
    name: str,
    args: argparse.Namespace,
    flood_parent: str,
) -> tuple[list[float], list[float]]:
    """The bystander's latencies (paused, running) with the throttled flooder paused and
    resumed in alternating windows (see the module docstring)."""
    windows = max(2, round(2 * args.seconds / args.window))
    flooder = await start_flooder(args, flood_parent, windows * args.window + 2)
    request = api_pb2.GetExperimentRequest(name=name)
    paused: list[float] = []
    running: list[float] = []
    start = time.perf_counter()
    try:
        for window in range(windows):
            os.kill(flooder.pid, signal.SIGCONT if window % 2 == 0 else signal.SIGSTOP)
            counted = start + window * args.window + SETTLE
            end = start + (window + 1) * args.window
            while (began := time.perf_counter()) < end:
                await stub.GetExperiment(request, metadata=who("bystander"))
                if began >= counted:
                    taken = (time.perf_counter() - began) * 1000
                    (running if window % 2 == 0 else paused).append(taken)
                await asyncio.sleep(args.gap)
    finally:
        os.kill(flooder.pid, signal.SIGCONT)
        await flooder.communicate()
    return paused, running


def quantiles(latencies: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(latencies, n=100)
    return statistics.median(latencies), cuts[98]


async def main(args: argparse.Namespace) -> None:
    if args.flood:
        await flood(args.port, args.flood, args.seconds, args.callers)
        return
    dsn = await create_database(ADMIN_DSN)
    args.port = free_port()
    tokens = ",".join(f"token-{k}={v}" for k, v in TOKENS.items())
    proc = await start_ess(
        dsn,
        args.port,
        service=False,
        extra_env={"XMC_AUTH_STATIC_TOKENS": tokens, "XMC_AUTH_ADMINS": TOKENS["admin"]},
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{args.port}")
    try:
        stub = api_pb2_grpc.ExperimentStateServiceStub(channel)
        create = api_pb2.CreateExperimentRequest(experiment=Experiment(title="mine"))
        mine = (await stub.CreateExperiment(create, metadata=who("bystander"))).name
        theirs = (await stub.CreateExperiment(create, metadata=who("flooder"))).name
        for _ in range(50):  # warm the channel and the server's caches
            await stub.GetExperiment(
                api_pb2.GetExperimentRequest(name=mine), metadata=who("bystander")
            )
        # Throttled before the unthrottled flood: each phase then starts from an ESS with
        # nothing left over (an unthrottled flood leaves thousands of tasks for the relay to
        # publish, which the phase after it would measure).
        results = {"baseline": await phase(stub, mine, args, None)}
        quotas = quota_pb2_grpc.QuotaServiceStub(channel)
        limits = quota_pb2.Quota(
            name="quotas/users/flooder@example.com",
            creates_per_second=args.rate,
            creates_burst=int(args.rate),
        )
        await quotas.SetQuota(quota_pb2.SetQuotaRequest(quota=limits), metadata=who("admin"))
        results["throttled"] = await phase(stub, mine, args, theirs)
        paused, running = await paired(stub, mine, args, theirs)
        await quotas.DeleteQuota(
            quota_pb2.DeleteQuotaRequest(name=limits.name), metadata=who("admin")
        )
        results["flood"] = await phase(stub, mine, args, theirs)
    finally:
        await channel.close()
        proc.terminate()
        await proc.wait()
        await drop_database(ADMIN_DSN, dsn)
    base99 = quantiles(results["baseline"][0])[1]
    print(f"bystander GetExperiment, {args.seconds:g} s per phase, flooder {args.callers} callers")
    print(f"{'phase':<11} {'calls':>6} {'p50 ms':>7} {'p99 ms':>7} {'p99/base':>8} "
          f"{'created/s':>9} {'refused/s':>9}")  # fmt: skip
    for label, (latencies, counts) in results.items():
        p50, p99 = quantiles(latencies)
        created = counts.get("created", 0) / (args.seconds + 1)
        refused = counts.get("refused", 0) / (args.seconds + 1)
        print(
            f"{label:<11} {len(latencies):>6} {p50:>7.2f} {p99:>7.2f} {p99 / base99:>7.2f}x "
            f"{created:>9.0f} {refused:>9.0f}"
        )
    print(f"target: throttled p99 <= 2x baseline ({2 * base99:.2f} ms); quota {args.rate:g}/s")
    (paused50, paused99), (running50, running99) = quantiles(paused), quantiles(running)
    print(
        f"paired in {args.window:g} s windows: flooder paused p50/p99 {paused50:.2f}/"
        f"{paused99:.2f} ms ({len(paused)} calls), throttled flood running "
        f"{running50:.2f}/{running99:.2f} ms ({len(running)} calls): "
        f"{running99 / paused99:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--gap", type=float, default=0.002)
    parser.add_argument("--window", type=float, default=4.0)
    parser.add_argument("--flood", default="", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    asyncio.run(main(parser.parse_args()))
