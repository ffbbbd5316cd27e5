"""Discovery, health, Kueue visibility and routing errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, ApisApi, BatchV1Api, CoreApi, CoreV1Api
from kubernetes_asyncio.dynamic import DynamicClient

from kubesim.resources import CLUSTER_QUEUE, JOBSET, LOCAL_QUEUE, WORKLOAD
from kubesim.server import KubeSim
from tests.kubesim.support import jobset


async def test_healthz(kubesim: KubeSim) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{kubesim.url}/healthz") as response:
        assert (response.status, await response.text()) == (200, "ok")


async def test_core_and_group_discovery(kube_api: ApiClient) -> None:
    versions = await CoreApi(kube_api).get_api_versions()
    groups = await ApisApi(kube_api).get_api_versions()
    core = await CoreV1Api(kube_api).get_api_resources()
    batch = await BatchV1Api(kube_api).get_api_resources()

    assert versions.versions == ["v1"]
    assert {"jobset.x-k8s.io", "kueue.x-k8s.io", "batch", "coordination.k8s.io"} <= {
        g.name for g in groups.groups
    }
    kueue = next(g for g in groups.groups if g.name == "kueue.x-k8s.io")
    assert [v.version for v in kueue.versions] == ["v1beta2", "v1beta1"]
    assert kueue.preferred_version.version == "v1beta2"
    pods = {r.name: r for r in core.resources}
    assert pods["pods"].namespaced
    assert pods["pods"].kind == "Pod"
    assert "pods/status" in pods
    assert pods["pods/log"].verbs == ["get"]
    assert not pods["namespaces"].namespaced
    assert "jobs/status" in {r.name for r in batch.resources}


async def test_dynamic_client_discovers_jobsets_and_their_status(
    kubesim: KubeSim, kube_api: ApiClient, tmp_path: Path
) -> None:
    kubesim.store.create(JOBSET, jobset("a"))
    async with DynamicClient(kube_api, cache_file=str(tmp_path / "discovery.json")) as dynamic:
        jobsets = await dynamic.resources.get(api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet")
        listed = await dynamic.get(jobsets, namespace="default")

    assert jobsets.namespaced
    assert set(jobsets.verbs or ()) >= {
        "create",
        "get",
        "list",
        "watch",
        "patch",
        "update",
        "delete",
    }
    assert "status" in jobsets.subresources
    assert [item.metadata.name for item in listed.items] == ["a"]


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        pytest.param("GET", "/apis/nope.io/v1/things", (404, "NotFound"), id="unknown group"),
        pytest.param(
            "GET",
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/widgets",
            (404, "NotFound"),
            id="unknown resource",
        ),
        pytest.param(
            "GET",
            "/apis/jobset.x-k8s.io/v1alpha2/jobsets/a",
            (404, "NotFound"),
            id="a namespaced object without its namespace",
        ),
        pytest.param(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/l/status",
            (404, "NotFound"),
            id="a status subresource that does not exist",
        ),
        pytest.param(
            "POST",
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/a",
            (405, "MethodNotAllowed"),
            id="POST to an object",
        ),
        pytest.param(
            "POST",
            "/apis/jobset.x-k8s.io/v1alpha2/jobsets",
            (405, "MethodNotAllowed"),
            id="create across namespaces",
        ),
        pytest.param(
            "DELETE",
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/a/status",
            (405, "MethodNotAllowed"),
            id="DELETE of a status",
        ),
        pytest.param("POST", "/healthz", (405, "MethodNotAllowed"), id="POST to healthz"),
    ],
)
async def test_routing_errors_are_status_bodies(
    kubesim: KubeSim, method: str, path: str, expected: tuple[int, str]
) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, f"{kubesim.url}{path}", json={}) as response,
    ):
        body = await response.json()
    assert (response.status, body["reason"]) == expected
    assert (body["kind"], body["code"]) == ("Status", expected[0])


def _kueue(store: Any) -> None:
    """One ClusterQueue, one LocalQueue pointing at it, two pending Workloads."""
    store.create(CLUSTER_QUEUE, {"metadata": {"name": "cq"}, "spec": {}})
    store.create(LOCAL_QUEUE, {"metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}})
    for name in ("w1", "w2"):
        store.create(
            WORKLOAD,
            {"metadata": {"name": name}, "spec": {"queueName": "lq", "podSets": []}},
            "default",
        )


async def test_kueue_visibility_lists_pending_workloads(kubesim: KubeSim) -> None:
    pytest.importorskip("kubesim.controllers.kueue", reason="the Kueue simulator is not built")
    _kueue(kubesim.store)
    base = f"{kubesim.url}/apis/visibility.kueue.x-k8s.io/v1beta1"

    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/clusterqueues/cq/pendingworkloads") as response:
            summary = await response.json()
        async with http.get(f"{base}/namespaces/default/localqueues/lq/pendingworkloads") as r:
            local = await r.json()
        async with http.get(f"{base}/clusterqueues/missing/pendingworkloads") as missing:
            assert missing.status == 404

    assert summary["kind"] == "PendingWorkloadsSummary"
    assert sorted(item["metadata"]["name"] for item in summary["items"]) == ["w1", "w2"]
    assert local["items"] == summary["items"]
