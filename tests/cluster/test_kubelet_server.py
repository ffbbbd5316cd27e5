"""The node agent's kubelet endpoint (``tools/cluster/kubelet_server.py``): who a client
certificate names, the SubjectAccessReview asked, the ``tail`` compatibility parameter
(pure, as tables); then the server itself over TLS on a socket, with certificates from
``pki.py``: 401 without a certificate, 403 when the review denies, the kubelet's texts
for bad options, unknown pods and containers and a run that is not there, the log, and
a follow that ends with the container's failure."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import kubelet_server
import pki
import pytest
from kubelet_server import Caller

from kubesim.container_logs import LogScript
from tests.stack import free_port

Obj = dict[str, Any]
ADMIN = (("organizationName", "system:masters"),), (("commonName", "xmc-cluster-admin"),)


@pytest.mark.parametrize(
    ("peercert", "caller"),
    [
        (None, None),
        ({}, None),
        ({"subject": ((("organizationName", "o"),),)}, None),
        (
            {"subject": ((("commonName", "kube-apiserver-kubelet-client"),),)},
            Caller("kube-apiserver-kubelet-client", ("system:authenticated",)),
        ),
        (
            {"subject": ADMIN},
            Caller("xmc-cluster-admin", ("system:masters", "system:authenticated")),
        ),
    ],
)
def test_the_caller_of_a_client_certificate(peercert: Obj | None, caller: Caller | None) -> None:
    assert kubelet_server.caller_of(peercert) == caller


@pytest.mark.parametrize(
    ("node", "attributes"),
    [
        ("n1", {"verb": "get", "version": "v1", "resource": "nodes", "subresource": "proxy",
                "name": "n1"}),
        ("", {"verb": "get", "version": "v1", "resource": "nodes", "subresource": "proxy"}),
    ],
)  # fmt: skip
def test_the_access_review_is_get_on_nodes_proxy(node: str, attributes: Obj) -> None:
    review = kubelet_server.access_review(Caller("u", ("g",)), node)
    assert review["spec"] == {"user": "u", "groups": ["g"], "resourceAttributes": attributes}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"tail": "3"}, {"tailLines": "3"}),
        ({"tail": "all", "tailLines": "3"}, {}),
        ({"tailLines": "2", "follow": "true"}, {"tailLines": "2", "follow": "true"}),
        ({"tail": ""}, {}),
    ],
)
def test_tail_is_the_old_name_of_tail_lines(
    query: dict[str, str], expected: dict[str, str]
) -> None:
    assert kubelet_server.kubelet_query(query) == expected


# --- the server over TLS ---------------------------------------------------------------

NOW = datetime.now(UTC).replace(microsecond=0)
SCRIPT = LogScript(("one", "two"), every_seconds=1.0, run_seconds=None)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(state: Obj) -> Obj:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {"nodeName": "kwok-node-0", "containers": [{"name": "main"}, {"name": "side"}]},
        "status": {"containerStatuses": [{"name": "main", "state": state}]},
    }


class World:
    """The agent's side: one pod, and the answers of the SubjectAccessReviews."""

    def __init__(self) -> None:
        self.pod = _pod({"running": {"startedAt": _stamp(NOW - timedelta(seconds=10))}})
        self.allow = True
        self.reviews: list[Obj] = []
        self.changes = kubelet_server.Changes()

    def find(self, key: tuple[str, str]) -> Obj | None:
        return self.pod if key == ("ns", "p") else None

    async def review(self, body: Obj) -> Obj:
        self.reviews.append(body)
        return {"status": {"allowed": self.allow}}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pki")
    pki.make_all(out / "pki", "https://127.0.0.1:1", out, ["kwok-node-0"])
    return out / "pki"


@pytest.fixture
async def served(certs: Path) -> AsyncIterator[tuple[World, str]]:
    port = free_port()
    world = World()
    pods = kubelet_server.Pods(world.find, lambda pod: {"main": SCRIPT}, world.changes)
    ctx = kubelet_server.serving_context(certs / "kubelet.crt", certs / "kubelet.key",
                                         certs / "ca.crt")  # fmt: skip
    runner = await kubelet_server.serve(
        pods, kubelet_server.Authorizer(world.review), "127.0.0.1", port, ctx
    )
    try:
        yield world, f"https://127.0.0.1:{port}/containerLogs/ns"
    finally:
        await runner.cleanup()


def _client(certs: Path, name: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if name is not None:
        ctx.load_cert_chain(certs / f"{name}.crt", certs / f"{name}.key")
    return ctx


async def _get(
    certs: Path, url: str, name: str | None = "apiserver-kubelet-client"
) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url, ssl=_client(certs, name)) as resp:
        return resp.status, await resp.text()


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("p/main", 200, "one\ntwo\n"),
        ("p/main?tail=1", 200, "two\n"),
        ("p/main?tailLines=x", 400, '{"message": "Unable to decode query."}'),
        ("p/main?tailLines=-1", 422, '{"message": "Invalid request."}'),
        ("q/main", 404, 'pod "q" does not exist'),
        ("p/nope", 404, 'container "nope" not found in pod "p"'),
        ("p/main?previous=true", 400, 'previous terminated container "main" in pod "p" not found'),
        ("p/side", 400, 'container "side" in pod "p" is not available'),
    ],
)
async def test_the_kubelets_answers(
    served: tuple[World, str], certs: Path, path: str, status: int, text: str
) -> None:
    world, base = served
    assert await _get(certs, f"{base}/{path}") == (status, text)
    node = "" if path.startswith("q/") else "kwok-node-0"
    caller = kubelet_server.caller_of({"subject": ((("commonName", pki.KUBELET_CLIENT),),)})
    assert caller is not None
    assert world.reviews == [kubelet_server.access_review(caller, node)]


async def test_without_a_certificate_401_and_denied_403(
    served: tuple[World, str], certs: Path
) -> None:
    world, base = served
    assert await _get(certs, f"{base}/p/main", name=None) == (401, "Unauthorized")
    world.allow = False
    assert await _get(certs, f"{base}/p/main", name="kcm") == (
        403,
        "Forbidden (user=system:kube-controller-manager, verb=get, resource=nodes, "
        "subresource(s)=[proxy])\n",
    )


async def test_a_follow_ends_when_the_container_exits(
    served: tuple[World, str], certs: Path
) -> None:
    world, base = served
    url = f"{base}/p/main?follow=true"
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, ssl=_client(certs, "apiserver-kubelet-client")) as resp,
    ):
        assert await resp.content.readline() == b"one\n"
        assert await resp.content.readline() == b"two\n"
        started = world.pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        ended = {"exitCode": 1, "message": "boom", "containerID": "nodeagent://x",
                 "startedAt": started, "finishedAt": _stamp(NOW)}  # fmt: skip
        world.pod = _pod({"terminated": ended})
        world.changes.notify(("ns", "p"))
        rest = await asyncio.wait_for(resp.content.read(), timeout=10)
    assert rest == b"boom\n"
