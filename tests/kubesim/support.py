"""What kubesim's API tests share besides their fixtures: a kubernetes-asyncio client
for a running kubesim, the JobSet API's group and version, a small JobSet manifest, and
how to read and send what the client's stubs do not type."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration

from kubesim.server import KubeSim
from tests.builders import JobSetBuilder

MakeKubeSim = Callable[..., Awaitable[KubeSim]]
"""The ``make_kubesim`` fixture: starts a KubeSim with the given options."""


def client_for(sim: KubeSim) -> ApiClient:
    """A kubernetes-asyncio client for ``sim``; use it as ``async with``."""
    return ApiClient(Configuration(host=sim.url))


JOBSET_API = ("jobset.x-k8s.io", "v1alpha2")


def jobset(
    name: str, *, labels: dict[str, str] | None = None, replicas: int = 1, **meta: Any
) -> dict[str, Any]:
    """A small JobSet manifest: replicated job ``workers`` of Jobs without pods."""
    manifest = JobSetBuilder.manifest(name).replicated_job(
        "workers", replicas=replicas, job_spec={}
    )
    for key, value in (labels or {}).items():
        manifest.label(key, value)
    created = manifest.obj()
    created["metadata"].update(meta)
    return created


def failure(error: BaseException) -> tuple[int, str]:
    """(status, reason) of a kubernetes-asyncio ApiException: only ``reason`` tells
    AlreadyExists from Conflict."""
    status = getattr(error, "status", None)
    body = getattr(error, "body", None)
    assert isinstance(status, int), f"not an API error: {error!r}"
    reason = json.loads(body).get("reason", "") if body else ""  # "" (Unknown) is omitted
    return status, reason


MERGE_PATCH: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
"""Pass as ``**MERGE_PATCH`` to a kubernetes-asyncio patch call: without it a dict body is
sent as a JSON patch (and rejected); the bundled stubs do not declare ``_content_type``."""
