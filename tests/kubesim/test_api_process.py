"""``xmc-kubesim`` as a real OS process: a probe drives it through kubernetes-asyncio
(create, read, patch, replace, conditional delete, finalizers, watch resume, 410 and
bookmarks), then SIGTERM stops it with exit code 0."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import (
    ApiClient,
    ApiException,
    Configuration,
    CustomObjectsApi,
    V1DeleteOptions,
    V1Preconditions,
)
from kubernetes_asyncio.watch import Watch

from kubesim.clock import parse_offset
from tests.kubesim.support import JOBSET_API, MERGE_PATCH, failure, jobset
from tests.waiting import eventually

# xmc-kubesim as an OS process: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

G, V = JOBSET_API
SCRIPT = Path(sys.executable).parent / "xmc-kubesim"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _until_healthy(url: str, process: asyncio.subprocess.Process) -> None:
    async with asyncio.timeout(15), aiohttp.ClientSession() as http:
        while process.returncode is None:
            try:
                async with http.get(f"{url}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)  # not listening yet: poll again
    raise AssertionError(f"xmc-kubesim exited early with {process.returncode}")


@asynccontextmanager
async def _running(*args: str) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT), *args, "--port", str(port), stderr=asyncio.subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    try:
        await _until_healthy(url, process)
        yield url, process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.fixture
async def kubesim_process() -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    args = ("--ephemeral", "--no-controllers", "--watch-history", "5", "--bookmark-interval", "0.2")
    async with _running(*args) as running:
        yield running


async def _crud(custom: CustomObjectsApi) -> None:
    created = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("a"))
    assert created["metadata"]["uid"]
    fetched = await custom.get_namespaced_custom_object(G, V, "default", "jobsets", "a")
    assert fetched == created
    patched = await custom.patch_namespaced_custom_object(
        G, V, "default", "jobsets", "a", {"metadata": {"labels": {"p": "1"}}}, **MERGE_PATCH
    )
    patched["spec"]["replicatedJobs"][0]["replicas"] = 2
    replaced = await custom.replace_namespaced_custom_object(
        G, V, "default", "jobsets", "a", patched
    )
    assert replaced["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as raised:
        await custom.replace_namespaced_custom_object(G, V, "default", "jobsets", "a", patched)
    assert failure(raised.value) == (409, "Conflict")


async def _delete_with_preconditions_and_finalizers(custom: CustomObjectsApi) -> None:
    body = jobset("f", finalizers=["x.io/keep"])
    created = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", body)
    wrong = V1DeleteOptions(preconditions=V1Preconditions(uid="not-the-uid"))
    with pytest.raises(ApiException) as raised:
        await custom.delete_namespaced_custom_object(G, V, "default", "jobsets", "f", body=wrong)
    assert failure(raised.value) == (409, "Conflict")

    right = V1DeleteOptions(preconditions=V1Preconditions(uid=created["metadata"]["uid"]))
    await custom.delete_namespaced_custom_object(G, V, "default", "jobsets", "f", body=right)
    kept = await custom.get_namespaced_custom_object(G, V, "default", "jobsets", "f")
    assert kept["metadata"]["deletionTimestamp"]
    await custom.patch_namespaced_custom_object(
        G, V, "default", "jobsets", "f", [{"op": "remove", "path": "/metadata/finalizers"}]
    )
    with pytest.raises(ApiException) as raised:
        await custom.get_namespaced_custom_object(G, V, "default", "jobsets", "f")
    assert failure(raised.value) == (404, "NotFound")


async def _watch(custom: CustomObjectsApi, resource_version: str, count: int) -> list[Any]:
    events: list[Any] = []
    async with Watch() as watch, asyncio.timeout(10):
        stream = watch.stream(
            custom.list_namespaced_custom_object,
            G,
            V,
            "default",
            "jobsets",
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=30,
        )
        async for event in stream:
            events.append((event["type"], event["raw_object"]["metadata"]))
            if len(events) == count:
                break
    return events


async def _watch_resume_410_and_bookmarks(custom: CustomObjectsApi) -> None:
    listed = await custom.list_namespaced_custom_object(G, V, "default", "jobsets")
    version = listed["metadata"]["resourceVersion"]
    await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset("w"))

    events = await _watch(custom, version, 3)
    assert [(t, m.get("name")) for t, m in events[:2]] == [("ADDED", "w"), ("BOOKMARK", None)]
    assert events[2][0] == "BOOKMARK", "bookmarks keep coming while nothing changes"

    for i in range(6):  # more writes than the history (5) holds
        await custom.create_namespaced_custom_object(G, V, "default", "jobsets", jobset(f"x{i}"))
    with pytest.raises(ApiException) as raised:
        await _watch(custom, version, 1)
    assert raised.value.status == 410


async def test_xmc_kubesim_process(
    kubesim_process: tuple[str, asyncio.subprocess.Process],
) -> None:
    url, process = kubesim_process
    async with ApiClient(Configuration(host=url)) as api:
        custom = CustomObjectsApi(api)
        await _crud(custom)
        await _delete_with_preconditions_and_finalizers(custom)
        await _watch_resume_410_and_bookmarks(custom)
    async with aiohttp.ClientSession() as http:
        path = f"{url}/apis/{G}/{V}/namespaces/default/jobsets"
        async with http.get(path) as response:  # what a plain curl sees
            assert response.status == 200
            assert (await response.json())["kind"] == "JobSetList"

    process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(10):
        assert await process.wait() == 0
    assert process.stderr is not None
    log = [json.loads(line) for line in (await process.stderr.read()).splitlines() if line]
    assert {"event": "kubesim serving", "url": url}.items() <= log[0].items()
    assert log[-1]["event"] == "kubesim stopped"


@pytest.mark.parametrize("offset", [-5, 5], ids=["behind", "ahead"])
async def test_clock_offset_skews_every_cluster_timestamp(offset: int) -> None:
    """``--clock-offset`` moves the API server's clock, so creation and deletion times
    (and every condition the simulators stamp) come from a clock that is not the host's."""
    async with (
        _running("--no-controllers", f"--clock-offset={offset:+d}s") as (url, _process),
        ApiClient(Configuration(host=url)) as api,
    ):
        custom = CustomObjectsApi(api)
        host_before = datetime.now(UTC)
        body = jobset("skewed", finalizers=["x.io/keep"])
        created = await custom.create_namespaced_custom_object(G, V, "default", "jobsets", body)
        await custom.delete_namespaced_custom_object(G, V, "default", "jobsets", "skewed")
        held = await custom.get_namespaced_custom_object(G, V, "default", "jobsets", "skewed")
        host_after = datetime.now(UTC)
    for stamp in (created["metadata"]["creationTimestamp"], held["metadata"]["deletionTimestamp"]):
        moment = datetime.fromisoformat(stamp)
        skew = timedelta(seconds=offset)
        # Whole seconds: the stamp is floored, so it may be up to 1 s before the window.
        assert host_before + skew - timedelta(seconds=1) <= moment <= host_after + skew, stamp


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("-5s", -5.0), ("+5s", 5.0), ("5", 5.0), ("1m", 60.0), ("-250ms", -0.25), ("0s", 0.0)],
)
def test_parse_offset(text: str, seconds: float) -> None:
    assert parse_offset(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "five", "5 days", "--5s", "5x"])
def test_parse_offset_refuses_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="clock offset"):
        parse_offset(text)


@pytest.mark.parametrize(
    ("version", "reason"), [("0.19", "Inadmissible"), ("0.20", "Misconfigured")]
)
async def test_kueue_version_picks_the_waiting_reasons(version: str, reason: str) -> None:
    """``--kueue-version``: v0.19's reasons or current upstream's granular ones."""
    async with (
        _running(f"--kueue-version={version}", "--time-scale", "100") as (url, _process),
        ApiClient(Configuration(host=url)) as api,
    ):
        custom = CustomObjectsApi(api)
        body = jobset("lost", labels={"kueue.x-k8s.io/queue-name": "nope"})
        body["spec"]["suspend"] = True
        await custom.create_namespaced_custom_object(G, V, "default", "jobsets", body)

        async def waiting() -> dict[str, Any]:
            listed = await custom.list_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", "default", "workloads"
            )
            for item in listed["items"]:
                for found in (item.get("status") or {}).get("conditions") or []:
                    if found["type"] == "QuotaReserved":
                        return dict(found)
            return {}

        found = await eventually(waiting, what="the Workload's QuotaReserved condition")
    assert (found["status"], found["reason"], found["message"]) == (
        "False",
        reason,
        "LocalQueue nope doesn't exist",
    )


def test_the_cli_offers_every_kueue_version() -> None:
    from kubesim.controllers import KueueVersion
    from kubesim.main import KUEUE_VERSIONS

    assert set(KUEUE_VERSIONS) == {str(v) for v in KueueVersion}
