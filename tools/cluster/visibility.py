"""Kueue's visibility API (``visibility.kueue.x-k8s.io``: a LocalQueue's pending
workloads and their positions), served through the API server's aggregation layer.

Kueue 0.17 serves it from its own process (``pkg/visibility/server.go``: a generic API
server on ``--visibility-server-port``, feature gate ``VisibilityOnDemand``, beta and on by
default), and the API server reaches it through upstream's APIServices, which name a
Service (``config/components/visibility``). Two facts of a cluster of host processes:

- The aggregator sends a request to an address of the Service's EndpointSlices
  (``--enable-aggregator-routing``; kube-aggregator's ``ResolveEndpoint``), and an
  endpoint may not be a loopback address (kubernetes ``ValidateEndpointIP``: "may not be
  in the loopback range"). So the visibility server listens on this host's first global
  IPv4 address instead of 127.0.0.1. Without one, or with
  ``XMC_CLUSTER_VISIBILITY=off``, it stays off and XMC shows no queue positions.
- With internal certificate management off, Kueue reads its serving certificate from
  the fixed path ``/visibility/tls.{crt,key}``. Upstream's APIServices set
  ``insecureSkipTLSVerify: true``, so any pair does (as for the metrics certificate,
  ``up.py`` writes one there if none is present).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

SERVICE = "kueue-visibility-server"  # upstream's name after its kustomization's "kueue-" prefix
NAMESPACE = "kueue-system"
CERT_DIR = Path("/visibility")
GROUP_PATH = "/apis/visibility.kueue.x-k8s.io/v1beta1"


def host_address() -> str | None:
    """The address the visibility server listens on: the first global IPv4 address of
    this host that an EndpointSlice accepts, or None (left off)."""
    if os.environ.get("XMC_CLUSTER_VISIBILITY", "").lower() == "off":
        return None
    try:
        out = subprocess.run(
            ["ip", "-4", "-o", "addr", "show", "scope", "global"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    for line in out.splitlines():
        fields = line.split()
        if "inet" not in fields:
            continue
        address = ipaddress.ip_interface(fields[fields.index("inet") + 1]).ip
        if not (address.is_loopback or address.is_link_local or address.is_unspecified):
            return str(address)
    return None


def apiserver_flags(pki: Path) -> list[str]:
    """The aggregation layer: who may name a user in X-Remote-* headers, and the client
    certificate the API server proxies with (as kubeadm configures it)."""
    return [
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--enable-aggregator-routing=true",
    ]


def ensure_certificate(pair_dir: Path) -> bool:
    """Kueue's fixed certificate path; a pair already there (another cluster on this
    machine, a previous start) is used as it is: nobody verifies it. False when it cannot
    be written (not root): the visibility API then stays off."""
    if (CERT_DIR / "tls.crt").exists():
        return True
    try:
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(pair_dir / name, CERT_DIR / name)
    except OSError:
        return False
    return True


def objects(kueue_src: Path, address: str, port: int) -> list[tuple[str, dict[str, Any]]]:
    """(collection, object) to apply, in order: upstream's Service and APIServices (names
    as its kustomization makes them), and an EndpointSlice of ours for the Service, which
    has no selector (no pod runs Kueue here)."""
    src = kueue_src / "config" / "components" / "visibility"
    service = yaml.safe_load((src / "service.yaml").read_text())
    service["metadata"].update(name=SERVICE, namespace=NAMESPACE)
    service["spec"].pop("selector", None)
    service_port = service["spec"]["ports"][0]
    service_port["targetPort"] = port
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{SERVICE}-host",
            "namespace": NAMESPACE,
            "labels": {
                "kubernetes.io/service-name": SERVICE,
                "endpointslice.kubernetes.io/managed-by": "xmc-cluster",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": service_port["name"], "port": port, "protocol": "TCP"}],
    }
    out: list[tuple[str, dict[str, Any]]] = [
        (f"/api/v1/namespaces/{NAMESPACE}/services", service),
        (f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices", slice_),
    ]
    for version in ("v1beta1", "v1beta2"):
        apiservice = yaml.safe_load((src / f"apiservice_{version}.yaml").read_text())
        apiservice["spec"]["service"].update(name=SERVICE, namespace=NAMESPACE)
        out.append(("/apis/apiregistration.k8s.io/v1/apiservices", apiservice))
    return out


def available(apiservice: dict[str, Any]) -> bool:
    conditions = apiservice.get("status", {}).get("conditions", [])
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)
