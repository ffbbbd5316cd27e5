"""The queue view on the real control plane (docs/queues.md): the ESS, as k8s/base's
``xmc-ess`` ServiceAccount (read-only RBAC, a ClusterRole for ClusterQueues), reads the
real Kueue v0.17's ClusterQueue, LocalQueues, Workloads and visibility API; and an admin's
priority change is relabelled by the Actuator and honoured by the real Kueue: the
Workload's priority follows the label (``UpdateWorkloadPriority``) and the pending unit
moves ahead in the queue (docs/kubesim.md cites both)."""

from __future__ import annotations

from typing import Any

from tests.integration.processes import Client
from tests.integration.support import forever_work_unit
from tests.real.support import NAMESPACE, POLL, jobset_name
from tests.real.test_real_queue import _workload_of
from tests.waiting import eventually
from xmc.kube_client import KubeClient
from xmc.labels import PRIORITY_CLASS
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1.priority_pb2 import Priority
from xmc_api.xmc.v1 import queue_pb2, queue_pb2_grpc

S = WorkUnitState
RAISED = "xmc-priority-normal-normal"


async def test_the_queue_view_from_the_real_kueue_and_a_priority_change(
    admin: KubeClient, client: Client
) -> None:
    """Three 40-CPU units on cluster-queue's 64: the first (normal) is admitted, two low
    ones wait; the view shows the quota and Kueue's order; raising the one behind to the
    first's class moves it ahead of the other without preempting the first.

    Which of two equal-priority units real Kueue puts first is its own business: with
    BestEffortFIFO one already found inadmissible can stand behind one not yet tried, so
    the test reads the order and raises whichever is behind."""
    queues = queue_pb2_grpc.QueueServiceStub(client.channel)
    experiment = await client.experiment()
    units = []
    for index in range(3):
        unit = forever_work_unit(40_000)
        if index:
            unit.priority = Priority.LOW
        units.append(await client.create(experiment, unit))
        state = S.RUNNING if not index else S.SCHEDULING
        await eventually(lambda: client.state(units[-1]), state, within=90, every=POLL)
    first, second, third = units

    async def pending() -> list[tuple[int, str]]:
        found = await queues.GetQueue(queue_pb2.GetQueueRequest(name="cluster-queue"))
        return [(w.position, w.work_unit) for w in found.pending]

    async def waiting() -> list[int]:
        return sorted(p for p, unit in await pending() if unit in (second, third))

    assert await eventually(waiting, [1, 2], within=60, every=POLL) == [1, 2]
    order = dict(await pending())
    ahead, behind = order[1], order[2]
    found = await queues.GetQueue(queue_pb2.GetQueueRequest(name="cluster-queue"))
    assert [w.work_unit for w in found.admitted] == [first]
    assert found.admitted[0].priority_class == RAISED
    assert found.admitted[0].flavors == ["default-flavor"]
    cpu = next(q for q in found.quotas if q.resource == "cpu")
    assert (cpu.flavor, cpu.nominal_quota, cpu.reserved) == ("default-flavor", "64", "40")
    assert {"cpu-queue", "gpu-queue"} <= set(found.local_queues)
    assert "insufficient unused quota" in found.pending[0].message, found.pending[0]
    listed = await queues.ListQueues(queue_pb2.ListQueuesRequest())
    assert "cluster-queue" in [q.cluster_queue for q in listed.queues]

    changed = await queues.SetWorkUnitPriority(
        queue_pb2.SetWorkUnitPriorityRequest(name=behind, priority_class=RAISED)
    )
    assert changed.priority_class == RAISED

    async def label() -> Any:
        jobset = await admin.request(
            "GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets/"
            f"{jobset_name(behind)}",
        )  # fmt: skip
        return jobset["metadata"]["labels"].get(PRIORITY_CLASS)

    assert await eventually(label, RAISED, within=60, every=POLL) == RAISED

    async def workload_priority() -> tuple[Any, Any]:
        workload = await _workload_of(admin, jobset_name(behind))
        spec = workload["spec"]
        return spec.get("priority"), (spec.get("priorityClassRef") or {}).get("name")

    want_wl = (500, RAISED)
    assert await eventually(workload_priority, want_wl, within=60, every=POLL) == want_wl
    moved = [(1, behind), (2, ahead)]
    assert await eventually(pending, moved, within=60, every=POLL) == moved
    assert await client.state(first) == S.RUNNING  # equal priority: no preemption
