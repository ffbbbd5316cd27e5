"""Fixtures: a real kubesim over real HTTP and a real kubernetes-asyncio client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from kubesim.server import KubeSim
from tests.kubesim.support import MakeKubeSim, client_for


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


@pytest.fixture
async def kube_api(kubesim: KubeSim) -> AsyncIterator[ApiClient]:
    async with client_for(kubesim) as api:
        yield api
