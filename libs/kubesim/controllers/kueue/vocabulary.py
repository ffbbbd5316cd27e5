"""Kueue's names the simulator uses: labels, annotations, the upstream versions it follows
and the reasons a waiting Workload gives.
"""

from __future__ import annotations

import enum

PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
MULTIKUEUE_CLUSTER_ANNOTATION = "kubesim.xmc/multikueue-cluster"
SEQUENCE_ANNOTATION = "kubesim.xmc/queue-sequence"
"""Store revision at the Workload's creation: FIFO tie-break below timestamps' 1 s grain."""
OWNER_NOT_FOUND = "OwnerNotFound"
OWNER_NOT_FOUND_MESSAGE = "The workload's owner no longer exists"
"""Upstream's ``WorkloadFinishedReasonOwnerNotFound`` and its message."""
WORKLOAD_PRIORITY_CLASS_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"


class KueueVersion(enum.StrEnum):
    """Which upstream defaults the simulator follows for the reasons of waiting Workloads."""

    V0_19 = "0.19"
    """v0.19.2: ``UnadmittedWorkloadsObservability`` off — ``Pending`` / ``Inadmissible``."""
    V0_20 = "0.20"
    """Current upstream (main, v0.20.0-devel): the gate on — the granular reasons."""


DEFAULT_KUEUE_VERSION = KueueVersion.V0_19


class WaitReason(enum.StrEnum):
    """Kueue's granular ``QuotaReserved=False`` reasons (``UnadmittedWorkloadsObservability``)."""

    WAITING_FOR_QUOTA = "WaitingForQuota"
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    NO_MATCHING_FLAVOR = "NoMatchingFlavor"
    WAITING_FOR_PREEMPTED_WORKLOADS = "WaitingForPreemptedWorkloads"
    PENDING_EVALUATION = "PendingEvaluation"
    MISCONFIGURED = "Misconfigured"


def quota_reserved_reason(reason: WaitReason, version: KueueVersion) -> str:
    """The reason a version writes: the granular one, or (gate off) the queue blockers'
    ``Inadmissible`` and the scheduler's ``Pending`` (``UnadmittedWorkloadReasonWithFallback``)."""
    if version != KueueVersion.V0_19:
        return str(reason)
    return "Inadmissible" if reason == WaitReason.MISCONFIGURED else "Pending"
