"""Fixtures: a real kubesim over real HTTP and a real kubernetes-asyncio client for it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from kubesim.server import KubeSim

MakeKubeSim = Callable[..., Awaitable[KubeSim]]


@pytest.fixture
async def make_kubesim() -> AsyncIterator[MakeKubeSim]:
    """Start a KubeSim with custom options (controllers off unless asked); stopped after."""
    started: list[KubeSim] = []

    async def make(**options: Any) -> KubeSim:
        options.setdefault("controllers", False)
        sim = KubeSim(**options)
        await sim.start()
        started.append(sim)
        return sim

    yield make
    for sim in started:
        await sim.stop()


@pytest.fixture
async def kubesim(make_kubesim: MakeKubeSim) -> KubeSim:
    return await make_kubesim()


@pytest.fixture
async def kubesim_with_controllers(make_kubesim: MakeKubeSim) -> KubeSim:
    pytest.importorskip("kubesim.controllers", reason="the simulated controllers are not built")
    return await make_kubesim(controllers=True)


def client_for(sim: KubeSim) -> ApiClient:
    """A kubernetes-asyncio client for ``sim``; use it as ``async with``."""
    return ApiClient(Configuration(host=sim.url))


@pytest.fixture
async def kube_api(kubesim: KubeSim) -> AsyncIterator[ApiClient]:
    async with client_for(kubesim) as api:
        yield api


JOBSET_API = ("jobset.x-k8s.io", "v1alpha2")


def jobset(
    name: str, *, labels: dict[str, str] | None = None, replicas: int = 1, **meta: Any
) -> dict[str, Any]:
    """A small JobSet manifest."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels or {}, **meta},
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": replicas, "template": {"spec": {}}},
            ]
        },
    }


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
