"""What ``kubectl`` needs of the API server: Table output (``as=Table``), short names in
discovery and OpenAPI documents — through kubernetes-asyncio over HTTP, and with the real
``kubectl`` binary when one is on the PATH."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from kubesim.openapi import PROTOBUF_V2
from kubesim.resources import CLUSTER_QUEUE, JOB, JOBSET, POD, WORKLOAD
from kubesim.server import KubeSim
from tests.kubesim.support import JOBSET_API, client_for, jobset, kubectl, needs_kubectl

G, V = JOBSET_API
Obj = dict[str, Any]
TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)
"""What ``kubectl get`` sends."""


async def _get(api: ApiClient, path: str, accept: str = "application/json") -> Any:
    response = await api.call_api(
        path, "GET", header_params={"Accept": accept}, _preload_content=False
    )
    body = await response.read()
    return body if "protobuf" in accept else json.loads(body)


def _columns(table: Obj) -> list[str]:
    return [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]


def _cells(table: Obj, row: int = 0) -> dict[str, Any]:
    names = [c["name"] for c in table["columnDefinitions"]]
    return dict(zip(names, table["rows"][row]["cells"], strict=True))


def _running_pod(name: str) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]},
    }


async def test_pods_print_as_a_table(kubesim: KubeSim) -> None:
    store = kubesim.store
    store.create(POD, _running_pod("p"), "default")
    store.update(
        POD,
        "default",
        "p",
        lambda pod: pod.update(
            status={
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [
                    {"name": "a", "ready": True, "restartCount": 0, "state": {"running": {}}},
                    {
                        "name": "b",
                        "ready": False,
                        "restartCount": 2,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    },
                ],
            }
        ),
        subresource="status",
    )
    async with client_for(kubesim) as api:
        listed = await _get(api, "/api/v1/namespaces/default/pods", TABLE)
        got = await _get(api, "/api/v1/namespaces/default/pods/p", TABLE)
        plain = await _get(api, "/api/v1/namespaces/default/pods/p")
    assert listed["kind"] == "Table"
    assert listed["apiVersion"] == "meta.k8s.io/v1"
    assert _columns(listed) == ["Name", "Ready", "Status", "Restarts", "Age"]
    cells = _cells(listed)
    assert (cells["Name"], cells["Ready"], cells["Status"], cells["Restarts"]) == (
        "p",
        "1/2",
        "CrashLoopBackOff",
        "2",
    )
    assert cells["Age"].endswith("s")
    row_object = listed["rows"][0]["object"]
    assert row_object["kind"] == "PartialObjectMetadata"
    assert row_object["metadata"]["name"] == "p"
    assert listed["metadata"]["resourceVersion"] == str(store.resource_version)
    assert got["rows"][0]["cells"][:4] == ["p", "1/2", "CrashLoopBackOff", "2"]
    assert plain["kind"] == "Pod"  # plain JSON is still plain


async def test_jobsets_workloads_and_jobs_print_upstreams_columns(kubesim: KubeSim) -> None:
    store = kubesim.store
    store.create(JOBSET, {**jobset("js"), "spec": {"suspend": True}}, "default")
    store.create(
        WORKLOAD,
        {"metadata": {"name": "wl"}, "spec": {"queueName": "cpu-queue"}},
        "default",
    )
    store.update(
        WORKLOAD,
        "default",
        "wl",
        lambda wl: wl.update(
            status={
                "admission": {"clusterQueue": "cluster-queue"},
                "conditions": [{"type": "Admitted", "status": "True"}],
            }
        ),
        subresource="status",
    )
    store.create(JOB, {"metadata": {"name": "j"}, "spec": {"completions": 2}}, "default")
    async with client_for(kubesim) as api:
        jobsets = await _get(api, f"/apis/{G}/{V}/namespaces/default/jobsets", TABLE)
        workloads = await _get(api, "/apis/kueue.x-k8s.io/v1beta2/workloads", TABLE)
        jobs = await _get(api, "/apis/batch/v1/namespaces/default/jobs", TABLE)
    assert _columns(jobsets) == [
        "Name",
        "TerminalState",
        "Restarts",
        "Completed",
        "Suspended",
        "Age",
    ]
    assert _cells(jobsets)["Suspended"] == "true"
    assert _cells(jobsets)["TerminalState"] is None
    assert _columns(workloads) == ["Name", "Queue", "Reserved in", "Admitted", "Finished", "Age"]
    assert _cells(workloads)["Reserved in"] == "cluster-queue"
    assert _cells(workloads)["Admitted"] == "True"
    assert _columns(jobs) == ["Name", "Status", "Completions", "Duration", "Age"]
    assert _cells(jobs)["Status"] == "Running"
    assert _cells(jobs)["Completions"] == "0/2"


async def test_a_watch_as_table_sends_one_row_tables(kubesim: KubeSim) -> None:
    """``kubectl get -w``: every event's object is a Table with that object's row."""
    kubesim.store.create(POD, _running_pod("p"), "default")
    async with client_for(kubesim) as api:
        response = await api.call_api(
            "/api/v1/namespaces/default/pods",
            "GET",
            query_params=[("watch", "true")],
            header_params={"Accept": TABLE},
            _preload_content=False,
        )
        line = await asyncio.wait_for(response.content.readline(), 5)
        response.close()
    event = json.loads(line)
    assert event["type"] == "ADDED"
    assert event["object"]["kind"] == "Table"
    assert [row["cells"][0] for row in event["object"]["rows"]] == ["p"]


async def test_include_object_none_and_object(kubesim: KubeSim) -> None:
    kubesim.store.create(POD, _running_pod("p"), "default")
    async with client_for(kubesim) as api:
        bare = await _get(api, "/api/v1/namespaces/default/pods?includeObject=None", TABLE)
        whole = await _get(api, "/api/v1/namespaces/default/pods?includeObject=Object", TABLE)
    assert "object" not in bare["rows"][0]
    assert whole["rows"][0]["object"]["kind"] == "Pod"


async def test_discovery_lists_upstreams_short_names(kubesim: KubeSim) -> None:
    async with client_for(kubesim) as api:
        core = await _get(api, "/api/v1")
        kueue = await _get(api, "/apis/kueue.x-k8s.io/v1beta2")
        jobsets = await _get(api, f"/apis/{G}/{V}")
    short = {
        r["name"]: r.get("shortNames", [])
        for listing in (core, kueue, jobsets)
        for r in listing["resources"]
    }
    assert short["namespaces"] == ["ns"]
    assert short["pods"] == ["po"]
    assert short["events"] == ["ev"]
    assert short["clusterqueues"] == ["cq"]
    assert "lq" in short["localqueues"]
    assert short["workloads"] == ["kwl", "kueueworkload", "kueueworkloads"]
    assert short["workloadpriorityclasses"] == ["wpc"]
    assert short["jobsets"] == []  # JobSet's CRD declares none


async def test_openapi_v3_tells_kubectl_the_server_validates_fields(kubesim: KubeSim) -> None:
    async with client_for(kubesim) as api:
        root = await _get(api, "/openapi/v3")
        assert {"api/v1", "apis/batch/v1", f"apis/{G}/{V}", "apis/kueue.x-k8s.io/v1beta1"} <= set(
            root["paths"]
        )
        document = await _get(api, root["paths"][f"apis/{G}/{V}"]["serverRelativeURL"])
        core = await _get(api, "/openapi/v3/api/v1")
    patch = document["paths"][f"/apis/{G}/{V}/namespaces/{{namespace}}/jobsets/{{name}}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": G, "version": V, "kind": "JobSet"}
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    pod_patch = core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" in pod_patch["requestBody"]["content"]


async def test_openapi_v2_in_json_and_protobuf(kubesim: KubeSim) -> None:
    async with client_for(kubesim) as api:
        document = await _get(api, "/openapi/v2")
        protobuf = await _get(api, "/openapi/v2", PROTOBUF_V2)
    assert document["swagger"] == "2.0"
    assert f"/apis/{G}/{V}/namespaces/{{namespace}}/jobsets" in document["paths"]
    assert protobuf.startswith(b"\x0a\x032.0")


# --- the real kubectl ------------------------------------------------------------------

JOBSET_YAML = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: js
  labels:
    team: a
spec:
  suspend: true
  replicatedJobs:
  - name: main
    replicas: 1
    template:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: c
              image: busybox
"""
POD_YAML = """
apiVersion: v1
kind: Pod
metadata:
  name: p
  labels:
    team: a
spec:
  containers:
  - name: c
    image: busybox
"""


@needs_kubectl
async def test_kubectl_create_validates_on_the_server(kubesim: KubeSim, tmp_path: Path) -> None:
    """Without ``--validate=false``: kubectl reads /openapi/v3 and sends fieldValidation."""
    await kubectl(kubesim, tmp_path, "create", "-f", "-", stdin=JOBSET_YAML)
    await kubectl(kubesim, tmp_path, "create", "-f", "-", stdin=POD_YAML)
    assert kubesim.store.find(JOBSET, "default", "js") is not None
    assert kubesim.store.find(POD, "default", "p") is not None


@needs_kubectl
@pytest.mark.parametrize(("manifest", "resource"), [(JOBSET_YAML, JOBSET), (POD_YAML, POD)])
async def test_kubectl_apply_creates_then_patches(
    kubesim: KubeSim, tmp_path: Path, manifest: str, resource: Any
) -> None:
    name = "js" if resource is JOBSET else "p"
    await kubectl(kubesim, tmp_path, "apply", "-f", "-", stdin=manifest)
    changed = manifest.replace("team: a", "team: b")
    out = await kubectl(kubesim, tmp_path, "apply", "-f", "-", stdin=changed)
    assert "configured" in out
    stored = kubesim.store.get(resource, "default", name)
    assert stored["metadata"]["labels"] == {"team": "b"}
    applied = json.loads(
        stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    )
    assert applied["metadata"]["labels"] == {"team": "b"}
    out = await kubectl(kubesim, tmp_path, "apply", "-f", "-", stdin=changed)
    assert "unchanged" in out


@needs_kubectl
async def test_kubectl_get_prints_columns_and_knows_short_names(
    kubesim: KubeSim, tmp_path: Path
) -> None:
    await kubectl(kubesim, tmp_path, "create", "-f", "-", stdin=JOBSET_YAML + "---" + POD_YAML)
    pods = await kubectl(kubesim, tmp_path, "get", "po")
    assert pods.split("\n")[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pods.split("\n")[1].split()[:2] == ["p", "0/1"]
    jobsets = await kubectl(kubesim, tmp_path, "get", "jobsets")
    assert jobsets.split("\n")[0].split() == [
        "NAME",
        "TERMINALSTATE",
        "RESTARTS",
        "COMPLETED",
        "SUSPENDED",
        "AGE",
    ]
    assert "true" in jobsets.split("\n")[1].split()
    namespaces = await kubectl(kubesim, tmp_path, "get", "ns")
    assert namespaces.split("\n")[1].split()[:2] == ["default", "Active"]
    kubesim.store.create(CLUSTER_QUEUE, {"metadata": {"name": "cq1"}, "spec": {}})
    queues = await kubectl(kubesim, tmp_path, "get", "cq")
    assert queues.split("\n")[0].split() == ["NAME", "COHORT", "PENDING", "WORKLOADS"]
    await kubectl(kubesim, tmp_path, "get", "lq,kwl,wpc")  # known short names: exit 0


@needs_kubectl
async def test_kubectl_server_dry_run_changes_nothing(kubesim: KubeSim, tmp_path: Path) -> None:
    before = kubesim.store.resource_version
    out = await kubectl(
        kubesim, tmp_path, "create", "-f", "-", "--dry-run=server", stdin=JOBSET_YAML
    )
    assert "(server dry run)" in out
    assert kubesim.store.find(JOBSET, "default", "js") is None
    assert kubesim.store.resource_version == before
