"""The spec view: what the work-unit page and ``xmc wu get`` show of a unit's containers."""

from __future__ import annotations

import pytest

from xmc.model.work_unit_spec import (
    MASK,
    EnvEntry,
    byte_size,
    env_entry,
    is_secret_name,
    rendered_args,
    resources_text,
    spec_view,
)
from xmc_api.cloud.xmanager.v1.resources_pb2 import (
    CpuResources,
    GpuResources,
    ResourceSet,
    TpuResources,
)
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import (
    EnvVar,
    EnvVarSource,
    ExecutableSpec,
    FieldRef,
    JobSetExecutable,
    KubernetesJob,
    SecretKeyRef,
    WorkUnit,
)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("WANDB_API_KEY", True),
        ("HF_TOKEN", True),
        ("DB_PASSWORD", True),
        ("password", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("PRIVATE_KEY", True),
        ("my.secret", True),
        ("LEARNING_RATE", False),
        ("TOKENIZER", False),  # a word that starts like a credential is not one
        ("PASSES", False),
        ("NUM_KEYS", False),
        ("", False),
    ],
)
def test_a_credential_is_known_by_its_name(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("var", "expected"),
    [
        (EnvVar(name="LR", value="0.1"), EnvEntry("LR", "0.1")),
        (EnvVar(name="HF_TOKEN", value="hf_abc"), EnvEntry("HF_TOKEN", MASK, masked=True)),
        (
            EnvVar(
                name="KEY",
                value_from=EnvVarSource(secret_key_ref=SecretKeyRef(name="wandb", key="api")),
            ),
            EnvEntry("KEY", "from secret wandb/api", masked=True),
        ),
        (
            EnvVar(
                name="POD", value_from=EnvVarSource(field_ref=FieldRef(field_path="metadata.name"))
            ),
            EnvEntry("POD", "from field metadata.name"),
        ),
        (EnvVar(name="EMPTY"), EnvEntry("EMPTY", "")),
    ],
)
def test_env_entries(var: EnvVar, expected: EnvEntry) -> None:
    assert env_entry(var) == expected


def test_args_are_rendered_as_the_container_gets_them() -> None:
    spec = ExecutableSpec(args_list=["train"], args={"lr": "0.1", "batch": "32"})
    assert rendered_args(spec) == ("train", "--batch=32", "--lr=0.1")


@pytest.mark.parametrize(
    ("resources", "text"),
    [
        (ResourceSet(), ""),
        (
            ResourceSet(cpu_resources=CpuResources(cpu_millicores=2000, memory_bytes=8 << 30)),
            "2000m CPU, 8 GiB",
        ),
        (
            ResourceSet(
                cpu_resources=CpuResources(cpu_millicores=500, limit_cpu_millicores=1000),
                ephemeral_storage_bytes=1536 << 20,
            ),
            "500m CPU, limit 1000m CPU, 1.5 GiB disk",
        ),
        (ResourceSet(gpu_resources=GpuResources(type="nvidia-a100", count=4)), "4 × nvidia-a100"),
        (ResourceSet(gpu_resources=GpuResources(count=1)), "1 × GPU"),
        (ResourceSet(tpu_resources=TpuResources(type="v5e", topology="2x4")), "TPU v5e 2x4"),
    ],
)
def test_resources_in_one_line(resources: ResourceSet, text: str) -> None:
    assert resources_text(resources) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (5 << 40, "5 TiB")],
)
def test_byte_sizes(count: int, text: str) -> None:
    assert byte_size(count) == text


def test_a_unit_s_spec_lists_every_container_of_every_job() -> None:
    unit = WorkUnit()
    unit.executable.scheduling_constraints.queue_name = "team-a"
    unit.executable.jobset.CopyFrom(
        JobSetExecutable(
            jobs=[
                KubernetesJob(
                    name="trainer",
                    replicas=2,
                    retry_limit=3,
                    active_deadline_seconds=3600,
                    priority_class_name="high",
                    spec=ExecutableSpec(
                        docker_image="python:3.11",
                        command=["python", "-m", "train"],
                        args={"lr": "0.01"},
                        env_vars={"WANDB_API_KEY": "k", "SEED": "1"},
                    ),
                    sidecars=[ExecutableSpec(docker_image="busybox")],
                    init_containers=[ExecutableSpec(name="fetch", docker_image="alpine")],
                )
            ]
        )
    )
    view = spec_view(unit)
    assert view.queue == "team-a"
    (job,) = view.jobs
    assert (job.name, job.replicas, job.retry_limit, job.deadline_seconds, job.priority_class) == (
        "trainer",
        2,
        3,
        3600,
        "high",
    )
    assert [(c.role, c.name, c.image) for c in job.containers] == [
        ("main", "trainer", "python:3.11"),
        ("sidecar", "trainer-sidecar-0", "busybox"),
        ("init", "fetch", "alpine"),
    ]
    main = job.containers[0]
    assert main.command == ("python", "-m", "train")
    assert main.args == ("--lr=0.01",)
    assert main.env == (EnvEntry("SEED", "1"), EnvEntry("WANDB_API_KEY", MASK, masked=True))


def test_a_unit_without_a_jobset_has_no_jobs() -> None:
    assert spec_view(WorkUnit()).jobs == ()
