"""What the real-cluster tests share besides their fixtures (conftest.py): where the
cluster's kubeconfigs are, the namespace, and a few calls as cluster-admin."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Final

from kubernetes_asyncio import config
from kubernetes_asyncio.client import Configuration

from tests.integration.support import fetch_all
from tests.stack import Stack
from tests.waiting import eventually
from xmc import labels
from xmc.kube import JOBSETS, LEASES, KubeError, KubeFailure, api_client
from xmc.kube_client import KubeClient
from xmc.model.states import WorkUnitState

ROOT: Final = Path(__file__).resolve().parents[2]
CLUSTER_DIR: Final = Path(os.environ.get("XMC_TEST_CLUSTER_DIR") or ROOT / ".cluster")
ADMIN_KUBECONFIG: Final = CLUSTER_DIR / "kubeconfig"
#: k8s/base's namespace: JobSets, LocalQueues, the Reconciler's Lease.
NAMESPACE: Final = "xmc"
KUBECONFIGS: Final = {
    s: CLUSTER_DIR / "xmc" / f"{s}.kubeconfig" for s in ("ess", "actuator", "reconciler")
}
LEASE: Final = "xmc-reconciler"


#: Seconds between two looks: every probe is a round trip to the real cluster or the ESS,
#: and two shared cores run it all.
POLL: Final = 0.25


def jobset_name(name: str) -> str:
    """``experiments/X/workUnits/Y`` → its JobSet's name, ``xmc-X-Y``."""
    xid, wid = name.split("/")[1::2]
    return f"xmc-{xid}-{wid}"


async def state_history(stack: Stack, name: str) -> list[tuple[int, WorkUnitState]]:
    """(eid, new state) of every accepted state change of work unit ``name``, oldest first."""
    xid, wid = (int(part) for part in name.split("/")[1::2])
    rows = await fetch_all(
        stack.database_url,
        "SELECT eid, new_state FROM work_unit_status_history "
        "WHERE xid = $1 AND wid = $2 ORDER BY id",
        xid,
        wid,
    )
    return [(r["eid"], WorkUnitState(r["new_state"])) for r in rows]


async def client_for(kubeconfig: Path) -> KubeClient:
    """A client through XMC's own ``api_client`` from one kubeconfig file."""
    configuration = Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return KubeClient(await api_client(configuration))


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

    async def jobsets_left() -> int:
        return len((await kube.list_page(JOBSETS, namespace))["items"])

    await eventually(jobsets_left, 0, within=20, every=0.1)
    try:
        await kube.delete(LEASES, namespace, LEASE)
    except KubeError as error:
        if error.failure is not KubeFailure.NOT_FOUND:
            raise


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
