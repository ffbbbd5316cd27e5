"""The Actuator's JobSet client: four verbs over kubernetes-asyncio's ``CustomObjectsApi``.

Every failure of a call — an HTTP error answer, a dropped connection, a timeout — leaves
this module as one exception type, :class:`KubeError`, carrying what
:func:`actuator.errors.classify_kubernetes_error` needs (status, ``Status.reason``,
``Retry-After``). Handlers therefore classify in exactly one place and never see
kubernetes-asyncio's or aiohttp's exception zoo.

Two kubernetes-asyncio traps are handled here rather than at every call site
(docs/kubesim.md): a dict patch body is sent as a JSON patch unless the merge-patch content
type is forced, and the client's aiohttp session is built with ``trust_env=True``, which
costs two thread hops per request (netrc and proxy look-ups), so it is swapped for one
without.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping
from typing import Any, Final, Self

import aiohttp
from kubernetes_asyncio.client import (
    ApiClient,
    Configuration,
    CustomObjectsApi,
    V1DeleteOptions,
    V1Preconditions,
)
from kubernetes_asyncio.client.exceptions import ApiException

from actuator.errors import ErrorClass, classify_kubernetes_error, parse_retry_after
from xmc.config import Settings
from xmc.kube import KubeError as BaseKubeError
from xmc.kube import api_client, load_configuration

GROUP: Final = "jobset.x-k8s.io"
VERSION: Final = "v1alpha2"
PLURAL: Final = "jobsets"

#: Seconds one API call may take before it counts as a (transient) failure.
DEFAULT_REQUEST_TIMEOUT: Final = 30.0

_MERGE_PATCH: Final[dict[str, Any]] = {"_content_type": "application/merge-patch+json"}


class KubeError(BaseKubeError):
    """The shared Kubernetes error, classified the Actuator's way (SPEC §6)."""

    def classify(self) -> ErrorClass:
        return classify_kubernetes_error(self.status, self.reason, retry_after=self.retry_after)


class JobSetClient:
    """JobSets in any namespace; owns its ``ApiClient`` (close it with :meth:`close`)."""

    def __init__(self, api: ApiClient, *, request_timeout: float = DEFAULT_REQUEST_TIMEOUT):
        self._api = api
        self._custom = CustomObjectsApi(api)
        self._timeout = request_timeout

    @classmethod
    async def from_settings(
        cls, settings: Settings, *, request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    ) -> Self:
        """``XMC_KUBE_URL`` when set (kubesim, ``kubectl proxy``), else the pod's service
        account (in-cluster), else the current context of ``~/.kube/config``."""
        configuration = await load_configuration(settings)
        return await cls.for_configuration(configuration, request_timeout=request_timeout)

    @classmethod
    async def for_configuration(
        cls, configuration: Configuration, *, request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    ) -> Self:
        return cls(await api_client(configuration), request_timeout=request_timeout)

    async def close(self) -> None:
        await self._api.close()

    async def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The JobSet, or None when there is none (404)."""
        try:
            return await self._call(
                self._custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name, _request_timeout=self._timeout
                )
            )
        except KubeError as error:
            if error.status == 404:
                return None
            raise

    async def create_jobset(self, namespace: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        created = await self._call(
            self._custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, dict(manifest), _request_timeout=self._timeout
            )
        )
        if created is not None:
            return created
        # kubernetes-asyncio drops the body of any success but 201 (a proxy answering 200).
        name = str(manifest["metadata"]["name"])
        found = await self.get_jobset(namespace, name)
        if found is None:
            raise KubeError(None, None, f"JobSet {namespace}/{name} not found after its create")
        return found

    async def delete_jobset(self, namespace: str, name: str, *, uid: str) -> None:
        """Delete only the JobSet with ``uid`` (a newer one of the same name answers 409
        Conflict); children go in the background, the finalizer holds the JobSet itself."""
        options = V1DeleteOptions(
            preconditions=V1Preconditions(uid=uid), propagation_policy="Background"
        )
        await self._call(
            self._custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body=options,
                _request_timeout=self._timeout,
            )
        )

    async def patch_jobset(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386), never kubernetes-asyncio's default JSON patch."""
        patched = await self._call(
            self._custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                dict(patch),
                _request_timeout=self._timeout,
                **_MERGE_PATCH,
            )
        )
        if patched is None:
            raise KubeError(None, None, f"patching JobSet {namespace}/{name} returned no object")
        return patched

    async def _call(self, call: Awaitable[Any]) -> dict[str, Any] | None:
        """Await one API call; every failure becomes a :class:`KubeError`."""
        try:
            result = await call
        except ApiException as error:
            raise kube_error_from_api_exception(error) from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise KubeError(None, None, f"{type(error).__name__}: {error}") from error
        return result if isinstance(result, dict) else None


def kube_error_from_api_exception(error: ApiException) -> KubeError:
    """Status, ``Status.reason`` and ``Retry-After`` of an error answer. The ``Retry-After``
    header wins; ``details.retryAfterSeconds`` of the body is the fallback."""
    status = error.status or None  # kubernetes-asyncio uses 0 for "no request was sent"
    body = _status_body(error.body)
    reason = body.get("reason")
    message = body.get("message") or error.reason or "Kubernetes API error"
    headers = error.headers
    retry_after = parse_retry_after(headers.get("Retry-After") if headers else None)
    if retry_after is None:
        details = body.get("details")
        if isinstance(details, dict) and isinstance(details.get("retryAfterSeconds"), int):
            retry_after = float(details["retryAfterSeconds"])
    return KubeError(status, reason if isinstance(reason, str) else None, str(message), retry_after)


def _status_body(body: bytes | str | None) -> dict[str, Any]:
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
