"""Delete through the real kubernetes-asyncio client: preconditions, finalizers and
ownerReference garbage collection."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import (
    ApiClient,
    ApiException,
    CoreV1Api,
    CustomObjectsApi,
    V1DeleteOptions,
    V1ObjectMeta,
    V1OwnerReference,
    V1Pod,
    V1Preconditions,
)

from tests.kubesim.support import JOBSET_API, MERGE_PATCH, failure, jobset

G, V = JOBSET_API


@pytest.fixture
def custom(kube_api: ApiClient) -> CustomObjectsApi:
    return CustomObjectsApi(kube_api)


@pytest.fixture
def core(kube_api: ApiClient) -> CoreV1Api:
    return CoreV1Api(kube_api)


async def _exists(custom: CustomObjectsApi, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await custom.get_namespaced_custom_object(
            G, V, "default", "jobsets", name
        )
    except ApiException as error:
        if error.status != 404:
            raise
        return None
    return found


@pytest.mark.parametrize(
    "preconditions",
    [
        pytest.param({"uid": "00000000-0000-0000-0000-000000000000"}, id="uid mismatch"),
        pytest.param({"resource_version": "1"}, id="resourceVersion mismatch"),
    ],
)
async def test_failed_precondition_is_a_conflict_and_deletes_nothing(
    custom: CustomObjectsApi, preconditions: dict[str, str]
) -> None:
    await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))

    with pytest.raises(ApiException) as raised:
        await custom.delete_namespaced_custom_object(
            G,
            V,
            "default",
            "jobsets",
            "a",
            body=V1DeleteOptions(preconditions=V1Preconditions(**preconditions)),
        )

    assert failure(raised.value) == (409, "Conflict")
    assert await _exists(custom, "a") is not None


async def test_matching_preconditions_delete(custom: CustomObjectsApi) -> None:
    created = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    meta = created["metadata"]
    options = V1DeleteOptions(
        preconditions=V1Preconditions(uid=meta["uid"], resource_version=meta["resourceVersion"])
    )

    deleted = await custom.delete_namespaced_custom_object(
        G, V, "default", "jobsets", "a", body=options
    )

    assert deleted["metadata"]["uid"] == meta["uid"]
    assert await _exists(custom, "a") is None


async def test_delete_of_a_missing_object_is_not_found(custom: CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as raised:
        await custom.delete_namespaced_custom_object(G, V, "default", "jobsets", "nope")
    assert failure(raised.value) == (404, "NotFound")


async def test_finalizers_keep_the_object_until_the_last_is_removed(
    custom: CustomObjectsApi,
) -> None:
    body = jobset("a", finalizers=["x.io/one", "x.io/two"])
    await custom.create_namespaced_custom_object(G, V, "default", "jobsets", body)

    await custom.delete_namespaced_custom_object(G, V, "default", "jobsets", "a")
    terminating = await _exists(custom, "a")
    assert terminating is not None
    assert terminating["metadata"]["deletionTimestamp"]

    finalizers = {"metadata": {"finalizers": ["x.io/two"]}}
    await custom.patch_namespaced_custom_object(
        G, V, "default", "jobsets", "a", finalizers, **MERGE_PATCH
    )
    assert await _exists(custom, "a") is not None, "one finalizer is still there"

    last = [{"op": "remove", "path": "/metadata/finalizers/0"}]
    await custom.patch_namespaced_custom_object(G, V, "default", "jobsets", "a", last)
    assert await _exists(custom, "a") is None


def _owned_pod(name: str, owner: dict[str, Any]) -> V1Pod:
    reference = V1OwnerReference(
        api_version=owner["apiVersion"],
        kind=owner["kind"],
        name=owner["metadata"]["name"],
        uid=owner["metadata"]["uid"],
        controller=True,
    )
    return V1Pod(metadata=V1ObjectMeta(name=name, owner_references=[reference]))


@pytest.mark.parametrize(
    ("propagation", "survivors"),
    [
        pytest.param(None, ["unrelated"], id="background by default: owned pods are collected"),
        pytest.param("Background", ["unrelated"], id="background"),
        pytest.param("Foreground", ["unrelated"], id="foreground (collected at once here)"),
        pytest.param("Orphan", ["owned-0", "owned-1", "unrelated"], id="orphan keeps them"),
    ],
)
async def test_deleting_a_jobset_cascades_to_the_pods_it_owns(
    custom: CustomObjectsApi, core: CoreV1Api, propagation: str | None, survivors: list[str]
) -> None:
    owner = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    for i in range(2):
        await core.create_namespaced_pod("default", _owned_pod(f"owned-{i}", owner))
    await core.create_namespaced_pod("default", V1Pod(metadata=V1ObjectMeta(name="unrelated")))

    options: dict[str, Any] = {"propagation_policy": propagation} if propagation else {}
    await custom.delete_namespaced_custom_object(G, V, "default", "jobsets", "a", **options)

    pods = (await core.list_namespaced_pod("default")).items
    assert [pod.metadata.name for pod in pods] == survivors
    assert all(not pod.metadata.owner_references for pod in pods)


async def test_unknown_propagation_policy_is_invalid(custom: CustomObjectsApi) -> None:
    await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    with pytest.raises(ApiException) as raised:
        await custom.delete_namespaced_custom_object(
            G, V, "default", "jobsets", "a", propagation_policy="Sideways"
        )
    assert failure(raised.value) == (422, "Invalid")


async def test_delete_collection_by_label(custom: CustomObjectsApi) -> None:
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        await custom.create_namespaced_custom_object(
            G, V, "default", "jobsets", jobset(name, labels={"team": team})
        )

    await custom.delete_collection_namespaced_custom_object(
        G, V, "default", "jobsets", label_selector="team=x"
    )

    left = await custom.list_namespaced_custom_object(G, V, "default", "jobsets")
    assert [item["metadata"]["name"] for item in left["items"]] == ["c"]
