"""Create, read, list, replace and patch through the real kubernetes-asyncio client over
real HTTP: the semantics our Actuator and Reconciler rely on."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes_asyncio.client import (
    ApiClient,
    ApiException,
    CoordinationV1Api,
    CoreV1Api,
    CustomObjectsApi,
    V1Lease,
    V1LeaseSpec,
    V1Namespace,
    V1ObjectMeta,
    V1Pod,
)

from kubesim.server import KubeSim
from tests.kubesim.support import JOBSET_API, MERGE_PATCH, MakeKubeSim, client_for, failure, jobset

G, V = JOBSET_API
MERGE = MERGE_PATCH["_content_type"]


@pytest.fixture
def custom(kube_api: ApiClient) -> CustomObjectsApi:
    return CustomObjectsApi(kube_api)


@pytest.fixture
def core(kube_api: ApiClient) -> CoreV1Api:
    return CoreV1Api(kube_api)


async def test_create_answers_201_with_the_stored_object(custom: CustomObjectsApi) -> None:
    created = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))

    assert created is not None, "kubernetes-asyncio returns None unless the answer is 201"
    meta = created["metadata"]
    assert meta["namespace"] == "default", "the namespace comes from the URL"
    assert meta["generation"] == 1
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])
    assert int(meta["resourceVersion"]) > 0
    fetched = await custom.get_namespaced_custom_object(G, V, "default", "jobsets", "a")
    assert fetched == created


async def test_resource_versions_come_from_one_global_counter(
    custom: CustomObjectsApi, core: CoreV1Api
) -> None:
    first = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    pod = await core.create_namespaced_pod("default", V1Pod(metadata=V1ObjectMeta(name="p")))
    second = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("b"))

    versions = [
        int(first["metadata"]["resourceVersion"]),
        int(pod.metadata.resource_version),
        int(second["metadata"]["resourceVersion"]),
    ]
    assert versions == sorted(set(versions)), "strictly increasing across resources"


async def test_duplicate_create_is_already_exists_not_conflict(custom: CustomObjectsApi) -> None:
    await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))

    with pytest.raises(ApiException) as raised:
        await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))

    assert failure(raised.value) == (409, "AlreadyExists")


@pytest.mark.parametrize(
    ("namespace", "body", "expected"),
    [
        pytest.param(
            "default",
            {**jobset("a"), "kind": None, "apiVersion": None},
            (400, "BadRequest"),
            id="a custom resource without apiVersion and kind",
        ),
        pytest.param(
            "default",
            {**jobset("a"), "apiVersion": "jobset.x-k8s.io/v1"},
            (400, "BadRequest"),
            id="an apiVersion other than the URL's",
        ),
        pytest.param(
            "default",
            jobset("a", namespace="other"),
            (400, "BadRequest"),
            id="a body namespace other than the URL's",
        ),
        pytest.param("missing", jobset("a"), (404, "NotFound"), id="a namespace that is absent"),
        pytest.param("default", jobset("Not_A_Name"), (422, "Invalid"), id="an invalid name"),
        pytest.param(
            "default",
            jobset("a", resourceVersion="5"),
            (500, ""),
            id="a resourceVersion (an object re-sent as read)",
        ),
    ],
)
async def test_create_rejects_what_a_real_server_rejects(
    custom: CustomObjectsApi, namespace: str, body: dict[str, Any], expected: tuple[int, str]
) -> None:
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(ApiException) as raised:
        await custom.create_namespaced_custom_object(G, V, namespace, "jobsets", body)
    assert failure(raised.value) == expected


async def test_get_of_a_missing_object_is_not_found(custom: CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as raised:
        await custom.get_namespaced_custom_object(G, V, "default", "jobsets", "nope")
    assert failure(raised.value) == (404, "NotFound")


@pytest.mark.parametrize(
    ("label_selector", "field_selector", "expected"),
    [
        pytest.param(None, None, ["a", "b", "c", "d"], id="everything"),
        pytest.param("app=web", None, ["a", "b"], id="equality"),
        pytest.param("app==web", None, ["a", "b"], id="double equals"),
        pytest.param("app!=web", None, ["c", "d"], id="inequality includes unlabelled"),
        pytest.param("app in (web,db)", None, ["a", "b", "c"], id="set in"),
        pytest.param("app notin (web)", None, ["c", "d"], id="set notin"),
        pytest.param("tier", None, ["b", "c"], id="exists"),
        pytest.param("!tier", None, ["a", "d"], id="does not exist"),
        pytest.param("app=web,tier=gpu", None, ["b"], id="requirements are ANDed"),
        pytest.param(None, "metadata.name=c", ["c"], id="field selector on the name"),
        pytest.param(None, "metadata.name!=c", ["a", "b", "d"], id="negated field selector"),
        pytest.param("app=web", "metadata.name=b", ["b"], id="labels and fields together"),
    ],
)
async def test_list_selectors(
    custom: CustomObjectsApi,
    label_selector: str | None,
    field_selector: str | None,
    expected: list[str],
) -> None:
    labels: dict[str, dict[str, str]] = {
        "a": {"app": "web"},
        "b": {"app": "web", "tier": "gpu"},
        "c": {"app": "db", "tier": "cpu"},
        "d": {},
    }
    for name, object_labels in labels.items():
        await custom.create_namespaced_custom_object(
            G, V, "default", "jobsets", jobset(name, labels=object_labels)
        )
    options: dict[str, Any] = {"label_selector": label_selector, "field_selector": field_selector}
    listed = await custom.list_namespaced_custom_object(
        G, V, "default", "jobsets", **{k: v for k, v in options.items() if v}
    )
    assert [item["metadata"]["name"] for item in listed["items"]] == expected
    assert listed["kind"] == "JobSetList"


async def test_malformed_selector_is_a_bad_request(custom: CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as raised:
        await custom.list_namespaced_custom_object(
            G, V, "default", "jobsets", label_selector="app in (web"
        )
    assert failure(raised.value) == (400, "BadRequest")


async def test_list_across_namespaces(custom: CustomObjectsApi, core: CoreV1Api) -> None:
    await core.create_namespace(V1Namespace(metadata=V1ObjectMeta(name="team")))
    await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    await custom.create_namespaced_custom_object(G, V, "team", "jobsets", jobset("b"))

    everywhere = await custom.list_cluster_custom_object(G, V, "jobsets")
    in_team = await custom.list_namespaced_custom_object(G, V, "team", "jobsets")

    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere["items"]] == [
        ("default", "a"),
        ("team", "b"),
    ]
    assert [i["metadata"]["name"] for i in in_team["items"]] == ["b"]


async def test_pagination_walks_every_object_with_an_opaque_continue_token(
    kubesim: KubeSim, custom: CustomObjectsApi
) -> None:
    names = [f"js-{i}" for i in range(7)]
    for name in names:
        await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset(name))
    list_version = str(kubesim.store.resource_version)

    pages: list[list[str]] = []
    token: str | None = None
    while True:
        resume: dict[str, Any] = {"_continue": token} if token else {}
        page = await custom.list_namespaced_custom_object(
            G, V, "default", "jobsets", limit=3, **resume
        )
        pages.append([item["metadata"]["name"] for item in page["items"]])
        assert page["metadata"]["resourceVersion"] == list_version, "pages share one version"
        token = page["metadata"].get("continue")
        if not token:
            break
        assert page["metadata"]["remainingItemCount"] == len(names) - sum(map(len, pages))
        if len(pages) == 1:  # a write between pages does not change the list's version
            await custom.patch_namespaced_custom_object(
                G,
                V,
                "default",
                "jobsets",
                "js-0",
                {"metadata": {"labels": {"x": "y"}}},
                **MERGE_PATCH,
            )

    assert pages == [names[0:3], names[3:6], names[6:7]]


async def test_a_continue_token_older_than_the_history_is_expired(
    make_kubesim: MakeKubeSim,
) -> None:
    sim = await make_kubesim(watch_history=3)
    async with client_for(sim) as api:
        custom = CustomObjectsApi(api)
        for i in range(3):
            await custom.create_namespaced_custom_object(
                G, V, "default", "jobsets", jobset(f"a{i}")
            )
        page = await custom.list_namespaced_custom_object(G, V, "default", "jobsets", limit=1)
        for i in range(4):
            await custom.create_namespaced_custom_object(
                G, V, "default", "jobsets", jobset(f"b{i}")
            )

        with pytest.raises(ApiException) as raised:
            await custom.list_namespaced_custom_object(
                G, V, "default", "jobsets", limit=1, _continue=page["metadata"]["continue"]
            )
    assert failure(raised.value) == (410, "Expired")


async def test_replace_with_a_stale_resource_version_is_a_conflict(
    custom: CustomObjectsApi,
) -> None:
    created = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    await custom.patch_namespaced_custom_object(
        G, V, "default", "jobsets", "a", {"metadata": {"labels": {"x": "1"}}}, **MERGE_PATCH
    )

    with pytest.raises(ApiException) as raised:
        await custom.replace_namespaced_custom_object(G, V, "default", "jobsets", "a", created)

    assert failure(raised.value) == (409, "Conflict")
    current = await custom.get_namespaced_custom_object(G, V, "default", "jobsets", "a")
    assert current["metadata"]["labels"] == {"x": "1"}, "the stale write changed nothing"


async def test_replace_of_a_custom_resource_requires_a_resource_version(
    custom: CustomObjectsApi,
) -> None:
    await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    with pytest.raises(ApiException) as raised:
        await custom.replace_namespaced_custom_object(G, V, "default", "jobsets", "a", jobset("a"))
    assert failure(raised.value) == (422, "Invalid")


@pytest.mark.parametrize(
    ("change", "generation"),
    [
        pytest.param({"spec": {"replicatedJobs": []}}, 2, id="a spec change bumps generation"),
        pytest.param({"metadata": {"labels": {"l": "v"}}}, 1, id="a label change does not"),
    ],
)
async def test_replace_moves_generation_only_with_spec(
    custom: CustomObjectsApi, change: dict[str, Any], generation: int
) -> None:
    created = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    body = {**created, **{k: {**created[k], **v} for k, v in change.items()}}

    replaced = await custom.replace_namespaced_custom_object(G, V, "default", "jobsets", "a", body)

    assert replaced["metadata"]["generation"] == generation
    assert int(replaced["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"]
    )


async def test_replace_with_another_name_than_the_url_is_a_bad_request(
    custom: CustomObjectsApi,
) -> None:
    created = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    created["metadata"]["name"] = "b"
    with pytest.raises(ApiException) as raised:
        await custom.replace_namespaced_custom_object(G, V, "default", "jobsets", "a", created)
    assert failure(raised.value) == (400, "BadRequest")


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        pytest.param(
            {"metadata": {"labels": {"patched": "yes"}}}, MERGE, 200, id="merge patch of a dict"
        ),
        pytest.param(
            [{"op": "add", "path": "/metadata/labels/patched", "value": "yes"}],
            None,
            200,
            id="a list is sent as a JSON patch",
        ),
        pytest.param(
            {"metadata": {"labels": {"patched": "yes"}}},
            None,
            (400, "BadRequest"),
            id="a dict without _content_type is sent as a JSON patch and rejected",
        ),
        pytest.param(
            [{"op": "remove", "path": "/metadata/labels/missing"}],
            None,
            (422, "Invalid"),
            id="a JSON patch that cannot apply",
        ),
        pytest.param(
            {"metadata": {"labels": {"patched": "yes"}}},
            "application/strategic-merge-patch+json",
            (415, "UnsupportedMediaType"),
            id="strategic merge patch of a custom resource",
        ),
        pytest.param(
            {"metadata": {"labels": {"patched": "yes"}}},
            "application/vnd.kubesim.unknown+json",
            (415, "UnsupportedMediaType"),
            id="an unknown patch type",
        ),
        pytest.param(
            {"metadata": {"resourceVersion": "1", "labels": {"patched": "yes"}}},
            MERGE,
            (409, "Conflict"),
            id="a patch carrying a stale resourceVersion",
        ),
    ],
)
async def test_patch_by_content_type(
    custom: CustomObjectsApi, body: Any, content_type: str | None, expected: Any
) -> None:
    await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    options: dict[str, Any] = {"_content_type": content_type} if content_type else {}

    if expected == 200:
        patched = await custom.patch_namespaced_custom_object(
            G, V, "default", "jobsets", "a", body, **options
        )
        assert patched["metadata"]["labels"] == {"patched": "yes"}
        assert patched["metadata"]["generation"] == 1
        return
    with pytest.raises(ApiException) as raised:
        await custom.patch_namespaced_custom_object(
            G, V, "default", "jobsets", "a", body, **options
        )
    assert failure(raised.value) == expected
    current = await custom.get_namespaced_custom_object(G, V, "default", "jobsets", "a")
    assert current["metadata"]["labels"] == {}, "a failed patch changes nothing"


async def test_strategic_merge_patch_is_accepted_for_built_in_types(core: CoreV1Api) -> None:
    await core.create_namespaced_pod("default", V1Pod(metadata=V1ObjectMeta(name="p")))
    # A dict body makes kubernetes-asyncio pick strategic-merge-patch+json for core types.
    patched = await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "b"}}})
    assert patched.metadata.labels == {"a": "b"}


async def test_status_subresource_is_separate_from_spec(custom: CustomObjectsApi) -> None:
    body = {**jobset("a"), "status": {"restarts": 9}}
    created = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", body)
    assert "status" not in created, "create ignores status"

    by_status = await custom.patch_namespaced_custom_object_status(
        G,
        V,
        "default",
        "jobsets",
        "a",
        {"status": {"restarts": 1}, "spec": {"suspend": True}},
        **MERGE_PATCH,
    )
    assert by_status["status"] == {"restarts": 1}
    assert by_status["spec"] == created["spec"], "a status write never changes spec"
    assert by_status["metadata"]["generation"] == 1

    by_spec = await custom.patch_namespaced_custom_object(
        G,
        V,
        "default",
        "jobsets",
        "a",
        {"status": {"restarts": 5}, "spec": {"suspend": True}},
        **MERGE_PATCH,
    )
    assert by_spec["status"] == {"restarts": 1}, "a spec write never changes status"
    assert by_spec["spec"]["suspend"] is True
    assert by_spec["metadata"]["generation"] == 2

    by_spec["status"] = {"restarts": 2}
    replaced = await custom.replace_namespaced_custom_object_status(
        G, V, "default", "jobsets", "a", by_spec
    )
    assert replaced["status"] == {"restarts": 2}
    assert (await custom.get_namespaced_custom_object_status(G, V, "default", "jobsets", "a"))[
        "status"
    ] == {"restarts": 2}


async def test_pod_status_subresource(core: CoreV1Api) -> None:
    await core.create_namespaced_pod("default", V1Pod(metadata=V1ObjectMeta(name="p")))

    await core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})

    assert (await core.read_namespaced_pod_status("p", "default")).status.phase == "Running"
    assert (await core.read_namespaced_pod("p", "default")).metadata.generation == 1


async def test_stale_status_replace_is_a_conflict(custom: CustomObjectsApi) -> None:
    created = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    await custom.patch_namespaced_custom_object_status(
        G, V, "default", "jobsets", "a", {"status": {"restarts": 1}}, **MERGE_PATCH
    )
    with pytest.raises(ApiException) as raised:
        await custom.replace_namespaced_custom_object_status(
            G, V, "default", "jobsets", "a", {**created, "status": {"restarts": 2}}
        )
    assert failure(raised.value) == (409, "Conflict")


async def test_lease_leader_election_pattern(kube_api: ApiClient) -> None:
    leases = CoordinationV1Api(kube_api)
    spec = V1LeaseSpec(holder_identity="one", lease_duration_seconds=15)
    lease = await leases.create_namespaced_lease(
        "default", V1Lease(metadata=V1ObjectMeta(name="leader"), spec=spec)
    )
    stale = await leases.read_namespaced_lease("leader", "default")

    lease.spec.holder_identity = "two"
    await leases.replace_namespaced_lease("leader", "default", lease)
    stale.spec.holder_identity = "three"
    with pytest.raises(ApiException) as raised:
        await leases.replace_namespaced_lease("leader", "default", stale)

    assert failure(raised.value) == (409, "Conflict")
    assert (await leases.read_namespaced_lease("leader", "default")).spec.holder_identity == "two"


async def test_kueue_objects_are_served_in_both_versions(custom: CustomObjectsApi) -> None:
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "q"},
        "spec": {"clusterQueue": "cq"},
    }
    await custom.create_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", "default", "localqueues", body
    )
    old = await custom.get_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta1", "default", "localqueues", "q"
    )
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert old["spec"] == body["spec"]
