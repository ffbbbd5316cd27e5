"""What a work unit asked to run, as a researcher reads it (issue 27, "the spec").

The dashboard's work-unit page and ``xmc wu get`` show the image, command, args, env,
resources, queue, priority, retry limit and deadline of every container of the unit's
JobSet. They are read from the stored ``WorkUnit.executable`` (what the client sent), so
the spec is shown even before the Actuator has created the JobSet.

Two rules make the view safe to show to anyone who may read the experiment:

- An env var taken from a Secret (``valueFrom.secretKeyRef``) shows the Secret's name and
  key; XMC never knows the value.
- A literal env value whose *name* says it is a credential (``*_TOKEN``, ``PASSWORD``,
  ``API_KEY``, …) is masked. Researchers do put keys in plain env vars; the page must not
  become the place they leak from.

Args are rendered as the Actuator renders them (``args_list`` first, then ``--key=value``
in key order), so what the page shows is what the container got.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from xmc_api.cloud.xmanager.v1.resources_pb2 import ResourceSet
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import (
    EnvVar,
    ExecutableSpec,
    KubernetesJob,
    WorkUnit,
)

#: What a masked value is shown as.
MASK: Final = "••••••"
#: Env names that hold a credential: a word of the name (split on ``_``/``-``/``.``) or
#: the whole name matches.
_SECRET_NAME: Final = re.compile(
    r"(^|[_.-])(SECRET|TOKEN|PASSWORD|PASSWD|PASS|CREDENTIALS?|API_?KEY|ACCESS_?KEY|"
    r"PRIVATE_?KEY|AUTH)([_.-]|$)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class EnvEntry:
    name: str
    #: The value as shown: the literal, :data:`MASK`, or where it comes from.
    shown: str
    masked: bool = False


@dataclass(frozen=True)
class ContainerView:
    job: str
    #: ``main``, ``sidecar`` or ``init``.
    role: str
    name: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[EnvEntry, ...]
    resources: str


@dataclass(frozen=True)
class JobView:
    name: str
    replicas: int
    #: The Job's ``backoffLimit`` as the client set it (0: none).
    retry_limit: int
    #: ``activeDeadlineSeconds`` (0: none).
    deadline_seconds: int
    priority_class: str
    containers: tuple[ContainerView, ...]


@dataclass(frozen=True)
class SpecView:
    queue: str
    jobs: tuple[JobView, ...]


def is_secret_name(name: str) -> bool:
    """Whether an env var's name says its value is a credential."""
    return bool(_SECRET_NAME.search(name))


def literal_env(name: str, value: str) -> EnvEntry:
    if is_secret_name(name):
        return EnvEntry(name, MASK, masked=True)
    return EnvEntry(name, value)


def env_entry(var: EnvVar) -> EnvEntry:
    source = var.WhichOneof("source")
    if source == "value":
        return literal_env(var.name, var.value)
    if source == "value_from":
        reference = var.value_from.WhichOneof("reference")
        if reference == "secret_key_ref":
            ref = var.value_from.secret_key_ref
            return EnvEntry(var.name, f"from secret {ref.name}/{ref.key}", masked=True)
        if reference == "field_ref":
            return EnvEntry(var.name, f"from field {var.value_from.field_ref.field_path}")
    return EnvEntry(var.name, "")


def rendered_args(spec: ExecutableSpec) -> tuple[str, ...]:
    """The container's ``args`` as the Actuator writes them into the JobSet."""
    return (*spec.args_list, *(f"--{key}={spec.args[key]}" for key in sorted(spec.args)))


def resources_text(resources: ResourceSet) -> str:
    """One line: ``2000m CPU, 8 GiB``, ``4 × nvidia-tesla-a100``, ``TPU v5e 2x4``."""
    parts: list[str] = []
    kind = resources.WhichOneof("resources")
    if kind == "cpu_resources":
        cpu = resources.cpu_resources
        if cpu.cpu_millicores:
            parts.append(f"{cpu.cpu_millicores}m CPU")
        if cpu.limit_cpu_millicores:
            parts.append(f"limit {cpu.limit_cpu_millicores}m CPU")
        if cpu.memory_bytes:
            parts.append(byte_size(cpu.memory_bytes))
    elif kind == "gpu_resources":
        gpu = resources.gpu_resources
        parts.append(f"{gpu.count} × {gpu.type or 'GPU'}")
    elif kind == "tpu_resources":
        tpu = resources.tpu_resources
        parts.append(f"TPU {tpu.type} {tpu.topology}".strip())
    if resources.ephemeral_storage_bytes:
        parts.append(f"{byte_size(resources.ephemeral_storage_bytes)} disk")
    return ", ".join(parts)


def byte_size(count: int) -> str:
    """Binary units, as Kubernetes quantities read (``Gi``), to at most one decimal."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if size == int(size) else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def container_view(job: str, role: str, spec: ExecutableSpec, default_name: str) -> ContainerView:
    env = [literal_env(key, spec.env_vars[key]) for key in sorted(spec.env_vars)]
    env.extend(env_entry(var) for var in spec.env)
    return ContainerView(
        job=job,
        role=role,
        name=spec.name or default_name,
        image=spec.docker_image,
        command=tuple(spec.command),
        args=rendered_args(spec),
        env=tuple(env),
        resources=resources_text(spec.resources) if spec.HasField("resources") else "",
    )


def job_view(job: KubernetesJob) -> JobView:
    containers = [container_view(job.name, "main", job.spec, job.name)]
    containers += _extra(job.name, "sidecar", job.sidecars)
    containers += _extra(job.name, "init", job.init_containers)
    return JobView(
        name=job.name,
        replicas=job.replicas,
        retry_limit=job.retry_limit,
        deadline_seconds=job.active_deadline_seconds,
        priority_class=job.priority_class_name,
        containers=tuple(containers),
    )


def _extra(job: str, role: str, specs: Iterable[ExecutableSpec]) -> list[ContainerView]:
    return [container_view(job, role, s, f"{job}-{role}-{i}") for i, s in enumerate(specs)]


def spec_view(unit: WorkUnit) -> SpecView:
    """The unit's spec; empty jobs when it has no JobSet executable."""
    executable = unit.executable
    jobs = executable.jobset.jobs if executable.HasField("jobset") else ()
    return SpecView(
        queue=executable.scheduling_constraints.queue_name,
        jobs=tuple(job_view(job) for job in jobs),
    )
