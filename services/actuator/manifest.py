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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

from xmc import labels
from xmc.tasks import task_execution_id
from xmc.timestamps import to_datetime
from xmc_api.cloud.xmanager.v1.resources_pb2 import ResourceSet
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import (
    ConfigMapVolumeSource,
    ContainerPort,
    EnvVar,
    ExecutableSpec,
    JobSetExecutable,
    KubernetesJob,
    SecretVolumeSource,
    Volume,
    VolumeMount,
)
from xmc_api.internal.v1.tasks_pb2 import Task

GPU_RESOURCE: Final = "nvidia.com/gpu"
TPU_RESOURCE: Final = "google.com/tpu"
GKE_ACCELERATOR: Final = "cloud.google.com/gke-accelerator"
GKE_TPU_ACCELERATOR: Final = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY: Final = "cloud.google.com/gke-tpu-topology"
GCSFUSE_DRIVER: Final = "gcsfuse.csi.storage.gke.io"
GCSFUSE_POD_ANNOTATION: Final = "gke-gcsfuse/volumes"

#: Chips on one TPU VM host. A slice whose topology has more chips spans several hosts,
#: each pod of the job then runs on one host and requests that host's chips.
TPU_CHIPS_PER_HOST: Final = 4

_DEFAULT_RESTART_POLICY: Final = "Never"
_DEPENDS_ON_STATUS: Final[Mapping[int, str]] = {
    KubernetesJob.DependencyOrder.READY: "Ready",
    KubernetesJob.DependencyOrder.COMPLETED: "Complete",
}
_DEFAULT_DEPENDS_ON_STATUS: Final = "Complete"
_SUCCESS_OPERATORS: Final[Mapping[int, str]] = {
    JobSetExecutable.SuccessPolicy.ALL: "All",
    JobSetExecutable.SuccessPolicy.ANY: "Any",
}
_DEFAULT_SUCCESS_OPERATOR: Final = "All"
_PROTOCOLS: Final[Mapping[int, str]] = {
    ContainerPort.TCP: "TCP",
    ContainerPort.UDP: "UDP",
    ContainerPort.SCTP: "SCTP",
}


def build_base_jobset(task: Task, *, namespace: str) -> dict[str, Any]:
    """The suspended JobSet of ``task``'s execution; Kueue unsuspends it on admission."""
    work_unit = task.payload.work_unit
    executable = work_unit.executable
    jobset = executable.jobset
    eid = task_execution_id(task)
    system_labels = {
        labels.EXPERIMENT_ID: str(task.xid),
        labels.WORK_UNIT_ID: str(task.wid),
        labels.EXECUTION_ID: str(eid),
        labels.LAST_EDIT: labels.last_edit_label(to_datetime(task.operation_time)),
        labels.PRIORITY_CLASS: labels.priority_class_name(
            task.payload.experiment_priority, work_unit.priority
        ),
        labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
    }
    if executable.scheduling_constraints.queue_name:
        system_labels[labels.QUEUE_NAME] = executable.scheduling_constraints.queue_name
    metadata: dict[str, Any] = {
        "name": labels.jobset_name(task.xid, task.wid),
        "namespace": namespace,
        "labels": {**dict(jobset.labels), **system_labels},
    }
    if jobset.annotations:
        metadata["annotations"] = dict(jobset.annotations)
    metadata["finalizers"] = [labels.FINALIZER]
    pod_labels = {
        labels.EXPERIMENT_ID: str(task.xid),
        labels.WORK_UNIT_ID: str(task.wid),
        labels.EXECUTION_ID: str(eid),
    }
    return {
        "apiVersion": labels.JOBSET_API_VERSION,
        "kind": labels.JOBSET_KIND,
        "metadata": metadata,
        "spec": _jobset_spec(jobset, pod_labels),
    }


def tpu_chips_per_host(topology: str) -> int | None:
    """Chips each pod requests for a TPU ``topology`` such as ``2x2`` or ``4x4x4``.

    The product of the dimensions when the whole slice fits one host (≤ 4 chips), else
    :data:`TPU_CHIPS_PER_HOST`. None when the topology does not parse; the manifest then
    requests no chips and validation reports the topology selector.
    """
    dims = topology.split("x")
    if not all(d.isascii() and d.isdigit() for d in dims):
        return None
    chips = math.prod(int(d) for d in dims)
    return chips if chips <= TPU_CHIPS_PER_HOST else TPU_CHIPS_PER_HOST


# --- JobSet spec -----------------------------------------------------------------------


def _jobset_spec(jobset: JobSetExecutable, pod_labels: Mapping[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "suspend": True,
        "replicatedJobs": [_replicated_job(job, pod_labels) for job in jobset.jobs],
    }
    if jobset.HasField("network") and (network := _network(jobset.network)):
        spec["network"] = network
    if jobset.HasField("coordinator") and jobset.coordinator.replicated_job:
        spec["coordinator"] = _coordinator(jobset.coordinator)
    if jobset.HasField("success_policy"):
        spec["successPolicy"] = _success_policy(jobset.success_policy)
    return spec


def _network(network: JobSetExecutable.Network) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if network.HasField("enable_dns_hostnames"):
        out["enableDNSHostnames"] = network.enable_dns_hostnames
    if network.subdomain:
        out["subdomain"] = network.subdomain
    if network.HasField("publish_not_ready_addresses"):
        out["publishNotReadyAddresses"] = network.publish_not_ready_addresses
    return out


def _coordinator(coordinator: JobSetExecutable.Coordinator) -> dict[str, Any]:
    out: dict[str, Any] = {"replicatedJob": coordinator.replicated_job}
    if coordinator.HasField("job_index"):
        out["jobIndex"] = coordinator.job_index
    if coordinator.HasField("pod_index"):
        out["podIndex"] = coordinator.pod_index
    return out


def _success_policy(policy: JobSetExecutable.SuccessPolicy) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operator": _SUCCESS_OPERATORS.get(policy.operator, _DEFAULT_SUCCESS_OPERATOR)
    }
    if policy.target_replicated_jobs:
        out["targetReplicatedJobs"] = list(policy.target_replicated_jobs)
    return out


def _replicated_job(job: KubernetesJob, pod_labels: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": job.name}
    if job.group_name:
        out["groupName"] = job.group_name
    # proto3 cannot tell "unset" from 0, and a replicated job of zero Jobs is never useful.
    out["replicas"] = job.replicas or 1
    if job.HasField("dependency_order") and job.dependency_order.job_name:
        order = job.dependency_order
        status = _DEPENDS_ON_STATUS.get(order.job_dependency_state, _DEFAULT_DEPENDS_ON_STATUS)
        out["dependsOn"] = [{"name": order.job_name, "status": status}]
    out["template"] = {"spec": _job_spec(job, pod_labels)}
    return out


def _job_spec(job: KubernetesJob, pod_labels: Mapping[str, str]) -> dict[str, Any]:
    pod_spec = _pod_spec(job)
    spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": job.retry_limit,
    }
    if job.active_deadline_seconds > 0:
        spec["activeDeadlineSeconds"] = job.active_deadline_seconds
    # Kubernetes accepts a pod failure policy only with restartPolicy Never.
    if not job.disable_pod_failure_policy and pod_spec["restartPolicy"] == "Never":
        spec["podFailurePolicy"] = {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        }
    metadata: dict[str, Any] = {"labels": {**dict(job.labels), **pod_labels}}
    annotations = dict(job.annotations)
    if any(v.WhichOneof("source") == "gcs" for v in job.volumes):
        # GKE injects the gcsfuse sidecar only into pods that ask for it.
        annotations.setdefault(GCSFUSE_POD_ANNOTATION, "true")
    if annotations:
        metadata["annotations"] = annotations
    spec["template"] = {"metadata": metadata, "spec": pod_spec}
    return spec


def _pod_spec(job: KubernetesJob) -> dict[str, Any]:
    specs = [job.spec, *job.sidecars, *job.init_containers]
    node_selector = {**_accelerator_selectors(s.resources for s in specs), **job.node_selector}
    spec: dict[str, Any] = {
        "restartPolicy": (
            job.restart_policy if job.HasField("restart_policy") else _DEFAULT_RESTART_POLICY
        )
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if job.priority_class_name:
        spec["priorityClassName"] = job.priority_class_name
    if job.service_account:
        spec["serviceAccountName"] = job.service_account
    if job.HasField("host_network"):
        spec["hostNetwork"] = job.host_network
    if job.HasField("dns_policy"):
        spec["dnsPolicy"] = job.dns_policy
    if job.HasField("termination_grace_period_seconds"):
        spec["terminationGracePeriodSeconds"] = job.termination_grace_period_seconds
    if job.volumes:
        spec["volumes"] = [_volume(v) for v in job.volumes]
    if job.init_containers:
        spec["initContainers"] = [
            _container(c, default_name=f"{job.name}-init-{i}")
            for i, c in enumerate(job.init_containers)
        ]
    spec["containers"] = [
        _container(job.spec, default_name=job.name),
        *(
            _container(c, default_name=f"{job.name}-sidecar-{i}")
            for i, c in enumerate(job.sidecars)
        ),
    ]
    return spec


# --- containers ------------------------------------------------------------------------


def _container(spec: ExecutableSpec, *, default_name: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": spec.name or default_name, "image": spec.docker_image}
    if spec.command:
        out["command"] = list(spec.command)
    args = [*spec.args_list, *(f"--{key}={spec.args[key]}" for key in sorted(spec.args))]
    if args:
        out["args"] = args
    env = [{"name": key, "value": spec.env_vars[key]} for key in sorted(spec.env_vars)]
    env.extend(_env_var(var) for var in spec.env)
    if env:
        out["env"] = env
    if spec.ports:
        out["ports"] = [_port(p) for p in spec.ports]
    if spec.volume_mounts:
        out["volumeMounts"] = [_volume_mount(m) for m in spec.volume_mounts]
    if spec.HasField("resources") and (resources := _resources(spec.resources)):
        out["resources"] = resources
    if spec.HasField("privileged"):
        out["securityContext"] = {"privileged": spec.privileged}
    if spec.HasField("restart_policy"):
        out["restartPolicy"] = spec.restart_policy
    return out


def _env_var(var: EnvVar) -> dict[str, Any]:
    out: dict[str, Any] = {"name": var.name}
    source = var.WhichOneof("source")
    if source == "value":
        out["value"] = var.value
    elif source == "value_from":
        ref = var.value_from
        kind = ref.WhichOneof("reference")
        if kind == "field_ref":
            field_ref = {"fieldPath": ref.field_ref.field_path}
            if ref.field_ref.api_version:
                field_ref["apiVersion"] = ref.field_ref.api_version
            out["valueFrom"] = {"fieldRef": field_ref}
        elif kind == "secret_key_ref":
            secret: dict[str, Any] = {
                "name": ref.secret_key_ref.name,
                "key": ref.secret_key_ref.key,
            }
            if ref.secret_key_ref.HasField("optional"):
                secret["optional"] = ref.secret_key_ref.optional
            out["valueFrom"] = {"secretKeyRef": secret}
    return out


def _port(port: ContainerPort) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if port.name:
        out["name"] = port.name
    out["containerPort"] = port.container_port
    if port.protocol in _PROTOCOLS:
        out["protocol"] = _PROTOCOLS[port.protocol]
    if port.host_port:
        out["hostPort"] = port.host_port
    return out


def _volume_mount(mount: VolumeMount) -> dict[str, Any]:
    out: dict[str, Any] = {"name": mount.name, "mountPath": mount.mount_path}
    if mount.HasField("read_only"):
        out["readOnly"] = mount.read_only
    if mount.sub_path:
        out["subPath"] = mount.sub_path
    return out


# --- resources -------------------------------------------------------------------------


def _resources(resources: ResourceSet) -> dict[str, Any]:
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


def _accelerator_selectors(resource_sets: Iterable[ResourceSet]) -> dict[str, str]:
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


# --- volumes ---------------------------------------------------------------------------


def _volume(volume: Volume) -> dict[str, Any]:
    out: dict[str, Any] = {"name": volume.name}
    source = volume.WhichOneof("source")
    if source == "persistent_volume_claim":
        pvc = volume.persistent_volume_claim
        claim: dict[str, Any] = {"claimName": pvc.claim_name}
        if pvc.HasField("read_only"):
            claim["readOnly"] = pvc.read_only
        out["persistentVolumeClaim"] = claim
    elif source == "gcs":
        out["csi"] = _gcs(volume)
    elif source == "host_path":
        host_path = {"path": volume.host_path.path}
        if volume.host_path.type:
            host_path["type"] = volume.host_path.type
        out["hostPath"] = host_path
    elif source == "empty_dir":
        empty_dir: dict[str, Any] = {}
        if volume.empty_dir.medium:
            empty_dir["medium"] = volume.empty_dir.medium
        if volume.empty_dir.size_limit_bytes:
            empty_dir["sizeLimit"] = str(volume.empty_dir.size_limit_bytes)
        out["emptyDir"] = empty_dir
    elif source == "secret":
        secret = volume.secret
        out["secret"] = {"secretName": secret.secret_name, **_mode_and_optional(secret)}
    elif source == "config_map":
        config_map = volume.config_map
        out["configMap"] = {"name": config_map.name, **_mode_and_optional(config_map)}
    elif source == "nfs":
        nfs: dict[str, Any] = {"server": volume.nfs.server, "path": volume.nfs.path}
        if volume.nfs.HasField("read_only"):
            nfs["readOnly"] = volume.nfs.read_only
        out["nfs"] = nfs
    return out


def _gcs(volume: Volume) -> dict[str, Any]:
    gcs = volume.gcs
    attributes = {"bucketName": gcs.bucket}
    if gcs.mount_options:
        # The gcsfuse CSI driver takes its mount options as one comma-separated attribute.
        attributes["mountOptions"] = ",".join(gcs.mount_options)
    csi: dict[str, Any] = {"driver": GCSFUSE_DRIVER}
    if gcs.HasField("read_only"):
        csi["readOnly"] = gcs.read_only
    csi["volumeAttributes"] = attributes
    return csi


def _mode_and_optional(source: SecretVolumeSource | ConfigMapVolumeSource) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if source.HasField("default_mode"):
        out["defaultMode"] = source.default_mode
    if source.HasField("optional"):
        out["optional"] = source.optional
    return out
