"""A restart of kube-apiserver, or of etcd, in the middle of a sweep (issue 25, point 3):
0 lost, 0 duplicated, 0 stuck, on the real loopback control plane.

The sweep goes through XMC's services as processes (ESS, Actuator, Reconciler electing its
leader through the Lease, as ``tests/real``'s other tests): units whose pods run for a few
seconds, created in three waves — before the restart (SCHEDULING or RUNNING when it
happens), while the component is down (the ESS accepts them; the Actuator's creates meet
a dead or unready API server), and after it is back. ``tools/cluster/restart.py`` stops
the component (SIGTERM or SIGKILL), keeps it down a few seconds and starts it again with
the same command line, data and ports, as a kubelet restarts a static pod.

Then: every unit COMPLETED on execution 1 and every CreateWorkUnit Operation done without
error (0 lost); one JobSet uid per unit, seen by a watch of our own that outlives the
restart, no execution 2, each unit's history moving only forward (0 duplicated); all of
it within a deadline (0 stuck); nothing dead-lettered, every service still running and
the Reconciler ready again (its watches resumed: units created after the restart are
observed to the end). How long recovery took is printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
import redis.asyncio as aioredis
from google.longrunning import operations_grpc_pb2
from google.longrunning.operations_proto_pb2 import GetOperationRequest

from tests.integration.processes import Client
from tests.integration.support import fetch_all, minimal_work_unit
from tests.real.support import NAMESPACE, POLL, ROOT, jobset_name, state_history
from tests.stack import Stack
from tests.waiting import eventually
from xmc.kube import JOBSETS, KubeError, KubeFailure
from xmc.kube_client import KubeClient
from xmc.model.states import EXECUTION_TERMINAL_STATES as TERMINAL
from xmc.model.states import WorkUnitState
from xmc.streams import StreamNames
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

S = WorkUnitState
EXECUTION_ID: Final = "xmc.google.com/execution-id"
RESTART: Final = ROOT / "tools" / "cluster" / "restart.py"
#: Units per wave: before the restart, while the component is down, after it is back.
BEFORE, DURING, AFTER = 10, 5, 5
#: Seconds each unit's pod runs (the node agent's ``kubesim.xmc/behavior``).
RUN_SECONDS: Final = 8
#: Seconds the component stays stopped before restart.py starts it again.
DOWN_SECONDS: Final = 5
#: The order a unit's state moves in on this sweep; a step back is a duplicated or stale
#: observation applied.
FORWARD: Final = (S.INITIALIZING, S.SCHEDULING, S.STARTING, S.RUNNING, S.COMPLETED)


class JobSetLedger:
    """Every uid each JobSet name in ``xmc`` had, from a list and watch of our own that
    resumes after the API server comes back (re-listing on 410): a second JobSet for one
    unit shows as a second uid."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self.uids: dict[str, set[str]] = {}
        self.execution_ids: dict[str, set[str]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _note(self, jobset: dict[str, Any]) -> str:
        meta = jobset["metadata"]
        self.uids.setdefault(meta["name"], set()).add(meta["uid"])
        eid = (meta.get("labels") or {}).get(EXECUTION_ID, "")
        self.execution_ids.setdefault(meta["name"], set()).add(eid)
        return str(meta["resourceVersion"])

    async def _run(self) -> None:
        version: str | None = None
        while True:
            try:
                if version is None:
                    page = await self._kube.list_page(JOBSETS, NAMESPACE, request_timeout=10)
                    for item in page["items"]:
                        self._note(item)
                    version = page["metadata"]["resourceVersion"]
                async with self._kube.watch(
                    JOBSETS, NAMESPACE, resource_version=version, timeout_seconds=30
                ) as events:
                    async for event in events:
                        if event["type"] == "BOOKMARK":
                            version = event["object"]["metadata"]["resourceVersion"]
                        else:
                            version = self._note(event["object"])
            except KubeError as error:
                if error.failure is KubeFailure.EXPIRED:
                    version = None
                await asyncio.sleep(0.2)  # the server is restarting: watch again


@pytest.fixture
async def ledger(admin: KubeClient) -> AsyncIterator[JobSetLedger]:
    watching = JobSetLedger(admin)
    watching.start()
    yield watching
    await watching.stop()


def _unit() -> WorkUnit:
    unit = minimal_work_unit()
    job = unit.executable.jobset.jobs[0]
    job.annotations["kubesim.xmc/behavior"] = json.dumps({"run_seconds": RUN_SECONDS})
    job.termination_grace_period_seconds = 1
    return unit


async def _create(client: Client, parent: str) -> tuple[str, str]:
    """(work unit, its Operation)."""
    operation = await client.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=_unit())
    )
    return str(operation.name).split("/operations/")[0], str(operation.name)


async def _serving(admin: KubeClient) -> bool:
    """The API server answers a consistent read, which needs etcd too."""
    try:
        await admin.list_page(JOBSETS, NAMESPACE, limit=1, request_timeout=2)
    except KubeError:
        return False
    return True


@pytest.mark.parametrize(
    ("component", "kill"),
    [("kube-apiserver", False), ("kube-apiserver", True), ("etcd", False), ("etcd", True)],
    ids=["apiserver-sigterm", "apiserver-sigkill", "etcd-sigterm", "etcd-sigkill"],
)
async def test_a_restart_in_the_middle_of_a_sweep_loses_duplicates_and_strands_nothing(
    admin: KubeClient,
    client: Client,
    stack: Stack,
    ledger: JobSetLedger,
    component: str,
    kill: bool,
) -> None:
    parent = await client.experiment()
    units: dict[str, str] = {}  # work unit -> its CreateWorkUnit Operation
    units.update(await asyncio.gather(*(_create(client, parent) for _ in range(BEFORE))))
    before = list(units)

    async def some_running() -> bool:
        states = await asyncio.gather(*(client.state(name) for name in before))
        return states.count(S.RUNNING) >= 2

    await eventually(some_running, True, within=120, every=POLL)
    t0 = time.monotonic()
    restart = await asyncio.create_subprocess_exec(
        sys.executable, str(RESTART), component, *(["--kill"] if kill else []),
        f"--down-seconds={DOWN_SECONDS}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await eventually(lambda: _serving(admin), False, within=60, every=0.1)
        down_at = time.monotonic()
        during = dict(await asyncio.gather(*(_create(client, parent) for _ in range(DURING))))
        units.update(during)
        out, err = await asyncio.wait_for(restart.communicate(), timeout=180)
    finally:
        if restart.returncode is None:
            restart.kill()
            await restart.wait()
    assert restart.returncode == 0, err.decode()
    timings = json.loads(out.decode().strip().splitlines()[-1])
    healthy_at, back = time.monotonic(), datetime.now(UTC)
    units.update(await asyncio.gather(*(_create(client, parent) for _ in range(AFTER))))

    async def unfinished() -> dict[str, WorkUnitState]:
        states = await asyncio.gather(*(client.state(name) for name in units))
        return {n: s for n, s in zip(units, states, strict=True) if s not in TERMINAL}

    none: dict[str, WorkUnitState] = {}
    await eventually(unfinished, none, within=300, every=POLL)
    done_at = time.monotonic()
    resumed = await _first_running(stack, [_wid(name) for name in during])
    print(
        f"\n{component} {timings['signal']}: stop {timings['stop_seconds']}s, "
        f"down {healthy_at - down_at:.1f}s (start to healthy "
        f"{timings['start_to_healthy_seconds']}s); first unit created while down RUNNING "
        f"{'never' if resumed is None else f'{(resumed - back).total_seconds():.1f}s'} after "
        f"it was back; all {len(units)} terminal {done_at - healthy_at:.1f}s after "
        f"(sweep {done_at - t0:.1f}s from the signal)"
    )

    # 0 lost: every unit finished on its one execution, every Operation done cleanly.
    executions = await asyncio.gather(*(client.execution(name) for name in units))
    lost = {n: e for n, e in zip(units, executions, strict=True) if e != (1, S.COMPLETED)}
    operations = operations_grpc_pb2.OperationsStub(client.channel)
    failed = []
    for operation in units.values():
        reply = await operations.GetOperation(GetOperationRequest(name=operation))
        if not reply.done or reply.HasField("error"):
            failed.append((operation, reply.done, reply.error.message))
    assert (lost, failed) == ({}, []), "units lost"

    # 0 duplicated: one JobSet (one uid) per unit, execution 1 only; histories go forward.
    jobsets = {jobset_name(name) for name in units}
    assert jobsets <= set(ledger.uids), sorted(jobsets - set(ledger.uids))
    assert {n: u for n, u in ledger.uids.items() if n in jobsets and len(u) > 1} == {}
    assert {e for n, eids in ledger.execution_ids.items() if n in jobsets for e in eids} == {"1"}
    for name in units:
        history = await state_history(stack, name)
        assert {eid for eid, _ in history} == {1}, (name, history)
        states = [state for _, state in history]
        ranks = [FORWARD.index(state) for state in states]
        assert ranks == sorted(set(ranks)), (name, states)
        assert states[-1] is S.COMPLETED, (name, states)

    # Nothing given up, nothing died, the Reconciler's watches connected and synced again.
    redis = aioredis.Redis.from_url(stack.redis_url)
    try:
        assert await redis.xlen(StreamNames.with_prefix(stack.prefix).dlq) == 0
    finally:
        await redis.aclose()
    assert all(stack.alive().values()), stack.alive()
    await eventually(lambda: _ready(stack, "reconciler"), 200, within=60, every=POLL)
    retried = _count(stack.log_dir / "actuator.log", "will retry")
    refused = _count(stack.log_dir / "actuator.log", "refused; asking again")
    print(f"Actuator: {retried} retries, {refused} refusals asked again; one uid per JobSet")
    if component == "kube-apiserver":
        assert retried > 0, "the creates made while the API server was down were retried"


def _wid(name: str) -> int:
    return int(name.rsplit("/", 1)[1])


async def _first_running(stack: Stack, wids: Sequence[int]) -> datetime | None:
    """When the first of these units was recorded RUNNING (None: never)."""
    rows = await fetch_all(
        stack.database_url,
        "SELECT min(record_time) AS at FROM work_unit_status_history "
        "WHERE wid = ANY($1) AND new_state = $2",
        list(wids),
        int(S.RUNNING),
    )
    at: datetime | None = rows[0]["at"]
    return at


async def _ready(stack: Stack, service: str) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.get(stack.ops_url(service, "/readyz")) as response,
    ):
        return response.status


def _count(log: Path, text: str) -> int:
    return sum(text in line for line in log.read_text(errors="replace").splitlines())
