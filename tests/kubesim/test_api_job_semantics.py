"""The Job semantics XMC sets, as upstream's Job and JobSet controllers enact them, seen
through kubernetes-asyncio over HTTP: ``activeDeadlineSeconds``, ``podFailurePolicy``
(XMC's ``Ignore`` of ``DisruptionTarget`` among them), the backoff before a failed pod
is replaced, and a JobSet restart under ``failurePolicy``. The simulated clock runs 100
times faster than real time, so each assertion on time reads the objects' timestamps."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, BatchV1Api, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.watch import Watch

pytest.importorskip("kubesim.controllers", reason="the simulated controllers are not built")

from tests.kubesim.controller_support import (
    conditions,
    make_jobset,
    replicated_job,
)
from tests.kubesim.support import JOBSET_API, MakeKubeSim, client_for
from tests.waiting import eventually

G, V = JOBSET_API
SCALE = 100.0
WITHIN = 10.0
"""Real seconds to wait for a condition."""


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)


class Cluster:
    """A kubernetes-asyncio view of one namespace of the simulated cluster."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.custom = CustomObjectsApi(api)
        self.core = CoreV1Api(api)
        self.batch = BatchV1Api(api)

    async def create(self, body: dict[str, Any]) -> None:
        manifest = {"apiVersion": f"{G}/{V}", "kind": "JobSet", **body}
        await self.custom.create_namespaced_custom_object(G, V, "default", "jobsets", manifest)

    async def jobset(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = await self.custom.get_namespaced_custom_object(
            G, V, "default", "jobsets", name
        )
        return found

    async def job(self, name: str) -> dict[str, Any]:
        job = await self.batch.read_namespaced_job(name, "default")
        found: dict[str, Any] = self.api.sanitize_for_serialization(job)
        return found

    async def pods(self, jobset_name: str) -> list[dict[str, Any]]:
        listed = await self.core.list_namespaced_pod(
            "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={jobset_name}"
        )
        pods: list[dict[str, Any]] = self.api.sanitize_for_serialization(listed.items)
        return sorted(
            pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"])
        )

    async def until_jobset(self, name: str, condition: str, status: str = "True") -> dict[str, Any]:
        """The JobSet, read over HTTP, once it has ``condition`` at ``status``."""

        def has(jobset: dict[str, Any]) -> bool:
            found = conditions(jobset).get(condition)
            return found is not None and found.get("status") == status

        latest: dict[str, Any] = await eventually(
            lambda: self.jobset(name), has, within=WITHIN, what=f"{name} {condition}={status}"
        )
        return latest


@contextlib.asynccontextmanager
async def cluster(make_kubesim: MakeKubeSim) -> AsyncIterator[Cluster]:
    sim = await make_kubesim(controllers=True, time_scale=SCALE)
    async with client_for(sim) as api:
        yield Cluster(api)


def _rjob(name: str = "main", **options: Any) -> dict[str, Any]:
    """A replicated job; ``job`` keys go into the Job spec, ``pod`` keys into the pod's."""
    job_spec = options.pop("job", {})
    pod_spec = options.pop("pod", {})
    rjob = replicated_job(name, **options)
    rjob["template"]["spec"].update(job_spec)
    rjob["template"]["spec"]["template"]["spec"].update(pod_spec)
    return rjob


def _unqueued(name: str, *rjobs: dict[str, Any], **options: Any) -> dict[str, Any]:
    """A JobSet that runs at once (no Kueue queue, not suspended)."""
    return make_jobset(name, *rjobs, queue=None, suspend=False, finalizers=(), **options)


# --- activeDeadlineSeconds ---------------------------------------------------------------


async def test_a_job_past_its_active_deadline_fails_and_fails_the_jobset(
    make_kubesim: MakeKubeSim,
) -> None:
    async with cluster(make_kubesim) as kube:
        rjob = _rjob(behavior={"run_seconds": None}, job={"activeDeadlineSeconds": 20})
        await kube.create(_unqueued("late", rjob))
        failed = await kube.until_jobset("late", "Failed")
        job = await kube.job("late-main-0")

    job_failed = conditions(job)["Failed"]
    assert (job_failed["reason"], job_failed["message"]) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    waited = _time(job_failed["lastTransitionTime"]) - _time(job["status"]["startTime"])
    assert 20 <= waited.total_seconds() <= 30
    js_failed = conditions(failed)["Failed"]
    assert (js_failed["reason"], js_failed["message"]) == (
        "FailedJobs",
        "jobset failed due to one or more job failures (first failed job: late-main-0)",
    )


# --- podFailurePolicy ----------------------------------------------------------------------


async def test_a_fail_job_rule_fails_the_job_at_the_first_matching_failure(
    make_kubesim: MakeKubeSim,
) -> None:
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    async with cluster(make_kubesim) as kube:
        rjob = _rjob(
            behavior={"run_seconds": 1, "exit_code": 42},
            backoff_limit=5,
            job={"podFailurePolicy": policy},
        )
        await kube.create(_unqueued("fatal", rjob))
        failed = await kube.until_jobset("fatal", "Failed")
        job = await kube.job("fatal-main-0")
        pods = await kube.pods("fatal")

    (pod,) = pods  # no retry, although backoffLimit allows five
    job_failed = conditions(job)["Failed"]
    assert job_failed["reason"] == "PodFailurePolicy"
    assert job_failed["message"] == (
        f"Container worker for pod default/{pod['metadata']['name']} failed with exit code 42 "
        "matching FailJob rule at index 0"
    )
    assert conditions(failed)["Failed"]["message"].endswith("(first failed job: fatal-main-0)")


async def test_an_ignore_rule_keeps_failures_off_the_backoff_limit(
    make_kubesim: MakeKubeSim,
) -> None:
    policy = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}]}
    async with cluster(make_kubesim) as kube:
        rjob = _rjob(
            behavior={"run_seconds": 1, "exit_code": 42},
            backoff_limit=0,
            job={"podFailurePolicy": policy},
        )
        await kube.create(_unqueued("flaky", rjob))

        async def three_attempts() -> bool:
            return len(await kube.pods("flaky")) >= 3

        await eventually(three_attempts, what="two replacements of ignored failures", within=WITHIN)
        job = await kube.job("flaky-main-0")
        jobset = await kube.jobset("flaky")

    assert "Failed" not in conditions(job)
    assert job["status"].get("failed", 0) == 0
    assert "Failed" not in conditions(jobset)


async def test_xmcs_disruption_target_rule_spares_the_retry_limit(
    make_kubesim: MakeKubeSim,
) -> None:
    """The rule the Actuator writes: a pod failed by a disruption (the eviction API, the
    taint manager or preemption set ``DisruptionTarget``) is replaced, not counted."""
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    async with cluster(make_kubesim) as kube:
        rjob = _rjob(behavior={"run_seconds": None}, job={"podFailurePolicy": policy})
        await kube.create(_unqueued("evicted", rjob))

        async def running() -> bool:
            pods = await kube.pods("evicted")
            return bool(pods) and pods[0]["status"].get("phase") == "Running"

        await eventually(running, what="the pod to run", within=WITHIN)
        (pod,) = await kube.pods("evicted")
        await kube.core.patch_namespaced_pod_status(
            pod["metadata"]["name"], "default", _evicted(pod)
        )

        async def replaced() -> bool:
            return len(await kube.pods("evicted")) == 2

        await eventually(replaced, what="the evicted pod's replacement", within=WITHIN)
        job = await kube.job("evicted-main-0")
        first, second = await kube.pods("evicted")

    assert "Failed" not in conditions(job)
    assert job["status"].get("failed", 0) == 0
    finished = _time(first["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"])
    assert (_time(second["metadata"]["creationTimestamp"]) - finished).total_seconds() >= 10


def _evicted(pod: dict[str, Any]) -> dict[str, Any]:
    """The status an eviction leaves: Failed, ``DisruptionTarget``, containers killed."""
    started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    at = pod["status"]["conditions"][-1]["lastTransitionTime"]
    return {
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "conditions": [
                *pod["status"]["conditions"],
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "lastTransitionTime": at,
                },
            ],
            "containerStatuses": [
                {
                    **container,
                    "ready": False,
                    "state": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "Error",
                            "startedAt": started,
                            "finishedAt": at,
                        }
                    },
                }
                for container in pod["status"]["containerStatuses"]
            ],
        }
    }


# --- the replacement backoff ---------------------------------------------------------------


async def test_failed_pods_are_replaced_after_a_doubling_backoff(
    make_kubesim: MakeKubeSim,
) -> None:
    async with cluster(make_kubesim) as kube:
        rjob = _rjob(behavior={"run_seconds": 1, "exit_code": 1}, backoff_limit=2)
        await kube.create(_unqueued("retry", rjob))
        await kube.until_jobset("retry", "Failed")
        job = await kube.job("retry-main-0")
        pods = await kube.pods("retry")

    assert conditions(job)["Failed"]["reason"] == "BackoffLimitExceeded"
    assert len(pods) == 3
    for failures, (failed, replacement) in enumerate(itertools.pairwise(pods), 1):
        (container,) = failed["status"]["containerStatuses"]
        finished = _time(container["state"]["terminated"]["finishedAt"])
        waited = (_time(replacement["metadata"]["creationTimestamp"]) - finished).total_seconds()
        backoff = 10 * 2 ** (failures - 1)
        # At least the backoff; the slack (0.1 s real) allows for a loaded machine.
        assert backoff <= waited <= backoff + 10, (failures, waited)


# --- a JobSet restart under failurePolicy ----------------------------------------------------


async def test_a_restart_recreates_each_job_once_the_old_one_has_stopped(
    make_kubesim: MakeKubeSim,
) -> None:
    """``main`` fails after 200 s; ``side`` runs until stopped (grace 30 s). The restart
    recreates ``main`` at once (its pod had finished) and ``side`` only once its old pod
    is gone; the second failure reaches ``maxRestarts``."""
    async with cluster(make_kubesim) as kube:
        main = _rjob("main", behavior={"run_seconds": 200, "exit_code": 1})
        side = _rjob(
            "side", behavior={"run_seconds": None}, pod={"terminationGracePeriodSeconds": 30}
        )
        seen: list[dict[str, Any]] = []
        async with _watching(kube, "again", seen):
            await kube.create(_unqueued("again", main, side, failure_policy={"maxRestarts": 1}))
            await kube.until_jobset("again", "RestartingJobSet", "False")  # all Jobs ready
            new_main = await kube.job("again-main-0")
            new_side = await kube.job("again-side-0")
            failed = await kube.until_jobset("again", "Failed")

    restarting = [
        (js["status"], conditions(js)["RestartingJobSet"])
        for js in seen
        if conditions(js).get("RestartingJobSet", {}).get("status") == "True"
    ]
    assert restarting, "the JobSet never showed RestartingJobSet=True"
    status, cond = restarting[0]
    assert (status["restarts"], status["restartsCountTowardsMax"]) == (1, 1)
    assert (cond["reason"], cond["message"]) == (
        "DefaultFailurePolicy",
        "applying RestartJobSet failure policy action (first failed job: again-main-0)",
    )
    restarted_at = _time(cond["lastTransitionTime"])
    for job in (new_main, new_side):
        assert job["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"
    side_wait = _time(new_side["metadata"]["creationTimestamp"]) - restarted_at
    assert side_wait.total_seconds() >= 30  # the old side pod's grace period
    main_wait = _time(new_main["metadata"]["creationTimestamp"]) - restarted_at
    assert main_wait.total_seconds() < 30

    assert failed["status"]["restarts"] == 1
    js_failed = conditions(failed)["Failed"]
    assert (js_failed["reason"], js_failed["message"]) == (
        "ReachedMaxRestarts",
        "jobset failed due to reaching max number of restarts (first failed job: again-main-0)",
    )
    settled = conditions(failed)["RestartingJobSet"]
    assert (settled["status"], settled["reason"], settled["message"]) == (
        "False",
        "JobSetFailed",
        "jobset failed",
    )


@contextlib.asynccontextmanager
async def _watching(kube: Cluster, name: str, seen: list[dict[str, Any]]) -> AsyncIterator[None]:
    """Collect every state of the JobSet ``name`` from a watch while the block runs."""
    started = asyncio.Event()

    async def follow() -> None:
        async with Watch() as watch:
            stream = watch.stream(
                kube.custom.list_namespaced_custom_object,
                G,
                V,
                "default",
                "jobsets",
                field_selector=f"metadata.name={name}",
                allow_watch_bookmarks=True,
            )
            async for event in stream:
                started.set()
                if event["type"] in ("ADDED", "MODIFIED"):
                    seen.append(event["raw_object"])

    task = asyncio.create_task(follow())
    await eventually(lambda: started.is_set() or task.done(), within=WITHIN, what="the watch")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
