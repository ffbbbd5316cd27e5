"""Benchmark: Actuator create tasks end to end (issue 5).

N signed CREATE tasks are XADDed at once; the clock runs until every JobSet exists in
kubesim and every Operation is done. Measured with 1 and 4 ``xmc-actuator`` processes
(one consumer group), beside kubesim's raw create rate measured in the same run with the
same client stack the Actuator uses (kubernetes-asyncio, 16 creates in flight).
kubesim runs as its own process, controllers off. Figures only: not a test.

    .venv/bin/python bench/actuator_bench.py [--tasks 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import redis.asyncio as aioredis
from kubernetes_asyncio.client import Configuration

from actuator.kube import JobSetClient
from actuator.manifest import build_base_jobset
from tests.stack import delete_prefixed_keys
from xmc.model.audit import Actor
from xmc.model.resume import TaskKind
from xmc.store import outbox
from xmc.store.creation import Created, NewWorkUnit
from xmc.store.migrate import migrate
from xmc.store.repository import Store
from xmc.streams import StreamNames, TaskPublisher
from xmc.timestamps import utc_now
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1.tasks_pb2 import Task, TaskPayload

ADMIN_DSN = os.environ.get("XMC_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("XMC_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
KEY = "bench-signing-key-of-at-least-32-bytes"
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def work_unit() -> WorkUnit:
    unit = WorkUnit()
    unit.executable.scheduling_constraints.queue_name = "cpu-queue"
    job = unit.executable.jobset.jobs.add(name="main", replicas=1)
    job.spec.docker_image = "python:3.11"
    return unit


async def start_kubesim() -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        str(BIN / "xmc-kubesim"),
        "--no-controllers",
        "--port",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            try:
                async with session.get(f"{url}/healthz") as response:
                    if response.status == 200:
                        return process, url
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise RuntimeError("kubesim did not start")


async def raw_creates(url: str, n: int, in_flight: int = 16) -> float:
    client = await JobSetClient.for_configuration(Configuration(host=url))
    tasks = [
        Task(task_id=uuid.uuid4().hex, kind=1, xid=999_999, wid=i + 1, target_eid=1)  # type: ignore[arg-type]
        for i in range(n)
    ]
    for task in tasks:
        task.payload.CopyFrom(TaskPayload(work_unit=work_unit(), eid=1))
        task.operation_time.FromDatetime(datetime.now(UTC))
    manifests = [build_base_jobset(task, namespace="default") for task in tasks]
    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    for manifest in manifests:
        queue.put_nowait(manifest)

    async def worker() -> None:
        while not queue.empty():
            await client.create_jobset("default", queue.get_nowait())

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    elapsed = time.perf_counter() - began
    await client.close()
    return n / elapsed


async def prepare(dsn: str, n: int) -> list[Task]:
    """One experiment, ``n`` work units (rows + CREATE Operations), and their tasks."""
    store = await Store.connect(dsn, max_size=2)
    experiment = await store.create_experiment(Experiment(), creator="bench")
    xid = int(experiment.name.rsplit("/", 1)[1])
    created: list[Created] = []
    for start in range(0, n, 500):
        outcomes = await store.create_work_units(
            [
                NewWorkUnit(xid, None, work_unit(), Actor("bench"))
                for _ in range(min(500, n - start))
            ],
            writer="bench",
        )
        created += [o for o in outcomes if isinstance(o, Created)]
    tasks = []
    for outcome in created:
        assert outcome.work_unit is not None
        wid = int(outcome.work_unit.name.rsplit("/", 1)[1])
        task = Task(
            task_id=uuid.uuid4().hex,
            kind=int(TaskKind.CREATE),  # type: ignore[arg-type]
            xid=xid,
            wid=wid,
            target_eid=1,
            operation=outcome.operation.name,
            payload=TaskPayload(work_unit=outcome.work_unit, eid=1),
        )
        task.operation_time.FromDatetime(datetime.now(UTC))
        tasks.append(task)
    # As the ESS would: every task is in the outbox (the Actuator's admission reads it
    # and its settle finishes it); no relay runs here, the bench publishes them itself.
    async with store.transaction() as conn:
        await outbox.enqueue(conn, tasks, now=datetime.now(UTC))
    await store.close()
    return tasks


async def run_actuators(dsn: str, kube_url: str, processes: int, n: int) -> tuple[float, float]:
    """(tasks/s, seconds) for ``n`` create tasks through ``processes`` Actuators."""
    tasks = await prepare(dsn, n)
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    names = StreamNames.with_prefix(prefix)
    redis = aioredis.Redis.from_url(REDIS_URL)
    env = {
        **os.environ,
        "XMC_DATABASE_URL": dsn,
        "XMC_REDIS_URL": REDIS_URL,
        "XMC_KUBE_URL": kube_url,
        "XMC_TASK_SIGNING_KEY": KEY,
        "XMC_STREAM_PREFIX": prefix,
    }
    actuators = [
        await asyncio.create_subprocess_exec(
            str(BIN / "xmc-actuator"),
            "--concurrency",
            "64",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        for _ in range(processes)
    ]
    conn = await asyncpg.connect(dsn)
    try:
        await asyncio.sleep(1.5)  # let the processes connect and join the group
        publisher = TaskPublisher(redis, names, signing_key=KEY, clock=utc_now)
        began = time.perf_counter()
        for start in range(0, len(tasks), 500):
            await publisher.publish_many(tasks[start : start + 500])
        while True:
            done = await conn.fetchval("SELECT count(*) FROM operations WHERE done")
            if done >= len(tasks):
                break
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - began
    finally:
        await conn.close()
        for process in actuators:
            process.terminate()
        for process in actuators:
            await process.wait()
        await delete_prefixed_keys(redis, prefix)
        await redis.aclose()
    return len(tasks) / elapsed, elapsed


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2000)
    args = parser.parse_args()
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        kubesim, url = await start_kubesim()
        raw = await raw_creates(url, args.tasks)
        kubesim.terminate()
        await kubesim.wait()
        print(f"kubesim raw creates (JobSetClient, 16 in flight): {raw:8,.0f} /s")
        for processes in (1, 4):
            # A fresh kubesim and database per run: JobSet names repeat across runs.
            name = f"xmc_bench_{uuid.uuid4().hex[:8]}"
            await admin.execute(f'CREATE DATABASE "{name}"')
            dsn = urlunsplit(urlsplit(ADMIN_DSN)._replace(path=f"/{name}"))
            kubesim, url = await start_kubesim()
            try:
                await migrate(dsn)
                rate, elapsed = await run_actuators(dsn, url, processes, args.tasks)
                print(
                    f"actuators={processes}: {rate:8,.0f} tasks/s end to end "
                    f"({args.tasks} tasks in {elapsed:.1f} s) = {rate / raw:4.2f}x raw"
                )
            finally:
                kubesim.terminate()
                await kubesim.wait()
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
