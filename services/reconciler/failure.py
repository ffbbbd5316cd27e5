"""Why a JobSet failed, as one bounded sentence a researcher can act on (issue 12.4).

A FAILED work unit must say why: the failing container's exit code and reason
(``Error``, ``OOMKilled``), the Job's own reason (``DeadlineExceeded``,
``BackoffLimitExceeded``, ``PodFailurePolicy``), a container that never started, or at
least the JobSet's failure message. :func:`decide_failure_reason` reads the failed
JobSet, its child Jobs (whichever the shell could read) and its pods, and returns a
:class:`FailureReason`; :func:`failure_message` makes it the ERROR ``system_message``
that the terminal FAILED observation carries. Pure: no I/O, no clock, so every case is
a row of a table test.

The order of the evidence is the point:

1. *Which Job.* The JobSet's ``Failed`` message names the first failed Job
   (upstream's ``messageWithFirstFailedJob``: ``… (first failed job: NAME)``); else the
   Job whose ``Failed`` condition is oldest (upstream's ``findFirstFailedJob``); else the
   Job of the first pod that failed.
2. *The Job stopped its pods itself* (``DeadlineExceeded``): the Job's reason is the
   cause, and the exit codes of its pods (SIGTERM's 143) are consequences, so they are
   not reported; a container that was stuck before it could start (an image that cannot
   be pulled) is added, because that is usually why the deadline passed.
3. *A pod that failed on its own*: the earliest container, init containers included,
   that terminated with a non-zero exit code — ``state.terminated``, or
   ``lastState.terminated`` of a container that was restarted in place — *before* its pod
   was deleted (whatever ends after the deletion was killed by it); or a pod-level
   ``status.reason`` (``Evicted``, a pod's own ``DeadlineExceeded``).
4. *A container that never started* (``ErrImagePull``, ``CreateContainerConfigError``…).
5. The Job's ``Failed`` condition alone, then the JobSet's alone.

Text copied from the cluster goes through ``xmc.messages.printable`` and the whole text
is cut to :data:`MAX_TEXT` characters: termination messages can be long.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

from reconciler.observe import (
    STARTUP_FAILURE_REASONS,
    belongs_to,
    cluster_error,
)
from xmc.kjson import as_mapping, as_sequence, as_str, condition_of, labels_of, metadata_of
from xmc.messages import printable
from xmc.timestamps import parse_rfc3339
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.internal.v1.executions_pb2 import RunFailure

#: Characters of ``user_facing_text`` at most (the cut ends in "…").
MAX_TEXT: Final = 1000
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
#: The label batch/v1 put on pods before ``batch.kubernetes.io/job-name``.
LEGACY_JOB_NAME_LABEL: Final = "job-name"
JOB_UID_LABEL: Final = "batch.kubernetes.io/controller-uid"
RESTART_ATTEMPT_LABEL: Final = "jobset.sigs.k8s.io/restart-attempt"
#: The pod condition the control plane sets on a pod it is about to delete for reasons
#: not of the pod's making (preemption, eviction, taint manager, pod GC, kubelet's
#: node-pressure eviction): k8s.io/api/core/v1 ``DisruptionTarget``.
DISRUPTION_TARGET: Final = "DisruptionTarget"

#: Job failure reasons for which the Job controller itself deleted the running pods.
JOB_STOPPED_ITS_PODS: Final = frozenset({"DeadlineExceeded"})

_FIRST_FAILED_JOB = re.compile(r"\(first failed job: ([^)\s]+)\)")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_CONTAINER_KINDS: Final = (
    ("initContainerStatuses", "init container"),
    ("containerStatuses", "container"),
)


class FailureCause(enum.StrEnum):
    """Where the reason came from; small, so it can label a metric."""

    #: The JobSet has not failed: nothing to say (not an error, an explicit answer).
    NOT_FAILED = "not_failed"
    #: A container exited with a non-zero code (init containers too).
    CONTAINER = "container"
    #: The pod failed with a reason of its own (``Evicted``, ``DeadlineExceeded``).
    POD = "pod"
    #: A container never started (image pull, container config).
    STARTUP = "startup"
    #: The Job's ``Failed`` condition (``DeadlineExceeded``, ``BackoffLimitExceeded``…).
    JOB = "job"
    #: Nothing but the JobSet's own ``Failed`` condition.
    JOBSET = "jobset"


@dataclass(frozen=True)
class FailureReason:
    cause: FailureCause
    #: Printable, at most :data:`MAX_TEXT` characters; "" for NOT_FAILED.
    text: str
    #: The failed Job, "" when not known.
    job: str = ""
    #: The failing container's exit code (CONTAINER only): what a retry policy matches.
    exit_code: int | None = None
    #: A pod of the failed Job carries ``DisruptionTarget``: preempted, evicted or its
    #: node lost, not failed of its own (a retry of it spends no attempt).
    disrupted: bool = False

    def facts(self) -> RunFailure:
        """The facts the ESS judges a retry on (``internal.v1.RunFailure``)."""
        facts = RunFailure(disrupted=self.disrupted, cause=self.cause.value)
        if self.exit_code is not None:
            facts.exit_code = self.exit_code
        return facts


NOT_FAILED: Final = FailureReason(FailureCause.NOT_FAILED, "")


# --- small readers of API objects (the generic ones are ``xmc.kjson``'s) --------------


def _name(obj: Mapping[str, Any]) -> str:
    return as_str(metadata_of(obj).get("name"))


def _current_attempt(pod: Mapping[str, Any], jobset: Mapping[str, Any]) -> bool:
    """Pods of an earlier JobSet restart tell nothing about the failure that ended it."""
    attempt = labels_of(pod).get(RESTART_ATTEMPT_LABEL)
    restarts = as_mapping(jobset.get("status")).get("restarts")
    return attempt is None or not isinstance(restarts, int) or attempt == str(restarts)


def _pod_job(pod: Mapping[str, Any]) -> str:
    labels = labels_of(pod)
    return as_str(labels.get(JOB_NAME_LABEL)) or as_str(labels.get(LEGACY_JOB_NAME_LABEL))


# --- the failed Job -------------------------------------------------------------------


def named_failed_job(jobset: Mapping[str, Any]) -> str:
    """The Job the JobSet's ``Failed`` message names; "" when it names none."""
    failed = condition_of(jobset, "Failed", status="True")
    match = _FIRST_FAILED_JOB.search(as_str((failed or {}).get("message")))
    return match.group(1) if match else ""


def _oldest_failed_job(jobs: Sequence[Mapping[str, Any]]) -> str:
    """The Job whose ``Failed`` condition is oldest; list order breaks ties (and ranks
    unparseable times last)."""
    failed: list[tuple[bool, datetime, int, str]] = []
    for index, job in enumerate(jobs):
        condition = condition_of(job, "Failed", status="True")
        if condition is not None:
            at = parse_rfc3339(condition.get("lastTransitionTime"))
            failed.append((at is None, at or _EPOCH, index, _name(job)))
    return min(failed)[3] if failed else ""


# --- what the pods say ----------------------------------------------------------------


@dataclass(frozen=True)
class _PodFailure:
    """One piece of evidence from one pod, with when it happened (None: unknown)."""

    at: datetime | None
    pod: str
    order: int
    cause: FailureCause
    detail: str
    job: str
    exit_code: int | None = None


def _container_detail(kind: str, container: str, pod: str, terminated: Mapping[str, Any]) -> str:
    code = terminated.get("exitCode")
    text = f'{kind} "{container}" of pod "{pod}" exited with code {code}'
    reason = as_str(terminated.get("reason"))
    if reason:
        text += f" ({reason})"
    message = as_str(terminated.get("message")).strip()
    return f"{text}: {message}" if message else text


def _killed(terminated: Mapping[str, Any], deleted_at: datetime | None) -> bool:
    """Ended at or after its pod's deletion (or at an unknown time after one): killed."""
    if deleted_at is None:
        return False
    finished = parse_rfc3339(terminated.get("finishedAt"))
    return finished is None or finished >= deleted_at


def _container_failures(pod: Mapping[str, Any]) -> list[_PodFailure]:
    """Non-zero exits of this pod's containers that were not caused by its deletion."""
    status, name, job = as_mapping(pod.get("status")), _name(pod), _pod_job(pod)
    deleted_at = parse_rfc3339(metadata_of(pod).get("deletionTimestamp"))
    found: list[_PodFailure] = []
    order = 0
    for key, kind in _CONTAINER_KINDS:
        for container in map(as_mapping, as_sequence(status.get(key))):
            for state_key in ("state", "lastState"):
                terminated = as_mapping(as_mapping(container.get(state_key)).get("terminated"))
                code = terminated.get("exitCode")
                order += 1
                if not isinstance(code, int) or code == 0 or _killed(terminated, deleted_at):
                    continue
                detail = _container_detail(kind, as_str(container.get("name")), name, terminated)
                at = parse_rfc3339(terminated.get("finishedAt"))
                found.append(
                    _PodFailure(at, name, order, FailureCause.CONTAINER, detail, job, code)
                )
    return found


def _pod_reason(pod: Mapping[str, Any]) -> _PodFailure | None:
    """A failed pod's own ``status.reason`` (the kubelet evicted it, or its
    ``activeDeadlineSeconds`` passed): its containers were killed *because* of it."""
    status = as_mapping(pod.get("status"))
    reason = as_str(status.get("reason"))
    if status.get("phase") != "Failed" or not reason:
        return None
    detail = f'pod "{_name(pod)}" failed: {reason}'
    message = as_str(status.get("message")).strip()
    if message:
        detail += f" ({message})"
    ends = [t for c in as_sequence(status.get("containerStatuses")) if (t := _finished_at(c))]
    at = min(ends, default=None)
    return _PodFailure(at, _name(pod), 0, FailureCause.POD, detail, _pod_job(pod))


def _finished_at(container: Any) -> datetime | None:
    terminated = as_mapping(as_mapping(as_mapping(container).get("state")).get("terminated"))
    return parse_rfc3339(terminated.get("finishedAt"))


def _stuck(pods: Sequence[Mapping[str, Any]]) -> _PodFailure | None:
    """The first container (init containers first, pods by name) waiting with a reason
    that never clears on its own."""
    for pod in sorted(pods, key=_name):
        status = as_mapping(pod.get("status"))
        for key, kind in _CONTAINER_KINDS:
            for container in map(as_mapping, as_sequence(status.get(key))):
                waiting = as_mapping(as_mapping(container.get("state")).get("waiting"))
                reason = as_str(waiting.get("reason"))
                if reason not in STARTUP_FAILURE_REASONS:
                    continue
                where = f'{kind} "{as_str(container.get("name"))}" of pod "{_name(pod)}"'
                detail = f"{where} could not start: {reason}"
                message = as_str(waiting.get("message")).strip()
                if message:
                    detail += f" ({message})"
                return _PodFailure(None, _name(pod), 0, FailureCause.STARTUP, detail, _pod_job(pod))
    return None


def _first_failure(pods: Sequence[Mapping[str, Any]]) -> _PodFailure | None:
    """The earliest failure among the pods; a pod's own reason stands for its containers."""
    found: list[_PodFailure] = []
    for pod in pods:
        own = _pod_reason(pod)
        found.extend([own] if own is not None else _container_failures(pod))
    if not found:
        return None
    return min(found, key=lambda f: (f.at is None, f.at or _EPOCH, f.pod, f.order))


# --- the decision ---------------------------------------------------------------------


def _bounded(text: str) -> str:
    text = printable(text)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _job_prefix(job: str, condition: Mapping[str, Any] | None) -> str:
    reason = as_str((condition or {}).get("reason"))
    return f'job "{job}" failed' + (f" ({reason})" if reason else "")


def _jobset_only(jobset: Mapping[str, Any], failed: Mapping[str, Any], job: str) -> FailureReason:
    reason, message = as_str(failed.get("reason")), as_str(failed.get("message")).strip()
    text = f'JobSet "{_name(jobset)}" failed' + (f" ({reason})" if reason else "")
    return FailureReason(
        FailureCause.JOBSET, _bounded(f"{text}: {message}" if message else text), job
    )


def decide_failure_reason(
    jobset: Mapping[str, Any],
    jobs: Iterable[Mapping[str, Any]] = (),
    pods: Iterable[Mapping[str, Any]] = (),
) -> FailureReason:
    """The reason a failed JobSet failed (see the module docstring for the order).

    ``jobs`` and ``pods`` may hold anything the shell read (other JobSets' objects, an
    older incarnation's, nothing at all when the reads failed): only this JobSet's, of
    its current restart attempt, are considered.
    """
    failed = condition_of(jobset, "Failed", status="True")
    if failed is None:
        return NOT_FAILED
    own_jobs = [j for j in jobs if belongs_to(j, jobset)]
    own_pods = [p for p in pods if belongs_to(p, jobset) and _current_attempt(p, jobset)]

    # 1. Which Job failed first.
    name = named_failed_job(jobset) or _oldest_failed_job(own_jobs)
    if not name:
        first = _first_failure(own_pods)
        name = first.job if first is not None else ""
    job = next((j for j in own_jobs if _name(j) == name), None)
    condition = None if job is None else condition_of(job, "Failed", "FailureTarget", status="True")
    job_uid = as_str(metadata_of(job or {}).get("uid"))
    job_pods = [
        p
        for p in own_pods
        if (not name or _pod_job(p) == name)
        and (not job_uid or labels_of(p).get(JOB_UID_LABEL, job_uid) == job_uid)
    ]
    prefix = _job_prefix(name, condition) if name else f'JobSet "{_name(jobset)}" failed'
    return _decide(jobset, failed, name, condition, prefix, job_pods)


def _disrupted(pod: Mapping[str, Any]) -> bool:
    return condition_of(pod, DISRUPTION_TARGET, status="True") is not None


def _decide(
    jobset: Mapping[str, Any],
    failed: Mapping[str, Any],
    name: str,
    condition: Mapping[str, Any] | None,
    prefix: str,
    job_pods: Sequence[Mapping[str, Any]],
) -> FailureReason:
    """Steps 2–5 of the module docstring, on the failed Job's pods."""

    # 2. The Job stopped its pods itself: its reason, and what kept a container from starting.
    if condition is not None and as_str(condition.get("reason")) in JOB_STOPPED_ITS_PODS:
        text = f"{prefix}: {as_str(condition.get('message')).strip() or condition.get('reason')}"
        stuck = _stuck(job_pods)
        if stuck is not None:
            return FailureReason(FailureCause.STARTUP, _bounded(f"{text}; {stuck.detail}"), name)
        return FailureReason(FailureCause.JOB, _bounded(text), name)

    # 3. A pod that failed on its own, then 4. a container that never started.
    evidence = _first_failure(job_pods) or _stuck(job_pods)
    if evidence is not None:
        text = _bounded(f"{prefix}: {evidence.detail}")
        pod = next((p for p in job_pods if _name(p) == evidence.pod), {})
        return FailureReason(evidence.cause, text, name, evidence.exit_code, _disrupted(pod))

    # 5. The Job's condition alone, then the JobSet's; disrupted if a pod of it was.
    disrupted = any(_disrupted(p) for p in job_pods)
    if condition is not None:
        message = as_str(condition.get("message")).strip()
        text = _bounded(f"{prefix}: {message}" if message else prefix)
        return FailureReason(FailureCause.JOB, text, name, disrupted=disrupted)
    return replace(_jobset_only(jobset, failed, name), disrupted=disrupted)


class DescribedFailure(NamedTuple):
    """A FAILED JobSet's reason, as the terminal write carries it."""

    message: StructuredMessage | None
    facts: RunFailure


def describe_failure(jobset: Mapping[str, Any], reason: FailureReason) -> DescribedFailure:
    return DescribedFailure(failure_message(jobset, reason), reason.facts())


def failure_message(jobset: Mapping[str, Any], reason: FailureReason) -> StructuredMessage | None:
    """The ERROR ``system_message`` (source KUBERNETES: the text is the cluster's) of the
    FAILED observation; None when there is nothing to say."""
    if reason.cause is FailureCause.NOT_FAILED:
        return None
    return cluster_error(jobset, reason.text)
