"""The queue and quota view end to end on kubesim (docs/queues.md): the ESS reads Kueue's
ClusterQueue, LocalQueues, Workloads and visibility API (``xmc.v1.QueueService``), the
REST face serves it, and an admin's priority change goes ESS (outbox) → Actuator (JobSet
label) → kubesim's Kueue (Workload priority) → a pending unit moves ahead in the queue.

Three 40-CPU units on the 64-CPU ``cluster-queue``: the first (normal priority) is
admitted, the two low-priority ones wait. Raising the third to the first's class puts it
ahead of the second without preempting the first (``LowerPriority`` preempts only lower).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import grpc
import pytest

from kubesim.resources import WORKLOAD
from tests.integration.ess_harness import metadata
from tests.integration.read_auth_support import BOB, restricted_auth
from tests.integration.support import fetch_all, forever_work_unit
from tests.integration.system import ALICE, System, running_system
from tests.integration.test_cli import xmc, xmc_json
from tests.integration.ui_support import running_ui
from tests.waiting import eventually
from xmc.labels import PRIORITY_CLASS
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.priority_pb2 import Priority
from xmc_api.xmc.v1 import queue_pb2, queue_pb2_grpc

pytestmark = pytest.mark.slow

ROOT = metadata("root")
RAISED = "xmc-priority-normal-normal"


async def launch_contended(system: System, title: str = "contended sweep") -> list[str]:
    """Three 40-CPU units; the first admitted before the others are created."""
    api = system.ess.api
    experiment = await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title=title)), metadata=ALICE
    )
    names = []
    for index in range(3):
        unit = forever_work_unit(40_000)
        if index:
            unit.priority = Priority.LOW
        operation = await api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=unit), metadata=ALICE
        )
        names.append(str(operation.name).split("/operations/")[0])
        if not index:
            await eventually(lambda: system.state(names[0]), WorkUnitState.RUNNING, within=60)
    return names


def queues(system: System) -> queue_pb2_grpc.QueueServiceStub:
    return queue_pb2_grpc.QueueServiceStub(system.ess.channel)


async def pending_units(system: System, name: str = "cluster-queue") -> list[tuple[int, str]]:
    found = await queues(system).GetQueue(queue_pb2.GetQueueRequest(name=name), metadata=ALICE)
    return [(w.position, w.work_unit) for w in found.pending]


def workload_priority(system: System, unit: str) -> int | None:
    jobset = system.jobset(unit)
    for workload in system.sim.store.list(WORKLOAD):
        owners = workload["metadata"].get("ownerReferences") or []
        if jobset and any(o.get("uid") == jobset["metadata"]["uid"] for o in owners):
            return int(workload["spec"].get("priority") or 0)
    return None


@pytest.fixture
async def system(ess_factory: Any) -> Any:
    async with running_system(ess_factory) as started:
        yield started


async def test_the_queue_view_and_an_admins_priority_change(system: System) -> None:
    first, second, third = await launch_contended(system)
    want = [(1, second), (2, third)]
    assert await eventually(lambda: pending_units(system), want, within=30) == want

    found = await queues(system).GetQueue(
        queue_pb2.GetQueueRequest(name="cluster-queue"), metadata=ALICE
    )
    assert [w.work_unit for w in found.admitted] == [first]
    admitted = found.admitted[0]
    assert (admitted.priority_class, admitted.priority) == (RAISED, 500)
    assert (admitted.flavors, admitted.experiment_title) == (["default-flavor"], "contended sweep")
    assert found.pending[0].priority_class == "xmc-priority-normal-low"
    assert found.pending[0].message  # Kueue's why: insufficient unused quota
    cpu = next(q for q in found.quotas if q.resource == "cpu")
    assert (cpu.flavor, cpu.nominal_quota, cpu.reserved) == ("default-flavor", "64", "40")
    assert found.local_queues == ["cpu-queue", "gpu-queue"]
    assert (found.admitted_workloads, found.pending_workloads) == (1, 2)
    # A LocalQueue's name resolves to its ClusterQueue, listing that LocalQueue's units.
    assert await pending_units(system, "cpu-queue") == want

    listed = await queues(system).ListQueues(queue_pb2.ListQueuesRequest(), metadata=ALICE)
    assert [q.cluster_queue for q in listed.queues] == ["cluster-queue"]
    assert not listed.queues[0].pending

    # Refusals: a researcher, a class that is not XMC's, a queue that does not exist.
    request = queue_pb2.SetWorkUnitPriorityRequest(name=third, priority_class=RAISED)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await queues(system).SetWorkUnitPriority(request, metadata=ALICE)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    bad = queue_pb2.SetWorkUnitPriorityRequest(name=third, priority_class="urgent")
    with pytest.raises(grpc.aio.AioRpcError) as invalid:
        await queues(system).SetWorkUnitPriority(bad, metadata=ROOT)
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "priority_class" in (invalid.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await queues(system).GetQueue(queue_pb2.GetQueueRequest(name="nope"), metadata=ALICE)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND

    # The admin's change: the JobSet's label, the Workload's priority, the queue's order.
    changed = await queues(system).SetWorkUnitPriority(request, metadata=ROOT)
    assert (changed.priority_class, changed.execution_id) == (RAISED, 1)

    def label() -> str | None:
        jobset = system.jobset(third) or {"metadata": {}}
        found: str | None = (jobset["metadata"].get("labels") or {}).get(PRIORITY_CLASS)
        return found

    assert await eventually(label, RAISED, within=30) == RAISED
    assert await eventually(lambda: workload_priority(system, third), 500, within=30) == 500
    moved = [(1, third), (2, second)]
    assert await eventually(lambda: pending_units(system), moved, within=30) == moved
    assert await system.state(first) == WorkUnitState.RUNNING  # equal priority: no preemption
    # The intent is in Postgres: its task's outbox row (kind SET_PRIORITY), carried out.
    xid, wid = (int(p) for p in third.split("/")[1::2])
    rows = await fetch_all(
        system.ess.database_url,
        "SELECT status, outcome FROM task_outbox WHERE xid = $1 AND wid = $2 AND kind = 5",
        xid,
        wid,
    )
    assert [(r["status"], r["outcome"]) for r in rows] == [("finished", "done")]


async def test_the_queue_view_over_rest_and_the_cli(system: System) -> None:
    _, second, third = await launch_contended(system, "rest sweep")
    want = [(1, second), (2, third)]
    assert await eventually(lambda: pending_units(system), want, within=30) == want
    # The REST face takes the caller's own token (the UI's default is for pages only).
    alice = {"Authorization": "Bearer token-alice"}
    session = aiohttp.ClientSession(headers=alice)
    async with running_ui(system.ess.channel) as base, session as http:
        async with http.get(f"{base}/v1/queues") as answer:
            assert answer.status == 200
            body = await answer.json()
        assert [q["clusterQueue"] for q in body["queues"]] == ["cluster-queue"]
        async with http.get(f"{base}/v1/queues/cluster-queue") as answer:
            one = await answer.json()
        assert [w["workUnit"] for w in one["pending"]] == [second, third]
        assert [w["position"] for w in one["pending"]] == [1, 2]
        async with http.get(f"{base}/v1/queues/nope") as answer:
            assert answer.status == 404
        url = f"{base}/v1/{third}:setPriority"
        async with http.post(url, json={"priorityClass": RAISED}) as answer:
            assert answer.status == 403  # alice is no admin
        root = {"Authorization": "Bearer token-root"}
        async with http.post(url, json={"priorityClass": RAISED}, headers=root) as answer:
            assert answer.status == 200, await answer.text()
            assert (await answer.json())["priorityClass"] == RAISED
    moved = [(1, third), (2, second)]
    assert await eventually(lambda: pending_units(system), moved, within=30) == moved

    # The CLI: every queue's quota, one queue's order, an admin's change.
    listed = await xmc_json(system.ess, "queue")
    assert [q["cluster_queue"] for q in listed["queues"]] == ["cluster-queue"]
    table = await xmc(system.ess, "queue", "cpu-queue")
    assert table.exit_code == 0, table.output
    assert third in table.stdout, table.stdout
    higher = "xmc-priority-normal-high"  # above the first's: may preempt it
    refused = await xmc(system.ess, "wu", "set-priority", second, higher)
    assert refused.exit_code != 0
    assert "PERMISSION_DENIED" in refused.output
    short = second.removeprefix("experiments/").replace("/workUnits/", "/")  # "1/2"
    changed = await xmc_json(system.ess, "wu", "set-priority", short, higher, token="token-root")
    assert (changed["name"], changed["priority_class"]) == (second, higher)

    async def relabelled() -> str | None:
        found = await xmc_json(system.ess, "queue", "cluster-queue")
        rows = found.get("admitted", []) + found.get("pending", [])
        return next((w.get("priority_class") for w in rows if w["work_unit"] == second), None)

    assert await eventually(relabelled, higher, within=30) == higher


async def test_under_restricted_reads_another_users_units_keep_their_place_not_their_names(
    ess_factory: Any,
) -> None:
    """Bob sees who is ahead of him (places, priorities, waits) but not alice's unit names,
    workloads or titles (decision 0048); alice sees her own in full."""
    async with running_system(ess_factory, auth=restricted_auth()) as system:
        first, second, third = await launch_contended(system, "alice's private sweep")
        want = [(1, second), (2, third)]
        assert await eventually(lambda: pending_units(system), want, within=30) == want
        request = queue_pb2.GetQueueRequest(name="cluster-queue")
        seen_by_bob = await queues(system).GetQueue(request, metadata=BOB)
        entries = [*seen_by_bob.admitted, *seen_by_bob.pending]
        assert [w.position for w in seen_by_bob.pending] == [1, 2]
        assert [w.priority_class for w in entries] == [RAISED, *["xmc-priority-normal-low"] * 2]
        assert all(w.wait.seconds >= 0 and w.queued_time.seconds for w in entries)
        for hidden in ("work_unit", "workload", "owner", "experiment_title", "message"):
            assert [getattr(w, hidden) for w in entries] == [""] * 3, hidden
        seen_by_alice = await queues(system).GetQueue(request, metadata=ALICE)
        assert [w.work_unit for w in seen_by_alice.pending] == [second, third]
        assert [w.work_unit for w in seen_by_alice.admitted] == [first]
        assert seen_by_alice.admitted[0].experiment_title == "alice's private sweep"
