"""Builders and probes shared by the store integration tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from xmc.kube import Resource
from xmc.kube_client import KubeClient
from xmc.model.merge import ExecutionUpdate
from xmc.model.states import Severity, WorkUnitState
from xmc.model.timeline import Change
from xmc.store.repository import Store
from xmc.store.timelines import fetch_unit_history
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    """Injected time: every call returns the current value; tests move it explicitly."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


class WallClock(FakeClock):
    """The real clock, for tests that must run at real time (SPEC-level flows whose
    timestamps meet the cluster's); ``now`` is the last time it told."""

    def __init__(self) -> None:
        super().__init__(datetime.now(UTC))

    def __call__(self) -> datetime:
        self.now = datetime.now(UTC)
        return self.now

    def advance(self, seconds: float) -> datetime:
        raise TypeError("the wall clock cannot be advanced")


def message(severity: Severity, text: str) -> StructuredMessage:
    return StructuredMessage(severity=int(severity), user_facing_text=text)  # type: ignore[arg-type]


def state_update(
    xid: int,
    wid: int,
    eid: int,
    state: WorkUnitState,
    at: datetime | None,
    *,
    system: StructuredMessage | None = None,
) -> ExecutionUpdate:
    """An observation of ``state`` (``at=None`` builds the malformed nil-time item)."""
    execution = WorkUnitExecution()
    execution.status.state = int(state)  # type: ignore[assignment]
    if at is not None:
        execution.status.state_update_time.FromDatetime(at)
    mask: tuple[str, ...] = ("status.state",)
    if system is not None:
        execution.status.system_message.CopyFrom(system)
        mask += ("status.system_message",)
    return ExecutionUpdate(xid, wid, eid, execution, mask)


def message_update(
    xid: int,
    wid: int,
    eid: int,
    *,
    system: StructuredMessage | None = None,
    user: StructuredMessage | None = None,
) -> ExecutionUpdate:
    execution = WorkUnitExecution()
    mask: tuple[str, ...] = ()
    if system is not None:
        execution.status.system_message.CopyFrom(system)
        mask += ("status.system_message",)
    if user is not None:
        execution.status.user_message.CopyFrom(user)
        mask += ("status.user_message",)
    return ExecutionUpdate(xid, wid, eid, execution, mask)


async def snapshot(dsn: str) -> dict[str, list[str]]:
    """Every row of every table (as text) plus every sequence position: equal snapshots
    mean the database did not change at all."""
    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        )
        result: dict[str, list[str]] = {}
        for t in tables:
            name = t["tablename"]
            rows = await conn.fetch(f'SELECT x::text AS r FROM "{name}" x ORDER BY 1')
            result[name] = [r["r"] for r in rows]
        sequences = await conn.fetch(
            "SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = 'public'"
        )
        result["<sequences>"] = sorted(f"{s['sequencename']}={s['last_value']}" for s in sequences)
        return result
    finally:
        await conn.close()


async def fetch_all(dsn: str, sql: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(sql, *args)  # type: ignore[no-any-return]
    finally:
        await conn.close()


def minimal_work_unit(queue: str = "cpu-queue", image: str = "python:3.11") -> WorkUnit:
    """The smallest WorkUnit CreateWorkUnit accepts: one job, one container, a queue."""
    work_unit = WorkUnit()
    executable = work_unit.executable
    executable.scheduling_constraints.queue_name = queue
    job = executable.jobset.jobs.add(name="main", replicas=1)
    job.spec.docker_image = image
    job.spec.command.extend(["python", "-c", "print('hi')"])
    return work_unit


def forever_work_unit(cpu_millicores: int = 0, *, grace_seconds: int = 1) -> WorkUnit:
    """A job that runs until deleted and leaves ``grace_seconds`` after SIGTERM (kubesim
    keeps a deleted pod Terminating for its grace period; the default 30 s would dominate
    every stop)."""
    work_unit = minimal_work_unit()
    job = work_unit.executable.jobset.jobs[0]
    job.annotations["kubesim.xmc/behavior"] = json.dumps({"run_seconds": None})
    if cpu_millicores:
        job.spec.resources.cpu_resources.cpu_millicores = cpu_millicores
    job.termination_grace_period_seconds = grace_seconds
    return work_unit


def behaving_unit(behavior: dict[str, Any], *, deadline_seconds: int = 0) -> WorkUnit:
    """A unit whose pod does what ``behavior`` says (kubesim's and the node agent's
    ``kubesim.xmc/behavior``: run time, exit code, logs, ...), 1 s of grace after SIGTERM."""
    work_unit = minimal_work_unit()
    job = work_unit.executable.jobset.jobs[0]
    job.annotations["kubesim.xmc/behavior"] = json.dumps(behavior)
    job.termination_grace_period_seconds = 1
    if deadline_seconds:
        job.active_deadline_seconds = deadline_seconds
    return work_unit


class BuggyReads(KubeClient):
    """A Kubernetes client whose next ``bugs`` reads raise as a bug would (not a
    ``KubeError``): loops must log such a failure and go on."""

    bugs = 0

    async def get(
        self, resource: Resource, namespace: str, name: str, *, request_timeout: float | None = None
    ) -> dict[str, Any] | None:
        if self.bugs:
            self.bugs -= 1
            raise RuntimeError("a bug in one attempt")
        return await super().get(resource, namespace, name, request_timeout=request_timeout)


async def unit_history(store: Store, xid: int, wid: int) -> list[tuple[int, Change]]:
    """Every (eid, change) of the unit in commit order, as the timelines read them."""
    async with store.connection() as conn:
        return await fetch_unit_history(conn, xid, wid)
