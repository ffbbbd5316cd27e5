"""XMC unchanged on a real API server (issue 25, points 2 and 3): its services as OS
processes, authenticating as k8s/base's ServiceAccounts through the kubeconfig path (TLS,
bearer token from the TokenRequest API), against kube-apiserver with RBAC, JobSet, Kueue
and kwok's fake Nodes. A permission missing from k8s/base fails one of these tests."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.longrunning import operations_grpc_pb2
from google.longrunning.operations_proto_pb2 import GetOperationRequest, Operation
from kubernetes_asyncio.config import incluster_config

from tests.integration.processes import Client, running_stack
from tests.integration.support import forever_work_unit, minimal_work_unit
from tests.real.support import (
    KUBECONFIGS,
    NAMESPACE,
    ROOT,
    clean_namespace,
    client_for,
    kubectl,
)
from tests.servers import ADMIN_DSN, REDIS_URL
from tests.stack import RealCluster, Stack, StackOptions
from tests.waiting import eventually
from xmc import labels
from xmc.kube import JOBSETS, KubeError, KubeFailure, api_client, load_configuration
from xmc.kube_client import KubeClient
from xmc.model.states import WorkUnitState
from xmc.settings import Settings
from xmc_api.cloud.xmanager.v1 import api_pb2

S = WorkUnitState
BASE = ROOT / "k8s" / "base"

# (ServiceAccount, verb, group, resource[/subresource], name): every call XMC's ESS, Actuator
# and Reconciler make (services/ess/live_logs.py; services/actuator/kube.py; reconciler
# app.py, finalizer.py, vanished.py, evidence.py, leader.py, queue_positions.py,
# log_capture.py).
USED: list[tuple[str, str, str, str, str]] = [
    *(("xmc-actuator", v, "jobset.x-k8s.io", "jobsets", "") for v in
      ("get", "create", "delete", "patch")),
    ("xmc-actuator", "list", "kueue.x-k8s.io", "workloads", ""),
    *(("xmc-reconciler", v, "jobset.x-k8s.io", "jobsets", "") for v in
      ("get", "list", "watch", "patch", "delete")),
    *(("xmc-reconciler", v, "kueue.x-k8s.io", "workloads", "") for v in ("get", "list", "watch")),
    *(("xmc-reconciler", v, "", "pods", "") for v in ("get", "list", "watch")),
    ("xmc-reconciler", "get", "", "pods/log", ""),
    *(("xmc-ess", v, "", "pods", "") for v in ("get", "list")),
    ("xmc-ess", "get", "", "pods/log", ""),
    ("xmc-reconciler", "get", "batch", "jobs", ""),
    ("xmc-reconciler", "get", "visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", ""),
    ("xmc-reconciler", "create", "coordination.k8s.io", "leases", ""),
    ("xmc-reconciler", "get", "coordination.k8s.io", "leases", "xmc-reconciler"),
    ("xmc-reconciler", "update", "coordination.k8s.io", "leases", "xmc-reconciler"),
]  # fmt: skip
#: Least privilege: what neither may do.
NOT_GRANTED: list[tuple[str, str, str, str, str]] = [
    ("xmc-actuator", "list", "jobset.x-k8s.io", "jobsets", ""),
    ("xmc-actuator", "get", "", "pods", ""),
    ("xmc-actuator", "watch", "kueue.x-k8s.io", "workloads", ""),
    ("xmc-actuator", "get", "", "secrets", ""),
    ("xmc-reconciler", "create", "jobset.x-k8s.io", "jobsets", ""),
    ("xmc-reconciler", "update", "coordination.k8s.io", "leases", "someone-elses-lease"),
    ("xmc-reconciler", "list", "", "secrets", ""),
    ("xmc-reconciler", "get", "visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads", ""),
    ("xmc-ess", "watch", "", "pods", ""),
    ("xmc-ess", "delete", "", "pods", ""),
    ("xmc-ess", "get", "jobset.x-k8s.io", "jobsets", ""),
    ("xmc-ess", "get", "", "secrets", ""),
]


async def _allowed(kube: KubeClient, verb: str, group: str, resource: str, name: str) -> bool:
    plural, _, subresource = resource.partition("/")
    attributes = {"namespace": NAMESPACE, "verb": verb, "group": group, "resource": plural}
    if subresource:
        attributes["subresource"] = subresource
    if name:
        attributes["name"] = name
    review = await kube.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    return bool(review["status"].get("allowed"))


async def test_k8s_base_grants_every_call_xmc_makes_and_no_more(admin: KubeClient) -> None:
    """Each ServiceAccount asks the API server itself (SelfSubjectAccessReview, with its
    own token) — one line per permission, so a gap names itself."""
    clients = {
        "xmc-actuator": await client_for(KUBECONFIGS["actuator"]),
        "xmc-reconciler": await client_for(KUBECONFIGS["reconciler"]),
        "xmc-ess": await client_for(KUBECONFIGS["ess"]),
    }
    try:
        denied = [u for u in USED if not await _allowed(clients[u[0]], *u[1:])]
        granted = [u for u in NOT_GRANTED if await _allowed(clients[u[0]], *u[1:])]
    finally:
        for kube in clients.values():
            await kube.close()
    assert denied == [], "k8s/base lacks these permissions XMC uses"
    assert granted == [], "k8s/base grants more than XMC needs"


async def test_create_runs_to_completed(admin: KubeClient, client: Client) -> None:
    """Actuator creates the JobSet (as xmc-actuator), Kueue admits it, the Job controller
    and kwok run its pod to Succeeded, the Reconciler (as xmc-reconciler, leading through
    its Lease) reports COMPLETED and removes the finished JobSet."""
    parent = await client.experiment()
    name = await client.create(parent, minimal_work_unit())
    await eventually(lambda: client.state(name), S.COMPLETED, within=90)
    xid, wid = name.split("/")[1::2]
    # Released and deleted by the orphan sweep, whose first pass is 30 s after the
    # Reconciler starts: up to ~25 s after COMPLETED, so 30 s left no room for a slow pass.
    await eventually(lambda: _exists(admin, f"xmc-{xid}-{wid}"), False, within=60)


async def test_create_runs_then_completes_observed_running(client: Client) -> None:
    parent = await client.experiment()
    work_unit = minimal_work_unit()
    work_unit.executable.jobset.jobs[0].annotations["kubesim.xmc/behavior"] = (
        '{"start_seconds": 1, "run_seconds": 5}'
    )
    name = await client.create(parent, work_unit)
    await eventually(lambda: client.state(name), S.RUNNING, within=60)
    await eventually(lambda: client.state(name), S.COMPLETED, within=60)


async def test_stop_of_a_running_unit_goes_through_the_finalizer(
    admin: KubeClient, client: Client
) -> None:
    parent = await client.experiment()
    name = await client.create(parent, forever_work_unit())
    await eventually(lambda: client.state(name), S.RUNNING, within=60)
    await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name))
    await eventually(lambda: client.state(name), S.STOPPED, within=60)
    xid, wid = name.split("/")[1::2]
    await eventually(lambda: _exists(admin, f"xmc-{xid}-{wid}"), False, within=30)


async def test_stop_of_a_queued_unit_goes_through_the_finalizer(
    admin: KubeClient, client: Client
) -> None:
    """A unit larger than cluster-queue's 64 CPUs stays queued (SCHEDULING, its JobSet
    suspended); StopWorkUnit: the Actuator deletes the JobSet (uid precondition), XMC's
    finalizer holds it, the Reconciler patches the finalizer away: STOPPED, JobSet gone.
    The finalizer path as a RUNNING stop takes it, without needing a running pod."""
    parent = await client.experiment()
    name = await client.create(parent, forever_work_unit(cpu_millicores=100_000))
    await eventually(lambda: client.state(name), S.SCHEDULING, within=60)
    xid, wid = name.split("/")[1::2]
    jobset = await admin.get(JOBSETS, NAMESPACE, f"xmc-{xid}-{wid}")
    assert jobset is not None
    assert jobset["spec"]["suspend"] is True
    assert labels.FINALIZER in jobset["metadata"].get("finalizers", [])
    await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name))
    await eventually(lambda: client.state(name), S.STOPPED, within=60)
    await eventually(lambda: _exists(admin, f"xmc-{xid}-{wid}"), False, within=30)


async def test_an_actuator_without_create_fails_the_unit_naming_the_permission(
    admin: KubeClient, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """k8s/base's Roles, in a namespace of the test's own, with `create` taken out of the
    Actuator's: the CREATE's Operation ends PERMISSION_DENIED with the API server's 403,
    which names the verb and the resource (once the 403 outlasts the Actuator's 7.5 s
    confirmation, ``actuator.kube``)."""
    namespace = f"xmc-rbac-{uuid.uuid4().hex[:8]}"
    try:
        kubeconfigs = await _narrowed_namespace(admin, namespace, tmp_path, drop=("create",))
        options = StackOptions(real=RealCluster(namespace, kubeconfigs))
        async with running_stack(ADMIN_DSN, REDIS_URL, tmp_path / "logs", request, options) as st:
            client = Client(st)
            try:
                parent = await client.experiment()
                operation = await client.api.CreateWorkUnit(
                    api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit())
                )
                done = await _finished(st, str(operation.name))
            finally:
                await client.channel.close()
        assert done.error.code == 7, done  # PERMISSION_DENIED
        assert 'cannot create resource "jobsets"' in done.error.message, done.error.message
        assert f"system:serviceaccount:{namespace}:xmc-actuator" in done.error.message
        assert (await admin.list_page(JOBSETS, namespace))["items"] == []
    finally:
        await clean_namespace(admin, namespace)
        await admin.request("DELETE", f"/api/v1/namespaces/{namespace}")


async def test_the_in_cluster_path_with_a_service_account_token(
    admin: KubeClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load_configuration``'s in-cluster branch (no XMC_KUBE_URL, KUBERNETES_SERVICE_*
    set): a pod's token and CA files, here written by the test. kubernetes-asyncio reads
    them from fixed paths under /var/run/secrets, so the paths are patched in-process (a
    service process cannot be pointed elsewhere without writing there)."""
    kubeconfig = yaml.safe_load(KUBECONFIGS["reconciler"].read_text())
    server = kubeconfig["clusters"][0]["cluster"]["server"]
    (tmp_path / "token").write_text(kubeconfig["users"][0]["user"]["token"])
    shutil.copyfile(
        kubeconfig["clusters"][0]["cluster"]["certificate-authority"], tmp_path / "ca.crt"
    )
    host, port = server.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))

    configuration = await load_configuration(Settings())
    assert configuration.host == server
    assert configuration.ssl_ca_cert == str(tmp_path / "ca.crt")

    kube = KubeClient(await api_client(configuration))
    try:
        assert (await kube.list_page(JOBSETS, NAMESPACE))["items"] == []  # allowed: list
        with pytest.raises(KubeError) as denied:  # not granted: create
            await kube.create(JOBSETS, NAMESPACE, {"metadata": {"name": "x"}})
        assert denied.value.failure is KubeFailure.FORBIDDEN
        assert "system:serviceaccount:xmc:xmc-reconciler" in denied.value.message
    finally:
        await kube.close()


async def test_every_k8s_overlay_passes_a_server_side_dry_run(admin: KubeClient) -> None:
    overlays = sorted(p.parent for p in (ROOT / "k8s").rglob("kustomization.yaml"))
    assert BASE in overlays
    for overlay in overlays:
        _out, stderr = await kubectl("apply", "--dry-run=server", "-k", str(overlay))
        assert "Warning" not in stderr, f"{overlay}: {stderr}"


# --- helpers -------------------------------------------------------------------------------


async def _exists(kube: KubeClient, name: str) -> bool:
    return await kube.get(JOBSETS, NAMESPACE, name) is not None


async def _finished(stack: Stack, name: str, within: float = 60) -> Operation:
    stub = operations_grpc_pb2.OperationsStub(grpc_channel := Client(stack).channel)
    try:

        async def done() -> bool:
            return bool((await stub.GetOperation(GetOperationRequest(name=name))).done)

        await eventually(done, True, within=within)
        reply: Operation = await stub.GetOperation(GetOperationRequest(name=name))
        return reply
    finally:
        await grpc_channel.close()


async def _narrowed_namespace(
    admin: KubeClient, namespace: str, tmp_path: Path, *, drop: tuple[str, ...]
) -> dict[str, Path]:
    """k8s/base's ServiceAccounts and namespaced Roles/RoleBindings moved to
    ``namespace``, ``drop`` taken out of the Actuator's Role; a LocalQueue; kubeconfigs."""
    await admin.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    objects: list[dict[str, Any]] = []
    for file in ("serviceaccounts.yaml", "rbac-actuator.yaml", "rbac-reconciler.yaml",
                 "rbac-ess.yaml"):  # fmt: skip
        objects += [o for o in yaml.safe_load_all((BASE / file).read_text()) if o]
    for obj in objects:
        if obj["kind"] not in ("ServiceAccount", "Role", "RoleBinding"):
            continue  # cluster-scoped: k8s/base's own stay as they are
        obj["metadata"]["namespace"] = namespace
        for subject in obj.get("subjects", []):
            subject["namespace"] = namespace
        if obj["kind"] == "Role" and obj["metadata"]["name"] == "xmc-actuator":
            for rule in obj["rules"]:
                rule["verbs"] = [v for v in rule["verbs"] if v not in drop]
        await admin.request("POST", _collection(obj, namespace), body=obj)
    await admin.request(
        "POST",
        f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues",
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "cpu-queue"},
            "spec": {"clusterQueue": "cluster-queue"},
        },
    )
    kubeconfigs = {}
    for service in ("ess", "actuator", "reconciler"):
        token = await admin.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/xmc-{service}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": 3600}},
        )  # fmt: skip
        config = yaml.safe_load(KUBECONFIGS[service].read_text())
        config["users"][0]["user"]["token"] = token["status"]["token"]
        path = tmp_path / f"{service}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        kubeconfigs[service] = path
    return kubeconfigs


def _collection(obj: dict[str, Any], namespace: str) -> str:
    plural = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings"}
    api = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    return f"{api}/namespaces/{namespace}/{plural[obj['kind']]}"
