"""Kueue's visibility API: the pending Workloads of a ClusterQueue or LocalQueue, in
admission order, with their 0-based positions.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kubesim.resources import WORKLOAD
from kubesim.store import ObjectStore

from .admission import pending_by_cluster_queue
from .model import QueuedWorkload
from .parse import parse_workload, queue_state

Obj = dict[str, Any]


def _pending_items(store: ObjectStore, cluster_queue: str) -> list[tuple[QueuedWorkload, Obj]]:
    objects = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in store.list(WORKLOAD)}
    workloads = [parse_workload(w) for w in objects.values()]
    queue = pending_by_cluster_queue(queue_state(store), workloads).get(cluster_queue, [])
    local_positions: dict[tuple[str, str], int] = defaultdict(int)
    items = []
    for position, workload in enumerate(queue):
        meta = objects[workload.key]["metadata"]
        local = (workload.namespace, workload.queue_name)
        item = {
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "creationTimestamp": meta.get("creationTimestamp"),
                "ownerReferences": meta.get("ownerReferences") or [],
            },
            "priority": workload.priority,
            "localQueueName": workload.queue_name,
            "positionInClusterQueue": position,
            "positionInLocalQueue": local_positions[local],
        }
        local_positions[local] += 1
        items.append((workload, item))
    return items


def pending_workloads(store: ObjectStore, cluster_queue: str) -> list[dict[str, Any]]:
    """Kueue visibility ``PendingWorkload`` items of a ClusterQueue, in admission order
    (0-based ``positionInClusterQueue`` and ``positionInLocalQueue``)."""
    return [item for _, item in _pending_items(store, cluster_queue)]


def pending_workloads_in_local_queue(
    store: ObjectStore, namespace: str, local_queue: str
) -> list[dict[str, Any]]:
    """The same items for one LocalQueue (positions as in the ClusterQueue listing)."""
    cq = queue_state(store).local_queues.get((namespace, local_queue))
    if cq is None:
        return []
    return [
        item
        for workload, item in _pending_items(store, cq)
        if (workload.namespace, workload.queue_name) == (namespace, local_queue)
    ]
