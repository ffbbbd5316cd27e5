"""Fluent builders of Pods and their container states, as the API server returns them.

The companion of :mod:`tests.builders` (JobSets and Workloads): a Pod carries the
JobSet and Job controllers' labels (``of_jobset``, ``of_job``) so the Reconciler can
find its JobSet, and one ``containerStatuses`` entry per container.
"""

from __future__ import annotations

import copy
from typing import Self

from tests.builders import ADMITTED, NAMESPACE, Obj

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"


def waiting(reason: str, message: str | None = None) -> Obj:
    """A container state: waiting for ``reason``."""
    state: Obj = {"reason": reason}
    if message is not None:
        state["message"] = message
    return {"waiting": state}


def running(started_at: str = ADMITTED) -> Obj:
    """A container state: running since ``started_at``."""
    return {"running": {"startedAt": started_at}}


def terminated(
    code: int,
    reason: str = "Error",
    *,
    started_at: str,
    finished_at: str,
    message: str | None = None,
) -> Obj:
    """A container state: exited with ``code``."""
    state: Obj = {
        "exitCode": code,
        "reason": reason,
        "startedAt": started_at,
        "finishedAt": finished_at,
    }
    if message is not None:
        state["message"] = message
    return {"terminated": state}


class PodBuilder:
    """A ``v1`` Pod; add it to a JobSet and a Job with :meth:`of_jobset` / :meth:`of_job`."""

    def __init__(self, name: str, namespace: str = NAMESPACE) -> None:
        self._obj: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {}},
            "status": {"phase": "Pending"},
        }

    def of_jobset(
        self, name: str, uid: str | None = None, *, restart_attempt: int | None = None
    ) -> Self:
        """The JobSet controller's labels; without ``uid`` only the name (older JobSets)."""
        labels = self._obj["metadata"]["labels"]
        labels[JOBSET_NAME_LABEL] = name
        if uid is not None:
            labels[JOBSET_UID_LABEL] = uid
        if restart_attempt is not None:
            labels[RESTART_ATTEMPT_LABEL] = str(restart_attempt)
        return self

    def of_job(self, name: str) -> Self:
        """The Job controller's labels (the Job's uid is ``uid-<name>``)."""
        self._obj["metadata"]["labels"].update({JOB_NAME_LABEL: name, JOB_UID_LABEL: f"uid-{name}"})
        return self

    def label(self, key: str, value: str) -> Self:
        self._obj["metadata"]["labels"][key] = value
        return self

    def phase(self, phase: str) -> Self:
        self._obj["status"]["phase"] = phase
        return self

    def deleting(self, at: str = ADMITTED) -> Self:
        self._obj["metadata"]["deletionTimestamp"] = at
        return self

    def container(self, name: str, state: Obj, *, last: Obj | None = None) -> Self:
        """Add a ``containerStatuses`` entry in ``state`` (see :func:`waiting`,
        :func:`running`, :func:`terminated`); ready when running."""
        return self._add("containerStatuses", name, state, last)

    def init_container(self, name: str, state: Obj) -> Self:
        return self._add("initContainerStatuses", name, state, None)

    def reason(self, reason: str, message: str) -> Self:
        """The pod-level ``status.reason`` and ``message`` (eviction, deadline)."""
        self._obj["status"].update(reason=reason, message=message)
        return self

    def disruption(self, reason: str = "PreemptionByScheduler") -> Self:
        """The ``DisruptionTarget`` condition the control plane sets on a pod it deletes
        for reasons not of the pod's making (k8s.io/api/core/v1 ``DisruptionTarget``)."""
        self._obj["status"].setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": reason}
        )
        return self

    def obj(self) -> Obj:
        return copy.deepcopy(self._obj)

    def _add(self, key: str, name: str, state: Obj, last: Obj | None) -> Self:
        self._obj["status"].setdefault(key, []).append(
            {
                "name": name,
                "ready": "running" in state,
                "state": state,
                "lastState": last or {},
                "restartCount": 0,
            }
        )
        return self
