"""The pure half of the Kubernetes boundary: resources, the one error type, its one
classification, and building the kubernetes-asyncio ``ApiClient`` underneath
:class:`xmc.kube_client.KubeClient`.

Every failed call of every service leaves the boundary as :class:`KubeError`, and what it
means is decided once, by :func:`classify_failure` (status + ``Status.reason`` →
:class:`KubeFailure`). The Actuator's permanent/transient classes and the watcher's
re-list/retry/fatal are mappings from that value, so no caller compares status numbers.

``XMC_KUBE_URL`` when set (kubesim, ``kubectl proxy``), else the pod's service account
(in-cluster), else the current context of ``~/.kube/config``. kubernetes-asyncio builds its
aiohttp session with ``trust_env=True``, which costs two thread hops per request (netrc
and proxy look-ups); it is swapped for one without, keeping the same TLS settings,
connection limit and read buffer (docs/kubesim.md).
"""

from __future__ import annotations

import enum
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from xmc.keepalive import keepalive_socket
from xmc.settings import Settings

# kubernetes-asyncio's own read buffer: watch events of large objects exceed aiohttp's default.
_READ_BUFSIZE: Final = 2**21

#: The ``Status.reason`` that tells a name clash from a failed precondition (both 409).
REASON_ALREADY_EXISTS: Final = "AlreadyExists"


# --- resources ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """One namespaced resource type; its URL prefix is built once."""

    group: str
    """``""`` for the core API (pods)."""
    version: str
    plural: str
    prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        object.__setattr__(self, "prefix", base)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def collection(self, namespace: str | None) -> str:
        """``namespace`` None: a cluster-scoped resource's (or every namespace's) list."""
        if namespace is None:
            return f"{self.prefix}/{self.plural}"
        return f"{self.prefix}/namespaces/{quote(namespace, safe='')}/{self.plural}"

    def item(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace)}/{quote(name, safe='')}"


JOBSETS: Final = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
WORKLOADS: Final = Resource("kueue.x-k8s.io", "v1beta2", "workloads")
PODS: Final = Resource("", "v1", "pods")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases")
#: Cluster-scoped: list with namespace None.
CLUSTER_QUEUES: Final = Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues")
LOCAL_QUEUES: Final = Resource("kueue.x-k8s.io", "v1beta2", "localqueues")


def pending_workloads_path(namespace: str, queue: str) -> str:
    """Kueue's visibility API for one LocalQueue (not a resource one can watch)."""
    return (
        f"/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/{quote(namespace, safe='')}"
        f"/localqueues/{quote(queue, safe='')}/pendingworkloads"
    )


# --- the one error type and its classification --------------------------------------------


class KubeFailure(enum.StrEnum):
    """What a failed call means, whoever made it; low-cardinality (a fit metric label)."""

    NO_RESPONSE = "no_response"
    """No HTTP answer: connection refused or lost, or no answer within the timeout."""
    NOT_FOUND = "not_found"
    """404."""
    CONFLICT = "conflict"
    """409: a UID or resourceVersion precondition no longer holds."""
    ALREADY_EXISTS = "already_exists"
    """409 with reason AlreadyExists: a create met an object of the same name."""
    EXPIRED = "expired"
    """410: the resourceVersion is older than the server's history."""
    INVALID = "invalid"
    """400 or 422: the request itself is wrong."""
    UNAUTHORIZED = "unauthorized"
    """401."""
    FORBIDDEN = "forbidden"
    """403."""
    TIMEOUT = "timeout"
    """408: the server gave up on the request."""
    THROTTLED = "throttled"
    """429."""
    SERVER = "server"
    """5xx."""
    CLIENT = "client"
    """Any other 4xx."""
    UNEXPECTED = "unexpected"
    """Any other status, or a success whose body is not a JSON object."""


_BY_STATUS: Final[Mapping[int, KubeFailure]] = {
    400: KubeFailure.INVALID,
    401: KubeFailure.UNAUTHORIZED,
    403: KubeFailure.FORBIDDEN,
    404: KubeFailure.NOT_FOUND,
    408: KubeFailure.TIMEOUT,
    409: KubeFailure.CONFLICT,
    410: KubeFailure.EXPIRED,
    422: KubeFailure.INVALID,
    429: KubeFailure.THROTTLED,
}


def classify_failure(status: int | None, reason: str | None) -> KubeFailure:
    """The one classification of a failed call; ``status`` None (or kubernetes-asyncio's
    0) means no HTTP answer. Only ``reason`` tells AlreadyExists from Conflict."""
    if not status:
        return KubeFailure.NO_RESPONSE
    if status == 409 and reason == REASON_ALREADY_EXISTS:
        return KubeFailure.ALREADY_EXISTS
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if 500 <= status < 600:
        return KubeFailure.SERVER
    if 400 <= status < 500:
        return KubeFailure.CLIENT
    return KubeFailure.UNEXPECTED


@dataclass(frozen=True)
class StatusCause:
    """One of a ``Status``'s ``details.causes``; ``reason`` is Go's ``StatusCause.Type``
    (its JSON name is ``reason``)."""

    reason: str
    message: str = ""


#: ``metav1.CauseTypeResourceVersionTooLarge``: a list or watch asked for a resourceVersion
#: the server has not reached (apiserver ``storage.NewTooLargeResourceVersionError``).
CAUSE_RESOURCE_VERSION_TOO_LARGE: Final = "ResourceVersionTooLarge"
_TOO_LARGE_TEXT: Final = "Too large resource version"


class KubeError(Exception):
    """A failed Kubernetes call, one type for every service: ``status`` None means no
    HTTP answer at all (connection loss, timeout); ``reason`` is the ``Status.reason`` of
    the answer's body; ``retry_after`` the server's ``Retry-After`` in seconds. Callers
    branch on :attr:`failure`, never on ``status``."""

    def __init__(
        self,
        status: int | None,
        reason: str | None,
        message: str,
        retry_after: float | None = None,
        causes: tuple[StatusCause, ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status or None
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        #: ``details.causes`` of the answer's ``Status``: what a 504 is about, say.
        self.causes = causes
        self.failure = classify_failure(self.status, reason)

    @classmethod
    def no_response(cls, message: str) -> KubeError:
        return cls(None, None, message)

    def __str__(self) -> str:
        where = "no response" if self.status is None else f"{self.status} {self.reason or ''}"
        return f"{where.strip()}: {self.message}"

    @property
    def resource_version_too_large(self) -> bool:
        """The server has not reached the resourceVersion asked for (its history went
        backwards: etcd restored, an ephemeral kubesim restarted): only a fresh list helps.
        Read like client-go's ``isTooLargeResourceVersionError`` (tools/cache/reflector.go):
        the cause, or for API servers before 1.18.6 a Timeout whose cause or message says
        so in words."""
        if any(c.reason == CAUSE_RESOURCE_VERSION_TOO_LARGE for c in self.causes):
            return True
        if self.reason != "Timeout":
            return False
        return any(c.message == _TOO_LARGE_TEXT for c in self.causes) or (
            _TOO_LARGE_TEXT in self.message
        )


def parse_retry_after(header: str | None) -> float | None:
    """The ``Retry-After`` header in seconds; the API server only ever sends seconds, so
    an HTTP date (or garbage) is ignored rather than guessed at."""
    if header is None:
        return None
    try:
        seconds = float(header.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None  # NaN fails the comparison too


def error_from_answer(
    status: int | None, body: bytes | str | Mapping[str, Any], retry_after: str | None = None
) -> KubeError:
    """A :class:`KubeError` from an error answer, or from a watch ``ERROR`` event's object
    (``status`` None: the body's ``code`` says it): the only parser of a ``Status`` body.
    The ``Retry-After`` header wins over the body's ``details.retryAfterSeconds``."""
    status_body = _as_object(body)
    if status is None:
        code = status_body.get("code")
        status = code if isinstance(code, int) and code >= 400 else 500
    reason = status_body.get("reason")
    message = status_body.get("message") or f"HTTP {status}"
    delay = parse_retry_after(retry_after)
    details = status_body.get("details")
    if delay is None and isinstance(details, Mapping):
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool):
            delay = float(seconds)
    return KubeError(
        status, reason if isinstance(reason, str) else None, str(message), delay, _causes(details)
    )


def _causes(details: object) -> tuple[StatusCause, ...]:
    """``details.causes``, whatever of it is readable."""
    causes = details.get("causes") if isinstance(details, Mapping) else None
    if not isinstance(causes, list):
        return ()
    return tuple(
        StatusCause(str(c.get("reason") or ""), str(c.get("message") or ""))
        for c in causes
        if isinstance(c, Mapping)
    )


def read_answer(status: int, raw: bytes, retry_after: str | None = None) -> dict[str, Any]:
    """The one response check: the JSON object of a 2xx answer, else :class:`KubeError`."""
    if not 200 <= status < 300:
        raise error_from_answer(status, raw, retry_after)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise KubeError(status, None, "the answer is not a JSON object")
    return parsed


def _as_object(body: bytes | str | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(body, Mapping):
        return body
    try:
        parsed = json.loads(body) if body else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


# --- building the ApiClient ----------------------------------------------------------------


async def load_configuration(settings: Settings) -> Configuration:
    configuration = Configuration()
    if settings.kube_url:
        configuration.host = settings.kube_url
        return configuration
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        await config.load_kube_config(client_configuration=configuration)
    return configuration


async def api_client(
    configuration: Configuration, *, dead_peer_seconds: float | None = None
) -> ApiClient:
    """An ``ApiClient`` whose session does not consult the environment per request, and
    whose connections to a silent API server end within ``dead_peer_seconds``
    (``xmc.keepalive``; None: the system's TCP defaults)."""
    api = ApiClient(configuration)
    rest = api.rest_client
    stock: aiohttp.ClientSession = rest.pool_manager
    factory = None if dead_peer_seconds is None else keepalive_socket(dead_peer_seconds)
    rest.pool_manager = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=configuration.connection_pool_maxsize,
            ssl=_ssl_context(configuration),
            socket_factory=factory,
        ),
        trust_env=False,
        read_bufsize=_READ_BUFSIZE,
    )
    await stock.close()
    return api


async def api_client_from_settings(settings: Settings) -> ApiClient:
    configuration = await load_configuration(settings)
    return await api_client(configuration, dead_peer_seconds=settings.dead_peer_seconds)


def _ssl_context(configuration: Configuration) -> ssl.SSLContext:
    """What kubernetes-asyncio's ``RESTClientObject`` builds: CA, client cert, verification."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context
