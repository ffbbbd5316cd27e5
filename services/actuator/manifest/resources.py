"""Container resources and the node selectors accelerators need (GKE node pools)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from xmc.model.tpu import TPU_CHIPS_PER_HOST, tpu_chips_per_host
from xmc_api.cloud.xmanager.v1.resources_pb2 import ResourceSet

__all__ = [
    "GKE_ACCELERATOR",
    "GKE_TPU_ACCELERATOR",
    "GKE_TPU_TOPOLOGY",
    "GPU_RESOURCE",
    "TPU_CHIPS_PER_HOST",
    "TPU_RESOURCE",
    "accelerator_selectors",
    "resources_spec",
    "tpu_chips_per_host",
]

GPU_RESOURCE: Final = "nvidia.com/gpu"
TPU_RESOURCE: Final = "google.com/tpu"
GKE_ACCELERATOR: Final = "cloud.google.com/gke-accelerator"
GKE_TPU_ACCELERATOR: Final = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY: Final = "cloud.google.com/gke-tpu-topology"


def resources_spec(resources: ResourceSet) -> dict[str, Any]:
    """A container's ``resources``: requests and limits (empty when nothing is asked for)."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    kind = resources.WhichOneof("resources")
    if kind == "cpu_resources":
        cpu = resources.cpu_resources
        if cpu.cpu_millicores:
            requests["cpu"] = f"{cpu.cpu_millicores}m"
        if cpu.memory_bytes:
            requests["memory"] = str(cpu.memory_bytes)
        if cpu.limit_cpu_millicores:
            limits["cpu"] = f"{cpu.limit_cpu_millicores}m"
    elif kind == "gpu_resources" and resources.gpu_resources.count:
        # Extended resources cannot be overcommitted: Kubernetes wants requests == limits.
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(resources.gpu_resources.count)
    elif kind == "tpu_resources":
        chips = tpu_chips_per_host(resources.tpu_resources.topology)
        if chips is not None:
            requests[TPU_RESOURCE] = limits[TPU_RESOURCE] = str(chips)
    if resources.ephemeral_storage_bytes:
        requests["ephemeral-storage"] = str(resources.ephemeral_storage_bytes)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def accelerator_selectors(resource_sets: Iterable[ResourceSet]) -> dict[str, str]:
    """Node labels the accelerators of a pod's containers need (GKE node pools)."""
    selectors: dict[str, str] = {}
    for resources in resource_sets:
        kind = resources.WhichOneof("resources")
        if kind == "gpu_resources" and resources.gpu_resources.type:
            selectors[GKE_ACCELERATOR] = resources.gpu_resources.type
        elif kind == "tpu_resources":
            tpu = resources.tpu_resources
            if tpu.type:
                selectors[GKE_TPU_ACCELERATOR] = tpu.type
            if tpu.topology:
                selectors[GKE_TPU_TOPOLOGY] = tpu.topology
    return selectors
