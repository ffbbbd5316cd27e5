"""Reads from a resourceVersion kubesim has not reached (a restarted ephemeral kubesim; on
a real cluster, etcd restored from a backup), answered as kube-apiserver answers them
(``kubesim.freshness`` cites the upstream code): a list waits ~3 s, then 504 Timeout with
the ``ResourceVersionTooLarge`` cause that makes client-go relist; an exact read fails at
once; a plain watch is no error and delivers only what comes after that version."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiException, CustomObjectsApi

from kubesim.freshness import WAIT_SECONDS, too_large
from kubesim.resources import JOBSET
from kubesim.server import KubeSim
from tests.kubesim.support import JOBSET_API, MakeKubeSim, client_for, jobset

G, V = JOBSET_API
JOBSETS = f"/apis/{G}/{V}/namespaces/default/jobsets"


async def _get(sim: KubeSim, query: dict[str, str]) -> tuple[int, dict[str, str], Any, float]:
    started = time.monotonic()
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{sim.url}{JOBSETS}", params=query) as response,
    ):
        body = await response.json()
        return response.status, dict(response.headers), body, time.monotonic() - started


@pytest.mark.parametrize("match", [None, "NotOlderThan"])
async def test_a_list_from_a_version_never_reached_is_504_too_large(
    make_kubesim: MakeKubeSim, match: str | None
) -> None:
    sim = await make_kubesim()
    current = sim.store.resource_version
    query = {"resourceVersion": str(current + 1000)}
    if match:
        query["resourceVersionMatch"] = match
    status, headers, body, took = await _get(sim, query)
    assert status == 504
    assert took >= WAIT_SECONDS - 0.1  # the watch cache waited for it first
    assert headers["Retry-After"] == "1"
    # The Status itself, field by field, is pinned in test_persistence_units.py.
    assert body == too_large(current + 1000, current).status()


async def test_kubernetes_asyncio_sees_the_timeout_with_its_cause(
    make_kubesim: MakeKubeSim,
) -> None:
    sim = await make_kubesim(controllers=False)
    sim.store.create(JOBSET, jobset("a"))
    async with client_for(sim) as api:
        custom = CustomObjectsApi(api)
        with pytest.raises(ApiException) as refused:
            await custom.list_namespaced_custom_object(
                G, V, "default", "jobsets", resource_version=str(sim.store.resource_version + 1000)
            )
        assert refused.value.status == 504
        body = json.loads(refused.value.body or b"{}")
        assert [c["reason"] for c in body["details"]["causes"]] == ["ResourceVersionTooLarge"]
        # What client-go's reflector does next: relist with resourceVersion "".
        listed = await custom.list_namespaced_custom_object(G, V, "default", "jobsets")
        assert [j["metadata"]["name"] for j in listed["items"]] == ["a"]


@pytest.mark.parametrize(
    "query", [{"resourceVersionMatch": "Exact"}, {"limit": "10"}], ids=["exact", "legacy-limit"]
)
async def test_an_exact_read_of_a_future_version_fails_at_once(
    make_kubesim: MakeKubeSim, query: dict[str, str]
) -> None:
    sim = await make_kubesim()
    query = {"resourceVersion": str(sim.store.resource_version + 1000), **query}
    status, _, body, took = await _get(sim, query)
    assert (status, body["message"]) == (
        500,
        "etcdserver: mvcc: required revision is a future revision",
    )
    assert "reason" not in body
    assert took < WAIT_SECONDS / 2


async def test_a_list_from_a_version_reached_during_the_wait_succeeds(
    make_kubesim: MakeKubeSim,
) -> None:
    sim = await make_kubesim()
    target = sim.store.resource_version + 3
    listing = asyncio.create_task(_get(sim, {"resourceVersion": str(target)}))
    await asyncio.sleep(0)  # the request is sent; the store has not moved yet
    for name in ("a", "b", "c"):
        await asyncio.sleep(0.2)
        sim.store.create(JOBSET, jobset(name))
    status, _, body, took = await listing
    assert status == 200
    assert int(body["metadata"]["resourceVersion"]) >= target
    assert [j["metadata"]["name"] for j in body["items"]] == ["a", "b", "c"]
    assert took < WAIT_SECONDS


async def test_a_get_from_a_version_never_reached_is_504_too(make_kubesim: MakeKubeSim) -> None:
    sim = await make_kubesim()
    sim.store.create(JOBSET, jobset("a"))
    ahead = sim.store.resource_version + 1000
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{sim.url}{JOBSETS}/a", params={"resourceVersion": str(ahead)}) as response,
    ):
        assert response.status == 504
        assert (await response.json())["details"]["causes"][0]["reason"] == (
            "ResourceVersionTooLarge"
        )


async def test_a_watch_from_a_future_version_waits_for_it_without_error(
    make_kubesim: MakeKubeSim,
) -> None:
    """Upstream's cacher lets the watch start (only ``sendInitialEvents`` waits and fails):
    it sends nothing, not even a bookmark, until the store passes that version, then the
    events after it."""
    sim = await make_kubesim(bookmark_interval=0.1)
    start = sim.store.resource_version + 2
    query = {"watch": "true", "resourceVersion": str(start), "allowWatchBookmarks": "true"}
    lines: list[dict[str, Any]] = []
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{sim.url}{JOBSETS}", params=query) as response,
    ):
        assert response.status == 200
        with pytest.raises(TimeoutError):  # open, silent: no ERROR, no bookmark
            async with asyncio.timeout(0.5):
                await response.content.readline()
        for name in ("a", "b", "c"):
            sim.store.create(JOBSET, jobset(name))
        async with asyncio.timeout(5):
            while not lines or lines[-1]["type"] == "BOOKMARK":
                lines.append(json.loads(await response.content.readline()))
    # Once the store has passed the version, bookmarks may come before the event (a
    # loaded machine gives the 0.1 s bookmark timer time to fire): only the events count.
    events = [e for e in lines if e["type"] != "BOOKMARK"]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "c")]
