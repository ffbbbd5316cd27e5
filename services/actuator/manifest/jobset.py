"""The JobSet, its replicated Jobs and their pod template (SPEC §7.1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from actuator.manifest.containers import container_spec, volume_spec
from actuator.manifest.resources import accelerator_selectors
from xmc import labels
from xmc.tasks import task_execution_id
from xmc.timestamps import to_datetime
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import JobSetExecutable, KubernetesJob
from xmc_api.internal.v1.tasks_pb2 import Task

GCSFUSE_POD_ANNOTATION: Final = "gke-gcsfuse/volumes"

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
    node_selector = {**accelerator_selectors(s.resources for s in specs), **job.node_selector}
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
        spec["volumes"] = [volume_spec(v) for v in job.volumes]
    if job.init_containers:
        spec["initContainers"] = [
            container_spec(c, default_name=f"{job.name}-init-{i}")
            for i, c in enumerate(job.init_containers)
        ]
    spec["containers"] = [
        container_spec(job.spec, default_name=job.name),
        *(
            container_spec(c, default_name=f"{job.name}-sidecar-{i}")
            for i, c in enumerate(job.sidecars)
        ),
    ]
    return spec
