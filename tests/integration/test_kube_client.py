"""The shared Kubernetes client (``xmc.kube_client.KubeClient``) against a real kubesim over
real HTTP: every verb, every failure classified, and every call bounded in time — a
server that never answers fails the call as NO_RESPONSE instead of hanging it.

Each test's own deadline is an ``asyncio.timeout`` around the call: a hang fails the test,
and nothing else about timing is asserted."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from kubesim.resources import CLUSTER_QUEUE, JOBSET, LOCAL_QUEUE
from kubesim.server import KubeSim
from tests.kubesim.support import jobset
from xmc.kube import JOBSETS, LEASES, KubeError, KubeFailure
from xmc.kube_client import KubeClient

NS = "default"
#: The test's own deadline for one call that must not hang.
DEADLINE = 5.0


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    sim = KubeSim(controllers=False, watch_history=5)
    await sim.start()
    yield sim
    await sim.stop()


@pytest.fixture
async def kube(sim: KubeSim) -> AsyncIterator[KubeClient]:
    async with await KubeClient.for_url(sim.url, request_timeout=5.0) as client:
        yield client


async def failure_of(call: Any) -> KubeError:
    """The KubeError ``call`` raises, within the test's deadline."""
    async with asyncio.timeout(DEADLINE):
        with pytest.raises(KubeError) as raised:
            await call
    return raised.value


# --- objects ---------------------------------------------------------------------------


async def test_get_of_a_missing_object_is_none(kube: KubeClient) -> None:
    assert await kube.get(JOBSETS, NS, "nothing") is None
    error = await failure_of(kube.delete(JOBSETS, NS, "nothing"))
    assert error.failure is KubeFailure.NOT_FOUND
    assert error.status == 404


async def test_create_returns_the_object_and_a_second_create_already_exists(
    kube: KubeClient,
) -> None:
    created = await kube.create(JOBSETS, NS, jobset("a"))
    assert created["metadata"]["uid"]
    assert (await kube.get(JOBSETS, NS, "a")) == created

    error = await failure_of(kube.create(JOBSETS, NS, jobset("a")))
    assert error.failure is KubeFailure.ALREADY_EXISTS
    assert error.reason == "AlreadyExists"


async def test_delete_with_another_uid_conflicts_and_with_its_own_deletes(
    sim: KubeSim, kube: KubeClient
) -> None:
    created = await kube.create(JOBSETS, NS, jobset("a"))

    error = await failure_of(kube.delete(JOBSETS, NS, "a", uid="someone-else"))
    assert error.failure is KubeFailure.CONFLICT
    assert sim.store.find(JOBSET, NS, "a") is not None

    await kube.delete(
        JOBSETS, NS, "a", uid=created["metadata"]["uid"], propagation_policy="Background"
    )
    assert await kube.get(JOBSETS, NS, "a") is None


async def test_an_unknown_propagation_policy_is_invalid(kube: KubeClient) -> None:
    await kube.create(JOBSETS, NS, jobset("a"))
    error = await failure_of(kube.delete(JOBSETS, NS, "a", propagation_policy="Sideways"))
    assert error.failure is KubeFailure.INVALID


async def test_patch_is_a_merge_patch_with_a_resource_version_precondition(
    kube: KubeClient,
) -> None:
    created = await kube.create(JOBSETS, NS, jobset("a", labels={"keep": "1", "drop": "1"}))

    patched = await kube.patch(
        JOBSETS, NS, "a", {"metadata": {"labels": {"drop": None, "new": "2"}}}
    )
    assert patched["metadata"]["labels"] == {"keep": "1", "new": "2"}, "RFC 7386, not RFC 6902"
    assert patched["spec"] == created["spec"]

    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    error = await failure_of(kube.patch(JOBSETS, NS, "a", stale))
    assert error.failure is KubeFailure.CONFLICT


async def test_replace_puts_and_a_stale_version_conflicts(kube: KubeClient) -> None:
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}}
    created = await kube.create(LEASES, NS, {**lease, "spec": {"holderIdentity": "a"}})
    replaced = await kube.replace(LEASES, NS, "l", {**created, "spec": {"holderIdentity": "b"}})
    assert replaced["spec"] == {"holderIdentity": "b"}

    error = await failure_of(kube.replace(LEASES, NS, "l", {**created, "spec": {}}))
    assert error.failure is KubeFailure.CONFLICT


async def test_list_pages_follow_continue_tokens(kube: KubeClient) -> None:
    for i in range(5):
        await kube.create(JOBSETS, NS, jobset(f"js-{i}", labels={"even": str(i % 2 == 0)}))

    names: list[str] = []
    pages = 0
    token: str | None = None
    while True:
        page = await kube.list_page(JOBSETS, NS, limit=2, continue_token=token)
        pages += 1
        names += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert (pages, sorted(names)) == (3, [f"js-{i}" for i in range(5)])

    selected = await kube.list_page(JOBSETS, NS, label_selector="even=True")
    assert sorted(i["metadata"]["name"] for i in selected["items"]) == ["js-0", "js-2", "js-4"]

    error = await failure_of(kube.list_page(JOBSETS, NS, label_selector="team in ("))
    assert error.failure is KubeFailure.INVALID


async def test_the_visibility_api(sim: KubeSim, kube: KubeClient) -> None:
    pytest.importorskip("kubesim.controllers", reason="pending workloads come from its Kueue")
    error = await failure_of(kube.pending_workloads(NS, "nowhere"))
    assert error.failure is KubeFailure.NOT_FOUND

    sim.store.create(CLUSTER_QUEUE, {"metadata": {"name": "cq"}, "spec": {}}, None)
    sim.store.create(LOCAL_QUEUE, {"metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}, NS)
    summary = await kube.pending_workloads(NS, "lq")
    assert summary["kind"] == "PendingWorkloadsSummary"
    assert summary["items"] == []


async def test_every_page_of_a_long_queue_is_read(
    sim: KubeSim, kube: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kueue answers at most ``limit`` items (1,000 unless asked): a queue of 2,500 comes
    back whole, in order, not cut at the first page."""
    import kubesim.api.visibility as visibility

    queued = [
        {"metadata": {"name": f"w-{i}", "namespace": NS}, "localQueueName": "lq",
         "positionInClusterQueue": i}
        for i in range(2_500)
    ]  # fmt: skip
    monkeypatch.setattr(visibility, "_pending_workloads", lambda store, cq: queued)
    sim.store.create(CLUSTER_QUEUE, {"metadata": {"name": "cq"}, "spec": {}}, None)
    sim.store.create(LOCAL_QUEUE, {"metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}, NS)

    summary = await kube.pending_workloads(NS, "lq")
    assert [i["positionInClusterQueue"] for i in summary["items"]] == list(range(2_500))
    small_pages = await kube.pending_workloads(NS, "lq", page=1_000)
    assert small_pages["items"] == summary["items"]
    exact = await kube.pending_workloads(NS, "lq", page=500)  # the last page is full
    assert len(exact["items"]) == 2_500


# --- watching --------------------------------------------------------------------------


async def test_watch_streams_the_events_after_a_resource_version(
    sim: KubeSim, kube: KubeClient
) -> None:
    listed = await kube.list_page(JOBSETS, NS)
    await kube.create(JOBSETS, NS, jobset("a"))
    await kube.patch(JOBSETS, NS, "a", {"metadata": {"labels": {"x": "1"}}})
    await kube.delete(JOBSETS, NS, "a")

    seen: list[tuple[str, str]] = []
    async with (
        asyncio.timeout(DEADLINE),
        kube.watch(
            JOBSETS, NS, resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=1
        ) as events,
    ):
        async for event in events:
            if event["type"] != "BOOKMARK":
                seen.append((event["type"], event["object"]["metadata"]["name"]))
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


async def test_a_watch_from_an_expired_version_is_expired(kube: KubeClient) -> None:
    first = await kube.create(JOBSETS, NS, jobset("a"))
    for i in range(10):  # past the sim's history of 5 events
        await kube.patch(JOBSETS, NS, "a", {"metadata": {"labels": {"i": str(i)}}})

    async def watch() -> None:
        version = first["metadata"]["resourceVersion"]
        async with kube.watch(JOBSETS, NS, resource_version=version, timeout_seconds=5) as events:
            async for _ in events:
                pass

    error = await failure_of(watch())
    assert error.failure is KubeFailure.EXPIRED


async def test_a_watch_error_answer_is_classified(sim: KubeSim, kube: KubeClient) -> None:
    sim.faults.fail("watch", "jobsets", code=429, retry_after_seconds=2)

    async def watch() -> None:
        async with kube.watch(JOBSETS, NS, resource_version="0", timeout_seconds=1):
            pass

    error = await failure_of(watch())
    assert (error.failure, error.retry_after) == (KubeFailure.THROTTLED, 2.0)


# --- faults and timeouts ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param(500, KubeFailure.SERVER, id="500"),
        pytest.param(503, KubeFailure.SERVER, id="503"),
        pytest.param(429, KubeFailure.THROTTLED, id="429"),
        pytest.param(403, KubeFailure.FORBIDDEN, id="403"),
        pytest.param(401, KubeFailure.UNAUTHORIZED, id="401"),
    ],
)
async def test_error_answers_are_classified(
    sim: KubeSim, kube: KubeClient, code: int, expected: KubeFailure
) -> None:
    sim.faults.fail("get", "jobsets", code=code)
    error = await failure_of(kube.get(JOBSETS, NS, "a"))
    assert (error.status, error.failure) == (code, expected)
    if code == 429:
        assert error.retry_after == 1.0, "kubesim's default Retry-After"


async def test_a_call_without_an_answer_fails_within_the_request_timeout(sim: KubeSim) -> None:
    sim.faults.delay("get", "jobsets", seconds=30)
    async with await KubeClient.for_url(sim.url, request_timeout=0.3) as kube:
        error = await failure_of(kube.get(JOBSETS, NS, "a"))
        assert error.failure is KubeFailure.NO_RESPONSE
        assert "no answer within 0.3s" in str(error)

        # A per-call bound overrides the client's.
        error = await failure_of(kube.get(JOBSETS, NS, "a", request_timeout=0.1))
        assert "no answer within 0.1s" in str(error)


async def test_a_watch_that_never_starts_fails_within_the_request_timeout(sim: KubeSim) -> None:
    sim.faults.delay("watch", "jobsets", seconds=30)

    async def watch(kube: KubeClient) -> None:
        async with kube.watch(JOBSETS, NS, resource_version="0", timeout_seconds=60):
            pass

    async with await KubeClient.for_url(sim.url, request_timeout=0.3) as kube:
        error = await failure_of(watch(kube))
    assert error.failure is KubeFailure.NO_RESPONSE


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """An HTTP server that starts every answer and then never says another word (a
    half-open connection, as far as the client can tell)."""
    hold = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await hold.wait()
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    hold.set()
    await runner.cleanup()


async def test_a_silent_watch_stream_fails_after_its_timeout_and_grace(
    silent_server: str,
) -> None:
    async def watch(kube: KubeClient) -> None:
        async with kube.watch(
            JOBSETS, NS, resource_version="0", timeout_seconds=1, grace=0.2
        ) as events:
            async for _ in events:
                pass

    async with await KubeClient.for_url(silent_server, request_timeout=1.0) as kube:
        error = await failure_of(watch(kube))
    assert error.failure is KubeFailure.NO_RESPONSE


async def test_an_answer_whose_body_never_comes_fails_within_the_request_timeout(
    silent_server: str,
) -> None:
    async with await KubeClient.for_url(silent_server, request_timeout=0.3) as kube:
        error = await failure_of(kube.get(JOBSETS, NS, "a"))
    assert error.failure is KubeFailure.NO_RESPONSE


async def test_a_refused_connection_is_no_response() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with await KubeClient.for_url(f"http://127.0.0.1:{port}") as kube:
        error = await failure_of(kube.get(JOBSETS, NS, "a"))
    assert (error.status, error.failure) == (None, KubeFailure.NO_RESPONSE)
