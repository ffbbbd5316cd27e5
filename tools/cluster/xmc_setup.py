"""XMC on the loopback cluster of ``make cluster`` (``make run CLUSTER=real``,
``make test-cluster``).

``setup`` (the default), as cluster-admin (``.cluster/kubeconfig``):

1. ``kubectl apply -k k8s/overlays/kueue-example``: the overlay k8s/README.md tells an
   operator to apply, as it is, so what every real-cluster test runs on is what an
   operator deploys: the namespace, ServiceAccounts and RBAC, XMC's nine
   WorkloadPriorityClasses, the ResourceFlavor ``default-flavor``, the ClusterQueue
   ``cluster-queue``, the LocalQueue ``cpu-queue``, and the Deployments (no XMC process
   runs in their pods: the node agent runs them as processes that never exit);
2. adds only what is not the operator's: the LocalQueue ``gpu-queue`` on
   ``cluster-queue`` (kubesim starts with it, so ``make run`` has the same queue names on
   both). Nothing here has the name of an object of the overlay, so the two never undo
   each other, whatever runs first;
3. mints a token per ServiceAccount with the TokenRequest API (``kubectl create token``)
   and writes ``.cluster/xmc/<service>.kubeconfig`` for the ESS (live logs), the Actuator
   and the Reconciler:
   ``https://127.0.0.1:<port>``, the cluster CA (``.cluster/pki/ca.crt``), the bearer token.
   A service started with ``KUBECONFIG`` set to its own file and no ``XMC_KUBE_URL`` goes
   through XMC's kubeconfig path (TLS, bearer token) as that ServiceAccount.

``running``: exit 0 when the cluster of this work tree runs, 1 otherwise (quietly).

``dry-run``: ``kubectl apply --dry-run=server -k`` of every kustomization under ``k8s/``
(``setup`` first: a dry run does not create the namespace its objects go in).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CLUSTER, ROOT, alive, pid_files

from kubesim.defaults import DEFAULT_CLUSTER_QUEUE, GPU_QUEUE

K8S: Final = ROOT / "k8s"
#: The overlay k8s/README.md has an operator apply first.
OVERLAY: Final = K8S / "overlays" / "kueue-example"
#: k8s/base's namespace (configmap.yaml's XMC_NAMESPACE): JobSets, LocalQueues, the Lease.
NAMESPACE: Final = "xmc"
#: The services that call the Kubernetes API, and their ServiceAccounts (k8s/base).
SERVICE_ACCOUNTS: Final = {
    "ess": "xmc-ess",
    "actuator": "xmc-actuator",
    "reconciler": "xmc-reconciler",
}
OUT: Final = CLUSTER / "xmc"
ADMIN: Final = CLUSTER / "kubeconfig"
CA: Final = CLUSTER / "pki" / "ca.crt"
#: Long enough for a day's `make run`; the apiserver may shorten it (then it says so).
TOKEN_DURATION: Final = "24h"


def log(message: str) -> None:
    print(f"[xmc-setup] {message}", flush=True)


def kubectl(*args: str, stdin: str | None = None, kubeconfig: Path = ADMIN) -> str:
    """kubectl as cluster-admin; its stderr on failure."""
    done = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed:\n{done.stderr.strip()}")
    return done.stdout


def running() -> bool:
    return ADMIN.exists() and any(alive(p) for p in pid_files())


def require_cluster() -> str:
    """The API server URL of the running cluster of this work tree, or exit saying how."""
    if not running():
        raise SystemExit(
            "no cluster of this work tree is running: `make cluster` first "
            "(XMC_CLUSTER_PORT_BASE picks its ports)"
        )
    config = yaml.safe_load(ADMIN.read_text())
    server: str = config["clusters"][0]["cluster"]["server"]
    return server


def extra_objects() -> list[dict[str, Any]]:
    """What the loopback cluster has beyond the overlay: kubesim's second LocalQueue."""
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": GPU_QUEUE, "namespace": NAMESPACE},
            "spec": {"clusterQueue": DEFAULT_CLUSTER_QUEUE},
        }
    ]


def kubeconfig(server: str, user: str, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "xmc-cluster", "cluster": {"server": server, "certificate-authority": str(CA)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {
                "name": user,
                "context": {"cluster": "xmc-cluster", "user": user, "namespace": NAMESPACE},
            }
        ],
        "current-context": user,
    }


def mint(service_account: str) -> str:
    """A bound token of the ServiceAccount (TokenRequest API)."""
    return kubectl(
        "create", "token", service_account, "-n", NAMESPACE, f"--duration={TOKEN_DURATION}"
    ).strip()


def write_kubeconfig(path: Path, server: str, service_account: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(server, service_account, mint(service_account))))
    path.chmod(0o600)
    return path


def setup() -> None:
    server = require_cluster()
    kubectl("apply", "-k", str(OVERLAY))
    log(f"kubectl apply -k {OVERLAY.relative_to(ROOT)}")
    items = extra_objects()
    kubectl(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    log(f"applied LocalQueue {NAMESPACE}/{GPU_QUEUE} (on {DEFAULT_CLUSTER_QUEUE})")
    for service, account in SERVICE_ACCOUNTS.items():
        path = write_kubeconfig(OUT / f"{service}.kubeconfig", server, account)
        log(f"{service}: ServiceAccount {NAMESPACE}/{account}, KUBECONFIG={path}")


def overlays() -> list[Path]:
    """Every kustomization under k8s/ (the base and any overlay)."""
    return sorted(p.parent for p in K8S.rglob("kustomization.yaml"))


def dry_run() -> None:
    require_cluster()
    for overlay in overlays():
        kubectl("apply", "--dry-run=server", "-k", str(overlay))
        log(f"kubectl apply --dry-run=server -k {overlay.relative_to(ROOT)}: accepted")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command", nargs="?", default="setup", choices=("setup", "dry-run", "running")
    )
    args = parser.parse_args(argv)
    if args.command == "running":
        sys.exit(0 if running() else 1)
    if args.command == "setup":
        setup()
    else:
        dry_run()


if __name__ == "__main__":
    main()
