"""Request validation: everything the ESS can reject before touching storage.

Each check raises ``InvalidArgumentError`` whose message starts with the offending field's
path in the request (``work_unit.executable.jobset.jobs[1].replicas: …``), so a user can
fix the request without reading server logs. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from google.protobuf.message import Message

from xmc import labels
from xmc.errors import InvalidArgumentError
from xmc.model.retry_policy import RETRY_POLICY_ANNOTATION, PolicyError, retry_policy_of
from xmc.model.states import LaunchState, Priority
from xmc.names import MAX_CLIENT_WORK_UNIT_ID
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.resources_pb2 import ResourceSet
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import (
    ExecutableSpec,
    JobSetExecutable,
    KubernetesJob,
    WorkUnit,
)

#: JobSet's annotation for exclusive placement; required with hostNetwork (SPEC §7.1).
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MAX_TAGS = 64
_MAX_TEXT = 64 * 1024
_MAX_JOBS = 64
# Pod hostnames are <jobset>-<job>-<job index>-<pod index> and must fit a 63-character DNS
# label; XMC's JobSet names take up to 25 of them.
_MAX_JOB_NAME = 30


def _enum_value(value: int, enum_type: type[Priority] | type[LaunchState], field: str) -> None:
    if value not in {int(member) for member in enum_type}:
        names = ", ".join(member.name for member in enum_type)
        raise InvalidArgumentError(
            f"{field}: {value} is not a valid value; expected one of {names}"
        )


def _text(value: str, field: str, *, limit: int = _MAX_TEXT) -> None:
    if len(value) > limit:
        raise InvalidArgumentError(f"{field}: longer than {limit} characters")


def _tags(tags: Iterable[str], field: str) -> None:
    tags = list(tags)
    if len(tags) > _MAX_TAGS:
        raise InvalidArgumentError(f"{field}: at most {_MAX_TAGS} tags")
    for i, tag in enumerate(tags):
        if not tag or len(tag) > 256:
            raise InvalidArgumentError(f"{field}[{i}]: must be 1 to 256 characters")


def _non_negative(message: Message, fields: Iterable[str], where: str) -> None:
    for name in fields:
        value = getattr(message, name)
        if value < 0:
            raise InvalidArgumentError(f"{where}.{name}: must be >= 0, got {value}")


def validate_experiment(experiment: Experiment, *, field: str = "experiment") -> None:
    _text(experiment.title, f"{field}.title", limit=1024)
    _text(experiment.notes, f"{field}.notes")
    _tags(experiment.tags, f"{field}.tags")
    _enum_value(experiment.priority, Priority, f"{field}.priority")
    for i, resources in enumerate(experiment.resources):
        validate_resources(resources, f"{field}.resources[{i}]")
    launch = int(experiment.status.launch_state)
    if launch not in (LaunchState.LAUNCH_STATE_UNSPECIFIED, LaunchState.LAUNCHING):
        raise InvalidArgumentError(
            f"{field}.status.launch_state: a new experiment is LAUNCHING; end the launch with "
            "UpdateExperimentLaunchState"
        )


def validate_resources(resources: ResourceSet, where: str) -> None:
    _non_negative(resources, ("ephemeral_storage_bytes",), where)
    kind = resources.WhichOneof("resources")
    if kind == "cpu_resources":
        _non_negative(
            resources.cpu_resources,
            ("cpu_millicores", "memory_bytes", "limit_cpu_millicores"),
            f"{where}.cpu_resources",
        )
    elif kind == "gpu_resources":
        _non_negative(resources.gpu_resources, ("count",), f"{where}.gpu_resources")
        if resources.gpu_resources.count and not resources.gpu_resources.type:
            raise InvalidArgumentError(f"{where}.gpu_resources.type: required with a count")
    elif kind == "tpu_resources" and not resources.tpu_resources.type:
        raise InvalidArgumentError(f"{where}.tpu_resources.type: required")


def _validate_container(spec: ExecutableSpec, where: str, *, image_required: bool) -> None:
    if image_required and not spec.docker_image:
        raise InvalidArgumentError(f"{where}.docker_image: required")
    if spec.name and not _DNS_LABEL.match(spec.name):
        raise InvalidArgumentError(f"{where}.name: {spec.name!r} is not a DNS label")
    if spec.HasField("resources"):
        validate_resources(spec.resources, f"{where}.resources")
    for i, port in enumerate(spec.ports):
        if not 0 < port.container_port < 65536:
            raise InvalidArgumentError(f"{where}.ports[{i}].container_port: must be 1..65535")


def _validate_job(job: KubernetesJob, where: str, annotations: dict[str, str]) -> None:
    if not job.name:
        raise InvalidArgumentError(f"{where}.name: required")
    if len(job.name) > _MAX_JOB_NAME or not _DNS_LABEL.match(job.name):
        raise InvalidArgumentError(
            f"{where}.name: {job.name!r} must be a DNS label of at most {_MAX_JOB_NAME} characters"
        )
    _non_negative(job, ("replicas", "retry_limit", "active_deadline_seconds"), where)
    if not job.HasField("spec"):
        raise InvalidArgumentError(f"{where}.spec: required")
    _validate_container(job.spec, f"{where}.spec", image_required=True)
    for i, sidecar in enumerate(job.sidecars):
        _validate_container(sidecar, f"{where}.sidecars[{i}]", image_required=True)
    for i, init in enumerate(job.init_containers):
        _validate_container(init, f"{where}.init_containers[{i}]", image_required=True)
    if job.host_network and EXCLUSIVE_TOPOLOGY not in {**annotations, **dict(job.annotations)}:
        raise InvalidArgumentError(
            f"{where}.host_network: requires the {EXCLUSIVE_TOPOLOGY} annotation "
            "(exclusive topology placement)"
        )
    if (
        job.HasField("termination_grace_period_seconds")
        and job.termination_grace_period_seconds < 0
    ):
        raise InvalidArgumentError(f"{where}.termination_grace_period_seconds: must be >= 0")


def validate_jobset(jobset: JobSetExecutable, where: str) -> None:
    if not jobset.jobs:
        raise InvalidArgumentError(f"{where}.jobs: at least one job is required")
    if len(jobset.jobs) > _MAX_JOBS:
        raise InvalidArgumentError(f"{where}.jobs: at most {_MAX_JOBS} jobs")
    names = [job.name for job in jobset.jobs]
    annotations = dict(jobset.annotations)
    try:
        retry_policy_of(annotations)
    except PolicyError as error:
        field = f"{where}.annotations[{RETRY_POLICY_ANNOTATION!r}]"
        key = f".{error.key}" if error.key else ""
        raise InvalidArgumentError(f"{field}{key}: {error.detail}") from None
    for i, job in enumerate(jobset.jobs):
        _validate_job(job, f"{where}.jobs[{i}]", annotations)
        if names.count(job.name) > 1:
            raise InvalidArgumentError(f"{where}.jobs[{i}].name: {job.name!r} is used twice")
        if job.HasField("dependency_order"):
            target = job.dependency_order.job_name
            if target not in names or target == job.name:
                raise InvalidArgumentError(
                    f"{where}.jobs[{i}].dependency_order.job_name: {target!r} is not another "
                    "job of this JobSet"
                )
    for i, target in enumerate(jobset.success_policy.target_replicated_jobs):
        if target not in names:
            raise InvalidArgumentError(
                f"{where}.success_policy.target_replicated_jobs[{i}]: no job named {target!r}"
            )
    coordinator = jobset.coordinator.replicated_job
    if coordinator and coordinator not in names:
        raise InvalidArgumentError(
            f"{where}.coordinator.replicated_job: no job named {coordinator!r}"
        )


def validate_work_unit_id(value: int) -> int | None:
    """``CreateWorkUnit.work_unit_id``: 0 asks the server to assign one (None); a
    client-chosen id is 1..MAX_CLIENT_WORK_UNIT_ID, so server-assigned ids never run out."""
    if value == 0:
        return None
    if not 1 <= value <= MAX_CLIENT_WORK_UNIT_ID:
        raise InvalidArgumentError(
            f"work_unit_id: must be 1..{MAX_CLIENT_WORK_UNIT_ID} (or 0 to have one assigned), "
            f"got {value}"
        )
    return value


def validate_new_work_unit(work_unit: WorkUnit, *, field: str = "work_unit") -> None:
    """What CreateWorkUnit needs: a JobSet executable with a queue, sane numbers."""
    _enum_value(work_unit.priority, Priority, f"{field}.priority")
    if work_unit.work_unit_type not in WorkUnit.WorkUnitType.values():
        raise InvalidArgumentError(f"{field}.work_unit_type: {work_unit.work_unit_type} is unknown")
    _tags(work_unit.tags, f"{field}.tags")
    _text(work_unit.notes, f"{field}.notes")
    if not work_unit.HasField("executable"):
        raise InvalidArgumentError(f"{field}.executable: required")
    executable = work_unit.executable
    if executable.WhichOneof("type") != "jobset":
        raise InvalidArgumentError(f"{field}.executable.jobset: required")
    if problem := labels.queue_name_problem(executable.scheduling_constraints.queue_name):
        raise InvalidArgumentError(
            f"{field}.executable.scheduling_constraints.queue_name: {problem}"
        )
    validate_jobset(executable.jobset, f"{field}.executable.jobset")


def validate_work_unit_update(work_unit: WorkUnit, paths: Iterable[str]) -> None:
    for path in paths:
        if path == "priority":
            _enum_value(work_unit.priority, Priority, "work_unit.priority")
        elif path == "tags":
            _tags(work_unit.tags, "work_unit.tags")
        elif path == "notes":
            _text(work_unit.notes, "work_unit.notes")
