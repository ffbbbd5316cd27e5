"""``ValidateJobSetManifest`` (SPEC §7.1): one named case per rule, whole problem lists compared."""

from __future__ import annotations

import copy
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from actuator.manifest import build_base_jobset
from actuator.validation import ManifestInvalid, parse_quantity, validate_jobset_manifest
from tests.unit.test_actuator_manifest import make_task, rich_jobset

Manifest = dict[str, Any]
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
RJ1 = "spec.replicatedJobs[1]"
POD1 = f"{RJ1}.template.spec.template.spec"
MAIN1 = f"{POD1}.containers[0]"


def replicated_job(name: str, replicas: int) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": {"xmc.google.com/execution-id": "1"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "volumes": [{"name": "data", "emptyDir": {}}],
                        "containers": [
                            {
                                "name": name,
                                "image": "img",
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                                "resources": {
                                    "requests": {"cpu": "500m", "memory": "1Gi"},
                                    "limits": {"cpu": "1"},
                                },
                            }
                        ],
                    },
                },
            }
        },
    }


def valid() -> Manifest:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "xmc-42-7",
            "namespace": "xmc-jobs",
            "labels": {
                "xmc.google.com/execution-id": "1",
                "kueue.x-k8s.io/queue-name": "team-a",
            },
            "finalizers": ["jobset.xmanager.cloud/finalizer"],
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [replicated_job("driver", 1), replicated_job("workers", 2)],
        },
    }


def pod(manifest: Manifest, index: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]["replicatedJobs"][index]["template"]["spec"][
        "template"
    ]["spec"]
    return spec


def main(manifest: Manifest, index: int = 1) -> dict[str, Any]:
    container: dict[str, Any] = pod(manifest, index)["containers"][0]
    return container


def with_(change: Callable[[Manifest], object]) -> Manifest:
    manifest = valid()
    change(manifest)
    return manifest


CASES = [
    pytest.param(valid(), [], id="a well-formed manifest has no problems"),
    pytest.param(
        with_(lambda m: pod(m).update(hostNetwork=True)),
        [
            f"{POD1}.hostNetwork: requires the {EXCLUSIVE} annotation on the JobSet, its Job or "
            "pod template (exclusive topology placement), or pods of two jobs could share a "
            "node's ports"
        ],
        id="host network without exclusive placement",
    ),
    pytest.param(
        with_(
            lambda m: (
                pod(m).update(hostNetwork=True),
                m["metadata"].update(annotations={EXCLUSIVE: "kubernetes.io/hostname"}),
            )
        ),
        [],
        id="host network with exclusive placement on the JobSet",
    ),
    pytest.param(
        with_(
            lambda m: (
                pod(m).update(hostNetwork=True),
                m["spec"]["replicatedJobs"][1]["template"].update(
                    metadata={"annotations": {EXCLUSIVE: "kubernetes.io/hostname"}}
                ),
            )
        ),
        [],
        id="host network with exclusive placement on its Job template",
    ),
    pytest.param(
        with_(
            lambda m: (
                pod(m).update(hostNetwork=True),
                m["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["metadata"].update(
                    annotations={EXCLUSIVE: "kubernetes.io/hostname"}
                ),
            )
        ),
        [],
        id="host network with exclusive placement on its pod template",
    ),
    pytest.param(
        with_(
            lambda m: (
                pod(m).update(hostNetwork=True),
                m["spec"]["replicatedJobs"][0]["template"].update(
                    metadata={"annotations": {EXCLUSIVE: "kubernetes.io/hostname"}}
                ),
            )
        ),
        [
            f"{POD1}.hostNetwork: requires the {EXCLUSIVE} annotation on the JobSet, its Job or "
            "pod template (exclusive topology placement), or pods of two jobs could share a "
            "node's ports"
        ],
        id="another replicated job's exclusive placement does not count",
    ),
    pytest.param(
        with_(lambda m: pod(m).update(hostNetwork=False)),
        [],
        id="host network explicitly off needs nothing",
    ),
    pytest.param(
        with_(lambda m: m["metadata"].update(name="Xmc_42")),
        ["metadata.name: 'Xmc_42' is not a DNS-1035 label of at most 63 characters"],
        id="JobSet name with capitals and underscore",
    ),
    pytest.param(
        with_(lambda m: m["metadata"].update(name="x" * 64)),
        [f"metadata.name: '{'x' * 64}' is not a DNS-1035 label of at most 63 characters"],
        id="JobSet name longer than 63",
    ),
    pytest.param(
        with_(lambda m: m["metadata"].update(name="1xmc")),
        ["metadata.name: '1xmc' is not a DNS-1035 label of at most 63 characters"],
        id="JobSet name starting with a digit",
    ),
    pytest.param(
        with_(lambda m: m["metadata"].pop("namespace")),
        ["metadata.namespace: required"],
        id="missing namespace",
    ),
    pytest.param(
        with_(lambda m: m["spec"]["replicatedJobs"][1].update(name="Workers")),
        [f"{RJ1}.name: 'Workers' is not a DNS-1123 label of at most 63 characters"],
        id="replicated job name with a capital",
    ),
    pytest.param(
        with_(lambda m: m["spec"]["replicatedJobs"][1].update(name="driver")),
        [f"{RJ1}.name: 'driver' is used by an earlier replicated job"],
        id="two replicated jobs with one name",
    ),
    pytest.param(
        with_(lambda m: m["spec"]["replicatedJobs"][1].update(name="w" * 51)),
        [
            f"{RJ1}.name: pod hostname 'xmc-42-7-{'w' * 51}-1-0' would exceed 63 characters",
        ],
        id="replicated job name too long for pod hostnames",
    ),
    pytest.param(
        with_(lambda m: m["spec"]["replicatedJobs"][1].update(replicas=-1)),
        [f"{RJ1}.replicas: must be >= 0"],
        id="negative replicas",
    ),
    pytest.param(
        with_(lambda m: m["spec"]["replicatedJobs"][1].update(replicas="2")),
        [f"{RJ1}.replicas: must be >= 0"],
        id="replicas as a string",
    ),
    pytest.param(
        with_(lambda m: m["spec"].update(replicatedJobs=[])),
        ["spec.replicatedJobs: at least one replicated job is required"],
        id="no replicated jobs",
    ),
    pytest.param(
        with_(lambda m: main(m)["resources"]["requests"].update(cpu="-1")),
        [f"{MAIN1}.resources.requests.cpu: must be >= 0, got '-1'"],
        id="negative cpu request",
    ),
    pytest.param(
        with_(lambda m: main(m)["resources"]["requests"].update(memory="1Gx")),
        [f"{MAIN1}.resources.requests.memory: '1Gx' is not a quantity"],
        id="memory that is not a quantity",
    ),
    pytest.param(
        with_(lambda m: main(m)["resources"].update(limits={"nvidia.com/gpu": "-2"})),
        [f"{MAIN1}.resources.limits.nvidia.com/gpu: must be >= 0, got '-2'"],
        id="negative GPU limit",
    ),
    pytest.param(
        with_(lambda m: main(m)["resources"]["requests"].update(cpu="1500m")),
        [f"{MAIN1}.resources.requests.cpu: must not exceed its limit"],
        id="cpu request above its limit",
    ),
    pytest.param(
        with_(lambda m: m["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")),
        ["metadata.labels[kueue.x-k8s.io/queue-name]: required; Kueue admits only queued JobSets"],
        id="no queue name",
    ),
    pytest.param(
        with_(lambda m: m["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "Team-A"})),
        [
            "metadata.labels[kueue.x-k8s.io/queue-name]: 'Team-A' is not a Kueue queue name "
            "(a label value and DNS-1123 subdomain: at most 63 lowercase alphanumerics, '-' "
            "or '.', starting and ending with an alphanumeric)"
        ],
        id="queue name Kueue's webhook refuses",
    ),
    pytest.param(
        with_(lambda m: m["metadata"]["labels"].update({"xmc.google.com/execution-id": "x"})),
        ["metadata.labels[xmc.google.com/execution-id]: must be a positive integer"],
        id="execution id that is not a number",
    ),
    pytest.param(
        with_(lambda m: m["metadata"]["labels"].update(team="Brain Team")),
        [
            "metadata.labels[team]: value 'Brain Team' is not a label value "
            "(at most 63 alphanumerics, '-', '_' or '.')"
        ],
        id="user label value with a space",
    ),
    pytest.param(
        with_(lambda m: m["metadata"].update(annotations={"bad key/": "v"})),
        [
            "metadata.annotations[bad key/]: key prefix is not a DNS-1123 subdomain",
        ],
        id="annotation key with a bad prefix",
    ),
    pytest.param(
        with_(lambda m: m["metadata"].update(annotations={"example.com/": "v"})),
        [
            "metadata.annotations[example.com/]: key name must be 1-63 alphanumerics, "
            "'-', '_' or '.'",
        ],
        id="annotation key with a prefix and no name",
    ),
    pytest.param(
        with_(
            lambda m: m["spec"]["replicatedJobs"][0].update(
                dependsOn=[{"name": "workers", "status": "Complete"}]
            )
        ),
        ["spec.replicatedJobs[0].dependsOn[0].name: 'workers' is not an earlier replicated job"],
        id="depends on a later replicated job",
    ),
    pytest.param(
        with_(
            lambda m: m["spec"]["replicatedJobs"][1].update(
                dependsOn=[{"name": "driver", "status": "Succeeded"}]
            )
        ),
        [f"{RJ1}.dependsOn[0].status: must be one of Ready, Complete"],
        id="depends on an unknown status",
    ),
    pytest.param(
        with_(
            lambda m: m["spec"].update(
                successPolicy={"operator": "Some", "targetReplicatedJobs": ["workers", "ps"]}
            )
        ),
        [
            "spec.successPolicy.operator: must be one of All, Any",
            "spec.successPolicy.targetReplicatedJobs[1]: no replicated job named 'ps'",
        ],
        id="success policy with a bad operator and an unknown target",
    ),
    pytest.param(
        with_(lambda m: m["spec"].update(coordinator={"replicatedJob": "ps"})),
        ["spec.coordinator.replicatedJob: no replicated job named 'ps'"],
        id="coordinator in an unknown replicated job",
    ),
    pytest.param(
        with_(
            lambda m: m["spec"].update(
                coordinator={"replicatedJob": "workers", "jobIndex": 2, "podIndex": -1}
            )
        ),
        ["spec.coordinator.jobIndex: must be in 0..1", "spec.coordinator.podIndex: must be >= 0"],
        id="coordinator indexes out of range",
    ),
    pytest.param(
        with_(lambda m: m["spec"].update(network={"subdomain": "Trainers"})),
        ["spec.network.subdomain: 'Trainers' is not a DNS-1035 label of at most 63 characters"],
        id="subdomain that is not a Service name",
    ),
    pytest.param(
        with_(lambda m: main(m)["volumeMounts"].append({"name": "ckpt", "mountPath": "/c"})),
        [f"{MAIN1}.volumeMounts[1].name: no volume named 'ckpt'"],
        id="mount of an unknown volume",
    ),
    pytest.param(
        with_(lambda m: pod(m).update(initContainers=[{"name": "workers", "image": "busybox"}])),
        [f"{MAIN1}.name: 'workers' is used by another container of the pod"],
        id="init container and main container share a name",
    ),
    pytest.param(
        with_(lambda m: main(m).update(image="")),
        [f"{MAIN1}.image: required"],
        id="container without an image",
    ),
    pytest.param(
        with_(lambda m: main(m).update(ports=[{"containerPort": 0, "hostPort": 70000}])),
        [
            f"{MAIN1}.ports[0].containerPort: must be 1..65535",
            f"{MAIN1}.ports[0].hostPort: must be 0..65535",
        ],
        id="ports out of range",
    ),
    pytest.param(
        with_(lambda m: pod(m).update(containers=[])),
        [f"{POD1}.containers: at least one container is required"],
        id="pod without containers",
    ),
    pytest.param(
        with_(lambda m: pod(m).update(restartPolicy="Always")),
        [f"{POD1}.restartPolicy: a Job's pods need one of Never, OnFailure"],
        id="Always restart policy is not for Jobs",
    ),
    pytest.param(
        with_(lambda m: pod(m).update(terminationGracePeriodSeconds=-5)),
        [f"{POD1}.terminationGracePeriodSeconds: must be >= 0"],
        id="negative grace period",
    ),
    pytest.param(
        with_(lambda m: m["spec"]["replicatedJobs"][1]["template"]["spec"].update(backoffLimit=-1)),
        [f"{RJ1}.template.spec.backoffLimit: must be >= 0"],
        id="negative backoff limit",
    ),
    pytest.param(
        with_(
            lambda m: m["spec"]["replicatedJobs"][1]["template"]["spec"].update(
                activeDeadlineSeconds=0
            )
        ),
        [f"{RJ1}.template.spec.activeDeadlineSeconds: must be > 0"],
        id="zero active deadline",
    ),
    pytest.param(
        with_(
            lambda m: pod(m).update(
                nodeSelector={
                    "cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice",
                    "cloud.google.com/gke-tpu-topology": "two",
                }
            )
        ),
        [
            f"{POD1}.nodeSelector[cloud.google.com/gke-tpu-topology]: 'two' is not a topology "
            "like 2x2x4"
        ],
        id="TPU topology that does not parse",
    ),
    pytest.param(
        with_(lambda m: pod(m)["volumes"].append({"name": "data", "emptyDir": {}})),
        [f"{POD1}.volumes[1].name: 'data' is used by an earlier volume"],
        id="two volumes with one name",
    ),
    pytest.param(
        with_(
            lambda m: (
                m["metadata"].update(name="Bad"),
                m["spec"]["replicatedJobs"][1].update(replicas=-3),
                main(m, 0)["resources"]["requests"].update(cpu="-100m"),
            )
        ),
        [
            "metadata.name: 'Bad' is not a DNS-1035 label of at most 63 characters",
            "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources"
            ".requests.cpu: must be >= 0, got '-100m'",
            f"{RJ1}.replicas: must be >= 0",
        ],
        id="every problem is reported at once",
    ),
    pytest.param(
        with_(lambda m: m.update(apiVersion="batch/v1", kind="Job")),
        ["apiVersion: must be jobset.x-k8s.io/v1alpha2", "kind: must be JobSet"],
        id="not a JobSet",
    ),
]


@pytest.mark.parametrize(("manifest", "expected"), CASES)
def test_validate_jobset_manifest(manifest: Manifest, expected: list[str]) -> None:
    before = copy.deepcopy(manifest)
    assert validate_jobset_manifest(manifest) == expected
    assert manifest == before


def test_manifest_invalid_carries_every_problem() -> None:
    error = ManifestInvalid(["a: bad", "b: worse"])
    assert error.problems == ("a: bad", "b: worse")
    assert str(error) == "a: bad; b: worse"


def test_built_manifests_validate() -> None:
    """What ``build_base_jobset`` makes of the rich test work unit passes as is."""
    assert (
        validate_jobset_manifest(build_base_jobset(make_task(rich_jobset()), namespace="n")) == []
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("500m", Decimal("0.5"), id="millicores"),
        pytest.param("2", Decimal(2), id="plain integer string"),
        pytest.param(3, Decimal(3), id="JSON integer"),
        pytest.param(0.25, Decimal("0.25"), id="JSON float"),
        pytest.param("1.5Gi", Decimal(3 * 2**29), id="binary suffix"),
        pytest.param("1Ki", Decimal(1024), id="kibibyte"),
        pytest.param("1k", Decimal(1000), id="decimal kilo"),
        pytest.param("2M", Decimal(2_000_000), id="decimal mega"),
        pytest.param("100u", Decimal("0.0001"), id="micro"),
        pytest.param("1e3", Decimal(1000), id="exponent"),
        pytest.param("1E-3", Decimal("0.001"), id="negative exponent"),
        pytest.param(".5", Decimal("0.5"), id="leading dot"),
        pytest.param("-1", Decimal(-1), id="negative kept for the caller"),
        pytest.param("+4", Decimal(4), id="explicit plus"),
        pytest.param("1Gx", None, id="unknown suffix"),
        pytest.param("", None, id="empty"),
        pytest.param("1 Gi", None, id="space"),
        pytest.param("Gi", None, id="suffix without a number"),
        pytest.param(True, None, id="boolean"),
        pytest.param(None, None, id="null"),
    ],
)
def test_parse_quantity(value: object, expected: Decimal | None) -> None:
    assert parse_quantity(value) == expected
