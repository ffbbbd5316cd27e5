"""``buildBaseJobSet`` (SPEC §7.1): a task's work unit as a ``jobset.x-k8s.io/v1alpha2`` dict.

Pure: the result is exactly what the Actuator sends to the API server, so tests compare it
whole. Unset fields are omitted rather than written as zero values (proto3 ``optional``
fields only when ``HasField``), so the API server's defaults apply: a zero written out
would override them or be invalid (``activeDeadlineSeconds: 0``).

Choices SPEC leaves open, made here:

* XMC's own labels win over the user's ``JobSetExecutable.labels`` / ``KubernetesJob.labels``
  on a clash: the guards and the Reconciler must be able to trust them.
* A container without a name is named after its job (main container), or
  ``{job}-sidecar-{i}`` / ``{job}-init-{i}`` so names stay unique within the pod.
* An explicit ``KubernetesJob.node_selector`` entry wins over the accelerator selector
  derived from resources: the user asked for that node pool by name.
* ``dependency_order`` without a state waits for ``Complete`` (the stricter ordering).
* A pod with a GCS volume gets the ``gke-gcsfuse/volumes: "true"`` annotation, without
  which GKE does not inject the gcsfuse sidecar and the volume never mounts.
* Unless ``disable_pod_failure_policy`` is set, a Job whose pods never restart in place
  ignores pod disruptions (node drain, preemption) so they do not use up ``retry_limit``.

Modules: ``jobset`` (the JobSet, its Jobs and pod template), ``containers`` (containers
and volumes) and ``resources`` (requests, limits and accelerator node selectors).
"""

from actuator.manifest.containers import GCSFUSE_DRIVER
from actuator.manifest.jobset import GCSFUSE_POD_ANNOTATION, build_base_jobset
from actuator.manifest.resources import (
    GKE_ACCELERATOR,
    GKE_TPU_ACCELERATOR,
    GKE_TPU_TOPOLOGY,
    GPU_RESOURCE,
    TPU_RESOURCE,
)
from xmc.model.tpu import TPU_CHIPS_PER_HOST, tpu_chips_per_host

__all__ = [
    "GCSFUSE_DRIVER",
    "GCSFUSE_POD_ANNOTATION",
    "GKE_ACCELERATOR",
    "GKE_TPU_ACCELERATOR",
    "GKE_TPU_TOPOLOGY",
    "GPU_RESOURCE",
    "TPU_CHIPS_PER_HOST",
    "TPU_RESOURCE",
    "build_base_jobset",
    "tpu_chips_per_host",
]
