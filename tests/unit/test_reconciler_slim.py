"""The Reconciler's cache transforms keep exactly what its observers read."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from reconciler.slim import (
    INTERN_UP_TO,
    POD_LABELS,
    compact,
    slim_jobset,
    slim_metadata,
    slim_pod,
    slim_workload,
)
from xmc.model.jobset import decide_work_unit_state, observation_state_update_time

Obj = dict[str, Any]
POD_SPEC = {
    "serviceAccountName": "runner",
    "containers": [{"name": "main", "image": "python:3.11", "env": [{"name": "A", "value": "1"}]}],
}
META = {
    "name": "xmc-1-2",
    "uid": "u",
    "labels": {"xmc.google.com/work-unit-id": "2"},
    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"},
    "managedFields": [{"manager": "kubectl"}],
    "finalizers": ["jobset.xmanager.cloud/finalizer"],
    "deletionTimestamp": "2026-12-01T00:00:00Z",
}
STATUS = {"conditions": [{"type": "Completed", "status": "True"}], "replicatedJobsStatus": []}


def _jobset() -> Obj:
    rjob = {
        "name": "main",
        "replicas": 2,
        "template": {"spec": {"parallelism": 1, "template": {"spec": POD_SPEC}}},
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": META,
        "spec": {"suspend": True, "replicatedJobs": [rjob], "failurePolicy": {}},
        "status": STATUS,
    }


def test_metadata_drops_only_managed_fields_and_annotations() -> None:
    assert slim_metadata(META) == {
        k: v for k, v in META.items() if k not in ("annotations", "managedFields")
    }


def test_a_jobset_keeps_suspend_replicas_service_account_and_status() -> None:
    slim = slim_jobset(_jobset())
    assert slim["spec"] == {
        "suspend": True,
        "replicatedJobs": [
            {
                "name": "main",
                "replicas": 2,
                "template": {"spec": {"template": {"spec": {"serviceAccountName": "runner"}}}},
            }
        ],
    }
    assert slim["status"] == STATUS
    assert (slim["apiVersion"], slim["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")


@pytest.mark.parametrize(
    "jobset",
    [
        _jobset(),
        {**_jobset(), "metadata": {"name": "a"}},
        {**_jobset(), "spec": {"replicatedJobs": [{"name": "w", "replicas": 3}]}},
        {"metadata": {"name": "bare"}},
    ],
)
def test_the_state_mapping_reads_the_same_from_a_slim_jobset(jobset: Obj) -> None:
    assert decide_work_unit_state(slim_jobset(jobset)) == decide_work_unit_state(jobset)


def test_a_jobset_keeps_when_its_suspend_last_changed_and_no_other_managed_field() -> None:
    """The time a lagging ``Suspended`` condition is read against (model/jobset.py)."""
    kueue = {
        "manager": "kueue",
        "operation": "Update",
        "time": "2026-12-01T00:00:31Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:suspend": {}, "f:replicatedJobs": {}}},
    }
    metadata = {**META, "managedFields": [{"manager": "kubectl", "fieldsV1": {}}, kueue]}
    jobset = {**_jobset(), "spec": {"suspend": False}, "metadata": metadata}
    jobset["status"] = {"conditions": [{"type": "Suspended", "status": "True",
                                        "lastTransitionTime": "2026-12-01T00:00:25Z"}]}  # fmt: skip
    slim = slim_jobset(jobset)
    assert slim["metadata"]["managedFields"] == [
        {"time": "2026-12-01T00:00:31Z", "fieldsV1": {"f:spec": {"f:suspend": {}}}}
    ]
    seen = datetime(2026, 12, 1, 0, 1, tzinfo=UTC)
    read = observation_state_update_time(slim, seen)
    assert read == observation_state_update_time(jobset, seen) == seen.replace(minute=0, second=31)
    assert "managedFields" not in slim_jobset(_jobset())["metadata"]


def test_a_workload_keeps_queue_priority_pod_set_counts_and_node_selectors() -> None:
    workload = {
        "metadata": {"name": "w", "ownerReferences": [{"uid": "u", "kind": "JobSet"}]},
        "spec": {
            "queueName": "cpu-queue",
            "priority": 100,
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {"spec": {**POD_SPEC, "nodeSelector": {"a": "b"}}},
                },
                {"name": "side", "count": 1, "template": {"spec": POD_SPEC}},
            ],
        },
        "status": {"admission": {"clusterQueue": "cq"}},
    }
    slim = slim_workload(workload)
    assert slim["spec"] == {
        "queueName": "cpu-queue",
        "priority": 100,
        "podSets": [
            {"name": "main", "count": 2, "template": {"spec": {"nodeSelector": {"a": "b"}}}},
            {"name": "side", "count": 1},
        ],
    }
    assert slim["metadata"] == workload["metadata"]
    assert slim["status"] == workload["status"]


def test_a_pod_keeps_metadata_with_the_labels_read_and_status_only() -> None:
    read = {label: "x" for label in POD_LABELS}
    labels = {**read, "jobset.sigs.k8s.io/job-key": "20a1cf", "team": "a"}
    pod = {"metadata": {**META, "labels": labels}, "spec": POD_SPEC, "status": {"phase": "Running"}}
    slim = slim_pod(pod)
    metadata = {**slim_metadata(META), "labels": read}
    assert slim == {"metadata": metadata, "spec": {}, "status": {"phase": "Running"}}


def test_compacted_objects_are_equal_and_share_their_keys_and_short_strings() -> None:
    long_message = "x" * (INTERN_UP_TO + 1)
    status = {"status": {"conditions": [{"type": "Ready", "message": long_message}]}}
    decoded = [json.loads(json.dumps(status)) for _ in range(2)]
    first, second = (compact(obj) for obj in decoded)
    assert first == decoded[0]
    a, b = first["status"]["conditions"][0], second["status"]["conditions"][0]
    assert a["type"] is b["type"]
    assert next(iter(a)) is next(iter(b))
    assert a["message"] is not b["message"]


def test_a_pod_keeps_its_phase_reasons_and_container_states_only() -> None:
    container = {
        "name": "main",
        "image": "python:3.11",
        "imageID": "docker-pullable://python@sha256:0d1c",
        "containerID": "containerd://9f2e",
        "restartCount": 1,
        "state": {"terminated": {"exitCode": 3, "reason": "Error"}},
        "lastState": {"terminated": {"exitCode": 1}},
    }
    status = {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on memory.",
        "conditions": [{"type": "Ready", "status": "False"}],
        "hostIP": "10.0.0.1",
        "podIP": "10.1.0.7",
        "startTime": "2026-12-01T00:00:00Z",
        "qosClass": "BestEffort",
        "containerStatuses": [container],
        "initContainerStatuses": [dict(container, name="init")],
    }
    slim = slim_pod({"metadata": {"name": "p"}, "status": status})["status"]
    kept = {k: v for k, v in container.items() if k not in ("image", "imageID", "containerID")}
    assert slim == {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on memory.",
        "containerStatuses": [kept],
        "initContainerStatuses": [dict(kept, name="init")],
    }
