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

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import Configuration

from tests.compat.conftest import SERVICE_EMAIL, SERVICE_TOKEN, USER_EMAIL, USER_TOKEN
from tests.conftest import ADMIN_DSN
from tests.integration.conftest import REDIS_URL
from tests.integration.processes import Client, running_stack
from tests.stack import RealCluster, Stack, StackOptions
from xmc import labels
from xmc.kube import JOBSETS, LEASES, KubeError, KubeFailure, api_client
from xmc.kube_client import KubeClient

ROOT: Final = Path(__file__).resolve().parents[2]
CLUSTER_DIR: Final = Path(os.environ.get("XMC_TEST_CLUSTER_DIR") or ROOT / ".cluster")
ADMIN_KUBECONFIG: Final = CLUSTER_DIR / "kubeconfig"
#: k8s/base's namespace: JobSets, LocalQueues, the Reconciler's Lease.
NAMESPACE: Final = "xmc"
KUBECONFIGS: Final = {
    s: CLUSTER_DIR / "xmc" / f"{s}.kubeconfig" for s in ("actuator", "reconciler")
}
LEASE: Final = "xmc-reconciler"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/real/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.real_cluster)


async def client_for(kubeconfig: Path) -> KubeClient:
    """A client through XMC's own ``api_client`` from one kubeconfig file."""
    configuration = Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return KubeClient(await api_client(configuration))


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


async def clean_namespace(kube: KubeClient, namespace: str) -> None:
    """Release (drop XMC's finalizer) and delete every JobSet; drop the Lease."""
    page = await kube.list_page(JOBSETS, namespace)
    for jobset in page["items"]:
        name = jobset["metadata"]["name"]
        finalizers = [f for f in jobset["metadata"].get("finalizers", []) if f != labels.FINALIZER]
        try:
            await kube.patch(JOBSETS, namespace, name, {"metadata": {"finalizers": finalizers}})
            await kube.delete(JOBSETS, namespace, name, propagation_policy="Background")
        except KubeError as error:
            if error.failure is not KubeFailure.NOT_FOUND:
                raise
    for _ in range(200):
        if not (await kube.list_page(JOBSETS, namespace))["items"]:
            break
        await asyncio.sleep(0.1)
    try:
        await kube.delete(LEASES, namespace, LEASE)
    except KubeError as error:
        if error.failure is not KubeFailure.NOT_FOUND:
            raise


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


async def kubectl(*args: str) -> tuple[str, str]:
    """``kubectl`` as cluster-admin, as an operator runs it: stdout and stderr; fails the
    test, with kubectl's output, when it exits non-zero (``kubectl diff``: a difference)."""
    process = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={ADMIN_KUBECONFIG}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, f"kubectl {' '.join(args)}: {out.decode()}{err.decode()}"
    return out.decode(), err.decode()


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[Client]:
    made = Client(stack)
    yield made
    await made.channel.close()
