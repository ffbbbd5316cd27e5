"""The Actuator's JobSet verbs: a thin adapter over the shared :class:`xmc.kube_client.
KubeClient`, so handlers say what they do to a JobSet and nothing about HTTP.

Every failure leaves as :class:`xmc.kube.KubeError`, already classified
(``error.failure``); :func:`actuator.errors.classify_kubernetes_error` maps that to the
Actuator's permanent/transient codes in one place. Every call is bounded by
``XMC_KUBE_REQUEST_TIMEOUT``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from kubernetes_asyncio.client import Configuration

from xmc.kube import JOBSETS
from xmc.kube_client import DEFAULT_REQUEST_TIMEOUT, KubeClient
from xmc.settings import Settings


class JobSetClient:
    """JobSets in any namespace; owns its :class:`KubeClient` (close it with :meth:`close`)."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    @classmethod
    async def from_settings(cls, settings: Settings) -> Self:
        """``XMC_KUBE_URL`` when set (kubesim, ``kubectl proxy``), else the pod's service
        account (in-cluster), else the current context of ``~/.kube/config``."""
        return cls(await KubeClient.from_settings(settings))

    @classmethod
    async def for_configuration(
        cls, configuration: Configuration, *, request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    ) -> Self:
        return cls(
            await KubeClient.for_configuration(configuration, request_timeout=request_timeout)
        )

    async def close(self) -> None:
        await self.kube.close()

    async def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The JobSet, or None when there is none."""
        return await self.kube.get(JOBSETS, namespace, name)

    async def create_jobset(self, namespace: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """The created JobSet; a name clash is ``KubeFailure.ALREADY_EXISTS``."""
        return await self.kube.create(JOBSETS, namespace, manifest)

    async def delete_jobset(self, namespace: str, name: str, *, uid: str) -> None:
        """Delete only the JobSet with ``uid`` (a newer one of the same name is
        ``KubeFailure.CONFLICT``); children go in the background, the finalizer holds the
        JobSet itself."""
        await self.kube.delete(JOBSETS, namespace, name, uid=uid, propagation_policy="Background")

    async def patch_jobset(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386)."""
        return await self.kube.patch(JOBSETS, namespace, name, patch)
