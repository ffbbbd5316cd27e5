"""The kubelet's log endpoint for the fake Nodes: ``GET /containerLogs/{namespace}/{pod}/
{container}`` over HTTPS, which kube-apiserver proxies ``pods/{name}/log`` to.

Upstream (v1.36.3) the API server serves ``pods/log`` by looking up the pod's Node, taking
the first of its ``status.addresses`` in ``--kubelet-preferred-address-types`` order and
``status.daemonEndpoints.kubeletEndpoint.Port`` (``pkg/kubelet/client/kubelet_client.go``
``NodeConnectionInfoGetter``), and proxying ``https://<address>:<port>/containerLogs/
<namespace>/<pod>/<container>?<options>`` (``pkg/registry/core/pod/strategy.go``
``LogLocation``) with its ``--kubelet-client-certificate``, checking the kubelet's serving
certificate against ``--kubelet-certificate-authority``. The kubelet
(``pkg/kubelet/server/server.go``) authenticates the caller (``InstallAuthFilter``: 401
``Unauthorized``), authorizes it with a SubjectAccessReview of ``get`` on ``nodes/proxy``
(``auth.go``, ``GetRequestAttributes``: 403 ``Forbidden (user=..., ...)``), decodes and
validates the options (400 ``Unable to decode query.``, 422 ``Invalid request.``), finds
the pod and the container (404), then ``validateContainerLogStatus`` picks the run or
refuses (400 with its text, which the API server passes on as a ``BadRequest``) and the
log is written chunked, flushed line by line.

This server does the same for every Node the agent runs (all share one address and
port: kwok gives them the same InternalIP and ``daemonEndpoints`` port), answering from
the pure log model (``kubesim.container_logs``) over the agent's pod cache, with the
writing shared with kubesim (``kubesim.api.log_stream``). Authentication is x509 only
(the kubelet's webhook token authentication is not served: no caller here has a token
for it); authorization decisions are cached as the kubelet's webhook authorizer caches
them (5 min allowed, 30 s denied).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from kubesim import container_logs as model
from kubesim.api.log_options import InvalidOptions, UndecodableOptions, parse_log_options
from kubesim.api.log_stream import stream_log

Obj = dict[str, Any]
Key = tuple[str, str]
ALLOWED_TTL_SECONDS = 300.0
DENIED_TTL_SECONDS = 30.0
"""The kubelet's ``--authorization-webhook-cache-{authorized,unauthorized}-ttl``."""


@dataclass(frozen=True)
class Caller:
    """Who a client certificate names: CN the user, each O a group."""

    user: str
    groups: tuple[str, ...]


def caller_of(peercert: Mapping[str, Any] | None) -> Caller | None:
    """The caller of a verified client certificate (``ssl.getpeercert()``), None without
    one; every authenticated caller is in ``system:authenticated``, as upstream's
    authenticator adds."""
    if not peercert:
        return None
    names = [pair for rdn in peercert.get("subject") or () for pair in rdn]
    user = next((value for key, value in names if key == "commonName"), "")
    if not user:
        return None
    groups = [value for key, value in names if key == "organizationName"]
    return Caller(user, (*groups, "system:authenticated"))


def access_review(caller: Caller, node: str) -> Obj:
    """The SubjectAccessReview the kubelet asks for ``GET /containerLogs/...``: verb
    ``get`` on ``nodes/proxy`` of its Node (every Node when the pod is unknown)."""
    attributes: Obj = {"verb": "get", "version": "v1", "resource": "nodes", "subresource": "proxy"}
    if node:
        attributes["name"] = node
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": caller.user,
            "groups": list(caller.groups),
            "resourceAttributes": attributes,
        },
    }


def forbidden_text(caller: Caller) -> str:
    return f"Forbidden (user={caller.user}, verb=get, resource=nodes, subresource(s)=[proxy])\n"


def kubelet_query(query: Mapping[str, str]) -> dict[str, str]:
    """The kubelet's backwards compatible ``tail``: its value becomes ``tailLines``, and
    ``all`` means no limit."""
    result = dict(query)
    tail = result.pop("tail", "")
    if tail and tail != "all":
        result["tailLines"] = tail
    elif tail == "all":
        result.pop("tailLines", None)
    return result


def has_container(pod: Mapping[str, Any], container: str) -> bool:
    spec = pod.get("spec") or {}
    return any(
        c.get("name") == container
        for key in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(key) or []
    )


class Authorizer:
    """SubjectAccessReviews through ``review`` (the API), with the kubelet's cache."""

    def __init__(self, review: Callable[[Obj], Awaitable[Obj]]) -> None:
        self._review = review
        self._cache: dict[tuple[Caller, str], tuple[bool, float]] = {}

    async def allowed(self, caller: Caller, node: str) -> bool:
        key = (caller, node)
        cached = self._cache.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        answer = await self._review(access_review(caller, node))
        allowed = bool((answer.get("status") or {}).get("allowed"))
        ttl = ALLOWED_TTL_SECONDS if allowed else DENIED_TTL_SECONDS
        self._cache[key] = (allowed, time.monotonic() + ttl)
        return allowed


class Changes:
    """Wakes whoever follows a pod's log when the agent sees that pod change."""

    def __init__(self) -> None:
        self._waiters: dict[Key, list[asyncio.Future[None]]] = {}

    def notify(self, key: Key) -> None:
        for waiter in self._waiters.pop(key, []):
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, key: Key, seconds: float | None) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, seconds)
        finally:
            waiters = self._waiters.get(key, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._waiters.pop(key, None)


@dataclass(frozen=True)
class Pods:
    """What the server needs of the agent: its pods on the Nodes it runs (None: not one
    of them), what their containers print, and when a pod changes."""

    find: Callable[[Key], Obj | None]
    scripts: Callable[[Obj], Mapping[str, model.LogScript]]
    changes: Changes


class _CacheFeed:
    """A pod in the agent's cache, in real time (``kubesim.api.log_stream.PodFeed``)."""

    def __init__(self, pods: Pods, key: Key) -> None:
        self._pods, self._key = pods, key

    def now(self) -> datetime:
        return datetime.now(UTC)

    def current(self) -> Obj | None:
        return self._pods.find(self._key)

    async def changed(self, wait: float | None) -> bool:
        await self._pods.changes.wait(self._key, wait)
        return False


def _refusal(status: int, text: str) -> web.Response:
    """The kubelet's errors are plain text (go-restful's ``WriteError``)."""
    return web.Response(status=status, text=text, content_type="text/plain")


PODS = web.AppKey("pods", Pods)
AUTHORIZER = web.AppKey("authorizer", Authorizer)


async def container_logs(request: web.Request) -> web.StreamResponse:
    namespace = request.match_info["namespace"]
    name, container = request.match_info["pod"], request.match_info["container"]
    caller = caller_of(request.transport.get_extra_info("peercert") if request.transport else None)
    if caller is None:
        return _refusal(401, "Unauthorized")
    pods = request.app[PODS]
    pod = pods.find((namespace, name))
    node = "" if pod is None else str(pod["spec"].get("nodeName", ""))
    if not await request.app[AUTHORIZER].allowed(caller, node):
        return _refusal(403, forbidden_text(caller))
    try:
        options = parse_log_options(kubelet_query(request.query))
    except UndecodableOptions:
        return _refusal(400, '{"message": "Unable to decode query."}')
    except InvalidOptions:
        return _refusal(422, '{"message": "Invalid request."}')
    if pod is None:
        return _refusal(404, f'pod "{name}" does not exist')
    if not has_container(pod, container):
        return _refusal(404, f'container "{container}" not found in pod "{name}"')
    try:
        run = model.pick_run(pod, container, previous=options.previous)
    except model.NoLog as error:
        return _refusal(400, str(error))
    script = pods.scripts(pod).get(container, model.LogScript())
    feed = _CacheFeed(pods, (namespace, name))
    return await stream_log(request, options, feed, pod, container, script, run)


def serving_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """TLS as the kubelet's ``--tls-cert-file``/``--tls-private-key-file`` and
    ``--client-ca-file``: a client certificate is asked for and, when given, must be
    signed by the CA; without one the request is 401."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(client_ca))
    ctx.load_cert_chain(str(cert), str(key))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


async def serve(
    pods: Pods, authorizer: Authorizer, address: str, port: int, ctx: ssl.SSLContext
) -> web.AppRunner:
    """Listen on ``address:port``; the caller cleans the returned runner up."""
    app = web.Application()
    app[PODS] = pods
    app[AUTHORIZER] = authorizer
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, address, port, ssl_context=ctx).start()
    return runner
