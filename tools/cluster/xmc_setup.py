"""XMC on the loopback cluster of ``make cluster`` (``make run CLUSTER=real``,
``make test-cluster``).

``setup`` (the default), as cluster-admin (``.cluster/kubeconfig``):

1. applies k8s/base's own namespace, ServiceAccounts and RBAC files (``kubectl apply -f``
   of the files themselves, not a copy: what runs is what k8s/base grants). The
   Deployments are not applied: there are no kubelets for XMC's own pods;
2. applies the queueing objects a work unit needs, the same as kubesim starts with
   (``kubesim.defaults``): ResourceFlavor ``default-flavor``, ClusterQueue
   ``cluster-queue``, LocalQueues ``cpu-queue`` and ``gpu-queue`` (in ``xmc``, where
   k8s/base puts the JobSets) and XMC's nine WorkloadPriorityClasses;
3. mints a token per ServiceAccount with the TokenRequest API (``kubectl create token``)
   and writes ``.cluster/xmc/<service>.kubeconfig`` for the Actuator and the Reconciler:
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

from kubesim.defaults import default_objects
from kubesim.resources import NAMESPACE as NAMESPACE_RESOURCE

K8S: Final = ROOT / "k8s"
BASE: Final = K8S / "base"
#: The files of k8s/base that give XMC's services their identities and permissions.
IDENTITY_FILES: Final = (
    "namespace.yaml",
    "serviceaccounts.yaml",
    "rbac-actuator.yaml",
    "rbac-reconciler.yaml",
)
#: k8s/base's namespace (configmap.yaml's XMC_NAMESPACE): JobSets, LocalQueues, the Lease.
NAMESPACE: Final = "xmc"
#: The services that call the Kubernetes API, and their ServiceAccounts (k8s/base).
SERVICE_ACCOUNTS: Final = {"actuator": "xmc-actuator", "reconciler": "xmc-reconciler"}
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


def queue_objects() -> list[dict[str, Any]]:
    """kubesim's starting queueing objects, as API objects; LocalQueues in ``xmc``."""
    objects = []
    for resource, obj in default_objects():
        if resource is NAMESPACE_RESOURCE:
            continue
        body = json.loads(json.dumps(obj))
        if resource.namespaced:
            body["metadata"]["namespace"] = NAMESPACE
        group = f"{resource.group}/" if resource.group else ""
        objects.append({"apiVersion": f"{group}{resource.version}", "kind": resource.kind, **body})
    return objects


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
    kubectl("apply", *(f"--filename={BASE / name}" for name in IDENTITY_FILES))
    log(f"applied k8s/base/{{{','.join(IDENTITY_FILES)}}}")
    items = queue_objects()
    kubectl(
        "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    log(f"applied {len(items)} queueing objects (cluster-queue, cpu-queue and gpu-queue in xmc)")
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
