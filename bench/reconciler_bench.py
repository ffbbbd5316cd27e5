"""Benchmark: Reconciler observation-to-stored-state latency (issue 6).

5,000 JobSets change state in kubesim; the Reconciler watches them, its UpdateBatcher
coalesces and writes to a real ESS (gRPC) over a fresh Postgres database. Printed:
observation-to-stored-state latency p50/p99, observations/s, writes/s and the coalescing
ratio, for a paced phase (~1,000 changes/s, target p99 < 1 s) and a burst phase (100 rapid
changes to each of the same 100 JobSets). Figures only: this is not a test and asserts
nothing.

Everything runs in this one process and event loop: kubesim (controllers off, HTTP on a
free port), the ESS (gRPC on a free port) and the Reconciler. State changes are written
straight into ``sim.store`` (what the JobSet controller would do); the latency is the wall
time from that write to the first DB poll (every ~20 ms) that shows the target state.

    .venv/bin/python bench/reconciler_bench.py [--jobsets 5000] [--rate 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from ess.app import EssOptions, EssServer
from kubesim.resources import JOBSET
from kubesim.server import KubeSim
from reconciler.app import Reconciler, ReconcilerOptions
from reconciler.batcher import BatcherOptions
from reconciler.ess_client import EssClient
from reconciler.observation import Source
from tests.stack import delete_prefixed_keys
from xmc.auth_settings import AuthSettings
from xmc.kube_client import KubeClient
from xmc.labels import (
    EXECUTION_ID,
    EXPERIMENT_ID,
    MANAGED_BY,
    MANAGED_BY_VALUE,
    QUEUE_NAME,
    WORK_UNIT_ID,
    jobset_name,
)
from xmc.model.audit import Actor
from xmc.model.states import WorkUnitState
from xmc.settings import Settings
from xmc.store.creation import NewWorkUnit
from xmc.store.migrate import migrate
from xmc.store.repository import Store
from xmc.timestamps import utc_now
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

ADMIN_DSN = os.environ.get("XMC_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("XMC_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TOKEN = "bench-reconciler-token"
SERVICE_ACCOUNT = "reconciler@xmc.internal"
NAMESPACE = "default"
QUEUE = "cpu-queue"
TICK = 0.01
POLL = 0.02
S = WorkUnitState
Obj = dict[str, Any]


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def work_unit() -> WorkUnit:
    unit = WorkUnit()
    unit.executable.scheduling_constraints.queue_name = QUEUE
    job = unit.executable.jobset.jobs.add(name="main", replicas=1)
    job.spec.docker_image = "python:3.11"
    job.spec.command.extend(["python", "train.py"])
    return unit


def jobset(xid: int, wid: int) -> Obj:
    """A suspended JobSet as the Actuator would create it (the labels the Reconciler reads)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": jobset_name(xid, wid),
            "namespace": NAMESPACE,
            "labels": {
                EXPERIMENT_ID: str(xid),
                WORK_UNIT_ID: str(wid),
                EXECUTION_ID: "1",
                MANAGED_BY: MANAGED_BY_VALUE,
                QUEUE_NAME: QUEUE,
            },
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "main",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [
                                        {
                                            "name": "main",
                                            "image": "python:3.11",
                                            "command": ["python", "train.py"],
                                        }
                                    ],
                                }
                            }
                        }
                    },
                }
            ],
        },
    }


def counter_total(name: str) -> float:
    return sum(REGISTRY.get_sample_value(name, {"source": s.value}) or 0.0 for s in Source)


def observations() -> float:
    """Observations the batcher received."""
    return counter_total("xmc_reconciler_observations_total")


def writes() -> float:
    return counter_total("xmc_reconciler_writes_total")


def pending() -> float:
    return REGISTRY.get_sample_value("xmc_reconciler_pending_updates") or 0.0


def percentile(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100)[q - 1]


class Poller:
    """Polls (wid, state) of the experiment every ~20 ms; records when each awaited target
    state was first seen."""

    def __init__(self, dsn: str, xid: int) -> None:
        self._dsn = dsn
        self._xid = xid
        #: wid → (target state, wall time of the change)
        self.awaiting: dict[int, tuple[WorkUnitState, float]] = {}
        self.latencies: list[float] = []
        self.states: dict[int, int] = {}
        self._stop = asyncio.Event()

    async def run(self) -> None:
        conn = await asyncpg.connect(self._dsn)
        try:
            while not self._stop.is_set():
                rows = await conn.fetch(
                    "SELECT wid, state FROM work_units WHERE xid = $1", self._xid
                )
                seen = time.perf_counter()
                self.states = {r["wid"]: r["state"] for r in rows}
                for wid, (target, changed) in list(self.awaiting.items()):
                    if self.states.get(wid) == target:
                        self.latencies.append(seen - changed)
                        del self.awaiting[wid]
                await asyncio.sleep(POLL)
        finally:
            await conn.close()

    def stop(self) -> None:
        self._stop.set()

    async def wait_all(self, state: WorkUnitState, count: int, within: float) -> bool:
        deadline = time.perf_counter() + within
        while time.perf_counter() < deadline:
            if sum(1 for v in self.states.values() if v == state) >= count:
                return True
            await asyncio.sleep(POLL)
        return False

    async def wait_awaited(self, within: float) -> None:
        deadline = time.perf_counter() + within
        while time.perf_counter() < deadline:
            if not self.awaiting:
                return
            await asyncio.sleep(POLL)


async def wait_drained(within: float = 30.0) -> None:
    """Until the batcher has nothing pending and writes stopped moving for 0.3 s."""
    deadline = time.perf_counter() + within
    last, still = writes(), 0.0
    while time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
        now = writes()
        still = still + 0.05 if now == last and pending() == 0 else 0.0
        last = now
        if still >= 0.3:
            return


def to_running(obj: Obj) -> None:
    obj["spec"]["suspend"] = False


def running_status(obj: Obj) -> None:
    now = rfc3339(datetime.now(UTC))
    obj["status"] = {
        "conditions": [
            {"type": "Suspended", "status": "False", "reason": "Resumed", "lastTransitionTime": now}
        ],
        "replicatedJobsStatus": [
            {"name": "main", "ready": 1, "active": 1, "succeeded": 0, "failed": 0, "suspended": 0}
        ],
        "restarts": 0,
    }


def completed_status(obj: Obj) -> None:
    now = rfc3339(datetime.now(UTC))
    status = obj.setdefault("status", {})
    status["conditions"] = [
        *status.get("conditions", []),
        {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "done",
         "lastTransitionTime": now},
    ]  # fmt: skip
    status["replicatedJobsStatus"] = [
        {"name": "main", "ready": 0, "active": 0, "succeeded": 1, "failed": 0, "suspended": 0}
    ]


async def paced(
    sim: KubeSim,
    poller: Poller,
    xid: int,
    wids: list[int],
    target: WorkUnitState,
    change: Callable[[str], None],
    rate: float,
) -> None:
    """Changes ``wids`` to ``target`` at ``rate`` per second, in batches per 10 ms tick, then
    waits for every target to be stored; prints the phase's figures."""
    per_tick = max(1, round(rate * TICK))
    obs0, writes0 = observations(), writes()
    poller.latencies = []
    began = time.perf_counter()
    for index in range(0, len(wids), per_tick):
        due = began + (index // per_tick) * TICK
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        for wid in wids[index : index + per_tick]:
            change(jobset_name(xid, wid))
            poller.awaiting[wid] = (target, time.perf_counter())
    driven = time.perf_counter() - began
    await poller.wait_awaited(within=60)
    await wait_drained()
    total = time.perf_counter() - began
    lost = len(poller.awaiting)
    poller.awaiting.clear()
    report(
        f"→ {target.name}",
        changes=len(wids),
        driven=driven,
        total=total,
        latencies=poller.latencies,
        observed=observations() - obs0,
        written=writes() - writes0,
        extra=f"({lost} never stored)" if lost else "",
    )


def report(
    title: str,
    *,
    changes: int,
    driven: float,
    total: float,
    latencies: list[float],
    observed: float,
    written: float,
    extra: str = "",
) -> None:
    if latencies:
        p50, p99 = percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000
        cells = f"{p50:>8.0f} {p99:>8.0f} {max(latencies) * 1000:>8.0f}"
    else:
        cells = f"{'-':>8} {'-':>8} {'-':>8}"
    ratio = observed / written if written else float("nan")
    print(
        f"{title:<14} {changes:>7,} {changes / driven:>10,.0f} {cells}"
        f" {observed:>8,.0f} {written:>8,.0f} {written / total:>9,.0f} {ratio:>7.2f}"
        + (f"  {extra}" if extra else "")
    )


async def burst(sim: KubeSim, xid: int, wids: list[int], rounds: int) -> None:
    """``rounds`` rapid status changes (restarts 1..rounds) to each of ``wids``, no pacing
    beyond one event-loop yield per round; the state stays RUNNING, so only coalescing and
    drain time are measured."""
    obs0, writes0 = observations(), writes()
    began = time.perf_counter()
    for round_ in range(1, rounds + 1):
        for wid in wids:

            def bump(obj: Obj, value: int = round_) -> None:
                obj["status"]["restarts"] = value

            sim.store.update(JOBSET, NAMESPACE, jobset_name(xid, wid), bump, subresource="status")
        await asyncio.sleep(0)
    driven = time.perf_counter() - began
    await wait_drained()
    total = time.perf_counter() - began - 0.3  # the quiet period wait_drained insists on
    report(
        "burst",
        changes=rounds * len(wids),
        driven=driven,
        total=total,
        latencies=[],
        observed=observations() - obs0,
        written=writes() - writes0,
        extra=f"(drained {max(total - driven, 0) * 1000:.0f} ms after the last change)",
    )


async def seed(dsn: str, count: int) -> int:
    store = await Store.connect(dsn, min_size=1, max_size=2)
    try:
        experiment = await store.create_experiment(Experiment(title="bench"), creator="bench")
        xid = int(experiment.name.split("/")[1])
        unit = work_unit()
        for start in range(1, count + 1, 500):
            items = [
                NewWorkUnit(xid, None, unit, Actor("bench"))
                for _ in range(start, min(start + 500, count + 1))
            ]
            await store.create_work_units(items, writer="bench")
        return xid
    finally:
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobsets", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=1000.0, help="changes per second")
    parser.add_argument("--burst-jobsets", type=int, default=100)
    parser.add_argument("--burst-rounds", type=int, default=100)
    args = parser.parse_args()

    name = f"xmc_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = urlunsplit(urlsplit(ADMIN_DSN)._replace(path=f"/{name}"))
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    redis = aioredis.Redis.from_url(REDIS_URL)
    sim = KubeSim(controllers=False)
    server: EssServer | None = None
    reconciler: Reconciler | None = None
    ess_client: EssClient | None = None
    api: Any = None
    poller: Poller | None = None
    poll_task: asyncio.Task[None] | None = None
    try:
        await migrate(dsn)
        began = time.perf_counter()
        xid = await seed(dsn, args.jobsets)
        wids = list(range(1, args.jobsets + 1))
        print(f"seeded {args.jobsets:,} work units in {time.perf_counter() - began:.1f} s")

        await sim.start()
        for wid in wids:
            sim.store.create(JOBSET, jobset(xid, wid), NAMESPACE)
        settings = Settings(
            database_url=dsn,
            redis_url=REDIS_URL,
            ess_listen="127.0.0.1:0",
            kube_url=sim.url,
            task_signing_key="bench-signing-key-of-at-least-32-bytes!!",
            stream_prefix=prefix,
        )
        server = EssServer(
            settings,
            EssOptions(
                auth=AuthSettings(
                    static_tokens={TOKEN: SERVICE_ACCOUNT},
                    service_accounts=frozenset({SERVICE_ACCOUNT}),
                ),
                resume_sweep_seconds=3600,
                run_migrations=False,
            ),
        )
        port = await server.start()
        api = await KubeClient.from_settings(settings)
        ess_client = EssClient(f"127.0.0.1:{port}", token=TOKEN)
        batcher = BatcherOptions()
        reconciler = Reconciler(
            api,
            ess_client,
            identity="bench",
            clock=utc_now,
            options=ReconcilerOptions(
                lease=None, batcher=batcher, orphan_interval=3600, diagnostics_interval=3600
            ),
        )
        poller = Poller(dsn, xid)
        poll_task = asyncio.create_task(poller.run())
        began = time.perf_counter()
        await reconciler.start()
        ok = await poller.wait_all(S.SCHEDULING, args.jobsets, within=60)
        print(
            f"initial observations: {args.jobsets:,} SCHEDULING"
            f"{'' if ok else ' (NOT all)'} in {time.perf_counter() - began:.1f} s"
        )
        await wait_drained()
        print(
            f"batcher: flush_interval {batcher.flush_interval * 1000:.0f} ms, max_batch"
            f" {batcher.max_batch}, flush_size {batcher.flush_size}, max_in_flight"
            f" {batcher.max_in_flight}; one process, one event loop (kubesim + ESS + Reconciler)"
        )
        print(
            f"\n{'phase':<14} {'changes':>7} {'changes/s':>10} {'p50 ms':>8} {'p99 ms':>8}"
            f" {'max ms':>8} {'obs':>8} {'writes':>8} {'writes/s':>9} {'obs/wr':>7}"
        )

        def running(name_: str) -> None:
            sim.store.update(JOBSET, NAMESPACE, name_, to_running)
            sim.store.update(JOBSET, NAMESPACE, name_, running_status, subresource="status")

        def completed(name_: str) -> None:
            sim.store.update(JOBSET, NAMESPACE, name_, completed_status, subresource="status")

        await paced(sim, poller, xid, wids, S.RUNNING, running, args.rate)
        burst_wids = wids[: args.burst_jobsets]
        await burst(sim, xid, burst_wids, args.burst_rounds)
        await paced(sim, poller, xid, wids, S.COMPLETED, completed, args.rate)
        print(
            "\nchanges/s = JobSet changes made ÷ time to make them; latency = change → first DB"
            " poll (~20 ms) showing the state;\nobs = observations handed to the batcher (→"
            " RUNNING is two watch events: spec then status); writes = items sent to ESS;\n"
            "writes/s = writes ÷ (drive + drain time); obs/wr = coalescing ratio."
        )
    finally:
        if poller is not None:
            poller.stop()
        if poll_task is not None:
            await poll_task
        if reconciler is not None:
            await reconciler.stop()
        if ess_client is not None:
            await ess_client.close()
        if api is not None:
            await api.close()
        if server is not None:
            await server.stop(grace=1)
        await sim.stop()
        await delete_prefixed_keys(redis, prefix)
        await redis.aclose()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
