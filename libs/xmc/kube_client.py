"""The one Kubernetes client of every service: get, create, replace, merge patch, delete,
list pages, watch streams and Kueue's visibility API, over raw JSON.

Built on kubernetes-asyncio's ``ApiClient`` (its auth, TLS and session, the session
swapped for one with ``trust_env=False``: see :mod:`xmc.kube`) through ``call_api`` with
``_preload_content=False``, and not its generated APIs, because ``CustomObjectsApi``

- sends a dict patch as a JSON patch unless the content type is forced,
- drops the body of any success but 201 (a proxy answering 200 loses the object),
- builds models for every watch event, and its ``Watch`` neither reconnects with
  ``timeout_seconds`` nor survives a 410 (docs/kubesim.md).

Every call is bounded: a unary call by ``request_timeout`` (``XMC_KUBE_REQUEST_TIMEOUT``)
end to end, auth refresh and body included; a watch by the same until its answer starts,
then by its ``timeoutSeconds`` plus a grace (a half-open connection never ends by itself).
Every failure — an error answer, a dropped connection, a timeout, a watch ``ERROR`` event
— leaves as :class:`xmc.kube.KubeError`, already classified (``error.failure``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any, Final, Self

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration

from xmc.kube import (
    KubeError,
    KubeFailure,
    Resource,
    api_client,
    error_from_answer,
    load_configuration,
    pending_workloads_path,
    read_answer,
)
from xmc.settings import Settings

Obj = dict[str, Any]

#: Seconds one call may take unless the settings say otherwise.
DEFAULT_REQUEST_TIMEOUT: Final = 30.0
#: Seconds a watch may stay silent beyond its own ``timeoutSeconds`` before the connection
#: is presumed dead.
STREAM_GRACE: Final = 30.0

#: What a dropped or broken connection raises (aiohttp wraps most OS errors, not all).
_CONNECTION_ERRORS: Final = (aiohttp.ClientError, OSError)
_JSON: Final = "application/json"
_MERGE_PATCH: Final = "application/merge-patch+json"


#: Kueue's own default ``limit`` of the visibility API (``apis/visibility/v1beta1/defaults.go``).
PENDING_WORKLOADS_PAGE = 1000


class KubeClient:
    """Owns its ``ApiClient``: close it with :meth:`close` (or ``async with``)."""

    def __init__(self, api: ApiClient, *, request_timeout: float = DEFAULT_REQUEST_TIMEOUT):
        self._api = api
        self.request_timeout = request_timeout

    @classmethod
    async def from_settings(cls, settings: Settings) -> Self:
        """``XMC_KUBE_URL``, else in-cluster, else kubeconfig; ``XMC_KUBE_REQUEST_TIMEOUT``."""
        configuration = await load_configuration(settings)
        api = await api_client(configuration, dead_peer_seconds=settings.dead_peer_seconds)
        return cls(api, request_timeout=settings.kube_request_timeout)

    @classmethod
    async def for_configuration(
        cls, configuration: Configuration, *, request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    ) -> Self:
        return cls(await api_client(configuration), request_timeout=request_timeout)

    @classmethod
    async def for_url(cls, url: str, *, request_timeout: float = DEFAULT_REQUEST_TIMEOUT) -> Self:
        """A client of an unauthenticated API server (kubesim, ``kubectl proxy``)."""
        return await cls.for_configuration(Configuration(host=url), request_timeout=request_timeout)

    async def close(self) -> None:
        await self._api.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # --- objects -----------------------------------------------------------------------

    async def get(
        self, resource: Resource, namespace: str, name: str, *, request_timeout: float | None = None
    ) -> Obj | None:
        """The object, or None when there is none (NOT_FOUND)."""
        try:
            return await self.request(
                "GET", resource.item(namespace, name), request_timeout=request_timeout
            )
        except KubeError as error:
            if error.failure is KubeFailure.NOT_FOUND:
                return None
            raise

    async def create(
        self,
        resource: Resource,
        namespace: str,
        body: Mapping[str, Any],
        *,
        request_timeout: float | None = None,
    ) -> Obj:
        """The created object; a name clash is ALREADY_EXISTS."""
        return await self.request(
            "POST", resource.collection(namespace), body=body, request_timeout=request_timeout
        )

    async def replace(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        request_timeout: float | None = None,
    ) -> Obj:
        """PUT; a stale ``metadata.resourceVersion`` in ``body`` is CONFLICT."""
        return await self.request(
            "PUT", resource.item(namespace, name), body=body, request_timeout=request_timeout
        )

    async def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        request_timeout: float | None = None,
    ) -> Obj:
        """A JSON merge patch (RFC 7386); a ``metadata.resourceVersion`` in it is a
        precondition (CONFLICT when the object changed)."""
        return await self.request(
            "PATCH",
            resource.item(namespace, name),
            body=patch,
            content_type=_MERGE_PATCH,
            request_timeout=request_timeout,
        )

    async def delete(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        propagation_policy: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        """Delete; with ``uid`` only that very object (another one of the same name is
        CONFLICT). Returns the object (still there while finalizers hold it) or a Status."""
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        return await self.request(
            "DELETE", resource.item(namespace, name), body=options, request_timeout=request_timeout
        )

    async def list_page(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        request_timeout: float | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> Obj:
        """One page of a list: ``items``, and ``metadata.continue`` while more follow
        (an expired token is EXPIRED). Without ``resource_version`` the read is
        consistent (the newest state); with it and ``resource_version_match``
        ``NotOlderThan``, the API server's watch cache answers, or fails with "too large
        resource version" if it never reaches that version."""
        query: list[tuple[str, str]] = []
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        if resource_version_match is not None:
            query.append(("resourceVersionMatch", resource_version_match))
        if limit is not None:
            query.append(("limit", str(limit)))
        if continue_token:
            query.append(("continue", continue_token))
        if label_selector:
            query.append(("labelSelector", label_selector))
        return await self.request(
            "GET", resource.collection(namespace), query=query, request_timeout=request_timeout
        )

    async def list_all(
        self, resource: Resource, namespace: str | None, *, page: int = 500
    ) -> list[Obj]:
        """Every item of a list, page by page (``namespace`` None: cluster-scoped); a
        continue token that expires mid-way is EXPIRED, like any read of a stale page."""
        items: list[Obj] = []
        token: str | None = None
        while True:
            answer = await self.list_page(resource, namespace, limit=page, continue_token=token)
            items += [i for i in answer.get("items") or () if isinstance(i, dict)]
            token = (answer.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    async def pending_workloads(
        self,
        namespace: str,
        queue: str,
        *,
        request_timeout: float | None = None,
        page: int = PENDING_WORKLOADS_PAGE,
    ) -> Obj:
        """Kueue's ``PendingWorkloadsSummary`` of one LocalQueue (``items`` in order, each
        with ``positionInClusterQueue``), every page of it: Kueue answers at most
        ``limit`` items (1,000 by default), so one request would cap the queue's length at
        1,000 and leave every unit behind those without a position."""
        path = pending_workloads_path(namespace, queue)
        items: list[Any] = []
        while True:
            query = [("limit", str(page)), ("offset", str(len(items)))]
            summary = await self.request("GET", path, query=query, request_timeout=request_timeout)
            got = summary.get("items") or []
            items += got
            if len(got) < page:
                return {**summary, "items": items}

    # --- watching ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        namespace: str,
        *,
        resource_version: str,
        timeout_seconds: int,
        label_selector: str | None = None,
        bookmarks: bool = True,
        grace: float = STREAM_GRACE,
    ) -> AsyncIterator[AsyncIterator[Obj]]:
        """``async with client.watch(...) as events: async for event in events``: the
        events after ``resource_version`` (``type`` ADDED, MODIFIED, DELETED or BOOKMARK,
        and ``object``) until the server ends the stream. An ``ERROR`` event is raised as
        its :class:`KubeError` (a 410 is EXPIRED: re-list). Leaving the block closes the
        connection."""
        query = [("watch", "true"), ("resourceVersion", resource_version)]
        if bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        query.append(("timeoutSeconds", str(timeout_seconds)))
        if label_selector:
            query.append(("labelSelector", label_selector))
        path = resource.collection(namespace)
        async with self.stream(path, query, total=timeout_seconds + grace) as response:
            events = _events(response)
            try:
                yield events
            finally:
                await events.aclose()

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        query: Sequence[tuple[str, str]],
        *,
        total: float | None,
        accept: str = _JSON,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A GET whose answer is read as it comes (a watch, a followed log): bounded by
        ``request_timeout`` until the answer starts, then by ``total`` seconds (None: no
        limit; the caller ends it). An error answer is raised as its :class:`KubeError`;
        leaving the block drops the connection."""
        limit = aiohttp.ClientTimeout(total=total, sock_connect=self.request_timeout)
        try:
            async with asyncio.timeout(self.request_timeout):
                response = await self._send("GET", path, query, None, _JSON, limit, accept)
        except TimeoutError as error:
            raise self._no_answer("GET", path, self.request_timeout) from error
        except _CONNECTION_ERRORS as error:
            raise KubeError.no_response(f"{type(error).__name__}: {error}") from error
        try:
            if not 200 <= response.status < 300:
                raw = await self._read_quietly(response)
                raise error_from_answer(response.status, raw, response.headers.get("Retry-After"))
            yield response
        finally:
            # close, not release: an unfinished stream must drop its connection.
            response.close()

    # --- the one request path ------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = _JSON,
        request_timeout: float | None = None,
    ) -> Obj:
        """One call, answer read, bounded end to end by ``request_timeout`` (default: the
        client's); the JSON object of a success, else :class:`KubeError`."""
        seconds = self.request_timeout if request_timeout is None else request_timeout
        try:
            async with asyncio.timeout(seconds):
                response = await self._send(method, path, query, body, content_type, None)
                try:
                    raw = await response.read()
                finally:
                    response.release()
        except TimeoutError as error:
            raise self._no_answer(method, path, seconds) from error
        except _CONNECTION_ERRORS as error:
            raise KubeError.no_response(f"{type(error).__name__}: {error}") from error
        return read_answer(response.status, raw, response.headers.get("Retry-After"))

    async def _send(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Mapping[str, Any] | None,
        content_type: str,
        stream_timeout: aiohttp.ClientTimeout | None,
        accept: str = _JSON,
    ) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await self._api.call_api(
            path,
            method,
            query_params=list(query),
            header_params={"Accept": accept, "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=stream_timeout,
        )
        return response

    async def _read_quietly(self, response: aiohttp.ClientResponse) -> bytes:
        """The body of an error answer, or nothing if it cannot be read in time."""
        try:
            async with asyncio.timeout(self.request_timeout):
                return await response.read()
        except (*_CONNECTION_ERRORS, TimeoutError):
            return b""

    @staticmethod
    def _no_answer(method: str, path: str, seconds: float) -> KubeError:
        return KubeError.no_response(f"{method} {path}: no answer within {seconds:g}s")


async def _events(response: aiohttp.ClientResponse) -> AsyncGenerator[Obj, None]:
    """Newline-delimited watch events, split by hand (no line-length limit for large
    objects); a read failure or a timeout of the stream is NO_RESPONSE."""
    pending = b""
    try:
        async for chunk in response.content.iter_any():
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    yield _event(response.status, line)
        if pending.strip():
            yield _event(response.status, pending)
    except (*_CONNECTION_ERRORS, TimeoutError) as error:
        raise KubeError.no_response(f"watch stream: {type(error).__name__}: {error}") from error


def _event(status: int, line: bytes) -> Obj:
    """One event; a line that is not one is UNEXPECTED (the answer's 2xx status)."""
    try:
        event = json.loads(line)
    except ValueError:
        event = None
    if not isinstance(event, dict):
        raise KubeError(status, None, f"watch stream: not an event: {line[:80]!r}")
    if event.get("type") == "ERROR":
        raise error_from_answer(None, event.get("object") or {})
    return event
