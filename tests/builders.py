"""Fluent builders of JobSets and Kueue Workloads as the API server returns them.

One home for the objects the Reconciler's and the model's unit tests feed in, after
JobSet's own ``pkg/util/testing/wrappers.go``: start from a small valid object, chain
what a case needs, and take a fresh copy with ``obj()``::

    JobSetBuilder("xmc-7-3").replicated_job("workers", replicas=2).condition("Failed", "True").obj()

Defaults are what XMC's Actuator and kubesim write (namespace ``xmc-jobs``, the XMC
finalizer, queue ``default``); set explicitly what a test asserts on. Times are RFC 3339.
Pods and container states are in :mod:`tests.pod_builders`.
"""

from __future__ import annotations

import copy
from typing import Any, Self

from xmc.labels import (
    EXECUTION_ID,
    EXPERIMENT_ID,
    FINALIZER,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    MANAGED_BY,
    MANAGED_BY_VALUE,
    QUEUE_NAME,
    WORK_UNIT_ID,
)

Obj = dict[str, Any]

NAMESPACE = "xmc-jobs"
QUEUE = "default"
#: When a Workload was created and first reported waiting.
CREATED = "2026-01-02T03:00:00Z"
#: When a JobSet was admitted; the default time of a JobSet condition.
ADMITTED = "2026-01-02T03:04:05Z"

#: (type, status) → (reason, message) of the JobSet controller's conditions.
JOBSET_CONDITION_REASONS = {
    ("Completed", "True"): ("AllJobsCompleted", "jobset completed successfully"),
    ("Failed", "True"): ("FailedJobs", "jobset failed due to one or more job failures"),
    ("Suspended", "True"): ("SuspendedJobs", "jobset is suspended"),
    ("Suspended", "False"): ("ResumeJobs", "jobset is resumed"),
}


def condition(type_: str, status: str, reason: str, message: str, time: str) -> Obj:
    """One ``status.conditions`` entry (metav1.Condition)."""
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": time,
    }


class JobSetBuilder:
    """A ``jobset.x-k8s.io/v1alpha2`` JobSet; ``uid`` defaults to ``uid-<name>``."""

    def __init__(self, name: str, namespace: str = NAMESPACE) -> None:
        self._obj: Obj = {
            "apiVersion": JOBSET_API_VERSION,
            "kind": JOBSET_KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{name}",
                "labels": {QUEUE_NAME: QUEUE},
                "finalizers": [FINALIZER],
            },
            "spec": {"replicatedJobs": []},
            "status": {"replicatedJobsStatus": [], "restarts": 0},
        }

    @classmethod
    def manifest(cls, name: str) -> Self:
        """What a client sends to create a JobSet: a name and labels, no namespace, uid,
        finalizer or status."""
        builder = cls(name).without_status()
        builder._obj["metadata"] = {"name": name, "labels": {}}
        return builder

    def uid(self, uid: str | None) -> Self:
        """Set the uid, or leave it out with ``None``."""
        if uid is None:
            self._obj["metadata"].pop("uid", None)
        else:
            self._obj["metadata"]["uid"] = uid
        return self

    def resource_version(self, version: str) -> Self:
        self._obj["metadata"]["resourceVersion"] = version
        return self

    def execution(self, xid: int, wid: int, eid: int) -> Self:
        """The labels the Actuator puts on an execution's JobSet."""
        self._obj["metadata"]["labels"].update(
            {
                EXPERIMENT_ID: str(xid),
                WORK_UNIT_ID: str(wid),
                EXECUTION_ID: str(eid),
                MANAGED_BY: MANAGED_BY_VALUE,
            }
        )
        return self

    def label(self, key: str, value: str | None) -> Self:
        """Set a label, or remove it with ``None``."""
        labels = self._obj["metadata"]["labels"]
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
        return self

    def finalizers(self, *names: str) -> Self:
        self._obj["metadata"]["finalizers"] = list(names)
        return self

    def created(self, at: str) -> Self:
        self._obj["metadata"]["creationTimestamp"] = at
        return self

    def suspend_set_by(self, manager: str, at: str) -> Self:
        """A ``managedFields`` entry: ``manager`` last changed ``spec.suspend`` at ``at``
        (an Update, as Kueue admits and evicts)."""
        self._obj["metadata"].setdefault("managedFields", []).append(
            {
                "manager": manager,
                "operation": "Update",
                "apiVersion": JOBSET_API_VERSION,
                "time": at,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:suspend": {}}},
            }
        )
        return self

    def deleting(self, at: str = ADMITTED) -> Self:
        self._obj["metadata"]["deletionTimestamp"] = at
        return self

    def replicated_job(
        self,
        name: str,
        *,
        replicas: int | None = 1,
        service_account: str | None = None,
        job_spec: Obj | None = None,
    ) -> Self:
        """Add a replicated job of one-pod Jobs, or of Jobs of ``job_spec`` (``{}``: a
        Job without pods); ``replicas=None`` omits the field as a sparse manifest would."""
        pod_spec: Obj = {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "trainer:latest"}],
        }
        if service_account is not None:
            pod_spec["serviceAccountName"] = service_account
        if job_spec is None:
            job_spec = {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "template": {"spec": pod_spec},
            }
        job: Obj = {"name": name, "template": {"spec": job_spec}}
        if replicas is not None:
            job["replicas"] = replicas
        self._obj["spec"]["replicatedJobs"].append(job)
        return self

    def suspend(self, value: bool) -> Self:
        self._obj["spec"]["suspend"] = value
        return self

    def success_policy(self, policy: Obj) -> Self:
        self._obj["spec"]["successPolicy"] = policy
        return self

    def failure_policy(self, policy: Obj) -> Self:
        self._obj["spec"]["failurePolicy"] = policy
        return self

    def status_counts(
        self,
        name: str,
        *,
        ready: int = 0,
        active: int = 0,
        succeeded: int = 0,
        failed: int = 0,
        suspended: int = 0,
    ) -> Self:
        """Add a ``status.replicatedJobsStatus`` entry."""
        self._obj["status"]["replicatedJobsStatus"].append(
            {
                "name": name,
                "ready": ready,
                "active": active,
                "succeeded": succeeded,
                "failed": failed,
                "suspended": suspended,
            }
        )
        return self

    def condition(
        self,
        type_: str,
        status: str,
        time: str = ADMITTED,
        *,
        reason: str | None = None,
        message: str | None = None,
    ) -> Self:
        """Add a condition; reason and message default to the JobSet controller's. A true
        Completed or Failed also sets ``terminalState``, as the controller does."""
        default_reason, default_message = JOBSET_CONDITION_REASONS.get(
            (type_, status), ("Test", "set by test")
        )
        self._obj["status"].setdefault("conditions", []).append(
            condition(
                type_,
                status,
                default_reason if reason is None else reason,
                default_message if message is None else message,
                time,
            )
        )
        if status == "True" and type_ in ("Completed", "Failed"):
            self._obj["status"]["terminalState"] = type_
        return self

    def admitted(self, time: str = ADMITTED) -> Self:
        """Resumed by Kueue: ``suspend: false`` and ``Suspended=False`` at ``time``."""
        return self.suspend(False).condition("Suspended", "False", time)

    def restarts(self, count: int) -> Self:
        self._obj["status"]["restarts"] = count
        return self

    def status(self, **fields: Any) -> Self:
        """Replace the whole status by ``fields`` (a decider's input as a test states it)."""
        self._obj["status"] = dict(fields)
        return self

    def without_status(self) -> Self:
        del self._obj["status"]
        return self

    def obj(self) -> Obj:
        return copy.deepcopy(self._obj)


class WorkloadBuilder:
    """A ``kueue.x-k8s.io/v1beta1`` Workload, as Kueue writes it for a JobSet."""

    def __init__(self, jobset_name: str, jobset_uid: str, namespace: str = NAMESPACE) -> None:
        self._obj: Obj = {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {
                "name": f"jobset-{jobset_name}-abcde",
                "namespace": namespace,
                "labels": {"kueue.x-k8s.io/job-uid": jobset_uid},
                "ownerReferences": [
                    {
                        "apiVersion": JOBSET_API_VERSION,
                        "kind": "JobSet",
                        "name": jobset_name,
                        "uid": jobset_uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"podSets": [], "queueName": QUEUE},
            "status": {},
        }

    def pod_set(
        self, name: str, *, count: int = 2, node_selector: dict[str, str] | None = None
    ) -> Self:
        spec: Obj = {"containers": [{"name": "main", "image": "trainer:latest"}]}
        if node_selector is not None:
            spec["nodeSelector"] = node_selector
        self._obj["spec"]["podSets"].append(
            {"name": name, "count": count, "template": {"spec": spec}}
        )
        return self

    def condition(
        self, type_: str, status: str, reason: str, message: str, time: str = CREATED
    ) -> Self:
        self._obj["status"].setdefault("conditions", []).append(
            condition(type_, status, reason, message, time)
        )
        return self

    def waiting(self, reason: str, message: str, time: str = CREATED) -> Self:
        """Kueue keeps it in the queue: ``QuotaReserved=False`` with ``reason``."""
        return self.condition("QuotaReserved", "False", reason, message, time)

    def admit(
        self,
        *assignments: tuple[str, dict[str, str]],
        cluster: str | None = None,
        time: str = ADMITTED,
    ) -> Self:
        """Quota reserved and admitted in ClusterQueue ``cq``; ``assignments`` are
        (pod set, resource → flavor); ``cluster`` is MultiKueue's placement."""
        reserved = "Quota reserved in ClusterQueue cq"
        self.condition("QuotaReserved", "True", "QuotaReserved", reserved, time)
        self.condition("Admitted", "True", "Admitted", "The workload is admitted", time)
        self._obj["status"]["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": name, "flavors": flavors, "resourceUsage": {}, "count": 2}
                for name, flavors in assignments
            ],
        }
        if cluster is not None:
            self._obj["status"]["clusterName"] = cluster
        return self

    def owner(self, *refs: Obj) -> Self:
        """Replace the owner references."""
        self._obj["metadata"]["ownerReferences"] = list(refs)
        return self

    def obj(self) -> Obj:
        return copy.deepcopy(self._obj)
