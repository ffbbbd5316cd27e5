"""The Actuator's JobSet verbs: a thin adapter over the shared :class:`xmc.kube_client.
KubeClient`, so handlers say what they do to a JobSet and nothing about HTTP.

Every failure leaves as :class:`xmc.kube.KubeError`, already classified
(``error.failure``); :func:`actuator.errors.classify_kubernetes_error` maps that to the
Actuator's permanent/transient codes in one place. Every call is bounded by
``XMC_KUBE_REQUEST_TIMEOUT``.

A 401 or 403 is permanent (SPEC §6), but only once it is believed: a kube-apiserver that
has just (re)started serves requests before its RBAC caches are filled, and for a moment
refuses a ServiceAccount what its Roles grant (``403 ... RBAC: [role.rbac.authorization.
k8s.io "xmc-actuator" not found, ...]``; measured on ``make cluster`` after restarts of
kube-apiserver: 40 ms to over 1 s, docs/cluster.md "Restarting a component"). In one run
of tests/real/test_real_restarts.py the five creates retried into that window failed
their units PERMISSION_DENIED. So a refused call is asked again on
:data:`REFUSAL_CONFIRMATION`'s schedule (7.5 s in all) and only a refusal that outlasts
it is raised; asking again is safe, a refused call changed nothing. 401 is treated the
same (a token the server cannot check yet), though only 403 was seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Self, TypeVar

import structlog
from kubernetes_asyncio.client import Configuration

from xmc.kube import JOBSETS, WORKLOADS, KubeError, KubeFailure
from xmc.kube_client import DEFAULT_REQUEST_TIMEOUT, KubeClient
from xmc.labels import KUEUE_JOB_UID
from xmc.retry import Backoffs, Sleep
from xmc.settings import Settings

log = structlog.get_logger()
T = TypeVar("T")

#: Seconds before each new ask of a call refused with 401 or 403; past the last, believed.
REFUSAL_CONFIRMATION: Final = Backoffs((0.5, 1.0, 2.0, 4.0))
_REFUSALS: Final = frozenset({KubeFailure.UNAUTHORIZED, KubeFailure.FORBIDDEN})


class JobSetClient:
    """JobSets in any namespace; owns its :class:`KubeClient` (close it with :meth:`close`)."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        confirmation: Backoffs = REFUSAL_CONFIRMATION,
        sleep: Sleep | None = None,  # injected for tests
    ) -> None:
        self.kube = kube
        self._confirmation = confirmation
        self._sleep = sleep

    @classmethod
    async def from_settings(cls, settings: Settings) -> Self:
        """``XMC_KUBE_URL`` when set (kubesim, ``kubectl proxy``), else the pod's service
        account (in-cluster), else the current context of ``~/.kube/config``."""
        return cls(await KubeClient.from_settings(settings))

    @classmethod
    async def for_configuration(
        cls,
        configuration: Configuration,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        confirmation: Backoffs = REFUSAL_CONFIRMATION,
    ) -> Self:
        kube = await KubeClient.for_configuration(configuration, request_timeout=request_timeout)
        return cls(kube, confirmation=confirmation)

    async def close(self) -> None:
        await self.kube.close()

    async def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The JobSet, or None when there is none."""
        return await self._believed(lambda: self.kube.get(JOBSETS, namespace, name))

    async def create_jobset(self, namespace: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """The created JobSet; a name clash is ``KubeFailure.ALREADY_EXISTS``."""
        return await self._believed(lambda: self.kube.create(JOBSETS, namespace, manifest))

    async def delete_jobset(self, namespace: str, name: str, *, uid: str) -> None:
        """Delete only the JobSet with ``uid`` (a newer one of the same name is
        ``KubeFailure.CONFLICT``); children go in the background, the finalizer holds the
        JobSet itself."""
        await self._believed(
            lambda: self.kube.delete(
                JOBSETS, namespace, name, uid=uid, propagation_policy="Background"
            )
        )

    async def workloads_of(self, namespace: str, uid: str) -> int:
        """How many Kueue Workloads made for the JobSet ``uid`` are left (0 without Kueue).

        A Restart creates execution N+1's JobSet only once N's Workload is gone too, and
        the garbage collector deletes that Workload only after the JobSet itself is gone.
        Kueue (v0.17 ``jobframework.FindMatchingWorkloads``, ``EquivalentToWorkload``)
        matches Workloads to a job by the owner's *name*: a new JobSet created while the
        old, admitted Workload lingered was started under the old admission, then stuck
        for good once Kueue admitted its own Workload ("invalid admission check
        PodSetUpdate: conflict for annotations ... kueue.x-k8s.io/workload"), as seen on
        the real control plane (decision 0032)."""
        try:
            page = await self._believed(
                lambda: self.kube.list_page(
                    WORKLOADS, namespace, label_selector=f"{KUEUE_JOB_UID}={uid}"
                )
            )
        except KubeError as error:
            if error.failure is KubeFailure.NOT_FOUND:  # no Kueue: no Workloads
                return 0
            raise
        return len(page.get("items") or [])

    async def patch_jobset(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386)."""
        return await self._believed(lambda: self.kube.patch(JOBSETS, namespace, name, patch))

    async def _believed(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, asked again while the server refuses it (401/403) and the
        confirmation schedule lasts (see the module docstring)."""
        refusals = 0
        while True:
            try:
                return await call()
            except KubeError as error:
                if error.failure not in _REFUSALS:
                    raise
                refusals += 1
                delay = self._confirmation.within(refusals)
                if delay is None:
                    raise
                log.info(
                    "refused; asking again in case the API server has just started",
                    error=str(error),
                    refusals=refusals,
                    delay=delay,
                )
                await (self._sleep or asyncio.sleep)(delay)
