"""``dryRun=All`` through the real kubernetes-asyncio client over HTTP: every write answers
what it would store and stores nothing (no resourceVersion, no watch event, no controller
reaction), as the API server's dry-run storage (apiserver ``registry/generic/registry/
dryrun.go``) does."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio.client import (
    ApiException,
    CoreV1Api,
    CustomObjectsApi,
    V1Container,
    V1DeleteOptions,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
)

from kubesim.resources import JOB, JOBSET, POD, WORKLOAD
from kubesim.server import KubeSim
from tests.kubesim.support import JOBSET_API, MERGE_PATCH, MakeKubeSim, client_for, failure, jobset
from tests.waiting import eventually

G, V = JOBSET_API
Obj = dict[str, Any]


async def _next_event_type_and_name(sim: KubeSim, after: int) -> tuple[str, str]:
    """The first watch event on JobSets after resourceVersion ``after``."""
    async with client_for(sim) as api:
        response = await api.call_api(
            f"/apis/{G}/{V}/namespaces/default/jobsets",
            "GET",
            query_params=[("watch", "true"), ("resourceVersion", str(after))],
            _preload_content=False,
            _request_timeout=5,
        )
        line = await asyncio.wait_for(response.content.readline(), 5)
        response.close()
    event = json.loads(line)
    return event["type"], event["object"]["metadata"]["name"]


async def test_dry_run_writes_store_nothing_and_emit_nothing(kubesim: KubeSim) -> None:
    store = kubesim.store
    async with client_for(kubesim) as api:
        custom = CustomObjectsApi(api)
        stored = await custom.create_namespaced_custom_object(
            G, V, "default", "jobsets", jobset("kept", finalizers=["x/hold"])
        )
        before = store.resource_version

        created = await custom.create_namespaced_custom_object(
            G, V, "default", "jobsets", jobset("dry"), dry_run="All"
        )
        patched = await custom.patch_namespaced_custom_object(
            G, V, "default", "jobsets", "kept", {"metadata": {"labels": {"a": "b"}}},
            dry_run="All", **MERGE_PATCH,
        )  # fmt: skip
        current = store.get(JOBSET, "default", "kept")
        current["spec"]["suspend"] = True
        replaced = await custom.replace_namespaced_custom_object(
            G, V, "default", "jobsets", "kept", current, dry_run="All"
        )
        status = await custom.patch_namespaced_custom_object_status(
            G, V, "default", "jobsets", "kept", {"status": {"restarts": 3}},
            dry_run="All", **MERGE_PATCH,
        )  # fmt: skip
        deleted = await custom.delete_namespaced_custom_object(
            G, V, "default", "jobsets", "kept", dry_run="All"
        )

        # what a real server answers: the would-be objects
        assert created["metadata"]["name"] == "dry"
        assert created["metadata"]["uid"]
        assert created["metadata"]["creationTimestamp"]
        assert not created["metadata"].get("resourceVersion")
        assert patched["metadata"]["labels"] == {"a": "b"}
        assert replaced["spec"]["suspend"] is True
        assert replaced["metadata"]["generation"] == 2
        assert status["status"] == {"restarts": 3}
        assert deleted["metadata"]["deletionTimestamp"]  # held by its finalizer
        for answer in (patched, replaced, status, deleted):
            assert answer["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]

        # and nothing changed
        assert store.resource_version == before
        assert store.find(JOBSET, "default", "dry") is None
        assert store.get(JOBSET, "default", "kept") == {**stored, "apiVersion": f"{G}/{V}"}

        # no watch event: the first one after the dry runs is the next real write
        await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("real"))
        assert await _next_event_type_and_name(kubesim, before) == ("ADDED", "real")


async def test_dry_run_delete_of_a_pod_without_finalizers_keeps_it(kubesim: KubeSim) -> None:
    pod = V1Pod(metadata=V1ObjectMeta(name="p"), spec=V1PodSpec(containers=[V1Container(name="c")]))
    async with client_for(kubesim) as api:
        core = CoreV1Api(api)
        await core.create_namespaced_pod("default", pod)
        before = kubesim.store.resource_version
        await core.delete_namespaced_pod("p", "default", body=V1DeleteOptions(dry_run=["All"]))
        await core.delete_collection_namespaced_pod("default", dry_run="All")
    assert kubesim.store.find(POD, "default", "p") is not None
    assert kubesim.store.resource_version == before


async def test_dry_run_create_of_an_existing_object_is_already_exists(kubesim: KubeSim) -> None:
    async with client_for(kubesim) as api:
        custom = CustomObjectsApi(api)
        await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
        with pytest.raises(ApiException) as raised:
            await custom.create_namespaced_custom_object(
                G, V, "default", "jobsets", jobset("a"), dry_run="All"
            )
    assert failure(raised.value) == (409, "AlreadyExists")


@pytest.mark.parametrize("verb", ["create", "patch", "delete"])
async def test_an_unknown_dry_run_value_is_invalid(kubesim: KubeSim, verb: str) -> None:
    """apimachinery's ``ValidateDryRun``: only ``All``; the handlers answer 422 Invalid."""
    kubesim.store.create(JOBSET, jobset("a"), "default")
    before = kubesim.store.resource_version
    path = f"/apis/{G}/{V}/namespaces/default/jobsets"
    method, url, body = {
        "create": ("POST", path, jobset("b")),
        "patch": ("PATCH", f"{path}/a", {"metadata": {"labels": {"x": "y"}}}),
        "delete": ("DELETE", f"{path}/a", None),
    }[verb]
    async with client_for(kubesim) as api:
        with pytest.raises(ApiException) as raised:
            await api.call_api(
                url,
                method,
                query_params=[("dryRun", "Yes")],
                body=body,
                header_params={"Content-Type": "application/merge-patch+json"},
            )
    assert failure(raised.value) == (422, "Invalid")
    assert kubesim.store.resource_version == before


async def test_controllers_never_see_a_dry_run_jobset(make_kubesim: MakeKubeSim) -> None:
    """A dry-run JobSet gets no Workload and no Jobs; a real one created after it does, so
    the controllers were running when the dry run passed."""
    pytest.importorskip("kubesim.controllers", reason="the simulated controllers are not built")
    from tests.kubesim.controller_support import make_jobset

    sim = await make_kubesim(controllers=True, time_scale=100.0)
    store = sim.store
    async with client_for(sim) as api:
        custom = CustomObjectsApi(api)
        dry: dict[str, Any] = {"dry_run": "All"}
        for name, dry_run in (("dry", dry), ("real", {})):
            body = {"apiVersion": f"{G}/{V}", "kind": "JobSet", **make_jobset(name)}
            await custom.create_namespaced_custom_object(
                G, V, "default", "jobsets", body, **dry_run
            )
    await eventually(
        lambda: bool(store.list(JOB, "default") and store.list(WORKLOAD, "default")),
        within=10,
        what="the real JobSet's Jobs and Workload",
    )
    owners = {
        ref["name"]
        for resource in (JOB, WORKLOAD)
        for obj in store.list(resource, "default")
        for ref in obj["metadata"].get("ownerReferences", [])
    }
    assert owners == {"real"}
