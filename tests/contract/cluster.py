"""What a contract test gets: a cluster (kubesim or real), a fresh namespace, a ``wait``
in cluster seconds, and XMC's own code paths to act on it — the Actuator's JobSet builder
and :class:`xmc.kube_client.KubeClient`, and the Reconciler's finalizer-removal patch."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import pytest
from kubernetes_asyncio.client import ApiClient

from actuator.kube import JobSetClient
from actuator.manifest import build_base_jobset
from kubesim.server import KubeSim
from reconciler.observe import finalizer_removal_patch
from tests.contract.setup import LOCAL_QUEUE
from tests.waiting import eventually, holds_for
from xmc import labels
from xmc.kjson import condition_of
from xmc.kube import JOBSETS, PODS, WORKLOADS, KubeError, KubeFailure, Resource
from xmc.kube_client import KubeClient
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1.tasks_pb2 import Task, TaskPayload

ON_REAL_CLUSTER: Final = bool(os.environ.get("KUBECONFIG"))
"""The suite runs on the cluster of ``KUBECONFIG`` when that is set, else on kubesim."""
Obj = dict[str, Any]
T = TypeVar("T")
JOBS: Final = Resource("batch", "v1", "jobs")
XID: Final = 4242
WORK_UNIT_MILLICORES: Final = 500
LOW, HIGH = 1, 3
POLL_SECONDS: Final = 0.05
"""Real seconds between two looks at the cluster."""


def on_kubesim_xfail(point: int, what: str) -> pytest.MarkDecorator:
    """A scenario today's kubesim fails (another part of issue 13 fixes it): expected to
    fail on kubesim only; a real cluster must pass it."""
    return pytest.mark.xfail(
        condition=not ON_REAL_CLUSTER,
        strict=True,
        reason=f"kubesim: {what}, issue 13 point {point}",
    )


@dataclass
class Cluster:
    api: ApiClient
    kube: KubeClient
    namespace: str
    scale: float
    """Cluster seconds per real second: kubesim's time scale, 1 on a real cluster."""
    sim: KubeSim | None = None

    @property
    def jobsets(self) -> JobSetClient:
        """The Actuator's JobSet verbs."""
        return JobSetClient(self.kube)

    async def wait(self, condition: Callable[[], Awaitable[T]], *, within: float, what: str) -> T:
        """``eventually`` in cluster seconds: the first truthy value of ``condition``.
        ``condition`` may raise AssertionError to fail early."""
        return await eventually(
            condition,
            within=within / self.scale,
            every=POLL_SECONDS,
            what=f"{what} (within {within} cluster seconds)",
        )

    async def holds(
        self, condition: Callable[[], Awaitable[bool]], *, during: float, what: str
    ) -> None:
        """``holds_for`` in cluster seconds: an observation window for what must *not*
        happen, never a synchronisation."""
        await holds_for(
            condition,
            during=during / self.scale,
            every=POLL_SECONDS,
            what=f"{what} (for {during} cluster seconds)",
        )

    # --- reading --------------------------------------------------------------------

    async def jobset(self, name: str) -> Obj | None:
        return await self.kube.get(JOBSETS, self.namespace, name)

    async def owned(self, resource: Resource, jobset: Obj) -> list[Obj]:
        """Objects of ``resource`` labelled with (Jobs, pods) or owned by (Workloads) the
        JobSet."""
        name, uid = jobset["metadata"]["name"], jobset["metadata"]["uid"]
        if resource is WORKLOADS:
            page = await self.kube.list_page(resource, self.namespace)
            return [
                w
                for w in page["items"]
                if any(r.get("uid") == uid for r in w["metadata"].get("ownerReferences", []))
            ]
        selector = f"jobset.sigs.k8s.io/jobset-name={name}"
        page = await self.kube.list_page(resource, self.namespace, label_selector=selector)
        items: list[Obj] = page["items"]
        return items

    async def admitted(self, jobset: Obj) -> bool:
        workloads = await self.owned(WORKLOADS, jobset)
        return any(condition_true(w, "Admitted") for w in workloads)

    async def running_pods(self, jobset: Obj) -> list[Obj]:
        pods = await self.owned(PODS, jobset)
        return [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]

    # --- acting as XMC --------------------------------------------------------------

    async def create_work_unit(
        self, wid: int, *, eid: int = 1, priority: int = LOW, **shape: Any
    ) -> Obj:
        """Create the JobSet the Actuator creates for execution ``eid`` of work unit
        ``wid``: its own builder, through its own client (``shape``: see
        :func:`xmc_jobset`)."""
        manifest = xmc_jobset(self.namespace, wid, eid=eid, priority=priority, **shape)
        return await self.jobsets.create_jobset(self.namespace, manifest)

    async def stop(self, jobset: Obj) -> Obj:
        """The Actuator's stop: delete this very JobSet (uid), children in the background."""
        name, uid = jobset["metadata"]["name"], jobset["metadata"]["uid"]
        await self.jobsets.delete_jobset(self.namespace, name, uid=uid)
        found = await self.jobset(name)
        assert found is not None, "the finalizer must hold the deleted JobSet"
        return found

    async def release(self, name: str) -> None:
        """The Reconciler's last step of a stop: drop XMC's finalizer (with the
        resourceVersion precondition it always sends), re-read on a conflict."""
        for _ in range(5):
            current = await self.jobset(name)
            if current is None:
                return
            try:
                await self.kube.patch(
                    JOBSETS, self.namespace, name, finalizer_removal_patch(current)
                )
                return
            except KubeError as error:  # a conflict: the JobSet moved, read it again
                if error.failure is not KubeFailure.CONFLICT:
                    raise
        raise AssertionError(f"could not remove the finalizer of {name}")

    async def running(self, jobset: Obj, *, within: float = 120) -> list[Obj]:
        """Wait until ``jobset`` is admitted and has a running pod; its running pods."""
        name = jobset["metadata"]["name"]
        await self.wait(lambda: self.admitted(jobset), within=within, what=f"{name} admitted")
        return await self.wait(
            lambda: self.running_pods(jobset), within=within, what=f"{name} has running pods"
        )


def condition_true(obj: Obj, kind: str) -> bool:
    return condition_of(obj, kind, status="True") is not None


def xmc_jobset(
    namespace: str,
    wid: int,
    *,
    eid: int = 1,
    priority: int = LOW,
    behavior: Mapping[str, Any] | None = None,
    grace_seconds: int = 30,
) -> Obj:
    """``build_base_jobset`` of a work unit that by default runs until stopped (``sleep``
    on a cluster with kubelets, the ``kubesim.xmc/behavior`` annotation on kubesim and the
    loopback control plane's nodes), asks for the whole contract queue's CPU, and takes
    ``grace_seconds`` to terminate (``sleep`` as PID 1 ignores SIGTERM)."""
    work_unit = WorkUnit(name=f"experiments/{XID}/workUnits/{wid}", priority=priority)  # type: ignore[arg-type]
    work_unit.executable.scheduling_constraints.queue_name = LOCAL_QUEUE
    job = work_unit.executable.jobset.jobs.add(name="main", replicas=1)
    job.spec.docker_image = "busybox:1.36"
    job.spec.command.extend(["sleep", "3600"])
    job.spec.resources.cpu_resources.cpu_millicores = WORK_UNIT_MILLICORES
    job.spec.resources.cpu_resources.memory_bytes = 64 * 2**20
    job.annotations["kubesim.xmc/behavior"] = json.dumps(
        {"run_seconds": None} if behavior is None else dict(behavior)
    )
    job.termination_grace_period_seconds = grace_seconds
    task = Task(
        task_id=f"contract-{wid}-{eid}",
        kind=Task.CREATE if eid == 1 else Task.RESTART,
        xid=XID,
        wid=wid,
        target_eid=eid if eid == 1 else eid - 1,
        operation=f"experiments/{XID}/workUnits/{wid}/operations/contract-{eid}",
        payload=TaskPayload(work_unit=work_unit, eid=eid, experiment_priority=priority),  # type: ignore[arg-type]
    )
    set_timestamp(task.operation_time, datetime.now(UTC))
    return build_base_jobset(task, namespace=namespace)


FINALIZER: Final = labels.FINALIZER
