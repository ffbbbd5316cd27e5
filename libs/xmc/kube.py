"""Building the kubernetes-asyncio client every service uses.

``XMC_KUBE_URL`` when set (kubesim, ``kubectl proxy``), else the pod's service account
(in-cluster), else the current context of ``~/.kube/config``. kubernetes-asyncio builds its
aiohttp session with ``trust_env=True``, which costs two thread hops per request (netrc
and proxy look-ups); it is swapped for one without, keeping the same TLS settings,
connection limit and read buffer (docs/kubesim.md).
"""

from __future__ import annotations

import ssl
from typing import Final

import aiohttp
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from xmc.config import Settings

# kubernetes-asyncio's own read buffer: watch events of large objects exceed aiohttp's default.
_READ_BUFSIZE: Final = 2**21


class KubeError(Exception):
    """A failed Kubernetes call, one type for every service: ``status`` None means no
    HTTP answer at all (connection loss, timeout); ``reason`` is the ``Status.reason`` of
    the answer's body (the only way to tell AlreadyExists from Conflict); ``retry_after``
    the server's ``Retry-After`` in seconds."""

    def __init__(
        self,
        status: int | None,
        reason: str | None,
        message: str,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = "no response" if self.status is None else f"{self.status} {self.reason or ''}"
        return f"{where.strip()}: {self.message}"


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


async def api_client(configuration: Configuration) -> ApiClient:
    """An ``ApiClient`` whose session does not consult the environment per request."""
    api = ApiClient(configuration)
    rest = api.rest_client
    stock: aiohttp.ClientSession = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=configuration.connection_pool_maxsize, ssl=_ssl_context(configuration)
        ),
        trust_env=False,
        read_bufsize=_READ_BUFSIZE,
    )
    await stock.close()
    return api


async def api_client_from_settings(settings: Settings) -> ApiClient:
    return await api_client(await load_configuration(settings))


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
