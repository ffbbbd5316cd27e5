"""The ``cluster`` fixture (``tests.contract.connect``): an embedded kubesim with its
controllers by default, or the real cluster of ``KUBECONFIG`` when that is set
(docs/testing.md, "Contract suite")."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from tests.contract.cluster import ON_REAL_CLUSTER, Cluster
from tests.contract.connect import connect


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/contract/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.contract)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with connect(real=ON_REAL_CLUSTER) as connected:
        yield connected
