"""``xmc.v1.QueueService`` (docs/queues.md): Kueue's queues as the cluster reports them,
each admitted and pending Workload mapped to its XMC work unit, and an admin's priority
change of a unit.

Reads go to the API server on each call, with the ESS's read-only client
(:mod:`ess.cluster`; decision 0046): one list of ClusterQueues, one of the namespace's
LocalQueues, and for one queue's page one list of the namespace's Workloads and one
visibility summary per LocalQueue feeding it, and one read of each experiment listed.
Nothing is cached or stored: the page is the cluster now. A cluster that cannot be read
is UNAVAILABLE, saying why; a visibility API that does not answer only leaves the pending
Workloads without positions (the page says so).

The priority change is an intent like any other: the task goes to the outbox in the
transaction that checks the unit (:meth:`ess.intents.Intents.set_priority`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import structlog

from ess.auth import require_admin
from ess.cluster import ClusterUnavailable, LazyKube
from ess.intents import Intents
from ess.interceptor import actor, caller
from xmc.errors import (
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from xmc.kjson import as_str, metadata_of
from xmc.kube import CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS, KubeError
from xmc.kube_client import KubeClient
from xmc.model.queues import (
    Positions,
    experiment_ids,
    local_queues_of,
    named,
    queue_message,
    resolve_queue,
)
from xmc.model.read_access import ReadScope
from xmc.names import experiment_name, parse_work_unit_name
from xmc.priority_classes import PRIORITY_CLASSES
from xmc.store.transactions import Store, fetch_experiment, fetch_readers
from xmc_api.xmc.v1 import queue_pb2, queue_pb2_grpc

log = structlog.get_logger()

Obj = dict[str, Any]

#: The longest queue name (a DNS-1123 subdomain, as Kubernetes names objects).
MAX_NAME = 253


class QueueService(queue_pb2_grpc.QueueServiceServicer):
    def __init__(
        self, store: Store, intents: Intents, kube: LazyKube, *, clock: Callable[[], datetime]
    ) -> None:
        self._store = store
        self._intents = intents
        self._kube = kube
        self._clock = clock

    async def ListQueues(
        self, request: queue_pb2.ListQueuesRequest, context: Any
    ) -> queue_pb2.ListQueuesResponse:
        kube = await self._client()
        cluster_queues, local_queues = await self._queues(kube)
        now = self._clock()
        queues = [
            queue_message(cq, local_queues, (), Positions({}), now=now, with_workloads=False)
            for cq in sorted(cluster_queues, key=lambda cq: as_str(metadata_of(cq).get("name")))
        ]
        return queue_pb2.ListQueuesResponse(queues=queues)

    async def GetQueue(self, request: queue_pb2.GetQueueRequest, context: Any) -> queue_pb2.Queue:
        name = request.name.strip()
        if not name or len(name) > MAX_NAME:
            raise InvalidArgumentError(f"name: a queue name of 1 to {MAX_NAME} characters")
        kube = await self._client()
        cluster_queues, local_queues = await self._queues(kube)
        ref = resolve_queue(name, cluster_queues, local_queues)
        if ref is None:
            raise NotFoundError(
                f"name: no ClusterQueue, nor LocalQueue in namespace {self._kube.namespace}, "
                f"named {name!r}"
            )
        cluster_queue = named(cluster_queues, ref.cluster_queue)
        if cluster_queue is None:
            raise NotFoundError(
                f"name: LocalQueue {name!r} submits to ClusterQueue "
                f"{ref.cluster_queue!r}, which does not exist"
            )
        feeding = (
            [ref.local_queue]
            if ref.local_queue
            else local_queues_of(ref.cluster_queue, local_queues)
        )
        workloads = await self._read(kube.list_all(WORKLOADS, self._kube.namespace), "Workloads")
        reads = caller().reads
        titles, unreadable = await self._titles(workloads, reads)
        queue = queue_message(
            cluster_queue,
            local_queues,
            workloads,
            await self._positions(kube, feeding),
            now=self._clock(),
            local_queue=ref.local_queue,
            titles=titles,
        )
        for entry in (*queue.admitted, *queue.pending):
            if entry.work_unit and entry.work_unit.rsplit("/workUnits/", 1)[0] in unreadable:
                anonymize(entry)
        return queue

    async def SetWorkUnitPriority(
        self, request: queue_pb2.SetWorkUnitPriorityRequest, context: Any
    ) -> queue_pb2.SetWorkUnitPriorityResponse:
        identity = caller()
        require_admin(identity, "SetWorkUnitPriority")
        xid, wid = parse_work_unit_name(request.name)
        if request.priority_class not in PRIORITY_CLASSES:
            raise InvalidArgumentError(
                f"priority_class: {request.priority_class!r} is not one of XMC's "
                f"WorkloadPriorityClasses ({', '.join(PRIORITY_CLASSES)})"
            )
        task = await self._intents.set_priority(
            identity, xid, wid, request.priority_class, by=actor()
        )
        log.info(
            "priority change committed",
            xid=xid,
            wid=wid,
            priority_class=request.priority_class,
            task_id=task.task_id,
        )
        return queue_pb2.SetWorkUnitPriorityResponse(
            name=request.name,
            priority_class=request.priority_class,
            execution_id=task.target_eid,
            task_id=task.task_id,
        )

    # --- reads -------------------------------------------------------------------------

    async def _client(self) -> KubeClient:
        try:
            return await self._kube.client()
        except ClusterUnavailable as error:
            raise UnavailableError(f"the cluster cannot be read: {error}") from error

    async def _queues(self, kube: KubeClient) -> tuple[list[Obj], list[Obj]]:
        cluster_queues = await self._read(kube.list_all(CLUSTER_QUEUES, None), "ClusterQueues")
        local_queues = await self._read(
            kube.list_all(LOCAL_QUEUES, self._kube.namespace), "LocalQueues"
        )
        return cluster_queues, local_queues

    async def _read(self, listing: Any, what: str) -> list[Obj]:
        try:
            items: list[Obj] = await listing
        except KubeError as error:
            raise UnavailableError(f"cannot list Kueue's {what}: {error}") from error
        return items

    async def _positions(self, kube: KubeClient, local_queues: Sequence[str]) -> Positions:
        """Kueue's visibility API, one summary per LocalQueue; positions are in the
        ClusterQueue, so the summaries of its LocalQueues merge into one order."""
        by_name: dict[str, int] = {}
        for queue in local_queues:
            try:
                summary = await kube.pending_workloads(self._kube.namespace, queue)
            except KubeError as error:
                return Positions({}, f"Kueue's visibility API did not answer: {error}")
            for item in summary.get("items") or ():
                position = item.get("positionInClusterQueue") if isinstance(item, Mapping) else None
                if isinstance(position, int):
                    by_name[as_str(metadata_of(item).get("name"))] = position
        return Positions(by_name)

    async def _titles(
        self, workloads: Sequence[Obj], reads: ReadScope
    ) -> tuple[dict[str, str], set[str]]:
        """Experiment name → title of the experiments listed (one read each), and, when
        the caller's reads are restricted (decision 0048), the names it may not read."""
        titles: dict[str, str] = {}
        unreadable: set[str] = set()
        async with self._store.connection() as conn:
            for xid in experiment_ids(workloads):
                name = experiment_name(xid)
                if not reads.everything and not reads.can_read(await fetch_readers(conn, xid)):
                    unreadable.add(name)
                    continue
                try:
                    titles[name] = (await fetch_experiment(conn, xid)).title
                except NotFoundError:
                    continue  # a JobSet of a deleted experiment: no title
        return titles, unreadable


def anonymize(entry: queue_pb2.QueuedWorkload) -> None:
    """Another user's unit, for a caller whose reads are restricted: its place, priority,
    wait and Kueue's reason stay (who is ahead, and why), its names and message go."""
    for field in ("workload", "work_unit", "owner", "experiment_title", "message"):
        entry.ClearField(field)
