"""Manifests for the loopback cluster, read from upstream's own files in the Go module
cache (nothing upstream is copied into this repository) and re-pointed at loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def crds(src: Path, webhook_port: int, ca_b64: str) -> list[dict[str, Any]]:
    """Apply config/components/crd/bases; where upstream's kustomization patches a CRD
    with a conversion webhook, point that webhook at our loopback server."""
    crd_dir = src / "config/components/crd"
    conversions: dict[str, dict[str, Any]] = {}
    kust = yaml.safe_load((crd_dir / "kustomization.yaml").read_text())
    for patch in kust.get("patches") or []:
        doc = load_yaml(crd_dir / patch["path"])[0]
        webhook = doc.get("spec", {}).get("conversion", {}).get("webhook")
        if webhook:
            conversions[doc["metadata"]["name"]] = webhook
    out = []
    for path in sorted((crd_dir / "bases").glob("*.yaml")):
        for crd in load_yaml(path):
            name = crd["metadata"]["name"]
            webhook = conversions.get(name)
            if webhook and len(crd["spec"]["versions"]) > 1:
                hook_path = webhook["clientConfig"]["service"]["path"]
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "conversionReviewVersions": webhook["conversionReviewVersions"],
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{webhook_port}{hook_path}",
                            "caBundle": ca_b64,
                        },
                    },
                }
            out.append(crd)
    return out


def json_patch_replace(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """The subset of RFC 6902 that upstream's webhook patches use: replace /webhooks/N."""
    for op in ops:
        parts = op["path"].strip("/").split("/")
        if op["op"] != "replace" or len(parts) != 2:
            raise ValueError(f"unsupported webhook patch {op}")
        doc[parts[0]][int(parts[1])] = op["value"]


def webhook_configs(
    prefix: str, src: Path, port: int, ca_b64: str, groups: set[str]
) -> list[dict[str, Any]]:
    """Register config/components/webhook/manifests.yaml (with upstream's kustomize
    patches) under `prefix-<name>`, each webhook re-pointed at https://127.0.0.1:port.
    Only webhooks for API groups in `groups` are kept: the others serve integrations
    that are not enabled here, and would fail every matching request."""
    hook_dir = src / "config/components/webhook"
    docs = load_yaml(hook_dir / "manifests.yaml")
    kust = yaml.safe_load((hook_dir / "kustomization.yaml").read_text())
    for patch in kust.get("patches") or []:
        body = patch.get("patch") or (hook_dir / patch["path"]).read_text()
        target = (patch.get("target") or {}).get("name")
        parsed = yaml.safe_load(body)
        for doc in docs:
            if isinstance(parsed, list) and doc["metadata"]["name"] == target:
                json_patch_replace(doc, parsed)
            elif isinstance(parsed, dict) and doc["metadata"]["name"] == parsed["metadata"]["name"]:
                by_name = {w["name"]: w for w in parsed.get("webhooks", [])}
                for hook in doc["webhooks"]:
                    hook.update(by_name.get(hook["name"], {}))
    for doc in docs:
        doc["metadata"] = {"name": f"{prefix}-{doc['metadata']['name']}"}
        hooks = [
            h for h in doc["webhooks"] if {g for r in h["rules"] for g in r["apiGroups"]} <= groups
        ]
        for hook in hooks:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_b64}
        doc["webhooks"] = hooks
    return docs


KWOK_STAGES = ("stage/node/fast", "stage/node/heartbeat")


def kwok_stages(src: Path) -> str:
    """kwok's own Node stage sets (kustomize/<set>/kustomization.yaml), as one config
    file: nodes become Ready and keep a heartbeat. No Pod stage: without one kwok starts
    no pod controller and never touches a pod; the node agent (nodeagent.py) runs them."""
    docs = []
    for stage_set in KWOK_STAGES:
        kust = yaml.safe_load((src / "kustomize" / stage_set / "kustomization.yaml").read_text())
        docs += [(src / "kustomize" / stage_set / r).read_text() for r in kust["resources"]]
    return "\n---\n".join(docs)


NODE_CAPACITY = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"}


def fake_node(i: int) -> dict[str, Any]:
    name = f"kwok-node-{i}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true",
            },
        },
        "status": {"capacity": NODE_CAPACITY, "allocatable": NODE_CAPACITY},
    }


def controller_config(name: str, src: Path, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """The config file of the JobSet controller or Kueue run on the host: upstream's own
    (``config/components/manager/controller_manager_config.yaml``: Kueue's client QPS
    50 / burst 100 and its per-kind worker counts, as deployed), with what a host process
    needs instead: webhooks on 127.0.0.1 with our certificate, no leader election, no
    metrics, no cert rotation; Kueue only the integrations whose webhooks are registered."""
    manager = src / "config" / "components" / "manager" / "controller_manager_config.yaml"
    config: dict[str, Any] = yaml.safe_load(manager.read_text())
    config.update(
        webhook={"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        metrics={"bindAddress": "0"},
        leaderElection={"leaderElect": False},
        internalCertManagement={"enable": False},
    )
    if name == "kueue":
        config.update(
            namespace="kueue-system",
            integrations={"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
        )
    return config


# Created with dryRun=All by up.py: they go through the admission webhooks of Kueue
# and JobSet, and fail while those do not answer.
PROBE_CLUSTERQUEUE: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ClusterQueue",
    "metadata": {"name": "xmc-cluster-probe"},
    "spec": {},
}
PROBE_JOBSET: dict[str, Any] = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "xmc-cluster-probe", "namespace": "default"},
    "spec": {
        "replicatedJobs": [
            {
                "name": "w",
                "template": {
                    "spec": {
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "c", "image": "x"}],
                            }
                        }
                    }
                },
            }
        ]
    },
}
