"""XMC's services on the real loopback control plane of ``make cluster`` (docs/cluster.md),
as the ServiceAccounts of k8s/base: ``make test-cluster`` runs these.

The cluster must be up and ``tools/cluster/xmc_setup.py setup`` applied
(``kubectl apply -k k8s/overlays/kueue-example``, ``gpu-queue``,
``.cluster/xmc/<service>.kubeconfig``).
Without it every test is skipped saying so, except under ``CI=true``, where it fails: CI
runs ``make test-cluster``, and a suite that silently skipped would prove nothing.

The services share namespace ``xmc`` (where k8s/base grants their Roles), so the tests
run one at a time (no xdist) and each starts from an empty namespace: JobSets left by a
failed test are released (finalizer removed) and deleted, the Reconciler's Lease dropped.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.compat.support import SERVICE_EMAIL, SERVICE_TOKEN, USER_EMAIL, USER_TOKEN
from tests.integration.processes import Client, running_stack
from tests.integration.webhook_receiver import receiver  # noqa: F401  (a fixture)
from tests.real.support import (
    ADMIN_KUBECONFIG,
    KUBECONFIGS,
    NAMESPACE,
    clean_namespace,
    client_for,
)
from tests.servers import ADMIN_DSN, REDIS_URL
from tests.stack import RealCluster, Stack, StackOptions
from xmc.kube import KubeError
from xmc.kube_client import KubeClient


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/real/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.real_cluster)


async def _not_ready() -> str | None:
    """Why the real cluster is not usable, or None."""
    if not ADMIN_KUBECONFIG.is_file():
        return f"no cluster ({ADMIN_KUBECONFIG} missing): `make test-cluster`, or `make cluster`"
    missing = [str(p) for p in KUBECONFIGS.values() if not p.is_file()]
    if missing:
        return f"no ServiceAccount kubeconfigs {missing}: `make cluster-xmc`"
    kube = await client_for(ADMIN_KUBECONFIG)
    try:
        await kube.request("GET", "/version", request_timeout=5)
    except KubeError as error:
        return f"the API server of {ADMIN_KUBECONFIG} does not answer ({error}): `make cluster`"
    finally:
        await kube.close()
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI runs the real-cluster tests, and the cluster is not there: {reason}")
    pytest.skip(reason)


@pytest.fixture
async def admin() -> AsyncIterator[KubeClient]:
    """cluster-admin, for setting up and inspecting (never for XMC's own calls)."""
    reason = await _not_ready()
    if reason:
        _unavailable(reason)
    kube = await client_for(ADMIN_KUBECONFIG)
    await clean_namespace(kube, NAMESPACE)
    try:
        yield kube
    finally:
        await clean_namespace(kube, NAMESPACE)
        await kube.close()


@pytest.fixture
async def stack(
    admin: KubeClient, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    """ESS, Actuator and Reconciler as processes; the Actuator and the Reconciler as
    k8s/base's ServiceAccounts, the Reconciler electing a leader as deployed."""
    options = StackOptions(real=RealCluster(NAMESPACE, KUBECONFIGS), leader_election=True)
    async with running_stack(ADMIN_DSN, REDIS_URL, tmp_path / "logs", request, options) as started:
        yield started


@pytest.fixture
async def auth_stack(
    admin: KubeClient, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    """The ``stack`` fixture's services with authentication on, as ``make compat``'s stack
    (the published client sends ``XMC_AUTH_TOKEN`` as a bearer token)."""
    auth = {
        "XMC_AUTH_DISABLED": "false",
        "XMC_AUTH_STATIC_TOKENS": f"{USER_TOKEN}={USER_EMAIL},{SERVICE_TOKEN}={SERVICE_EMAIL}",
        "XMC_AUTH_SERVICE_ACCOUNTS": SERVICE_EMAIL,
        "XMC_SERVICE_TOKEN": SERVICE_TOKEN,
    }
    options = StackOptions(
        real=RealCluster(NAMESPACE, KUBECONFIGS), leader_election=True, extra_env=auth
    )
    async with running_stack(ADMIN_DSN, REDIS_URL, tmp_path / "logs", request, options) as st:
        yield st


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[Client]:
    made = Client(stack)
    yield made
    await made.channel.close()
