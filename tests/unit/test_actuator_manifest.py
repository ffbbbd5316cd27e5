"""``buildBaseJobSet`` (SPEC §7.1): a rich work unit compared whole, then one case per rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from actuator.manifest import build_base_jobset, tpu_chips_per_host
from xmc import labels
from xmc.tasks import task_execution_id
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.resources_pb2 import (
    CpuResources,
    GpuResources,
    ResourceSet,
    TpuResources,
)
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import (
    ConfigMapVolumeSource,
    ContainerPort,
    EmptyDirVolumeSource,
    EnvVar,
    EnvVarSource,
    Executable,
    ExecutableSpec,
    FieldRef,
    GcsVolumeSource,
    HostPathVolumeSource,
    JobSetExecutable,
    KubernetesJob,
    NfsVolumeSource,
    PersistentVolumeClaimVolumeSource,
    SchedulingConstraints,
    SecretKeyRef,
    SecretVolumeSource,
    Volume,
    VolumeMount,
    WorkUnit,
)
from xmc_api.internal.v1.tasks_pb2 import Task, TaskPayload

OPERATION_TIME = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
LAST_EDIT = "0001772600767890123"
GiB = 2**30
LOW, NORMAL, HIGH = 1, 2, 3


def make_task(
    jobset: JobSetExecutable,
    *,
    queue: str = "team-a",
    eid: int = 3,
    target_eid: int = 3,
    experiment_priority: int = HIGH,
    work_unit_priority: int = LOW,
) -> Task:
    work_unit = WorkUnit(
        name="experiments/42/workUnits/7",
        priority=work_unit_priority,  # type: ignore[arg-type]
        executable=Executable(
            scheduling_constraints=SchedulingConstraints(queue_name=queue), jobset=jobset
        ),
    )
    task = Task(
        task_id="t-1",
        kind=Task.CREATE,
        xid=42,
        wid=7,
        target_eid=target_eid,
        operation="experiments/42/workUnits/7/operations/op-1",
        payload=TaskPayload(
            work_unit=work_unit,
            eid=eid,
            experiment_priority=experiment_priority,  # type: ignore[arg-type]
        ),
    )
    set_timestamp(task.operation_time, OPERATION_TIME)
    return task


def one_job(**job: Any) -> JobSetExecutable:
    job.setdefault("name", "main")
    job.setdefault("spec", ExecutableSpec(docker_image="img"))
    return JobSetExecutable(jobs=[KubernetesJob(**job)])


def only_job(manifest: dict[str, Any]) -> dict[str, Any]:
    replicated_jobs: list[dict[str, Any]] = manifest["spec"]["replicatedJobs"]
    assert len(replicated_jobs) == 1
    return replicated_jobs[0]


def pod_spec(replicated_job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = replicated_job["template"]["spec"]["template"]["spec"]
    return spec


def main_container(manifest: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod_spec(only_job(manifest))["containers"][0]
    return container


# --- the rich JobSet -------------------------------------------------------------------


def rich_jobset() -> JobSetExecutable:
    loader = KubernetesJob(
        name="loader",
        replicas=0,
        retry_limit=2,
        restart_policy="OnFailure",
        service_account="loader-sa",
        labels={"role": "loader", labels.EXPERIMENT_ID: "spoofed"},
        annotations={"note": "warms the cache"},
        spec=ExecutableSpec(
            docker_image="gcr.io/p/loader:1",
            command=["python", "-m", "loader"],
            args_list=["--fast"],
            args={"shards": "8", "bucket": "b"},
            resources=ResourceSet(
                cpu_resources=CpuResources(
                    cpu_millicores=1500, memory_bytes=2 * GiB, limit_cpu_millicores=2000
                ),
                ephemeral_storage_bytes=10 * GiB,
            ),
            volume_mounts=[VolumeMount(name="cache", mount_path="/cache")],
        ),
        init_containers=[ExecutableSpec(docker_image="busybox", command=["sh", "-c", "true"])],
        volumes=[
            Volume(
                name="cache", empty_dir=EmptyDirVolumeSource(medium="Memory", size_limit_bytes=GiB)
            ),
            Volume(
                name="cfg",
                config_map=ConfigMapVolumeSource(
                    name="loader-cfg", default_mode=420, optional=True
                ),
            ),
        ],
    )
    workers = KubernetesJob(
        name="workers",
        group_name="trainers",
        replicas=4,
        retry_limit=0,
        active_deadline_seconds=3600,
        dependency_order=KubernetesJob.DependencyOrder(
            job_name="loader", job_dependency_state=KubernetesJob.DependencyOrder.READY
        ),
        host_network=True,
        dns_policy="ClusterFirstWithHostNet",
        termination_grace_period_seconds=30,
        priority_class_name="batch-high",
        node_selector={"pool": "h100"},
        spec=ExecutableSpec(
            name="trainer",
            docker_image="gcr.io/p/trainer:2",
            env_vars={"B": "2", "A": "1"},
            env=[
                EnvVar(
                    name="POD_IP",
                    value_from=EnvVarSource(
                        field_ref=FieldRef(field_path="status.podIP", api_version="v1")
                    ),
                ),
                EnvVar(
                    name="TOKEN",
                    value_from=EnvVarSource(
                        secret_key_ref=SecretKeyRef(name="tok", key="t", optional=False)
                    ),
                ),
                EnvVar(name="MODE", value="train"),
            ],
            ports=[
                ContainerPort(name="coord", container_port=8476, protocol=ContainerPort.TCP),
                ContainerPort(container_port=9000, protocol=ContainerPort.UDP, host_port=9000),
            ],
            volume_mounts=[
                VolumeMount(name="data", mount_path="/data", read_only=True),
                VolumeMount(name="ckpt", mount_path="/ckpt", sub_path="run1"),
            ],
            privileged=True,
            resources=ResourceSet(gpu_resources=GpuResources(type="nvidia-h100-80gb", count=8)),
        ),
        sidecars=[ExecutableSpec(docker_image="fluent/fluent-bit:3")],
        volumes=[
            Volume(
                name="data",
                persistent_volume_claim=PersistentVolumeClaimVolumeSource(
                    claim_name="datasets", read_only=True
                ),
            ),
            Volume(
                name="ckpt",
                gcs=GcsVolumeSource(
                    bucket="ckpts", mount_options=["implicit-dirs", "uid=1000"], read_only=False
                ),
            ),
            Volume(name="shm", host_path=HostPathVolumeSource(path="/dev/shm", type="Directory")),
            Volume(name="creds", secret=SecretVolumeSource(secret_name="creds", default_mode=256)),
            Volume(name="scratch", nfs=NfsVolumeSource(server="10.0.0.2", path="/export")),
        ],
    )
    return JobSetExecutable(
        jobs=[loader, workers],
        labels={"team": "brain", labels.EXECUTION_ID: "999"},
        annotations={labels.EXCLUSIVE_TOPOLOGY: "cloud.google.com/gke-nodepool"},
        network=JobSetExecutable.Network(enable_dns_hostnames=True, subdomain="trainers"),
        coordinator=JobSetExecutable.Coordinator(
            replicated_job="workers", job_index=0, pod_index=0
        ),
        success_policy=JobSetExecutable.SuccessPolicy(
            operator=JobSetExecutable.SuccessPolicy.ANY, target_replicated_jobs=["workers"]
        ),
    )


IDS = {
    "xmc.google.com/experiment-id": "42",
    "xmc.google.com/work-unit-id": "7",
    "xmc.google.com/execution-id": "3",
}

EXPECTED_LOADER: dict[str, Any] = {
    "name": "loader",
    "replicas": 1,
    "template": {
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 2,
            "template": {
                "metadata": {
                    "labels": {"role": "loader", **IDS},
                    "annotations": {"note": "warms the cache"},
                },
                "spec": {
                    "restartPolicy": "OnFailure",
                    "serviceAccountName": "loader-sa",
                    "volumes": [
                        {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": str(GiB)}},
                        {
                            "name": "cfg",
                            "configMap": {
                                "name": "loader-cfg",
                                "defaultMode": 420,
                                "optional": True,
                            },
                        },
                    ],
                    "initContainers": [
                        {
                            "name": "loader-init-0",
                            "image": "busybox",
                            "command": ["sh", "-c", "true"],
                        }
                    ],
                    "containers": [
                        {
                            "name": "loader",
                            "image": "gcr.io/p/loader:1",
                            "command": ["python", "-m", "loader"],
                            "args": ["--fast", "--bucket=b", "--shards=8"],
                            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                            "resources": {
                                "requests": {
                                    "cpu": "1500m",
                                    "memory": str(2 * GiB),
                                    "ephemeral-storage": str(10 * GiB),
                                },
                                "limits": {"cpu": "2000m"},
                            },
                        }
                    ],
                },
            },
        }
    },
}

EXPECTED_WORKERS: dict[str, Any] = {
    "name": "workers",
    "groupName": "trainers",
    "replicas": 4,
    "dependsOn": [{"name": "loader", "status": "Ready"}],
    "template": {
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "activeDeadlineSeconds": 3600,
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
            "template": {
                "metadata": {"labels": IDS, "annotations": {"gke-gcsfuse/volumes": "true"}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {
                        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                        "pool": "h100",
                    },
                    "priorityClassName": "batch-high",
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "terminationGracePeriodSeconds": 30,
                    "volumes": [
                        {
                            "name": "data",
                            "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True},
                        },
                        {
                            "name": "ckpt",
                            "csi": {
                                "driver": "gcsfuse.csi.storage.gke.io",
                                "readOnly": False,
                                "volumeAttributes": {
                                    "bucketName": "ckpts",
                                    "mountOptions": "implicit-dirs,uid=1000",
                                },
                            },
                        },
                        {"name": "shm", "hostPath": {"path": "/dev/shm", "type": "Directory"}},
                        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 256}},
                        {"name": "scratch", "nfs": {"server": "10.0.0.2", "path": "/export"}},
                    ],
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "gcr.io/p/trainer:2",
                            "env": [
                                {"name": "A", "value": "1"},
                                {"name": "B", "value": "2"},
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "fieldPath": "status.podIP",
                                            "apiVersion": "v1",
                                        }
                                    },
                                },
                                {
                                    "name": "TOKEN",
                                    "valueFrom": {
                                        "secretKeyRef": {
                                            "name": "tok",
                                            "key": "t",
                                            "optional": False,
                                        }
                                    },
                                },
                                {"name": "MODE", "value": "train"},
                            ],
                            "ports": [
                                {"name": "coord", "containerPort": 8476, "protocol": "TCP"},
                                {"containerPort": 9000, "protocol": "UDP", "hostPort": 9000},
                            ],
                            "volumeMounts": [
                                {"name": "data", "mountPath": "/data", "readOnly": True},
                                {"name": "ckpt", "mountPath": "/ckpt", "subPath": "run1"},
                            ],
                            "resources": {
                                "requests": {"nvidia.com/gpu": "8"},
                                "limits": {"nvidia.com/gpu": "8"},
                            },
                            "securityContext": {"privileged": True},
                        },
                        {"name": "workers-sidecar-0", "image": "fluent/fluent-bit:3"},
                    ],
                },
            },
        }
    },
}

EXPECTED_RICH: dict[str, Any] = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {
        "name": "xmc-42-7",
        "namespace": "xmc-jobs",
        "labels": {
            "team": "brain",
            **IDS,
            "xmc.google.com/last-edit": LAST_EDIT,
            "kueue.x-k8s.io/priority-class": "xmc-priority-high-low",
            "app.kubernetes.io/managed-by": "xmc",
            "kueue.x-k8s.io/queue-name": "team-a",
        },
        "annotations": {
            "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
        },
        "finalizers": ["jobset.xmanager.cloud/finalizer"],
    },
    "spec": {
        "suspend": True,
        "replicatedJobs": [EXPECTED_LOADER, EXPECTED_WORKERS],
        "network": {"enableDNSHostnames": True, "subdomain": "trainers"},
        "coordinator": {"replicatedJob": "workers", "jobIndex": 0, "podIndex": 0},
        "successPolicy": {"operator": "Any", "targetReplicatedJobs": ["workers"]},
    },
}


def test_rich_jobset_metadata() -> None:
    manifest = build_base_jobset(make_task(rich_jobset()), namespace="xmc-jobs")
    assert manifest["apiVersion"] == EXPECTED_RICH["apiVersion"]
    assert manifest["kind"] == EXPECTED_RICH["kind"]
    assert manifest["metadata"] == EXPECTED_RICH["metadata"]


def test_rich_jobset_spec_policies() -> None:
    spec = build_base_jobset(make_task(rich_jobset()), namespace="xmc-jobs")["spec"]
    for field in ("suspend", "network", "coordinator", "successPolicy"):
        assert spec[field] == EXPECTED_RICH["spec"][field], field
    assert set(spec) == set(EXPECTED_RICH["spec"])


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        pytest.param(0, EXPECTED_LOADER, id="loader with init container and OnFailure restarts"),
        pytest.param(1, EXPECTED_WORKERS, id="workers with GPUs, env sources and five volumes"),
    ],
)
def test_rich_jobset_replicated_jobs(index: int, expected: dict[str, Any]) -> None:
    spec = build_base_jobset(make_task(rich_jobset()), namespace="xmc-jobs")["spec"]
    got = spec["replicatedJobs"][index]
    # Field by field first, so a mismatch names the field, then the whole job.
    got_pod, want_pod = pod_spec(got), pod_spec(expected)
    for field in sorted(set(got_pod) | set(want_pod)):
        assert got_pod.get(field) == want_pod.get(field), field
    assert got == expected


def test_rich_jobset_whole() -> None:
    assert build_base_jobset(make_task(rich_jobset()), namespace="xmc-jobs") == EXPECTED_RICH


def test_minimal_job_omits_every_unset_optional_field() -> None:
    manifest = build_base_jobset(make_task(one_job(), queue=""), namespace="ns")
    assert manifest == {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "xmc-42-7",
            "namespace": "ns",
            "labels": {
                **IDS,
                "xmc.google.com/last-edit": LAST_EDIT,
                "kueue.x-k8s.io/priority-class": "xmc-priority-high-low",
                "app.kubernetes.io/managed-by": "xmc",
            },
            "finalizers": ["jobset.xmanager.cloud/finalizer"],
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "main",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 0,
                            "podFailurePolicy": {
                                "rules": [
                                    {
                                        "action": "Ignore",
                                        "onPodConditions": [{"type": "DisruptionTarget"}],
                                    }
                                ]
                            },
                            "template": {
                                "metadata": {"labels": IDS},
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [{"name": "main", "image": "img"}],
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


# --- one rule at a time ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(ExecutableSpec(), None, id="no arguments at all"),
        pytest.param(ExecutableSpec(args_list=["b", "a"]), ["b", "a"], id="list keeps its order"),
        pytest.param(
            ExecutableSpec(args={"zeta": "1", "alpha": "x=y", "mid": ""}),
            ["--alpha=x=y", "--mid=", "--zeta=1"],
            id="map sorted by key as --key=value",
        ),
        pytest.param(
            ExecutableSpec(args_list=["train", "--v"], args={"b": "2", "a": "1"}),
            ["train", "--v", "--a=1", "--b=2"],
            id="list first then the sorted map",
        ),
    ],
)
def test_args(spec: ExecutableSpec, expected: list[str] | None) -> None:
    spec.docker_image = "img"
    container = main_container(build_base_jobset(make_task(one_job(spec=spec)), namespace="ns"))
    assert container.get("args") == expected


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        pytest.param(0, 1, id="unset replicas become one"),
        pytest.param(1, 1, id="one stays one"),
        pytest.param(5, 5, id="five stay five"),
    ],
)
def test_replicas(replicas: int, expected: int) -> None:
    manifest = build_base_jobset(make_task(one_job(replicas=replicas)), namespace="ns")
    assert only_job(manifest)["replicas"] == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        pytest.param(KubernetesJob.DependencyOrder.READY, "Ready", id="ready"),
        pytest.param(KubernetesJob.DependencyOrder.COMPLETED, "Complete", id="completed"),
        pytest.param(
            KubernetesJob.DependencyOrder.JOB_DEPENDENCY_STATE_UNSPECIFIED,
            "Complete",
            id="unspecified waits for completion",
        ),
    ],
)
def test_depends_on_status(state: int, expected: str) -> None:
    order = KubernetesJob.DependencyOrder(job_name="first", job_dependency_state=state)  # type: ignore[arg-type]
    jobset = JobSetExecutable(
        jobs=[
            KubernetesJob(name="first", spec=ExecutableSpec(docker_image="img")),
            KubernetesJob(
                name="second", spec=ExecutableSpec(docker_image="img"), dependency_order=order
            ),
        ]
    )
    manifest = build_base_jobset(make_task(jobset), namespace="ns")
    assert manifest["spec"]["replicatedJobs"][1]["dependsOn"] == [
        {"name": "first", "status": expected}
    ]


@pytest.mark.parametrize(
    ("tpu", "chips", "selectors"),
    [
        pytest.param(
            TpuResources(type="tpu-v5-lite-podslice", topology="2x2"),
            "4",
            {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2",
            },
            id="single-host 2x2 slice requests all four chips",
        ),
        pytest.param(
            TpuResources(type="tpu-v5-lite-podslice", topology="1x1"),
            "1",
            {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "1x1",
            },
            id="one chip",
        ),
        pytest.param(
            TpuResources(type="tpu-v4-podslice", topology="2x2x4"),
            "4",
            {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2x4",
            },
            id="multi-host slice requests one host's four chips per pod",
        ),
        pytest.param(
            TpuResources(type="tpu-v4-podslice", topology="two"),
            None,
            {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice",
                "cloud.google.com/gke-tpu-topology": "two",
            },
            id="unparseable topology requests no chips and is left to validation",
        ),
    ],
)
def test_tpu_resources_and_selectors(
    tpu: TpuResources, chips: str | None, selectors: dict[str, str]
) -> None:
    spec = ExecutableSpec(docker_image="img", resources=ResourceSet(tpu_resources=tpu))
    manifest = build_base_jobset(make_task(one_job(spec=spec)), namespace="ns")
    expected_resources = (
        {"requests": {"google.com/tpu": chips}, "limits": {"google.com/tpu": chips}}
        if chips
        else None
    )
    assert main_container(manifest).get("resources") == expected_resources
    assert pod_spec(only_job(manifest))["nodeSelector"] == selectors


@pytest.mark.parametrize(
    ("topology", "expected"),
    [
        pytest.param("1x1", 1, id="1x1"),
        pytest.param("1x2", 2, id="1x2"),
        pytest.param("2x2", 4, id="2x2"),
        pytest.param("2x4", 4, id="2x4 spans hosts"),
        pytest.param("4x4x4", 4, id="4x4x4"),
        pytest.param("8", 4, id="one dimension"),
        pytest.param("", None, id="empty"),
        pytest.param("2x", None, id="dangling x"),
        pytest.param("2X2", None, id="upper-case X"),
    ],
)
def test_tpu_chips_per_host(topology: str, expected: int | None) -> None:
    assert tpu_chips_per_host(topology) == expected


def test_explicit_node_selector_wins_over_accelerator_selector() -> None:
    spec = ExecutableSpec(
        docker_image="img",
        resources=ResourceSet(gpu_resources=GpuResources(type="nvidia-l4", count=1)),
    )
    job = one_job(spec=spec, node_selector={"cloud.google.com/gke-accelerator": "nvidia-a100"})
    manifest = build_base_jobset(make_task(job), namespace="ns")
    assert pod_spec(only_job(manifest))["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-a100"
    }


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        pytest.param(one_job(), True, id="default Never restarts get the policy"),
        pytest.param(one_job(disable_pod_failure_policy=True), False, id="disabled by the user"),
        pytest.param(one_job(restart_policy="OnFailure"), False, id="OnFailure cannot carry one"),
    ],
)
def test_pod_failure_policy(job: JobSetExecutable, expected: bool) -> None:
    manifest = build_base_jobset(make_task(job), namespace="ns")
    assert ("podFailurePolicy" in only_job(manifest)["template"]["spec"]) is expected


def test_success_policy_operator_unspecified_means_all() -> None:
    jobset = one_job()
    jobset.success_policy.SetInParent()
    manifest = build_base_jobset(make_task(jobset), namespace="ns")
    assert manifest["spec"]["successPolicy"] == {"operator": "All"}


def test_network_without_any_setting_is_omitted() -> None:
    jobset = one_job()
    jobset.network.SetInParent()
    assert "network" not in build_base_jobset(make_task(jobset), namespace="ns")["spec"]


def test_env_var_without_source_keeps_only_its_name() -> None:
    spec = ExecutableSpec(docker_image="img", env=[EnvVar(name="EMPTY")])
    container = main_container(build_base_jobset(make_task(one_job(spec=spec)), namespace="ns"))
    assert container["env"] == [{"name": "EMPTY"}]


def test_container_restart_policy_and_unprivileged() -> None:
    spec = ExecutableSpec(docker_image="img", restart_policy="Always", privileged=False)
    container = main_container(build_base_jobset(make_task(one_job(spec=spec)), namespace="ns"))
    assert container == {
        "name": "main",
        "image": "img",
        "securityContext": {"privileged": False},
        "restartPolicy": "Always",
    }


@pytest.mark.parametrize(
    ("eid", "target_eid", "expected"),
    [
        pytest.param(4, 3, 4, id="restart runs the payload's new execution"),
        pytest.param(0, 3, 3, id="payload without eid falls back to the target"),
    ],
)
def test_execution_id(eid: int, target_eid: int, expected: int) -> None:
    task = make_task(one_job(), eid=eid, target_eid=target_eid)
    assert task_execution_id(task) == expected
    manifest = build_base_jobset(task, namespace="ns")
    assert manifest["metadata"]["labels"][labels.EXECUTION_ID] == str(expected)
    pod_labels = only_job(manifest)["template"]["spec"]["template"]["metadata"]["labels"]
    assert pod_labels[labels.EXECUTION_ID] == str(expected)


# --- priority classes ------------------------------------------------------------------

_WORD = {0: "normal", LOW: "low", NORMAL: "normal", HIGH: "high"}


@pytest.mark.parametrize(
    ("experiment", "work_unit"),
    [
        pytest.param(e, w, id=f"experiment {_WORD[e]}({e}) x work unit {_WORD[w]}({w})")
        for e in (LOW, NORMAL, HIGH, 0)
        for w in (LOW, NORMAL, HIGH, 0)
    ],
)
def test_priority_class_label(experiment: int, work_unit: int) -> None:
    task = make_task(one_job(), experiment_priority=experiment, work_unit_priority=work_unit)
    manifest = build_base_jobset(task, namespace="ns")
    expected = f"xmc-priority-{_WORD[experiment]}-{_WORD[work_unit]}"
    assert manifest["metadata"]["labels"][labels.PRIORITY_CLASS] == expected
    assert labels.priority_class_name(experiment, work_unit) == expected
    assert expected in labels.PRIORITY_CLASSES


def test_priority_classes_order_and_values() -> None:
    assert labels.PRIORITY_CLASS_VALUES == {
        "xmc-priority-low-low": 100,
        "xmc-priority-low-normal": 200,
        "xmc-priority-low-high": 300,
        "xmc-priority-normal-low": 400,
        "xmc-priority-normal-normal": 500,
        "xmc-priority-normal-high": 600,
        "xmc-priority-high-low": 700,
        "xmc-priority-high-normal": 800,
        "xmc-priority-high-high": 900,
    }
    assert list(labels.PRIORITY_CLASSES) == list(labels.PRIORITY_CLASS_VALUES)


def test_unknown_priority_value_counts_as_normal() -> None:
    assert labels.priority_class_name(7, -1) == "xmc-priority-normal-normal"


# --- names and the last-edit label -----------------------------------------------------


def test_jobset_name() -> None:
    assert labels.jobset_name(12345, 6) == "xmc-12345-6"


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        pytest.param(datetime(1970, 1, 1, tzinfo=UTC), "0000000000000000000", id="the epoch"),
        pytest.param(OPERATION_TIME, LAST_EDIT, id="microseconds kept"),
        pytest.param(datetime(2026, 3, 4, 5, 6, 7, 890123), LAST_EDIT, id="naive time is UTC"),
        pytest.param(
            datetime(2026, 3, 4, 6, 6, 7, 890123, tzinfo=timezone(timedelta(hours=1))),
            LAST_EDIT,
            id="other zones normalise to UTC",
        ),
    ],
)
def test_last_edit_label(when: datetime, expected: str) -> None:
    assert labels.last_edit_label(when) == expected
    assert labels.parse_last_edit_label(expected) == (
        when if when.tzinfo else when.replace(tzinfo=UTC)
    )


def test_last_edit_label_orders_like_time() -> None:
    times = [
        datetime(2001, 9, 9, 1, 46, 39, 999999, tzinfo=UTC),
        datetime(2001, 9, 9, 1, 46, 40, tzinfo=UTC),  # 10**15 µs: one more digit
        OPERATION_TIME,
        OPERATION_TIME + timedelta(microseconds=1),
        datetime(9999, 12, 31, tzinfo=UTC),
    ]
    rendered = [labels.last_edit_label(t) for t in times]
    assert rendered == sorted(rendered)
    assert len({len(r) for r in rendered}) == 1


def test_last_edit_label_refuses_times_before_the_epoch() -> None:
    with pytest.raises(ValueError, match="before the epoch"):
        labels.last_edit_label(datetime(1969, 12, 31, tzinfo=UTC))


@pytest.mark.parametrize("value", ["", "-1", "12a", "1.5", "١٢"])
def test_parse_last_edit_label_rejects_garbage(value: str) -> None:
    with pytest.raises(ValueError, match="not a decimal number"):
        labels.parse_last_edit_label(value)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, {"gke-gcsfuse/volumes": "true"}, id="gcs volume asks for the sidecar"),
        pytest.param(
            {"gke-gcsfuse/volumes": "false"},
            {"gke-gcsfuse/volumes": "false"},
            id="the user's own setting is kept",
        ),
    ],
)
def test_gcs_volume_pod_annotation(annotations: dict[str, str], expected: dict[str, str]) -> None:
    job = one_job(
        annotations=annotations, volumes=[Volume(name="b", gcs=GcsVolumeSource(bucket="b"))]
    )
    manifest = build_base_jobset(make_task(job), namespace="ns")
    pod_metadata = only_job(manifest)["template"]["spec"]["template"]["metadata"]
    assert pod_metadata["annotations"] == expected
