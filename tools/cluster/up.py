"""Start a real Kubernetes control plane on loopback (``make cluster``).

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the JobSet controller,
Kueue and kwok run as host processes bound to 127.0.0.1, from binaries that
``build.sh`` keeps in ``$XMC_CLUSTER_CACHE``; kwok keeps the fake Nodes Ready and our
node agent (``nodeagent.py``, run by this interpreter) runs the pods bound to them.
Everything made at start lives in ``.cluster/`` (ignored by git): a CA and
certificates, service-account keys, etcd's data, logs, pid files, and ``kubeconfig``
(cluster-admin), which is printed at the end.

CRDs and webhook configurations are read from the Go module cache at the versions
pinned in ``tools/cluster/*/go.mod``; the webhooks are re-pointed from their in-cluster
Service to ``https://127.0.0.1:<port>`` with our CA as ``caBundle``.
``down.py`` stops it all. Ports: ``XMC_CLUSTER_PORT_BASE`` (default 17300) + offset.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import manifests
import pki
import procs
import visibility
from common import CLUSTER, ROOT, TOOLS, alive, pid_files, port_in_use
from procs import PKI, Health, log

BASE = int(os.environ.get("XMC_CLUSTER_PORT_BASE", "17300"))
PORT = {
    "etcd": BASE,
    "etcd-peer": BASE + 1,
    "apiserver": BASE + 2,
    "kcm": BASE + 3,
    "scheduler": BASE + 4,
    "jobset-webhook": BASE + 5,
    "jobset-health": BASE + 6,
    "kueue-webhook": BASE + 7,
    "kueue-health": BASE + 8,
    "kwok": BASE + 9,
    "kueue-visibility": BASE + 10,
    "kubelet": BASE + 11,
}
#: How each component shows it serves (recorded for restart.py).
HEALTH = {
    "etcd": Health(url=f"http://127.0.0.1:{PORT['etcd']}/health"),
    "kube-apiserver": Health(url=f"https://127.0.0.1:{PORT['apiserver']}/readyz", tls="admin"),
    "kube-controller-manager": Health(
        url=f"https://127.0.0.1:{PORT['kcm']}/healthz", tls="insecure"
    ),
    "kube-scheduler": Health(url=f"https://127.0.0.1:{PORT['scheduler']}/healthz", tls="insecure"),
    "jobset": Health(url=f"http://127.0.0.1:{PORT['jobset-health']}/readyz"),
    "kueue": Health(url=f"http://127.0.0.1:{PORT['kueue-health']}/readyz"),
    "kwok": Health(url=f"http://127.0.0.1:{PORT['kwok']}/healthz"),  # --server-address
    "nodeagent": Health(file=str(CLUSTER / "nodeagent.ready")),
}
#: The ports of PORT each component listens on.
LISTENS = {
    "etcd": ("etcd", "etcd-peer"),
    "kube-apiserver": ("apiserver",),
    "kube-controller-manager": ("kcm",),
    "kube-scheduler": ("scheduler",),
    "jobset": ("jobset-webhook", "jobset-health"),
    "kueue": ("kueue-webhook", "kueue-health"),
    "kwok": ("kwok",),
    "nodeagent": ("kubelet",),
}
NODES = int(os.environ.get("XMC_CLUSTER_NODES", "4"))
PROCS: dict[str, subprocess.Popen[bytes]] = {}


def components() -> dict[str, tuple[str, Path]]:
    """component -> (version, cache dir), as build.sh computes them."""
    out = subprocess.run(
        ["bash", str(TOOLS / "build.sh"), "--print"], check=True, capture_output=True, text=True
    ).stdout
    return {c: (v, Path(d)) for c, v, d in (line.split() for line in out.splitlines())}


def module_dir(module: str, version: str) -> Path:
    gomodcache = subprocess.run(
        ["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True
    ).stdout.strip()
    path = Path(gomodcache) / f"{module}@{version}"
    if not path.is_dir():  # build.sh downloaded it once; a cleaned cache is refilled here
        subprocess.run(["go", "mod", "download", f"{module}@{version}"], check=True)
    return path


def start(name: str, argv: list[str]) -> None:
    PROCS[name] = procs.start(name, argv, HEALTH[name], [PORT[p] for p in LISTENS[name]])


def wait_until(what: str, probe: Callable[[], bool], timeout: float = 120.0) -> None:
    procs.wait_until(what, probe, PROCS, timeout)


def wait_healthy(name: str) -> None:
    wait_until(
        f"{name} ({HEALTH[name].url or HEALTH[name].file})", lambda: procs.healthy(HEALTH[name])
    )


# --- the API, as cluster-admin ----------------------------------------------------

_CTX: ssl.SSLContext | None = None


def api(
    method: str, path: str, body: object = None, ctype: str = "application/json"
) -> dict[str, Any]:
    global _CTX
    if _CTX is None:
        _CTX = procs.admin_context()
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"https://127.0.0.1:{PORT['apiserver']}{path}",
        data=data,
        method=method,
        headers={"Content-Type": ctype, "Accept": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30, context=_CTX) as resp:
        raw = resp.read()
    return json.loads(raw) if raw.startswith(b"{") else {"text": raw.decode()}


def apply(collection: str, obj: dict[str, Any]) -> None:
    """Server-side apply of obj into collection (e.g. /api/v1/namespaces)."""
    name = obj["metadata"]["name"]
    api(
        "PATCH",
        f"{collection}/{name}?fieldManager=xmc-cluster&force=true",
        obj,
        "application/apply-patch+yaml",
    )


def create(collection: str, obj: dict[str, Any]) -> None:
    try:
        api("POST", collection, obj)
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise


def crd_established(name: str) -> bool:
    crd = api("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conds = crd.get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conds)


# --- the components -------------------------------------------------------------------


def main() -> None:
    if any(alive(p) for p in pid_files()):
        sys.exit("a cluster is already running (make cluster-down first)")
    comps = components()
    bins = {c: d / "bin" for c, (_, d) in comps.items()}
    missing = [str(b) for b in bins.values() if not b.is_dir()]
    if missing:
        sys.exit(f"not built: {missing}; run tools/cluster/build.sh")
    for name, port in PORT.items():
        if port_in_use(port):
            sys.exit(f"port {port} ({name}) is in use; set XMC_CLUSTER_PORT_BASE")
    shutil.rmtree(CLUSTER, ignore_errors=True)
    (CLUSTER / "pids").mkdir(parents=True)
    api_url = f"https://127.0.0.1:{PORT['apiserver']}"
    node_names = [manifests.fake_node(i)["metadata"]["name"] for i in range(NODES)]
    ca_b64 = pki.make_all(PKI, api_url, CLUSTER, node_names)
    log("CA, certificates and service-account keys made in .cluster/pki")

    k8s, etcd = bins["kubernetes"], bins["etcd"]
    start(
        "etcd",
        [
            str(etcd / "etcd"),
            "--name=xmc",
            f"--data-dir={CLUSTER / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{PORT['etcd']}",
            f"--advertise-client-urls=http://127.0.0.1:{PORT['etcd']}",
            f"--listen-peer-urls=http://127.0.0.1:{PORT['etcd-peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{PORT['etcd-peer']}",
            f"--initial-cluster=xmc=http://127.0.0.1:{PORT['etcd-peer']}",
            "--quota-backend-bytes=4294967296",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
    )
    wait_healthy("etcd")

    start(
        "kube-apiserver",
        [
            str(k8s / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{PORT['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={PORT['apiserver']}",
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={PKI / 'apiserver.crt'}",
            f"--tls-private-key-file={PKI / 'apiserver.key'}",
            f"--client-ca-file={PKI / 'ca.crt'}",
            f"--service-account-key-file={PKI / 'sa.pub'}",
            f"--service-account-signing-key-file={PKI / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            *kubelet_client_flags(),
            "--profiling=false",
            "--v=1",
            *visibility.apiserver_flags(PKI),
        ],
    )
    wait_healthy("kube-apiserver")
    apply("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", KUBELET_API_ADMIN)

    start(
        "kube-controller-manager",
        [
            str(k8s / "kube-controller-manager"),
            f"--kubeconfig={CLUSTER / 'kcm.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={PORT['kcm']}",
            "--leader-elect=false",
            "--controllers=*",
            f"--root-ca-file={PKI / 'ca.crt'}",
            f"--service-account-private-key-file={PKI / 'sa.key'}",
            f"--cluster-signing-cert-file={PKI / 'ca.crt'}",
            f"--cluster-signing-key-file={PKI / 'ca.key'}",
            "--use-service-account-credentials=true",
            "--profiling=false",
            "--v=1",
        ],
    )
    start(
        "kube-scheduler",
        [
            str(k8s / "kube-scheduler"),
            f"--kubeconfig={CLUSTER / 'scheduler.kubeconfig'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={PORT['scheduler']}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ],
    )

    jobset_src = module_dir("sigs.k8s.io/jobset", comps["jobset"][0])
    kueue_src = module_dir("sigs.k8s.io/kueue", comps["kueue"][0])
    crds = manifests.crds(jobset_src, PORT["jobset-webhook"], ca_b64)
    crds += manifests.crds(kueue_src, PORT["kueue-webhook"], ca_b64)
    for crd in crds:
        apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    names = [crd["metadata"]["name"] for crd in crds]
    for ns in ("kueue-system", "jobset-system"):
        apply(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        )
    wait_until(f"{len(crds)} CRDs established", lambda: all(crd_established(n) for n in names))

    jobset_config = manifests.controller_config(
        "jobset", jobset_src, PORT["jobset-webhook"], PKI / "jobset"
    )
    jobset_config["health"] = {"healthProbeBindAddress": f"127.0.0.1:{PORT['jobset-health']}"}
    (CLUSTER / "jobset.yaml").write_text(yaml.safe_dump(jobset_config))
    start(
        "jobset",
        [
            str(bins["jobset"] / "jobset-manager"),
            f"--config={CLUSTER / 'jobset.yaml'}",
            f"--kubeconfig={CLUSTER / 'jobset.kubeconfig'}",
        ],
    )
    kueue_config = manifests.controller_config(
        "kueue", kueue_src, PORT["kueue-webhook"], PKI / "kueue"
    )
    kueue_config["health"] = {"healthProbeBindAddress": f"127.0.0.1:{PORT['kueue-health']}"}
    visibility_address = visibility.host_address()
    if visibility_address and visibility.ensure_certificate(PKI / "kueue"):
        kueue_config["visibilityServer"] = {"bindAddress": visibility_address}
    else:
        visibility_address = None
        log(
            "Kueue's visibility API off: no global IPv4 address, XMC_CLUSTER_VISIBILITY=off, "
            f"or {visibility.CERT_DIR} not writable"
        )
    (CLUSTER / "kueue.yaml").write_text(yaml.safe_dump(kueue_config))
    # Kueue 0.17 reads its metrics certificate from this fixed path when internal cert
    # management is off, even with metrics disabled; give it one (made here, unused).
    metrics_certs = Path("/etc/kueue/metrics/certs")
    if not (metrics_certs / "tls.crt").exists():
        metrics_certs.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(PKI / "kueue" / name, metrics_certs / name)
    start(
        "kueue",
        [
            str(bins["kueue"] / "kueue-manager"),
            f"--config={CLUSTER / 'kueue.yaml'}",
            f"--kubeconfig={CLUSTER / 'kueue.kubeconfig'}",
            f"--visibility-server-port={PORT['kueue-visibility']}",
            f"--feature-gates=VisibilityOnDemand={'true' if visibility_address else 'false'}",
        ],
    )
    groups = {"", "batch", "jobset.x-k8s.io", "kueue.x-k8s.io"}
    configs = manifests.webhook_configs(
        "jobset", jobset_src, PORT["jobset-webhook"], ca_b64, groups
    )
    configs += manifests.webhook_configs(
        "kueue", kueue_src, PORT["kueue-webhook"], ca_b64, groups - {""}
    )
    for config in configs:
        apply(f"/apis/admissionregistration.k8s.io/v1/{config['kind'].lower()}s", config)
    if visibility_address:
        port = PORT["kueue-visibility"]
        for collection, obj in visibility.objects(kueue_src, visibility_address, port):
            apply(collection, obj)

    kwok_src = module_dir("sigs.k8s.io/kwok", comps["kwok"][0])
    (CLUSTER / "kwok.yaml").write_text(manifests.kwok_stages(kwok_src))
    start(
        "kwok",
        [
            str(bins["kwok"] / "kwok"),
            f"--kubeconfig={CLUSTER / 'kwok.kubeconfig'}",
            f"--config={CLUSTER / 'kwok.yaml'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1",
            # The Nodes' daemonEndpoints.kubeletEndpoint.Port: the node agent's kubelet
            # endpoint; kwok's own server (healthz) stays on a port of its own.
            f"--node-port={PORT['kubelet']}",
            f"--server-address=127.0.0.1:{PORT['kwok']}",
            "--v=1",
        ],
    )
    for i in range(NODES):
        create("/api/v1/nodes", manifests.fake_node(i))
    start(
        "nodeagent",
        [
            sys.executable,
            str(TOOLS / "nodeagent.py"),
            f"--kubeconfig={CLUSTER / 'nodeagent.kubeconfig'}",
            f"--ready-file={CLUSTER / 'nodeagent.ready'}",
            f"--port={PORT['kubelet']}",
            f"--tls-cert-file={PKI / 'kubelet.crt'}",
            f"--tls-private-key-file={PKI / 'kubelet.key'}",
            f"--client-ca-file={PKI / 'ca.crt'}",
        ],
    )

    for name in ("kube-controller-manager", "kube-scheduler", "jobset", "kueue", "kwok"):
        wait_healthy(name)
    wait_until("webhooks answering (server-side dry runs)", webhooks_answer)
    if visibility_address:
        wait_until(
            f"Kueue's visibility API (on {visibility_address}:{PORT['kueue-visibility']})",
            lambda: visibility.available(
                api(
                    "GET",
                    "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.visibility.kueue.x-k8s.io",
                )
            ),
        )
    wait_until(f"{NODES} kwok nodes Ready", lambda: ready_nodes() >= NODES)
    wait_healthy("nodeagent")

    log(f"up: {api_url} — KUBECONFIG={CLUSTER / 'kubeconfig'}")
    sys.stdout.write((CLUSTER / "kubeconfig").read_text())


def kubelet_client_flags() -> list[str]:
    """How kube-apiserver reaches a Node's kubelet (``pods/log``): over TLS checked
    against our CA (without ``--kubelet-certificate-authority`` it would not check the
    kubelet's certificate at all), presenting the apiserver-kubelet-client certificate.
    The address is the default preference's first present: kwok gives the Nodes only
    an InternalIP (``--node-ip``), and the port is their ``daemonEndpoints``."""
    return [
        f"--kubelet-certificate-authority={PKI / 'ca.crt'}",
        f"--kubelet-client-certificate={PKI / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={PKI / 'apiserver-kubelet-client.key'}",
    ]


#: What a kubelet lets the API server do (logs, exec, ...) is what RBAC lets its client
#: certificate's user do: the bootstrap ClusterRole system:kubelet-api-admin (``get``
#: and more on nodes/proxy, nodes/log, ...), as the kubelet authorization docs advise.
KUBELET_API_ADMIN: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "xmc-cluster:kube-apiserver-kubelet-client"},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:kubelet-api-admin",
    },
    "subjects": [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": pki.KUBELET_CLIENT}
    ],
}


def webhooks_answer() -> bool:
    """A dry-run create goes through the admission webhooks of Kueue and JobSet, and
    fails while they do not answer (failurePolicy: Fail)."""
    cq, js = manifests.PROBE_CLUSTERQUEUE, manifests.PROBE_JOBSET
    api("POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues?dryRun=All", cq)
    api("POST", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets?dryRun=All", js)
    return True


def ready_nodes() -> int:
    items = api("GET", "/api/v1/nodes?labelSelector=type%3Dkwok")["items"]
    return sum(
        any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in n["status"].get("conditions", [])
        )
        for n in items
    )


if __name__ == "__main__":
    os.chdir(ROOT)
    try:
        main()
    except BaseException:
        if PROCS:  # a start that failed half-way leaves nothing running
            log("start failed; stopping what was started (logs stay in .cluster/logs)")
            import down

            down.main()
        raise
