"""The queueing objects a fresh kubesim starts with, so a work unit submitted with the
published client's defaults (queue ``cpu-queue``, one of XMC's nine priorities) is
admitted without any setup.

kubesim is a standalone emulator and imports nothing of XMC, so it keeps its own copy of
XMC's nine WorkloadPriorityClasses (experiment priority × work-unit priority, 100 …
900); ``tests/kubesim/test_defaults.py`` holds it equal to ``xmc.priority_classes``, the
list the Actuator labels JobSets from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kubesim.errors import ApiError
from kubesim.resources import (
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    NAMESPACE,
    RESOURCE_FLAVOR,
    WORKLOAD_PRIORITY_CLASS,
    Resource,
)
from kubesim.store import ObjectStore

DEFAULT_NAMESPACE: Final = "default"
DEFAULT_FLAVOR: Final = "default-flavor"
DEFAULT_CLUSTER_QUEUE: Final = "cluster-queue"
CPU_QUEUE: Final = "cpu-queue"
"""The published client's default queue name."""
GPU_QUEUE: Final = "gpu-queue"


def priority_class_name(experiment: str, work_unit: str) -> str:
    """``xmc-priority-{experiment}-{work_unit}``, each one of ``PRIORITY_LEVELS``."""
    name = f"xmc-priority-{experiment}-{work_unit}"
    if name not in XMC_PRIORITY_CLASSES:
        raise ValueError(f"unknown priority {experiment!r} × {work_unit!r}")
    return name


PRIORITY_LEVELS: Final = ("low", "normal", "high")
#: Name → value, 100 (low × low) … 900 (high × high); the experiment priority dominates.
XMC_PRIORITY_CLASSES: Final[Mapping[str, int]] = {
    f"xmc-priority-{experiment}-{work_unit}": 100 * (3 * e + w + 1)
    for e, experiment in enumerate(PRIORITY_LEVELS)
    for w, work_unit in enumerate(PRIORITY_LEVELS)
}

_QUOTA: Final = {
    "cpu": "64",
    "memory": "256Gi",
    "nvidia.com/gpu": "8",
    "google.com/tpu": "8",
    "ephemeral-storage": "1Ti",
}


def default_objects() -> list[tuple[Resource, dict[str, Any]]]:
    cluster_queue = {
        "metadata": {"name": DEFAULT_CLUSTER_QUEUE},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": list(_QUOTA),
                    "flavors": [
                        {
                            "name": DEFAULT_FLAVOR,
                            "resources": [
                                {"name": name, "nominalQuota": quota}
                                for name, quota in _QUOTA.items()
                            ],
                        }
                    ],
                }
            ],
        },
    }
    objects: list[tuple[Resource, dict[str, Any]]] = [
        (NAMESPACE, {"metadata": {"name": DEFAULT_NAMESPACE}}),
        (RESOURCE_FLAVOR, {"metadata": {"name": DEFAULT_FLAVOR}, "spec": {}}),
        (CLUSTER_QUEUE, cluster_queue),
    ]
    for queue in (CPU_QUEUE, GPU_QUEUE):
        objects.append(
            (
                LOCAL_QUEUE,
                {
                    "metadata": {"name": queue, "namespace": DEFAULT_NAMESPACE},
                    "spec": {"clusterQueue": DEFAULT_CLUSTER_QUEUE},
                },
            )
        )
    for name, value in XMC_PRIORITY_CLASSES.items():
        description = f"XMC priority {name.removeprefix('xmc-priority-')}"
        objects.append(
            (
                WORKLOAD_PRIORITY_CLASS,
                {"metadata": {"name": name}, "value": value, "description": description},
            )
        )
    return objects


def install_defaults(store: ObjectStore) -> None:
    """Create whichever default objects are missing; existing ones are left as they are."""
    for resource, obj in default_objects():
        namespace = obj["metadata"].get("namespace")
        if store.find(resource, namespace, obj["metadata"]["name"]) is not None:
            continue
        try:
            store.create(resource, obj)
        except ApiError as error:
            if error.reason != "AlreadyExists":
                raise
