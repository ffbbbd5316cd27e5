"""``ValidateJobSetManifest`` (SPEC §7.1): what the API server or JobSet would reject later.

A manifest that fails here can never succeed, so the Create handler fails the task
permanently (``INVALID_ARGUMENT``) before touching the cluster, and the user learns which
field to fix: every problem starts with the field path in the manifest
(``spec.replicatedJobs[1].replicas: must be >= 0``). All problems are reported at once,
not only the first. Pure: no I/O; the manifest is read as the JSON-shaped dict that
:func:`actuator.manifest.build_base_jobset` returns (or the API server would).

Beyond the SPEC's list (exclusive topology with ``hostNetwork``, names, negative replicas
or resources) this also rejects a missing queue name (the JobSet would stay suspended
forever), dangling references (``dependsOn``, success policy, coordinator, volume mounts)
and requests above limits, all of which the API server or JobSet's webhook refuses too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, TypeGuard

import kubequantity
from actuator.manifest import GKE_TPU_TOPOLOGY
from actuator.validation_names import (
    DNS_1035_LABEL,
    DNS_1123_LABEL,
    MAX_LABEL,
    check_annotations,
    check_labels,
    check_metadata,
    check_type,
    dns_label,
)
from xmc import labels
from xmc.kjson import as_mapping, as_sequence

_TPU_TOPOLOGY: Final = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)*$")

_JOB_RESTART_POLICIES: Final = ("Never", "OnFailure")
_DEPENDS_ON_STATUSES: Final = ("Ready", "Complete")
_SUCCESS_OPERATORS: Final = ("All", "Any")


class ManifestInvalid(Exception):
    """Raised by callers that prefer an exception; always permanent (``INVALID_ARGUMENT``)."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


def validate_jobset_manifest(jobset: Mapping[str, Any]) -> list[str]:
    """Every problem of ``jobset``, each prefixed by its field path; empty when valid."""
    metadata = as_mapping(jobset.get("metadata"))
    spec = as_mapping(jobset.get("spec"))
    problems = check_type(jobset) + check_metadata(metadata)
    replicated_jobs = [as_mapping(rj) for rj in as_sequence(spec.get("replicatedJobs"))]
    if not replicated_jobs:
        problems.append("spec.replicatedJobs: at least one replicated job is required")
    # Pod hostnames are checked only under a valid JobSet name, to report each fault once.
    name = metadata.get("name")
    jobset_name = name if not dns_label(name, "", DNS_1035_LABEL) else None
    exclusive = labels.EXCLUSIVE_TOPOLOGY in as_mapping(metadata.get("annotations"))
    seen: list[str] = []
    for i, replicated_job in enumerate(replicated_jobs):
        where = f"spec.replicatedJobs[{i}]"
        problems += _check_replicated_job(
            replicated_job, where, jobset_name=jobset_name, earlier=seen, exclusive=exclusive
        )
        seen.append(str(replicated_job.get("name", "")))
    replicas = {str(rj.get("name", "")): _replicas(rj) for rj in replicated_jobs}
    problems += _check_network(as_mapping(spec.get("network")))
    problems += _check_success_policy(spec.get("successPolicy"), replicas)
    problems += _check_coordinator(spec.get("coordinator"), replicas)
    return problems


def parse_quantity(value: object) -> Decimal | None:
    """A Kubernetes resource quantity (``500m``, ``1.5Gi``, ``2e3``, ``4``) as a number.

    None when ``value`` is not a quantity (the shared :func:`kubequantity.parse_quantity`
    raises instead). Signs are kept so callers can reject negatives.
    """
    try:
        return kubequantity.parse_quantity(value)
    except ValueError:
        return None


# --- replicated jobs -------------------------------------------------------------------


def _check_replicated_job(
    replicated_job: Mapping[str, Any],
    where: str,
    *,
    jobset_name: str | None,
    earlier: Sequence[str],
    exclusive: bool,
) -> list[str]:
    name = replicated_job.get("name")
    problems = dns_label(name, f"{where}.name", DNS_1123_LABEL)
    if name in earlier:
        problems.append(f"{where}.name: {name!r} is used by an earlier replicated job")
    replicas = replicated_job.get("replicas", 1)
    if not _is_int(replicas) or replicas < 0:
        problems.append(f"{where}.replicas: must be >= 0")
    problems += _check_depends_on(as_sequence(replicated_job.get("dependsOn")), where, earlier)
    template = as_mapping(replicated_job.get("template"))
    job_spec = as_mapping(template.get("spec"))
    completions = job_spec.get("completions", 1)
    if jobset_name and isinstance(name, str) and _is_int(replicas) and _is_int(completions):
        # The last pod's hostname, <jobset>-<job>-<job index>-<pod index>, is a DNS label.
        hostname = f"{jobset_name}-{name}-{max(replicas - 1, 0)}-{max(completions - 1, 0)}"
        if len(hostname) > MAX_LABEL:
            problems.append(
                f"{where}.name: pod hostname {hostname!r} would exceed {MAX_LABEL} characters"
            )
    exclusive = exclusive or labels.EXCLUSIVE_TOPOLOGY in as_mapping(
        as_mapping(template.get("metadata")).get("annotations")
    )
    return problems + _check_job_spec(job_spec, f"{where}.template.spec", exclusive=exclusive)


def _replicas(replicated_job: Mapping[str, Any]) -> int:
    value = replicated_job.get("replicas", 1)
    return value if _is_int(value) else 0


def _check_depends_on(depends_on: Sequence[Any], where: str, earlier: Sequence[str]) -> list[str]:
    problems = []
    for j, dependency in enumerate(as_mapping(d) for d in depends_on):
        path = f"{where}.dependsOn[{j}]"
        if dependency.get("name") not in earlier:
            problems.append(
                f"{path}.name: {dependency.get('name')!r} is not an earlier replicated job"
            )
        if dependency.get("status") not in _DEPENDS_ON_STATUSES:
            problems.append(f"{path}.status: must be one of {', '.join(_DEPENDS_ON_STATUSES)}")
    return problems


def _check_job_spec(job_spec: Mapping[str, Any], where: str, *, exclusive: bool) -> list[str]:
    problems = []
    for field in ("backoffLimit", "parallelism", "completions"):
        value = job_spec.get(field, 0)
        if not _is_int(value) or value < 0:
            problems.append(f"{where}.{field}: must be >= 0")
    deadline = job_spec.get("activeDeadlineSeconds", 1)
    if not _is_int(deadline) or deadline <= 0:
        problems.append(f"{where}.activeDeadlineSeconds: must be > 0")
    pod_template = as_mapping(job_spec.get("template"))
    pod_metadata = as_mapping(pod_template.get("metadata"))
    problems += check_labels(
        as_mapping(pod_metadata.get("labels")), f"{where}.template.metadata.labels"
    )
    problems += check_annotations(
        as_mapping(pod_metadata.get("annotations")), f"{where}.template.metadata.annotations"
    )
    # JobSet's pod webhook reads the annotation from the pod itself, so a pod template
    # annotation (where KubernetesJob.annotations land, and what ESS accepts) counts too.
    exclusive = exclusive or labels.EXCLUSIVE_TOPOLOGY in as_mapping(
        pod_metadata.get("annotations")
    )
    pod_spec = as_mapping(pod_template.get("spec"))
    return problems + _check_pod_spec(pod_spec, f"{where}.template.spec", exclusive=exclusive)


# --- pods ------------------------------------------------------------------------------


def _check_pod_spec(pod_spec: Mapping[str, Any], where: str, *, exclusive: bool) -> list[str]:
    problems = []
    if pod_spec.get("hostNetwork") is True and not exclusive:
        problems.append(
            f"{where}.hostNetwork: requires the {labels.EXCLUSIVE_TOPOLOGY} annotation on the "
            "JobSet, its Job or pod template (exclusive topology placement), or pods of two jobs "
            "could share a node's ports"
        )
    if pod_spec.get("restartPolicy") not in _JOB_RESTART_POLICIES:
        problems.append(
            f"{where}.restartPolicy: a Job's pods need one of {', '.join(_JOB_RESTART_POLICIES)}"
        )
    grace = pod_spec.get("terminationGracePeriodSeconds", 0)
    if not _is_int(grace) or grace < 0:
        problems.append(f"{where}.terminationGracePeriodSeconds: must be >= 0")
    node_selector = as_mapping(pod_spec.get("nodeSelector"))
    problems += check_labels(node_selector, f"{where}.nodeSelector")
    topology = node_selector.get(GKE_TPU_TOPOLOGY)
    if topology is not None and not (isinstance(topology, str) and _TPU_TOPOLOGY.match(topology)):
        problems.append(
            f"{where}.nodeSelector[{GKE_TPU_TOPOLOGY}]: {topology!r} is not a topology like 2x2x4"
        )
    volumes = _check_volumes(as_sequence(pod_spec.get("volumes")), f"{where}.volumes")
    problems += volumes.problems
    containers = as_sequence(pod_spec.get("containers"))
    if not containers:
        problems.append(f"{where}.containers: at least one container is required")
    names: list[str] = []
    for field in ("initContainers", "containers"):
        for k, container in enumerate(as_mapping(c) for c in as_sequence(pod_spec.get(field))):
            path = f"{where}.{field}[{k}]"
            problems += _check_container(container, path, names=names, volumes=volumes.names)
            names.append(str(container.get("name", "")))
    return problems


@dataclass(frozen=True)
class _Volumes:
    """Problems of a pod's volumes and the names its mounts may refer to."""

    problems: list[str]
    names: frozenset[str]


def _check_volumes(volumes: Sequence[Any], where: str) -> _Volumes:
    problems: list[str] = []
    names: list[str] = []
    for k, volume in enumerate(as_mapping(v) for v in volumes):
        name = volume.get("name")
        problems += dns_label(name, f"{where}[{k}].name", DNS_1123_LABEL)
        if name in names:
            problems.append(f"{where}[{k}].name: {name!r} is used by an earlier volume")
        names.append(str(name))
    return _Volumes(problems, frozenset(names))


def _check_container(
    container: Mapping[str, Any], where: str, *, names: Sequence[str], volumes: frozenset[str]
) -> list[str]:
    name = container.get("name")
    problems = dns_label(name, f"{where}.name", DNS_1123_LABEL)
    if name in names:
        problems.append(f"{where}.name: {name!r} is used by another container of the pod")
    if not container.get("image"):
        problems.append(f"{where}.image: required")
    for k, port in enumerate(as_mapping(p) for p in as_sequence(container.get("ports"))):
        container_port = port.get("containerPort")
        if not _is_int(container_port) or not 0 < container_port < 65536:
            problems.append(f"{where}.ports[{k}].containerPort: must be 1..65535")
        host_port = port.get("hostPort", 0)
        if not _is_int(host_port) or not 0 <= host_port < 65536:
            problems.append(f"{where}.ports[{k}].hostPort: must be 0..65535")
    for k, mount in enumerate(as_mapping(m) for m in as_sequence(container.get("volumeMounts"))):
        if mount.get("name") not in volumes:
            problems.append(
                f"{where}.volumeMounts[{k}].name: no volume named {mount.get('name')!r}"
            )
        if not mount.get("mountPath"):
            problems.append(f"{where}.volumeMounts[{k}].mountPath: required")
    for k, env in enumerate(as_mapping(e) for e in as_sequence(container.get("env"))):
        if not env.get("name"):
            problems.append(f"{where}.env[{k}].name: required")
    return problems + _check_resources(as_mapping(container.get("resources")), f"{where}.resources")


def _check_resources(resources: Mapping[str, Any], where: str) -> list[str]:
    problems = []
    parsed: dict[str, dict[str, Decimal]] = {}
    for kind in ("requests", "limits"):
        parsed[kind] = {}
        for resource, value in as_mapping(resources.get(kind)).items():
            quantity = parse_quantity(value)
            if quantity is None:
                problems.append(f"{where}.{kind}.{resource}: {value!r} is not a quantity")
            elif quantity < 0:
                problems.append(f"{where}.{kind}.{resource}: must be >= 0, got {value!r}")
            else:
                parsed[kind][resource] = quantity
    for resource, request in parsed["requests"].items():
        limit = parsed["limits"].get(resource)
        if limit is not None and request > limit:
            problems.append(f"{where}.requests.{resource}: must not exceed its limit")
    return problems


# --- JobSet-level policies -------------------------------------------------------------


def _check_network(network: Mapping[str, Any]) -> list[str]:
    subdomain = network.get("subdomain")
    if subdomain is None:
        return []
    # The subdomain names the headless Service, so it must be a Service name.
    return dns_label(subdomain, "spec.network.subdomain", DNS_1035_LABEL)


def _check_success_policy(policy: object, replicas: Mapping[str, int]) -> list[str]:
    if policy is None:
        return []
    policy = as_mapping(policy)
    problems = []
    if policy.get("operator") not in _SUCCESS_OPERATORS:
        problems.append(
            f"spec.successPolicy.operator: must be one of {', '.join(_SUCCESS_OPERATORS)}"
        )
    for k, target in enumerate(as_sequence(policy.get("targetReplicatedJobs"))):
        if target not in replicas:
            problems.append(
                f"spec.successPolicy.targetReplicatedJobs[{k}]: no replicated job named {target!r}"
            )
    return problems


def _check_coordinator(coordinator: object, replicas: Mapping[str, int]) -> list[str]:
    if coordinator is None:
        return []
    coordinator = as_mapping(coordinator)
    name = coordinator.get("replicatedJob")
    if not isinstance(name, str) or name not in replicas:
        return [f"spec.coordinator.replicatedJob: no replicated job named {name!r}"]
    problems = []
    job_index = coordinator.get("jobIndex", 0)
    if not _is_int(job_index) or not 0 <= job_index < max(replicas[name], 1):
        problems.append(f"spec.coordinator.jobIndex: must be in 0..{max(replicas[name], 1) - 1}")
    pod_index = coordinator.get("podIndex", 0)
    if not _is_int(pod_index) or pod_index < 0:
        problems.append("spec.coordinator.podIndex: must be >= 0")
    return problems


# --- helpers ---------------------------------------------------------------------------


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
