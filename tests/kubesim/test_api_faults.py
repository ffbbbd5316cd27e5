"""Fault injection, in process (``KubeSim.faults``) and over HTTP, seen through the real
kubernetes-asyncio client."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, ApiException, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.watch import Watch

from kubesim.errors import ApiError
from kubesim.faults import Fault, Faults
from kubesim.resources import JOBSET
from kubesim.server import KubeSim
from tests.kubesim.support import JOBSET_API, MERGE_PATCH, failure, jobset
from tests.waiting import eventually

G, V = JOBSET_API
Call = Callable[[CustomObjectsApi], Awaitable[Any]]


async def _watch_once(custom: CustomObjectsApi) -> Any:
    async with Watch() as watch:
        stream = watch.stream(
            custom.list_namespaced_custom_object, G, V, "default", "jobsets", timeout_seconds=1
        )
        return [event async for event in stream]


async def _replace_status(custom: CustomObjectsApi) -> Any:
    current = await custom.get_namespaced_custom_object(G, V, "default", "jobsets", "a")
    current["status"] = {"restarts": 1}
    return await custom.replace_namespaced_custom_object_status(
        G, V, "default", "jobsets", "a", current
    )


CALLS: dict[str, Call] = {
    "get": lambda c: c.get_namespaced_custom_object(G, V, "default", "jobsets", "a"),
    "list": lambda c: c.list_namespaced_custom_object(G, V, "default", "jobsets"),
    "create": lambda c: c.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("b")),
    "update": lambda c: _replace_status(c),
    "patch": lambda c: c.patch_namespaced_custom_object(
        G, V, "default", "jobsets", "a", {"metadata": {"labels": {"x": "y"}}}, **MERGE_PATCH
    ),
    "delete": lambda c: c.delete_namespaced_custom_object(G, V, "default", "jobsets", "a"),
    "watch": _watch_once,
}


@pytest.fixture
async def custom(kube_api: ApiClient, kubesim: KubeSim) -> CustomObjectsApi:
    kubesim.store.create(JOBSET, jobset("a"))
    return CustomObjectsApi(kube_api)


@pytest.mark.parametrize(
    ("verb", "resource", "code", "reason"),
    [
        pytest.param("get", "jobsets", 500, "InternalError", id="get fails with 500"),
        pytest.param("list", "*", 429, "TooManyRequests", id="list is throttled"),
        pytest.param("create", "jobsets", 409, "Conflict", id="create conflicts"),
        pytest.param("update", "jobsets/status", 503, "ServiceUnavailable", id="status update"),
        pytest.param("update", "*", 409, "Conflict", id="update conflicts"),
        pytest.param("patch", "jobsets", 500, "InternalError", id="patch fails"),
        pytest.param("delete", "jobsets", 500, "InternalError", id="delete fails"),
        pytest.param("watch", "jobsets", 500, "InternalError", id="watch fails to start"),
    ],
)
async def test_the_next_call_fails_then_the_one_after_succeeds(
    kubesim: KubeSim, custom: CustomObjectsApi, verb: str, resource: str, code: int, reason: str
) -> None:
    kubesim.faults.fail(verb, resource, code=code)
    version = kubesim.store.resource_version

    with pytest.raises(ApiException) as raised:
        await CALLS[verb](custom)

    assert raised.value.status == code
    if verb != "watch":  # a watch error arrives as a Status line, without headers
        assert failure(raised.value) == (code, reason)
    assert kubesim.store.resource_version == version, "a failed call writes nothing"
    await CALLS[verb](custom)


async def test_429_carries_retry_after(kubesim: KubeSim, custom: CustomObjectsApi) -> None:
    kubesim.faults.fail("get", "jobsets", code=429, retry_after_seconds=3)
    with pytest.raises(ApiException) as raised:
        await CALLS["get"](custom)
    assert raised.value.headers is not None
    assert raised.value.headers["Retry-After"] == "3"


async def test_times_counts_failures_and_resources_are_matched(
    kubesim: KubeSim, kube_api: ApiClient, custom: CustomObjectsApi
) -> None:
    kubesim.faults.fail("list", "pods", code=500, times=2)
    core = CoreV1Api(kube_api)

    await CALLS["list"](custom)  # jobsets are not affected
    for _ in range(2):
        with pytest.raises(ApiException):
            await core.list_namespaced_pod("default")
    await core.list_namespaced_pod("default")
    assert kubesim.faults.pending == ()


async def test_latency_slows_matching_calls_only(
    kubesim: KubeSim, custom: CustomObjectsApi
) -> None:
    kubesim.faults.delay("get", "jobsets", seconds=0.3, times=1)

    started = time.monotonic()
    await CALLS["get"](custom)
    slow = time.monotonic() - started
    started = time.monotonic()
    await CALLS["get"](custom)
    fast = time.monotonic() - started

    assert slow >= 0.3
    assert fast < 0.3


async def test_latency_narrowed_to_one_object(kubesim: KubeSim, kube_api: ApiClient) -> None:
    """``url_contains`` sees the decoded URL: a label selector as written, an item's name."""
    core = CoreV1Api(kube_api)
    kubesim.faults.delay("list", "pods", seconds=0.3, url_contains="app=slow")
    kubesim.faults.delay("get", "pods", seconds=0.3, url_contains="/pods/slow-pod")

    async def took(call: Awaitable[Any]) -> float:
        started = time.monotonic()
        with contextlib.suppress(ApiException):  # the pods need not exist
            await call
        return time.monotonic() - started

    assert await took(core.list_namespaced_pod("default", label_selector="app=slow")) >= 0.3
    assert await took(core.list_namespaced_pod("default", label_selector="app=fast")) < 0.3
    assert await took(core.read_namespaced_pod("slow-pod", "default")) >= 0.3
    assert await took(core.read_namespaced_pod("fast-pod", "default")) < 0.3


async def test_closed_watches_are_resumed_by_the_client_without_loss(
    kubesim: KubeSim, custom: CustomObjectsApi
) -> None:
    async with Watch() as watch:
        stream = watch.stream(custom.list_namespaced_custom_object, G, V, "default", "jobsets")
        async with asyncio.timeout(5):
            first = await anext(aiter(stream))
            assert kubesim.faults.close_watches() == 1
            await eventually(lambda: kubesim.watches.open_count == 0, what="the watch to end")
            await CALLS["create"](custom)
            second = await anext(aiter(stream))  # kubernetes-asyncio reconnects from its rv

    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "a")
    assert (second["type"], second["object"]["metadata"]["name"]) == ("ADDED", "b")


async def test_faults_over_http(kubesim: KubeSim, custom: CustomObjectsApi) -> None:
    async with aiohttp.ClientSession(kubesim.url) as http:
        fault = {"verb": "get", "resource": "jobsets", "code": 500, "times": 1}
        async with http.post("/kubesim/faults", json=fault) as response:
            assert response.status == 201
        with pytest.raises(ApiException) as raised:
            await CALLS["get"](custom)
        assert raised.value.status == 500

        for _ in range(2):
            await http.post("/kubesim/faults", json=fault)
        async with http.delete("/kubesim/faults") as response:
            assert response.status == 200
        await CALLS["get"](custom)

        async with http.post("/kubesim/faults", json={"verb": "teleport"}) as response:
            assert response.status == 400
            assert (await response.json())["reason"] == "BadRequest"

        async with http.post("/kubesim/close-watches") as response:
            assert await response.json() == {"closed": 0}


@pytest.mark.parametrize(
    ("faults", "call", "expected"),
    [
        pytest.param(
            [Fault("get", "jobsets", code=500)], ("get", "jobsets"), (0.0, 500), id="a match"
        ),
        pytest.param([Fault("get", "pods", code=500)], ("get", "jobsets"), (0.0, None), id="other"),
        pytest.param(
            [Fault("*", "*", code=503)], ("watch", "pods"), (0.0, 503), id="wildcards match all"
        ),
        pytest.param(
            [Fault("update", "jobsets", code=500)],
            ("update", "jobsets/status"),
            (0.0, 500),
            id="a plural covers its status subresource",
        ),
        pytest.param(
            [Fault("update", "jobsets/status", code=500)],
            ("update", "jobsets"),
            (0.0, None),
            id="a subresource fault leaves the main resource alone",
        ),
        pytest.param(
            [Fault("get", code=500), Fault("get", code=429)],
            ("get", "jobsets"),
            (0.0, 500),
            id="the first failure wins",
        ),
        pytest.param(
            [Fault("get", latency_seconds=0.5, times=None), Fault("*", latency_seconds=0.25)],
            ("get", "jobsets"),
            (0.75, None),
            id="latencies add up",
        ),
        pytest.param(
            [Fault("list", "pods", latency_seconds=1, url_contains="job-name=xmc-1-1-main-0")],
            (
                "list",
                "pods",
                "/api/v1/namespaces/default/pods?labelSelector=a,job-name=xmc-1-1-main-0",
            ),
            (1.0, None),
            id="a URL naming the thing",
        ),
        pytest.param(
            [Fault("list", "pods", latency_seconds=1, url_contains="job-name=xmc-1-1-main-0")],
            (
                "list",
                "pods",
                "/api/v1/namespaces/default/pods?labelSelector=job-name=xmc-1-10-main-0",
            ),
            (0.0, None),
            id="a URL naming another thing",
        ),
    ],
)
def test_take_decides_per_call(
    faults: list[Fault], call: tuple[str, ...], expected: tuple[float, int | None]
) -> None:
    registry = Faults(lambda: 0)
    for fault in faults:
        registry.add(fault)
    decision = registry.take(*call)
    code = decision.error.code if isinstance(decision.error, ApiError) else None
    assert (decision.latency_seconds, code) == expected
