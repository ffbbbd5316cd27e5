"""Kueue's visibility API (``visibility.kueue.x-k8s.io``): the pending Workloads of a
ClusterQueue or LocalQueue, from the Kueue simulator.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from kubesim.api.context import CONTEXT, json_response
from kubesim.api.decode import non_negative_int
from kubesim.errors import ApiError, not_found
from kubesim.resources import CLUSTER_QUEUE, LOCAL_QUEUE
from kubesim.store import ObjectStore

Obj = dict[str, Any]

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta1"


def _pending_workloads(store: ObjectStore, cluster_queue: str) -> list[Obj]:
    """From the Kueue simulator (imported here so the API alone never needs it)."""
    try:
        from kubesim.controllers.kueue.visibility import pending_workloads
    except ImportError:
        raise ApiError(503, "ServiceUnavailable", "the Kueue simulator is not available") from None
    return pending_workloads(store, cluster_queue)


def _summary(items: list[Obj], query: Any) -> web.Response:
    offset = non_negative_int(query.get("offset"), "offset")
    limit = non_negative_int(query.get("limit"), "limit") or 1000
    return json_response(
        {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": f"{VISIBILITY_GROUP}/{VISIBILITY_VERSION}",
            "metadata": {"creationTimestamp": None},
            "items": items[offset : offset + limit],
        }
    )


async def cluster_queue_pending(request: web.Request) -> web.Response:
    await request.app[CONTEXT].faults.apply("get", "clusterqueues/pendingworkloads", request.path)
    store = request.app[CONTEXT].store
    name = request.match_info["name"]
    store.get(CLUSTER_QUEUE, None, name)
    return _summary(_pending_workloads(store, name), request.query)


async def local_queue_pending(request: web.Request) -> web.Response:
    await request.app[CONTEXT].faults.apply("get", "localqueues/pendingworkloads", request.path)
    store = request.app[CONTEXT].store
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    queue = store.get(LOCAL_QUEUE, namespace, name)
    cluster_queue = (queue.get("spec") or {}).get("clusterQueue")
    if not cluster_queue:
        raise not_found("clusterqueues", "", CLUSTER_QUEUE.group)
    items = [
        item
        for item in _pending_workloads(store, cluster_queue)
        if item.get("metadata", {}).get("namespace") == namespace
        and item.get("localQueueName") == name
    ]
    return _summary(items, request.query)
