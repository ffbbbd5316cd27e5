"""The ESS's one read-only Kubernetes client, shared by its cluster reads: the live
container logs (``xmc.v1.LogService``) and the queue view (``xmc.v1.QueueService``).

The client is made on the first read, not at start: an ESS whose cluster is out of reach
(or not configured, as in a store-only test) still serves everything it stores, and a
cluster read then says why it has nothing (:class:`ClusterUnavailable`). What the ESS may
read is k8s/base/rbac-ess.yaml: pods and their logs, Kueue's queues and Workloads, and
the LocalQueues' pending workloads; it never writes.
"""

from __future__ import annotations

import asyncio

from xmc.kube_client import KubeClient
from xmc.settings import Settings


class ClusterUnavailable(Exception):
    """The cluster cannot be read (not configured, or out of reach)."""


class LazyKube:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._kube: KubeClient | None = None
        self._lock = asyncio.Lock()

    @property
    def namespace(self) -> str:
        return self._settings.namespace

    async def client(self) -> KubeClient:
        async with self._lock:
            if self._kube is None:
                try:
                    self._kube = await KubeClient.from_settings(self._settings)
                except Exception as error:
                    raise ClusterUnavailable(f"no Kubernetes configuration: {error}") from error
            return self._kube

    async def close(self) -> None:
        if self._kube is not None:
            await self._kube.close()
