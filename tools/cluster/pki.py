"""A CA made at start, the certificates signed by it, and the kubeconfigs (openssl)."""

from __future__ import annotations

import base64
import subprocess
import tempfile
from pathlib import Path

import yaml

# name -> (CN, O): client certificates; RBAC sees the CN as user and O as group.
CLIENTS = {
    "admin": ("xmc-cluster-admin", "system:masters"),
    "kcm": ("system:kube-controller-manager", ""),
    "scheduler": ("system:kube-scheduler", ""),
    # The controllers run as cluster-admin for now (upstream RBAC is not applied yet).
    "jobset": ("jobset-controller-manager", "system:masters"),
    "kueue": ("kueue-controller-manager", "system:masters"),
    "kwok": ("kwok-controller", "system:masters"),
    "nodeagent": ("xmc-nodeagent", "system:masters"),
}
#: The user kube-apiserver is to the kubelets (its --kubelet-client-certificate's CN).
KUBELET_CLIENT = "kube-apiserver-kubelet-client"
APISERVER_SANS = [
    "IP:127.0.0.1",
    "IP:10.96.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
]


def _ossl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ec_key(path: Path) -> None:
    _ossl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))


def _sign(pki: Path, name: str, subject: str, usage: str, sans: list[str], ca: str = "ca") -> None:
    key, crt = pki / f"{name}.key", pki / f"{name}.crt"
    _ec_key(key)
    with tempfile.TemporaryDirectory() as tmp:
        csr, ext = Path(tmp) / "csr", Path(tmp) / "ext"
        lines = [
            "basicConstraints=CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={usage}",
        ]
        if sans:
            lines.append("subjectAltName=" + ",".join(sans))
        ext.write_text("\n".join(lines) + "\n")
        _ossl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
        _ossl(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(pki / f"{ca}.crt"),
            "-CAkey",
            str(pki / f"{ca}.key"),
            "-CAcreateserial",
            "-days",
            "3650",
            "-extfile",
            str(ext),
            "-out",
            str(crt),
        )


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(path: Path, server: str, pki: Path, name: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "xmc-cluster",
                "clusters": [
                    {
                        "name": "xmc-cluster",
                        "cluster": {
                            "server": server,
                            "certificate-authority-data": _b64(pki / "ca.crt"),
                        },
                    }
                ],
                "users": [
                    {
                        "name": name,
                        "user": {
                            "client-certificate-data": _b64(pki / f"{name}.crt"),
                            "client-key-data": _b64(pki / f"{name}.key"),
                        },
                    }
                ],
                "contexts": [
                    {"name": "xmc-cluster", "context": {"cluster": "xmc-cluster", "user": name}}
                ],
            },
            sort_keys=False,
        )
    )
    path.chmod(0o600)


def _ca(pki: Path, name: str, subject: str) -> None:
    _ec_key(pki / f"{name}.key")
    _ossl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(pki / f"{name}.key"),
        "-subj",
        subject,
        "-days",
        "3650",
        "-out",
        str(pki / f"{name}.crt"),
    )


def make_all(pki: Path, server: str, cluster: Path, nodes: list[str]) -> str:
    """Make everything; return the CA certificate base64-encoded (a caBundle). ``nodes``:
    the fake Nodes whose kubelet endpoint the node agent serves."""
    pki.mkdir(parents=True, exist_ok=True)
    _ca(pki, "ca", "/CN=xmc-cluster-ca")
    # The aggregation layer's own CA, as kubeadm keeps one: the API server proxies to an
    # extension API server (Kueue's visibility API) with the front-proxy-client
    # certificate, which that server trusts to name the user in X-Remote-* headers.
    _ca(pki, "front-proxy-ca", "/CN=xmc-front-proxy-ca")
    _sign(pki, "front-proxy-client", "/CN=front-proxy-client", "clientAuth", [], "front-proxy-ca")
    _sign(pki, "apiserver", "/CN=kube-apiserver", "serverAuth", APISERVER_SANS)
    for name, (cn, org) in CLIENTS.items():
        _sign(pki, name, (f"/O={org}" if org else "") + f"/CN={cn}", "clientAuth", [])
        kubeconfig(
            cluster / ("kubeconfig" if name == "admin" else f"{name}.kubeconfig"), server, pki, name
        )
    # The kubelet endpoint (kubelet_server.py): a serving certificate for every address
    # a Node may be reached by, signed by the CA that kube-apiserver checks it against
    # (--kubelet-certificate-authority), and the API server's client certificate for it
    # (--kubelet-client-certificate, as kubeadm's apiserver-kubelet-client; RBAC grants
    # its user system:kubelet-api-admin, up.py).
    node_sans = ["IP:127.0.0.1", "DNS:localhost", *(f"DNS:{node}" for node in nodes)]
    _sign(pki, "kubelet", "/CN=xmc-nodeagent-kubelet", "serverAuth", node_sans)
    _sign(pki, "apiserver-kubelet-client", f"/CN={KUBELET_CLIENT}", "clientAuth", [])
    for webhook in ("jobset", "kueue"):  # serving certs, as controller-runtime names them
        _sign(
            pki,
            f"{webhook}-webhook",
            f"/CN={webhook}-webhook",
            "serverAuth",
            ["IP:127.0.0.1", "DNS:localhost"],
        )
        (pki / webhook).mkdir()
        (pki / f"{webhook}-webhook.crt").rename(pki / webhook / "tls.crt")
        (pki / f"{webhook}-webhook.key").rename(pki / webhook / "tls.key")
    _ossl(
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        str(pki / "sa.key"),
    )
    _ossl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    return base64.b64encode((pki / "ca.crt").read_bytes()).decode()
