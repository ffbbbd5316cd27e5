"""Watch through the real ``kubernetes_asyncio.watch.Watch`` over real HTTP: initial state,
resume, 410 Expired, bookmarks, timeouts, selector crossings, many watchers, disconnects."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import (
    ApiClient,
    ApiException,
    CoreV1Api,
    CustomObjectsApi,
    V1Namespace,
    V1ObjectMeta,
    V1Pod,
)
from kubernetes_asyncio.watch import Watch

from kubesim.resources import JOBSET
from kubesim.server import KubeSim
from tests.kubesim.support import JOBSET_API, MERGE_PATCH, MakeKubeSim, client_for, jobset
from tests.waiting import eventually

G, V = JOBSET_API
Seen = tuple[str, str]


@pytest.fixture
def custom(kube_api: ApiClient) -> CustomObjectsApi:
    return CustomObjectsApi(kube_api)


def _seen(event: dict[str, Any]) -> Seen:
    if event["type"] == "BOOKMARK":
        return ("BOOKMARK", event["raw_object"]["metadata"]["resourceVersion"])
    return (event["type"], event["raw_object"]["metadata"]["name"])


async def take(
    stream: AsyncIterator[dict[str, Any]], count: int, within: float = 5.0
) -> list[Seen]:
    """The next ``count`` events of a watch, failing if they do not come within ``within``."""
    seen: list[Seen] = []
    async with asyncio.timeout(within):
        async for event in stream:
            seen.append(_seen(event))
            if len(seen) == count:
                break
    return seen


async def _create(custom: CustomObjectsApi, name: str, **labels: str) -> dict[str, Any]:
    created: dict[str, Any] = await custom.create_namespaced_custom_object(
        G, V, "default", "jobsets", jobset(name, labels=labels)
    )
    return created


async def _label(custom: CustomObjectsApi, name: str, **labels: str | None) -> None:
    body = {"metadata": {"labels": labels}}
    await custom.patch_namespaced_custom_object(
        G, V, "default", "jobsets", name, body, **MERGE_PATCH
    )


async def test_watch_starts_with_the_current_state_then_goes_live(
    custom: CustomObjectsApi,
) -> None:
    await _create(custom, "a")
    await _create(custom, "b")
    async with Watch() as watch:
        stream = watch.stream(custom.list_namespaced_custom_object, G, V, "default", "jobsets")
        assert await take(stream, 2) == [("ADDED", "a"), ("ADDED", "b")]

        await _label(custom, "a", x="1")
        await custom.delete_namespaced_custom_object(G, V, "default", "jobsets", "b")
        await _create(custom, "c")

        assert await take(stream, 3) == [("MODIFIED", "a"), ("DELETED", "b"), ("ADDED", "c")]


async def test_watch_resumes_strictly_after_a_resource_version(custom: CustomObjectsApi) -> None:
    await _create(custom, "a")
    await _create(custom, "b")
    listed = await custom.list_namespaced_custom_object(G, V, "default", "jobsets")
    await _label(custom, "a", x="1")
    await custom.delete_namespaced_custom_object(G, V, "default", "jobsets", "b")
    await _create(custom, "c")

    async with Watch() as watch:
        stream = watch.stream(
            custom.list_namespaced_custom_object,
            G,
            V,
            "default",
            "jobsets",
            resource_version=listed["metadata"]["resourceVersion"],
        )
        assert await take(stream, 3) == [("MODIFIED", "a"), ("DELETED", "b"), ("ADDED", "c")]
        await _create(custom, "d")
        assert await take(stream, 1) == [("ADDED", "d")]


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"timeout_seconds": 30}, id="with timeout_seconds: no retry"),
        pytest.param({}, id="without: kubernetes-asyncio retries a 410 once, then raises"),
    ],
)
async def test_a_too_old_resource_version_is_410_expired(
    make_kubesim: MakeKubeSim, options: dict[str, Any]
) -> None:
    sim = await make_kubesim(watch_history=3)
    async with client_for(sim) as api:
        custom = CustomObjectsApi(api)
        first = await _create(custom, "a")
        for name in "bcde":
            await _create(custom, name)

        async with Watch() as watch:
            stream = watch.stream(
                custom.list_namespaced_custom_object,
                G,
                V,
                "default",
                "jobsets",
                resource_version=first["metadata"]["resourceVersion"],
                **options,
            )
            with pytest.raises(ApiException) as raised:
                await take(stream, 1)
    assert raised.value.status == 410
    assert "Expired" in str(raised.value.reason)


async def test_410_is_an_error_event_on_a_200_stream(make_kubesim: MakeKubeSim) -> None:
    sim = await make_kubesim(watch_history=2)
    for name in "abcd":
        sim.store.create(JOBSET, jobset(name))
    url = f"{sim.url}/apis/{G}/{V}/namespaces/default/jobsets?watch=true&resourceVersion=1"

    async with aiohttp.ClientSession() as session, session.get(url) as response:
        lines = (await response.read()).decode().splitlines()

    assert response.status == 200
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    assert event["object"]["kind"] == "Status"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


async def test_bookmarks_follow_the_initial_state_and_then_come_periodically(
    make_kubesim: MakeKubeSim,
) -> None:
    sim = await make_kubesim(bookmark_interval=0.2)
    async with client_for(sim) as api, Watch() as watch:
        custom = CustomObjectsApi(api)
        await _create(custom, "a")
        initial_version = str(sim.store.resource_version)
        stream = watch.stream(
            custom.list_namespaced_custom_object,
            G,
            V,
            "default",
            "jobsets",
            allow_watch_bookmarks=True,
        )
        assert await take(stream, 2) == [("ADDED", "a"), ("BOOKMARK", initial_version)]

        created = await _create(custom, "b")
        assert await take(stream, 1) == [("ADDED", "b")]
        await CoreV1Api(api).create_namespaced_pod(
            "default", V1Pod(metadata=V1ObjectMeta(name="p"))
        )
        quiet_version = str(sim.store.resource_version)
        started = time.monotonic()
        assert await take(stream, 1) == [("BOOKMARK", quiet_version)]
        assert time.monotonic() - started < 1.0
        assert int(quiet_version) > int(created["metadata"]["resourceVersion"])
        assert watch.resource_version == quiet_version, "the client resumes from bookmarks"


async def test_timeout_seconds_ends_the_stream(custom: CustomObjectsApi) -> None:
    await _create(custom, "a")
    started = time.monotonic()
    async with Watch() as watch:
        stream = watch.stream(
            custom.list_namespaced_custom_object, G, V, "default", "jobsets", timeout_seconds=1
        )
        seen = [_seen(event) async for event in stream]

    assert seen == [("ADDED", "a")]
    assert 0.9 <= time.monotonic() - started < 3.0


async def _version(custom: CustomObjectsApi) -> str:
    """The current list resourceVersion: a watch from it misses nothing that follows, however
    late kubernetes-asyncio sends the request (it connects on the first iteration)."""
    listed = await custom.list_namespaced_custom_object(G, V, "default", "jobsets")
    version: str = listed["metadata"]["resourceVersion"]
    return version


async def test_label_selector_crossings_are_added_and_deleted(custom: CustomObjectsApi) -> None:
    await _create(custom, "a", app="other")
    async with Watch() as watch:
        stream = watch.stream(
            custom.list_namespaced_custom_object,
            G,
            V,
            "default",
            "jobsets",
            label_selector="app=web",
            resource_version=await _version(custom),
        )
        await _label(custom, "a", app="web")
        await _label(custom, "a", extra="1")
        await _label(custom, "a", app="db")
        await custom.delete_namespaced_custom_object(G, V, "default", "jobsets", "a")
        await _create(custom, "sentinel", app="web")
        events = []
        async with asyncio.timeout(5):
            async for event in stream:
                events.append(event)
                if len(events) == 4:
                    break

    assert [_seen(e) for e in events] == [
        ("ADDED", "a"),  # starts matching
        ("MODIFIED", "a"),  # still matches
        ("DELETED", "a"),  # stops matching; deleting it later is silent
        ("ADDED", "sentinel"),
    ]
    assert events[2]["raw_object"]["metadata"]["labels"]["app"] == "web", "its last match"


async def test_field_selector_watch_follows_one_object(custom: CustomObjectsApi) -> None:
    async with Watch() as watch:
        stream = watch.stream(
            custom.list_namespaced_custom_object,
            G,
            V,
            "default",
            "jobsets",
            field_selector="metadata.name=b",
            resource_version=await _version(custom),
        )
        for name in "abc":
            await _create(custom, name)
        await custom.delete_namespaced_custom_object(G, V, "default", "jobsets", "b")
        assert await take(stream, 2) == [("ADDED", "b"), ("DELETED", "b")]


async def test_all_namespaces_watch_sees_every_namespace(
    kube_api: ApiClient, custom: CustomObjectsApi
) -> None:
    await CoreV1Api(kube_api).create_namespace(V1Namespace(metadata=V1ObjectMeta(name="team")))
    async with Watch() as everywhere, Watch() as in_team:
        all_stream = everywhere.stream(custom.list_cluster_custom_object, G, V, "jobsets")
        team_stream = in_team.stream(custom.list_namespaced_custom_object, G, V, "team", "jobsets")
        await _create(custom, "a")
        await custom.create_namespaced_custom_object(G, V, "team", "jobsets", jobset("b"))

        assert await take(all_stream, 2) == [("ADDED", "a"), ("ADDED", "b")]
        assert await take(team_stream, 1) == [("ADDED", "b")]


async def test_many_concurrent_watchers_each_see_every_event(
    kubesim: KubeSim, custom: CustomObjectsApi
) -> None:
    names = [f"js-{i}" for i in range(10)]
    watches = [Watch() for _ in range(25)]
    streams = [
        w.stream(custom.list_namespaced_custom_object, G, V, "default", "jobsets") for w in watches
    ]
    try:
        readers = [asyncio.create_task(take(s, len(names))) for s in streams]
        await eventually(lambda: kubesim.watches.open_count == 25, what="25 open watches")
        for name in names:
            await _create(custom, name)
        results = await asyncio.gather(*readers)
    finally:
        for w in watches:
            await w.close()

    assert all(seen == [("ADDED", name) for name in names] for seen in results)


async def test_pods_are_watched_as_typed_objects(kube_api: ApiClient) -> None:
    core = CoreV1Api(kube_api)
    async with Watch() as watch:
        stream = watch.stream(core.list_namespaced_pod, "default")
        await core.create_namespaced_pod("default", V1Pod(metadata=V1ObjectMeta(name="p")))
        async with asyncio.timeout(5):
            event = await anext(aiter(stream))
    assert event["type"] == "ADDED"
    assert isinstance(event["object"], V1Pod)
    assert event["object"].metadata.name == "p"


@pytest.mark.parametrize("flag", ["true", "True", "1"])
async def test_watch_flag_in_any_spelling(kubesim: KubeSim, flag: str) -> None:
    kubesim.store.create(JOBSET, jobset("a"))
    url = f"{kubesim.url}/apis/{G}/{V}/namespaces/default/jobsets?watch={flag}&timeoutSeconds=1"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        first = json.loads(await response.content.readline())
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "a")


async def test_a_client_disconnect_unsubscribes(kubesim: KubeSim) -> None:
    url = f"{kubesim.url}/apis/{G}/{V}/namespaces/default/jobsets?watch=true"
    async with aiohttp.ClientSession() as session:
        response = await session.get(url)
        await eventually(lambda: kubesim.watches.open_count == 1, what="the watch to open")
        response.close()
    await eventually(lambda: kubesim.watches.open_count == 0, what="the watch to unsubscribe")
