"""The reads behind a failure reason (``reconciler.failure``): the I/O half, kept out of
the watch handlers.

A FAILED JobSet's reason is decided from its first failed Job and that Job's pods, read
when the failure is observed rather than taken from the pod watch's cache: the JobSet's
``Failed`` may be delivered before the pod watch delivers the failed pod (two streams,
no order between them), and the first FAILED write is final — a finished execution is
immutable (SPEC §5.2) — so a stale cache would lose the reason for good. Only failed
JobSets pay for the reads, a few times each (their events until they are deleted).

Every read is bounded and may fail on its own: without the Job (say RBAC does not grant
``get`` on ``batch/jobs``) its pods still tell the exit code; without a pod list the
watch cache stands in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import structlog

from reconciler.failure import JOB_NAME_LABEL, named_failed_job
from reconciler.observe import JOBSET_NAME_LABEL
from xmc.kube import PODS, KubeError, Resource
from xmc.kube_client import KubeClient

log = structlog.get_logger()
Obj = dict[str, Any]

#: batch/v1 Jobs: the first failed one is read for its ``Failed`` reason.
JOBS: Final = Resource("batch", "v1", "jobs")
#: Seconds each read may hold up the JobSet handler.
READ_TIMEOUT: Final = 5.0
#: Pods read (one page): the failed Job's, which are ``parallelism`` and its retries.
MAX_PODS: Final = 500


async def read_failure_evidence(
    kube: KubeClient,
    namespace: str,
    jobset: Obj,
    *,
    cached_pods: Callable[[str], list[Obj]],
) -> tuple[list[Obj], list[Obj]]:
    """(jobs, pods) for :func:`reconciler.failure.decide_failure_reason`: the Job the
    JobSet's ``Failed`` message names, and that Job's pods (all the JobSet's pods when it
    names none); ``cached_pods(jobset name)`` when the list fails."""
    name = jobset["metadata"]["name"]
    job_name = named_failed_job(jobset)
    jobs: list[Obj] = []
    if job_name:
        try:
            job = await kube.get(JOBS, namespace, job_name, request_timeout=READ_TIMEOUT)
            jobs = [job] if job is not None else []
        except KubeError as error:
            log.warning("failed Job unreadable; reason from its pods", job=job_name,
                        failure=error.failure.value, error=str(error))  # fmt: skip
    selector = f"{JOB_NAME_LABEL}={job_name}" if job_name else f"{JOBSET_NAME_LABEL}={name}"
    try:
        page = await kube.list_page(
            PODS, namespace, label_selector=selector, limit=MAX_PODS,
            request_timeout=READ_TIMEOUT,
        )  # fmt: skip
    except KubeError as error:
        log.warning("pods unreadable; reason from the watch cache", jobset=name,
                    failure=error.failure.value, error=str(error))  # fmt: skip
        return jobs, cached_pods(name)
    return jobs, list(page.get("items") or [])
