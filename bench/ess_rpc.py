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
  vs the raw SELECT of each page (the statement the store sends) through asyncpg.

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
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import grpc

from xmc.model.merge import ExecutionUpdate
from xmc.model.states import WorkUnitState
from xmc.names import experiment_name, work_unit_name
from xmc.store.executions import update_work_unit_executions
from xmc.store.experiments import insert_experiment
from xmc.store.listing import ListRequest
from xmc.store.migrate import migrate
from xmc.store.work_units import list_work_units, work_unit_doc
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_pb2 import Condition, ReplicatedJobStatus
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import (
    WorkUnitExecution,
    WorkUnitExecutionMetadata,
)
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1 import executions_pb2

ADMIN_DSN = os.environ.get("XMC_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("XMC_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TOKEN = "bench-token"
SERVICE = "bench@example.com"
METADATA = (("authorization", f"Bearer {TOKEN}"),)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
CYCLE = (WorkUnitState.SCHEDULING, WorkUnitState.STARTING, WorkUnitState.RUNNING)
BATCH = 100
PAGE = 100
UPDATE_METHOD = "/xmc.internal.v1.WorkUnitExecutionService/UpdateWorkUnitExecutions"
LIST_METHOD = "/cloud.xmanager.v1.ExperimentStateService/ListWorkUnits"


def work_unit() -> WorkUnit:
    unit = WorkUnit()
    unit.executable.scheduling_constraints.queue_name = "cpu-queue"
    job = unit.executable.jobset.jobs.add(name="main", replicas=1)
    job.spec.docker_image = "python:3.11"
    job.spec.command.extend(["python", "train.py"])
    job.spec.args["learning_rate"] = "0.01"
    return unit


def observation(round_: int, xid: int, wid: int) -> WorkUnitExecution:
    """What the Reconciler sends for one JobSet event (times move forward each round)."""
    execution = WorkUnitExecution()
    status = execution.status
    status.state = int(CYCLE[round_ % len(CYCLE)])  # type: ignore[assignment]
    status.state_update_time.FromDatetime(T0 + timedelta(seconds=round_ + 1))
    jobset = status.detailed_status.jobset_status
    jobset.conditions.append(Condition(type="Suspended", status="False", reason="Resumed"))
    jobset.replicated_jobs_status.append(
        ReplicatedJobStatus(name="workers", ready=round_ % 3, active=2, succeeded=0, failed=0)
    )
    execution.metadata.type = WorkUnitExecutionMetadata.JOB_SET
    execution.metadata.resource_name = f"xmc-{xid}-{wid}"
    execution.metadata.namespace = "default"
    return execution


MASK = ("status.state", "status.detailed_status", "metadata")


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


async def record_updates(conn: Any, xid: int, work_units: int) -> list[list[Any]]:
    """The store's statements for one round of batches over ``xid`` (its own experiment)."""
    batches = []
    for start in range(1, work_units + 1, BATCH):
        wids = range(start, min(start + BATCH, work_units + 1))
        items = [ExecutionUpdate(xid, w, 1, observation(0, xid, w), MASK) for w in wids]
        recorder = Recorder(conn)
        async with conn.transaction():
            await update_work_unit_executions(recorder, items, writer=SERVICE, now=T0)
        batches.append(recorder.calls)
    return batches


async def record_pages(conn: Any, xid: int) -> list[list[Any]]:
    pages, token = [], ""
    while True:
        recorder = Recorder(conn)
        response = api_pb2.ListWorkUnitsResponse()
        request = ListRequest(page_size=PAGE, page_token=token)
        token = await list_work_units(recorder, xid, request, response.work_units)
        pages.append(recorder.calls)
        if not token:
            return pages


async def raw_updates(conn: Any, batches: list[list[Any]], rounds: int) -> float:
    """Items/s of the recorded statements, one transaction per batch."""
    began = time.perf_counter()
    for _ in range(rounds):
        for calls in batches:
            async with conn.transaction():
                await replay(conn, calls)
    return rounds * len(batches) * BATCH / (time.perf_counter() - began)


async def raw_pages(conn: Any, pages: list[list[Any]], walks: int) -> float:
    began = time.perf_counter()
    rows = 0
    for _ in range(walks):
        for calls in pages:
            for _method, query, args, _kw in calls:
                rows += len(await conn.fetch(query, *args))
    return rows / (time.perf_counter() - began)


async def ess_updates(channel: grpc.aio.Channel, xid: int, work_units: int, rounds: range) -> float:
    call = channel.unary_unary(UPDATE_METHOD)
    requests = [
        update_request(xid, range(start, min(start + BATCH, work_units + 1)), round_)
        for round_ in rounds
        for start in range(1, work_units + 1, BATCH)
    ]
    began = time.perf_counter()
    responses = [await call(request, metadata=METADATA) for request in requests]
    elapsed = time.perf_counter() - began
    changed = sum(
        r.state_changed
        for data in responses
        for r in executions_pb2.UpdateWorkUnitExecutionsResponse.FromString(data).results
    )
    assert changed == len(rounds) * work_units, "every observation must change the state"
    return changed / elapsed


async def ess_pages(channel: grpc.aio.Channel, xid: int, walks: int) -> float:
    call = channel.unary_unary(LIST_METHOD)
    requests, token = [], ""
    while True:  # the tokens of every page, so the timed walk sends prepared bytes
        request = api_pb2.ListWorkUnitsRequest(
            parent=experiment_name(xid), page_size=PAGE, page_token=token
        ).SerializeToString()
        requests.append(request)
        response = api_pb2.ListWorkUnitsResponse.FromString(await call(request, metadata=METADATA))
        token = response.next_page_token
        if not token:
            break
    began = time.perf_counter()
    responses = [await call(r, metadata=METADATA) for _ in range(walks) for r in requests]
    elapsed = time.perf_counter() - began
    rows = sum(len(api_pb2.ListWorkUnitsResponse.FromString(d).work_units) for d in responses)
    return rows / elapsed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_ess(dsn: str, port: int, profile: str) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "XMC_DATABASE_URL": dsn,
        "XMC_REDIS_URL": REDIS_URL,
        "XMC_ESS_LISTEN": f"127.0.0.1:{port}",
        "XMC_TASK_SIGNING_KEY": "bench-signing-key-of-at-least-32-bytes",
        "XMC_AUTH_STATIC_TOKENS": f"{TOKEN}={SERVICE}",
        "XMC_AUTH_SERVICE_ACCOUNTS": SERVICE,
        "XMC_STREAM_PREFIX": f"bench-{uuid.uuid4().hex[:8]}:",
    }
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


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work-units", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2, help="update rounds per run")
    parser.add_argument("--walks", type=int, default=2, help="list walks per run")
    parser.add_argument("--profile", default="", help="run the ESS under cProfile into FILE")
    parser.add_argument("--only", choices=("update", "list"), default="", help="one figure")
    args = parser.parse_args()

    name = f"xmc_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = urlunsplit(urlsplit(ADMIN_DSN)._replace(path=f"/{name}"))
    proc = None
    try:
        await migrate(dsn)
        conn = await asyncpg.connect(dsn)
        xid = await seed(conn, args.work_units)
        raw_xid = await seed(conn, args.work_units)  # the raw loop's own rows and rollups
        await conn.execute("VACUUM ANALYZE")
        batches = await record_updates(conn, raw_xid, args.work_units)
        pages = await record_pages(conn, raw_xid)
        port = free_port()
        proc = await start_ess(dsn, port, args.profile)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        figures: dict[str, list[float]] = {k: [] for k in ("ess_u", "raw_u", "ess_l", "raw_l")}
        next_round = 1
        for _run in range(args.runs):
            rounds = range(next_round, next_round + args.rounds)
            next_round += args.rounds
            if args.only != "list":
                figures["raw_u"].append(await raw_updates(conn, batches, args.rounds))
                figures["ess_u"].append(await ess_updates(channel, xid, args.work_units, rounds))
            if args.only != "update":
                figures["raw_l"].append(await raw_pages(conn, pages, args.walks))
                figures["ess_l"].append(await ess_pages(channel, xid, args.walks))
        await channel.close()
        await conn.close()
        median = {k: statistics.median(v) for k, v in figures.items() if v}
        print(
            f"work units: {args.work_units} in one experiment; one call in flight;"
            f" median of {args.runs} runs (each: ESS and raw back to back)"
        )
        for label, ess, raw, unit, target in (
            ("UpdateWorkUnitExecutions batch 100", "ess_u", "raw_u", "items/s", 0.6),
            ("ListWorkUnits page 100", "ess_l", "raw_l", "rows/s", 0.4),
        ):
            if not figures[ess]:
                continue
            ratios = [e / r for e, r in zip(figures[ess], figures[raw], strict=True)]
            print(
                f"{label:36} ESS {median[ess]:9,.0f} {unit} | raw {median[raw]:9,.0f} {unit}"
                f" | {statistics.median(ratios):.2f}x raw (target >= {target}x;"
                f" runs: {', '.join(f'{x:.2f}' for x in ratios)})"
            )
    finally:
        if proc is not None:
            proc.terminate()
            await proc.wait()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
