"""``pods/{name}/log``, asserted the same way on kubesim and on a real cluster: what the
Reconciler (a failed container's last words) and the ESS (a live follow) read.

On kubesim the API server answers from its model; on ``make cluster`` kube-apiserver
proxies the request to the kubelet endpoint of the pod's Node, which the node agent
serves (docs/cluster.md, "Container logs"). The pods are bare pods in the test's
namespace, printing what their ``kubesim.xmc/behavior.<container>`` annotations say."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timedelta
from typing import Any, cast

import aiohttp
import pytest
from kubernetes_asyncio.client import CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from tests.contract.cluster import Cluster
from xmc.kube import PODS

Obj = dict[str, Any]
FOREVER = {"run_seconds": None}
STAMPED = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (.*)")


def _pod(namespace: str, name: str, behaviors: dict[str, Obj]) -> Obj:
    """A pod whose containers (one per behaviour, in order) behave as given."""
    annotations = {f"kubesim.xmc/behavior.{c}": json.dumps(b) for c, b in behaviors.items()}
    containers = [
        {"name": c, "image": "busybox:1.36", "command": ["sleep", "3600"],
         "resources": {"requests": {"cpu": "10m"}}}
        for c in behaviors
    ]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": containers,
        },
    }


async def _create(cluster: Cluster, name: str, behaviors: dict[str, Obj]) -> None:
    path = f"/api/v1/namespaces/{cluster.namespace}/pods"
    await cluster.kube.request("POST", path, body=_pod(cluster.namespace, name, behaviors))


async def _state(cluster: Cluster, name: str, container: str = "main") -> Obj:
    """The container's current state (``{"running": {...}}``, ...; empty: none yet)."""
    pod = await cluster.kube.get(PODS, cluster.namespace, name)
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    state: Obj = next((s.get("state") or {} for s in statuses if s["name"] == container), {})
    return state


async def _read(cluster: Cluster, name: str, **options: Any) -> str:
    text: str = await CoreV1Api(cluster.api).read_namespaced_pod_log(
        name, cluster.namespace, **options
    )
    return text


async def _refusal(cluster: Cluster, name: str, **options: Any) -> tuple[int, str]:
    """The status code and the Status message of a refused read."""
    with pytest.raises(ApiException) as caught:
        await _read(cluster, name, **options)
    return caught.value.status, json.loads(caught.value.body or b"{}")["message"]


async def _reads(cluster: Cluster, name: str, expected: str, **options: Any) -> None:
    """Wait until the container runs, then until its log reads ``expected``."""
    container = options.get("container", "main")
    await cluster.wait(
        lambda: _running(cluster, name, container), within=60, what=f"{name}/{container} runs"
    )

    async def read() -> bool:
        return await _read(cluster, name, **options) == expected

    await cluster.wait(read, within=60, what=f"the log of {name} {options} is {expected!r}")


async def test_a_pod_of_two_containers_needs_a_valid_container_name(cluster: Cluster) -> None:
    name = "two-containers"
    await _create(
        cluster,
        name,
        {"main": {**FOREVER, "logs": ["m1", "m2"]}, "side": {**FOREVER, "logs": ["s1"]}},
    )
    await _reads(cluster, name, "m1\nm2\n", container="main")
    await _reads(cluster, name, "s1\n", container="side")
    assert await _refusal(cluster, name) == (
        400,
        f"a container name must be specified for pod {name}, choose one of: [main side]",
    )
    assert await _refusal(cluster, name, container="nope") == (
        400,
        f"container nope is not valid for pod {name}",
    )


async def test_previous_of_a_container_never_restarted_is_refused(cluster: Cluster) -> None:
    await _create(cluster, "once", {"main": {**FOREVER, "logs": ["only"]}})
    await _reads(cluster, "once", "only\n")
    assert await _refusal(cluster, "once", previous=True) == (
        400,
        'previous terminated container "main" in pod "once" not found',
    )


async def test_tail_timestamps_and_since(cluster: Cluster) -> None:
    """Lines are stamped one ``log_every_seconds`` apart from the container's start;
    ``tailLines`` keeps the last ones; ``sinceSeconds`` drops those older than that."""
    lines = ["a", "b", "c", "d"]
    await _create(cluster, "stamped", {"main": {**FOREVER, "logs": lines}})
    await _reads(cluster, "stamped", "a\nb\nc\nd\n")
    assert await _read(cluster, "stamped", tail_lines=2) == "c\nd\n"
    assert await _read(cluster, "stamped", tail_lines=0) == ""

    stamped = [STAMPED.fullmatch(line) for line in
               (await _read(cluster, "stamped", timestamps=True)).splitlines()]  # fmt: skip
    assert all(stamped), stamped
    assert [m.group(2) for m in stamped if m] == lines
    moments = [datetime.fromisoformat(m.group(1)[:26] + "+00:00") for m in stamped if m]
    started = datetime.fromisoformat((await _state(cluster, "stamped"))["running"]["startedAt"])
    assert moments == [started + timedelta(seconds=i) for i in range(len(lines))]

    assert await _read(cluster, "stamped", since_seconds=3600) == "a\nb\nc\nd\n"
    # No line comes after "d": once it is more than 2 s old, none is that recent.
    await _reads(cluster, "stamped", "", since_seconds=2)


async def test_follow_streams_until_the_container_ends_with_its_failure(
    cluster: Cluster,
) -> None:
    """A follow opened while the container runs stays open, gets each line as it is
    printed, and ends once the container has exited: with its failure text, which a
    read made before the exit cannot have."""
    behavior = {"logs": ["one", "two", "three"], "run_seconds": 8, "exit_code": 3,
                "message": "boom"}  # fmt: skip
    await _create(cluster, "follow", {"main": behavior})
    await cluster.wait(
        lambda: _running(cluster, "follow"), within=60, what="the container is running"
    )
    # Unread (``_preload_content=False``), the client hands back aiohttp's response.
    response = cast(
        aiohttp.ClientResponse,
        await CoreV1Api(cluster.api).read_namespaced_pod_log(
            "follow", cluster.namespace, follow=True, _preload_content=False
        ),
    )
    try:
        body = await asyncio.wait_for(response.content.read(), timeout=60 / cluster.scale + 10)
    finally:
        response.release()
    assert body.decode() == "one\ntwo\nthree\nboom\n"
    terminated = (await _state(cluster, "follow"))["terminated"]
    assert (terminated["exitCode"], terminated["message"]) == (3, "boom")
    assert await _read(cluster, "follow") == "one\ntwo\nthree\nboom\n"


async def _running(cluster: Cluster, name: str, container: str = "main") -> bool:
    return "running" in await _state(cluster, name, container)
