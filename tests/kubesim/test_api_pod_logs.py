"""``pods/{name}/log`` over HTTP: containers run by the simulated kubelet print their
behaviour's ``logs`` (read back through kubernetes-asyncio's ``read_namespaced_pod_log``),
follow streams them as they are written, and refusals are upstream's ``Status`` bodies."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import CoreV1Api

from kubesim.container_logs import timestamp
from kubesim.resources import POD
from kubesim.server import KubeSim
from tests.kubesim.support import MakeKubeSim, client_for
from tests.waiting import eventually

pytest.importorskip("kubesim.controllers", reason="the simulated controllers are not built")

from kubesim.controllers import ControllerSettings

SCALE = 20.0
LINES = ["one", "two", "three"]
FAILING = {"logs": LINES, "run_seconds": 5, "exit_code": 3, "message": "boom"}


def pod(name: str, behavior: dict[str, Any], containers: tuple[str, ...] = ("main",)) -> Any:
    return {
        "metadata": {"name": name, "annotations": {"kubesim.xmc/behavior": json.dumps(behavior)}},
        "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers]},
    }


def state_of(sim: KubeSim, name: str) -> dict[str, Any]:
    found = sim.store.get(POD, "default", name)
    statuses = (found.get("status") or {}).get("containerStatuses") or [{}]
    state: dict[str, Any] = statuses[0].get("state") or {}
    return state


def started_at(state: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(next(iter(state.values()))["startedAt"])


async def test_a_failed_container_prints_its_lines_then_its_failure(
    make_kubesim: MakeKubeSim,
) -> None:
    sim = await make_kubesim(controllers=True, time_scale=SCALE)
    sim.store.create(POD, pod("p", FAILING), "default")
    state = await eventually(
        lambda: state_of(sim, "p").get("terminated") and state_of(sim, "p"), what="exited"
    )
    start = started_at(state)
    async with client_for(sim) as api:
        core = CoreV1Api(api)

        async def read(**options: Any) -> str:
            text: str = await core.read_namespaced_pod_log("p", "default", **options)
            return text

        assert await read() == "one\ntwo\nthree\nboom\n"
        assert await read(container="main", tail_lines=2) == "three\nboom\n"
        assert await read(limit_bytes=6) == "one\ntw"
        stamps = [start + timedelta(seconds=s) for s in (0, 1, 2, 5)]
        assert await read(timestamps=True) == "".join(
            f"{timestamp(at)} {text}\n" for at, text in zip(stamps, [*LINES, "boom"], strict=True)
        )
        since = (start + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
        async with aiohttp.ClientSession() as http:
            url = f"{sim.url}/api/v1/namespaces/default/pods/p/log?sinceTime={since}"
            async with http.get(url) as response:
                assert response.headers["Content-Type"].startswith("text/plain")
                assert await response.text() == "three\nboom\n"


async def test_follow_streams_lines_as_written_and_ends_with_the_containers_failure(
    make_kubesim: MakeKubeSim,
) -> None:
    sim = await make_kubesim(controllers=True, time_scale=5.0)
    failing = {"logs": LINES, "run_seconds": 6, "exit_code": 2, "message": "bad"}
    sim.store.create(POD, pod("p", failing), "default")
    await eventually(lambda: "running" in state_of(sim, "p"), what="running")
    url = f"{sim.url}/api/v1/namespaces/default/pods/p/log?follow=true"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        assert response.status == 200
        first = await response.content.readline()
        assert first == b"one\n"
        assert "running" in state_of(sim, "p"), "the first line came only after the exit"
        rest = await response.content.read()
    assert rest == b"two\nthree\nbad\n"
    assert "terminated" in state_of(sim, "p")


async def test_previous_reads_the_last_terminated_run(make_kubesim: MakeKubeSim) -> None:
    """kubesim never restarts a container, so the restart is written by hand (no kubelet)."""
    settings = ControllerSettings(jobset=False, kueue=False, kubelet=False)
    sim = await make_kubesim(controllers=True, controller_settings=settings)
    sim.store.create(POD, pod("p", {"logs": LINES}), "default")
    now = sim.clock.now()
    stamp = [(now + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ") for s in (-60, -59, -58)]
    last = {"exitCode": 1, "message": "lost", "containerID": "kubesim://main"}
    status = {
        "name": "main",
        "restartCount": 1,
        "state": {"running": {"startedAt": stamp[2]}},
        "lastState": {"terminated": {**last, "startedAt": stamp[0], "finishedAt": stamp[1]}},
    }
    sim.store.update(
        POD,
        "default",
        "p",
        lambda obj: obj.update(status={"containerStatuses": [status]}),
        subresource="status",
    )
    async with client_for(sim) as api:
        core = CoreV1Api(api)
        assert await core.read_namespaced_pod_log("p", "default", previous=True) == (
            "one\ntwo\nlost\n"
        )
        assert await core.read_namespaced_pod_log("p", "default") == "one\ntwo\nthree\n"


REFUSALS = [
    pytest.param(
        "p",
        "",
        400,
        "BadRequest",
        "a container name must be specified for pod p, choose one of: [a b]",
        id="no container in a pod of two",
    ),
    pytest.param(
        "p", "container=c", 400, "BadRequest", "container c is not valid for pod p", id="unknown"
    ),
    pytest.param(
        "p",
        "container=a&previous=true",
        400,
        "BadRequest",
        'previous terminated container "a" in pod "p" not found',
        id="no previous run",
    ),
    pytest.param(
        "p",
        "container=b",
        400,
        "BadRequest",
        'container "b" in pod "p" is waiting to start: ContainerCreating',
        id="not started",
    ),
    pytest.param(
        "p",
        "container=a&tailLines=-1",
        422,
        "Invalid",
        'PodLogOptions "p" is invalid: tailLines: Invalid value: -1: '
        "must be greater than or equal to 0",
        id="negative tailLines",
    ),
    pytest.param(
        "p",
        "container=a&sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z",
        422,
        "Invalid",
        'PodLogOptions "p" is invalid: : Forbidden: at most one of `sinceTime` or '
        "`sinceSeconds` may be specified",
        id="sinceSeconds and sinceTime",
    ),
    pytest.param(
        "p",
        "sinceSeconds=0&limitBytes=0",
        422,
        "Invalid",
        'PodLogOptions "p" is invalid: [limitBytes: Invalid value: 0: must be greater than 0, '
        "sinceSeconds: Invalid value: 0: must be greater than 0]",
        id="zero sinceSeconds and limitBytes",
    ),
    pytest.param(
        "p",
        "tailLines=ten",
        400,
        "BadRequest",
        'strconv.ParseInt: parsing "ten": invalid syntax',
        id="tailLines not a number",
    ),
    pytest.param("nope", "", 404, "NotFound", 'pods "nope" not found', id="no such pod"),
]


@pytest.mark.parametrize(("name", "query", "code", "reason", "message"), REFUSALS)
async def test_refusals_are_upstreams(
    kubesim: KubeSim, name: str, query: str, code: int, reason: str, message: str
) -> None:
    kubesim.store.create(POD, pod("p", {}, ("a", "b")), "default")
    statuses = [
        {"name": "a", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
        {"name": "b", "state": {"waiting": {"reason": "ContainerCreating"}}},
    ]
    kubesim.store.update(
        POD,
        "default",
        "p",
        lambda obj: obj.update(status={"containerStatuses": statuses}),
        subresource="status",
    )
    url = f"{kubesim.url}/api/v1/namespaces/default/pods/{name}/log?{query}"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        body = await response.json()
        assert (response.status, body["kind"], body["reason"]) == (code, "Status", reason)
    assert body["message"] == message
