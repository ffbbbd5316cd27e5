"""Benchmark: log follow latency (issue 27.5) — a line written by a container → shown by
``xmc logs -f``, beside the raw baseline of the same run: the same container's log
followed straight from the API server (``GET pods/{name}/log?follow=true``, what
``kubectl logs -f`` reads).

kubesim, ESS, Actuator and Reconciler as processes (``tests.stack``, kubesim at real
time); ``--units`` units each print ``--lines`` lines, one every ``--every`` seconds, and
one ``xmc logs -f`` process and one raw follow per unit read them at once. A line's
written time is when kubesim writes it: its pod's ``startedAt`` plus i × every (kubesim's
clock is the host's here). Printed: median, p95 and max over every line, the two paths
side by side.

    PYTHONPATH=. .venv/bin/python bench/log_follow.py [--units 4] [--lines 20] [--every 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import grpc

from tests.integration.support import minimal_work_unit
from tests.stack import Stack, create_database, drop_database
from xmc.labels import EXPERIMENT_ID, WORK_UNIT_ID
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

ADMIN_DSN = os.environ.get("XMC_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("XMC_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
XMC = str(Path(sys.executable).with_name("xmc"))


def unit(lines: int, every: float) -> WorkUnit:
    work_unit = minimal_work_unit()
    job = work_unit.executable.jobset.jobs[0]
    script = [f"line {i}" for i in range(lines)]
    behavior = {"logs": script, "log_every_seconds": every, "run_seconds": lines * every + 1}
    job.annotations["kubesim.xmc/behavior"] = json.dumps(behavior)
    return work_unit


async def running_pod(http: aiohttp.ClientSession, kube: str, name: str) -> tuple[str, float]:
    """The unit's pod once its container runs, and its start (epoch seconds)."""
    xid, wid = name.split("/")[1::2]
    selector = f"{EXPERIMENT_ID}={xid},{WORK_UNIT_ID}={wid}"
    url = f"{kube}/api/v1/namespaces/default/pods?labelSelector={selector}"
    for _ in range(600):
        async with http.get(url) as answer:
            for pod in (await answer.json())["items"]:
                for status in pod.get("status", {}).get("containerStatuses", []):
                    started = status.get("state", {}).get("running", {}).get("startedAt")
                    if started:
                        at = datetime.fromisoformat(started.replace("Z", "+00:00"))
                        return pod["metadata"]["name"], at.timestamp()
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{name}: no running pod")


def delays(arrivals: dict[int, float], start: float, every: float, after: float) -> list[float]:
    """Per line written after ``after`` (both readers connected: earlier lines were
    already there when a reader came), ms from its writing to its arrival."""
    written = {i: start + i * every for i in arrivals}
    return [(arrivals[i] - at) * 1000 for i, at in written.items() if at > after]


async def via_cli(endpoint: str, name: str) -> dict[int, float]:
    xid, wid = name.split("/")[1::2]
    process = await asyncio.create_subprocess_exec(
        XMC, "--endpoint", endpoint, "logs", xid, wid, "-f", "-q",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert process.stdout is not None
    arrivals: dict[int, float] = {}
    async for raw in process.stdout:
        text = raw.decode().strip()
        if text.startswith("line "):
            arrivals.setdefault(int(text.split()[1]), time.time())
    await process.wait()
    return arrivals


async def via_api(http: aiohttp.ClientSession, kube: str, pod: str) -> dict[int, float]:
    url = f"{kube}/api/v1/namespaces/default/pods/{pod}/log?follow=true"
    arrivals: dict[int, float] = {}
    async with http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as answer:
        async for raw in answer.content:
            text = raw.decode().strip()
            if text.startswith("line "):
                arrivals.setdefault(int(text.split()[1]), time.time())
    return arrivals


def summary(label: str, samples: list[float]) -> str:
    p95 = statistics.quantiles(samples, n=20)[-1] if len(samples) >= 2 else samples[0]
    return (f"{label:38} median {statistics.median(samples):7.1f} ms | p95 {p95:7.1f} ms"
            f" | max {max(samples):7.1f} ms | {len(samples)} lines")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--units", type=int, default=4)
    parser.add_argument("--lines", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.5)
    args = parser.parse_args()
    dsn = await create_database(ADMIN_DSN)
    stack = Stack(database_url=dsn, redis_url=REDIS_URL,
                  log_dir=Path(tempfile.mkdtemp(prefix="log-follow-")))  # fmt: skip
    try:
        await stack.start()
        channel = grpc.aio.insecure_channel(stack.endpoint)
        api = api_pb2_grpc.ExperimentStateServiceStub(channel)
        metadata = (("authorization", "Bearer token-alice"),)
        experiment = await api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=metadata,
            wait_for_ready=True,
        )  # fmt: skip
        names = []
        for _ in range(args.units):
            operation = await api.CreateWorkUnit(
                api_pb2.CreateWorkUnitRequest(parent=experiment.name,
                                              work_unit=unit(args.lines, args.every)),
                metadata=metadata,
            )  # fmt: skip
            names.append(str(operation.name).split("/operations/")[0])
        async with aiohttp.ClientSession() as http:
            pods = [await running_pod(http, stack.kube_url, name) for name in names]
            cli, raw = await asyncio.gather(
                asyncio.gather(*(via_cli(stack.endpoint, name) for name in names)),
                asyncio.gather(*(via_api(http, stack.kube_url, pod) for pod, _ in pods)),
            )
        connected = [max(min(c.values()), min(r.values())) for c, r in zip(cli, raw, strict=True)]
        cli_delays, raw_delays = [], []
        for (_, start), c, r, after in zip(pods, cli, raw, connected, strict=True):
            cli_delays += delays(c, start, args.every, after)
            raw_delays += delays(r, start, args.every, after)
        print(f"log follow: {args.units} units × {args.lines} lines, one every {args.every} s")
        print(summary("raw API server follow (baseline)", raw_delays))
        print(summary("xmc logs -f (ESS LogService)", cli_delays))
        print(
            f"{'xmc logs -f over the baseline':38} median "
            f"{statistics.median(cli_delays) - statistics.median(raw_delays):+7.1f} ms"
        )
        await channel.close()
    finally:
        await stack.stop()
        await drop_database(ADMIN_DSN, dsn)


if __name__ == "__main__":
    asyncio.run(main())
