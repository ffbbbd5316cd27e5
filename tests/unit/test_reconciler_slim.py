"""The Reconciler's cache transforms keep exactly what its observers read."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.slim import LAST_APPLIED, slim_jobset, slim_metadata, slim_pod, slim_workload
from xmc.model.jobset import decide_work_unit_state

Obj = dict[str, Any]
POD_SPEC = {
    "serviceAccountName": "runner",
    "containers": [{"name": "main", "image": "python:3.11", "env": [{"name": "A", "value": "1"}]}],
}
META = {
    "name": "xmc-1-2",
    "uid": "u",
    "labels": {"xmc.google.com/work-unit-id": "2"},
    "annotations": {LAST_APPLIED: "{...}", "keep": "me"},
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


def test_metadata_drops_only_managed_fields_and_the_last_applied_annotation() -> None:
    slim = slim_metadata(META)
    assert "managedFields" not in slim
    assert slim["annotations"] == {"keep": "me"}
    assert {k: v for k, v in slim.items() if k not in ("annotations",)} == {
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
    assert slim["status"] is STATUS
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


def test_a_pod_keeps_metadata_and_status_only() -> None:
    pod = {"metadata": META, "spec": POD_SPEC, "status": {"phase": "Running"}}
    slim = slim_pod(pod)
    assert slim == {"metadata": slim_metadata(META), "spec": {}, "status": {"phase": "Running"}}
