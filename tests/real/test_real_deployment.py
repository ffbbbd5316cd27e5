"""A deployment from ``k8s/`` alone (issue 25, point 7), on the real control plane: the
operator's steps of k8s/README.md, then a unit launched through the published client.

``kubectl apply -k k8s/overlays/kueue-example`` goes to kube-apiserver with its
server-side validation, Kueue's CRDs and webhooks; the objects it must leave are read
back; XMC's services run as the overlay's ServiceAccounts (tokens of those very objects,
checked by UID); ``xmanager==0.8.5.post1`` launches one work unit with its defaults, and
the real Kueue admits its JobSet's Workload on the overlay's queues with XMC's priority
class, before the unit reaches COMPLETED.

What it does not prove: no XMC process runs in the overlay's Deployments (the node agent
runs their pods as processes that never exit; the services run on the host with the
ServiceAccounts' tokens), so the image, the probes and the in-cluster configuration are
not exercised here (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from tests.compat.support import USER_TOKEN, client_venv
from tests.compat.test_published_client import run_client
from tests.real.support import KUBECONFIGS, NAMESPACE, POLL, ROOT, client_for, kubectl
from tests.stack import Stack
from tests.waiting import eventually
from xmc.kjson import condition_of
from xmc.kube import WORKLOADS
from xmc.kube_client import KubeClient
from xmc.model.states import WorkUnitState
from xmc.priority_classes import PRIORITY_CLASS_VALUES, priority_class_name
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc

OVERLAY = ROOT / "k8s" / "overlays" / "kueue-example"
Obj = dict[str, Any]


@pytest.fixture
async def deployed(admin: KubeClient) -> dict[tuple[str, str], Obj]:
    """The operator's steps before XMC's services start: the overlay applied, and every
    object of it as the API server now holds it, by (kind, name)."""
    # Whatever the setup and the other suites applied left the overlay's objects as the
    # overlay says (no object of the same name with another spec: nothing fights it).
    await kubectl("diff", "-k", str(OVERLAY))
    _out, stderr = await kubectl("apply", "-k", str(OVERLAY))
    assert "Warning" not in stderr, stderr
    await kubectl("diff", "-k", str(OVERLAY))
    built, _ = await kubectl("kustomize", str(OVERLAY))
    live, _ = await kubectl("get", "-k", str(OVERLAY), "-o", "json")
    objects = {(o["kind"], o["metadata"]["name"]): o for o in json.loads(live)["items"]}
    wanted = {(o["kind"], o["metadata"]["name"]) for o in _documents(built)}
    assert set(objects) == wanted
    return objects


async def test_the_documented_overlay_admits_a_unit_of_the_published_client(
    deployed: dict[tuple[str, str], Obj], auth_stack: Stack, admin: KubeClient
) -> None:
    """``deployed`` before ``auth_stack`` (argument order): the services start on the
    deployment, as an operator's would."""
    _check_deployment(deployed)
    for service, kubeconfig in KUBECONFIGS.items():
        user = await _whoami(kubeconfig)
        account = deployed[("ServiceAccount", f"xmc-{service}")]["metadata"]
        assert user["username"] == f"system:serviceaccount:{NAMESPACE}:xmc-{service}"
        assert user["uid"] == account["uid"]  # the overlay's object, not a namesake

    async with _admissions(admin) as admitted:
        python = client_venv("full")
        lines = await run_client(python, "client_sweep.py", auth_stack, "sweep", "1")
        xid = lines[0]["xid"]
        jobset = f"xmc-{xid}-1"
        async with grpc.aio.insecure_channel(auth_stack.endpoint) as channel:
            api = api_pb2_grpc.ExperimentStateServiceStub(channel)
            metadata = (("authorization", f"Bearer {USER_TOKEN}"),)
            experiment = await api.GetExperiment(
                api_pb2.GetExperimentRequest(name=f"experiments/{xid}"), metadata=metadata
            )
            unit_name = f"experiments/{xid}/workUnits/1"
            unit = await api.GetWorkUnit(
                api_pb2.GetWorkUnitRequest(name=unit_name), metadata=metadata
            )
            assert unit.executable.scheduling_constraints.queue_name == "cpu-queue"
            expected = priority_class_name(experiment.priority, unit.priority)
            assert expected == "xmc-priority-normal-normal"  # the client's defaults

            async def state() -> WorkUnitState:
                current = await api.GetWorkUnit(
                    api_pb2.GetWorkUnitRequest(name=unit_name), metadata=metadata
                )
                return WorkUnitState(current.current_work_unit_execution.status.state)

            await eventually(state, WorkUnitState.COMPLETED, within=180, every=POLL)
        await eventually(functools.partial(admitted.has, jobset), True, within=30, every=POLL)

    workload = admitted.seen[jobset]
    assert workload["spec"]["queueName"] == "cpu-queue"
    assert workload["status"]["admission"]["clusterQueue"] == "cluster-queue"
    flavors = {
        flavor
        for assignment in workload["status"]["admission"]["podSetAssignments"]
        for flavor in assignment["flavors"].values()
    }
    assert flavors == {"default-flavor"}
    reference = workload["spec"]["priorityClassRef"]
    assert (reference["kind"], reference["name"]) == ("WorkloadPriorityClass", expected)
    assert workload["spec"]["priority"] == PRIORITY_CLASS_VALUES[expected]
    conditions = {c["type"]: c["status"] for c in workload["status"]["conditions"]}
    assert conditions["QuotaReserved"] == conditions["Admitted"] == "True", conditions


# --- helpers -------------------------------------------------------------------------------


def _documents(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def _check_deployment(objects: dict[tuple[str, str], Obj]) -> None:
    """What k8s/README.md says the overlay deploys, as the API server holds it."""
    classes = {n: o["value"] for (k, n), o in objects.items() if k == "WorkloadPriorityClass"}
    assert classes == dict(PRIORITY_CLASS_VALUES)
    assert ("ResourceFlavor", "default-flavor") in objects
    cluster_queue = objects[("ClusterQueue", "cluster-queue")]
    assert condition_of(cluster_queue, "Active", status="True"), cluster_queue.get("status")
    groups = cluster_queue["spec"]["resourceGroups"]
    assert [f["name"] for g in groups for f in g["flavors"]] == ["default-flavor"]
    local_queue = objects[("LocalQueue", "cpu-queue")]
    assert local_queue["metadata"]["namespace"] == NAMESPACE
    assert local_queue["spec"]["clusterQueue"] == "cluster-queue"
    assert condition_of(local_queue, "Active", status="True"), local_queue.get("status")
    accounts = {n for (k, n) in objects if k == "ServiceAccount"}
    assert accounts == {"xmc-ess", "xmc-actuator", "xmc-reconciler", "xmc-ui"}
    bindings = {
        n: [s["name"] for s in o["subjects"]] for (k, n), o in objects.items() if k == "RoleBinding"
    }
    assert bindings == {
        "xmc-ess": ["xmc-ess"],
        "xmc-actuator": ["xmc-actuator"],
        "xmc-reconciler": ["xmc-reconciler"],
        "xmc-reconciler-leader": ["xmc-reconciler"],
    }


async def _whoami(kubeconfig: Path) -> Obj:
    """The user the API server sees behind a kubeconfig (SelfSubjectReview)."""
    kube = await client_for(kubeconfig)
    try:
        review = await kube.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    finally:
        await kube.close()
    user: Obj = review["status"]["userInfo"]
    return user


class _Admissions:
    """Admitted Workloads of ``xmc`` by their JobSet's name, as last seen, polled in the
    background: a finished JobSet (and its Workload) is deleted by XMC's orphan sweep,
    possibly before the client's launch has even returned."""

    def __init__(self, admin: KubeClient) -> None:
        self.seen: dict[str, Obj] = {}
        self._admin = admin
        self.task = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            for workload in (await self._admin.list_page(WORKLOADS, NAMESPACE))["items"]:
                owners = workload["metadata"].get("ownerReferences") or []
                jobsets = [o["name"] for o in owners if o["kind"] == "JobSet"]
                if jobsets and (workload.get("status") or {}).get("admission"):
                    self.seen[jobsets[0]] = workload
            await asyncio.sleep(POLL)

    async def has(self, jobset: str) -> bool:
        if self.task.done():
            self.task.result()  # the poll's error, if it failed
        return jobset in self.seen


@contextlib.asynccontextmanager
async def _admissions(admin: KubeClient) -> AsyncIterator[_Admissions]:
    admissions = _Admissions(admin)
    try:
        yield admissions
    finally:
        admissions.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await admissions.task
