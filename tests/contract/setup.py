"""The cluster-scoped objects the contract suite assumes (SPEC-independent test setup).

On kubesim the fixture creates them; on a real cluster apply them once::

    .venv/bin/python -m tests.contract.setup | kubectl apply -f -

A ResourceFlavor, the ClusterQueue ``xmc-contract`` (room for exactly one of the suite's
work units, so a second one must preempt or wait; preemption of lower priorities within
the queue, as XMC's clusters run) and XMC's nine WorkloadPriorityClasses.
"""

from __future__ import annotations

import json
from typing import Any, Final

from xmc.priority_classes import PRIORITY_CLASS_DESCRIPTIONS, PRIORITY_CLASS_VALUES

CLUSTER_QUEUE: Final = "xmc-contract"
LOCAL_QUEUE: Final = "xmc-contract"
FLAVOR: Final = "xmc-contract-flavor"
CPU_QUOTA_MILLICORES: Final = 500
"""One work unit of the suite (``contract.flows.WORK_UNIT_MILLICORES``) fills it."""
KUEUE: Final = "kueue.x-k8s.io/v1beta2"
#: The labels k8s/base's kustomization puts on every object it deploys.
XMC_LABELS: Final = {"app.kubernetes.io/part-of": "xmc"}


def cluster_objects() -> list[dict[str, Any]]:
    """The objects, in the order they can be created."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}, "spec": {}},
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": FLAVOR,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": f"{CPU_QUOTA_MILLICORES}m"},
                                    {"name": "memory", "nominalQuota": "1Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    ]
    # Exactly the classes k8s/base deploys (its label included): on a cluster where XMC is
    # deployed, `kubectl apply` of these changes nothing, and re-applying k8s/base
    # afterwards changes nothing either (tests/unit/test_deploy_manifests.py holds them
    # equal).
    for name, value in PRIORITY_CLASS_VALUES.items():
        objects.append(
            {
                "apiVersion": KUEUE,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name, "labels": dict(XMC_LABELS)},
                "value": value,
                "description": PRIORITY_CLASS_DESCRIPTIONS[name],
            }
        )
    return objects


def local_queue(namespace: str) -> dict[str, Any]:
    """The LocalQueue the fixture creates in each test's namespace."""
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }


if __name__ == "__main__":  # kubectl apply takes JSON as well as YAML
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster_objects()}, indent=2))
