"""The node agent's decisions (``nodeagent.decide`` and its helpers), as tables: what the
kubelet of a fake Node writes, when it looks again, and when it deletes a pod."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import nodeagent
import pytest

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
Obj = dict[str, Any]


def pod(
    behavior: Obj | None = None,
    *,
    status: Obj | None = None,
    deleted_at: datetime | None = None,
    containers: tuple[str, ...] = ("main",),
    restart_policy: str = "Never",
    **per_container: Obj,
) -> Obj:
    annotations = {}
    if behavior is not None:
        annotations["kubesim.xmc/behavior"] = json.dumps(behavior)
    for name, spec in per_container.items():
        annotations[f"kubesim.xmc/behavior.{name}"] = json.dumps(spec)
    meta: Obj = {"name": "p", "namespace": "ns", "uid": "u-1", "annotations": annotations}
    meta["generation"] = 1
    if deleted_at is not None:
        meta["deletionTimestamp"] = deleted_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["deletionGracePeriodSeconds"] = 30
    return {
        "metadata": meta,
        "spec": {
            "nodeName": "kwok-node-0",
            "restartPolicy": restart_policy,
            "containers": [{"name": n, "image": "busybox"} for n in containers],
        },
        "status": status or {},
    }


def decide(p: Obj, at: float) -> nodeagent.Decision:
    return nodeagent.decide(
        p,
        T0 + timedelta(seconds=at),
        start=T0,
        host_ip="127.0.0.1",
        pod_ip="10.128.0.7",
        start_seconds=1.0,
        run_seconds=3.0,
    )


def state(decision: nodeagent.Decision, index: int = 0) -> Obj:
    assert decision.status is not None
    container: Obj = decision.status["containerStatuses"][index]["state"]
    return container


@pytest.mark.parametrize(
    ("behavior", "at", "phase", "kind", "detail"),
    [
        (None, 0.5, "Pending", "waiting", {"reason": "ContainerCreating"}),
        (None, 2.0, "Running", "running", {}),
        (None, 4.0, "Succeeded", "terminated", {"exitCode": 0, "reason": "Completed"}),
        ({"run_seconds": None}, 10_000.0, "Running", "running", {}),
        ({"run_seconds": 2, "exit_code": 3}, 3.5, "Failed", "terminated",
         {"exitCode": 3, "reason": "Error"}),
        ({"oom_killed": True, "run_seconds": 1}, 2.5, "Failed", "terminated",
         {"exitCode": 137, "reason": "OOMKilled"}),
        ({"crash": True}, 1.0, "Failed", "terminated", {"exitCode": 1, "reason": "Error"}),
        ({"image_pull_error": True}, 2.0, "Pending", "waiting", {"reason": "ErrImagePull"}),
        ({"image_pull_error": True}, 12.0, "Pending", "waiting", {"reason": "ImagePullBackOff"}),
        ({"config_error": True}, 2.0, "Pending", "waiting",
         {"reason": "CreateContainerConfigError"}),
        ({"waiting_reason": "InvalidImageName", "message": "bad"}, 2.0, "Pending", "waiting",
         {"reason": "InvalidImageName", "message": "bad"}),
        ({"start_seconds": 5, "run_seconds": 1}, 4.0, "Pending", "waiting",
         {"reason": "ContainerCreating"}),
        ({"no_such_key": 1}, 2.0, "Pending", "waiting", {"reason": "CreateContainerConfigError"}),
    ],
)  # fmt: skip
def test_a_pod_follows_its_behaviour(
    behavior: Obj | None, at: float, phase: str, kind: str, detail: Obj
) -> None:
    decision = decide(pod(behavior), at)
    assert decision.status is not None
    assert decision.status["phase"] == phase
    assert not decision.delete
    current = state(decision)
    assert list(current) == [kind]
    assert detail.items() <= current[kind].items()


@pytest.mark.parametrize(
    ("behavior", "main", "phase"),
    [
        (None, None, "Running"),  # a Deployment's pod: runs until deleted
        (None, {"start_seconds": 2}, "Running"),  # the container's own, without run_seconds
        ({"run_seconds": 2, "exit_code": 3}, None, "Failed"),  # explicit: no in-place restart
    ],
)
def test_a_restart_always_pod_runs_until_deleted_unless_told_otherwise(
    behavior: Obj | None, main: Obj | None, phase: str
) -> None:
    if main is None:
        always = pod(behavior, restart_policy="Always")
    else:
        always = pod(behavior, restart_policy="Always", main=main)
    decision = decide(always, 10_000.0)
    assert decision.status is not None
    assert decision.status["phase"] == phase


def test_the_kubelet_owns_ips_and_leaves_pod_scheduled_to_the_scheduler() -> None:
    status = decide(pod(), 2.0).status
    assert status is not None
    assert status["hostIP"] == "127.0.0.1"
    assert status["hostIPs"] == [{"ip": "127.0.0.1"}]
    assert status["podIP"] == "10.128.0.7"
    assert status["observedGeneration"] == 1
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    # a True condition clears the reason/message it had while False (strategic merge)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] is None
    assert ready["message"] is None
    container = status["containerStatuses"][0]
    assert container["containerID"].startswith("nodeagent://")
    assert container["restartCount"] == 0
    assert container["state"]["running"]["startedAt"] == "2026-01-01T12:00:01Z"


@pytest.mark.parametrize(
    ("behavior", "at", "next_after"),
    [
        (None, 0.0, 1.0),  # starts
        (None, 2.0, 4.0),  # exits
        ({"run_seconds": None}, 2.0, None),  # never changes again
        ({"image_pull_error": True}, 2.0, 11.0),  # ErrImagePull -> ImagePullBackOff
        ({"run_seconds": 2, "exit_code": 3}, 5.0, None),  # terminal
    ],
)
def test_the_next_look_is_the_next_change(
    behavior: Obj | None, at: float, next_after: float | None
) -> None:
    decision = decide(pod(behavior), at)
    expected = None if next_after is None else T0 + timedelta(seconds=next_after)
    assert decision.next_at == expected


def test_containers_follow_their_own_behaviour() -> None:
    p = pod(
        {"run_seconds": None},
        containers=("main", "side"),
        side={"run_seconds": 2, "exit_code": 4},
    )
    decision = decide(p, 5.0)
    assert decision.status is not None
    assert decision.status["phase"] == "Running"
    assert "running" in state(decision, 0)
    assert state(decision, 1)["terminated"]["exitCode"] == 4


# --- deletion ---------------------------------------------------------------------------


def test_a_deleted_running_pod_runs_until_its_grace_period_ends() -> None:
    ends = T0 + timedelta(seconds=40)  # the API server's deletionTimestamp: deleted at 10 s
    p = pod({"run_seconds": None}, deleted_at=ends)
    during = decide(p, 20.0)
    assert not during.delete
    assert during.status is not None
    assert during.status["phase"] == "Running"
    assert "running" in state(during)
    assert during.next_at == ends

    after = decide(p, 40.5)
    assert after.delete
    assert after.status is not None
    assert after.status["phase"] == "Failed"
    killed = state(after)["terminated"]
    assert killed["exitCode"] == 137
    assert killed["reason"] == "Error"
    assert killed["finishedAt"] == "2026-01-01T12:00:40Z"
    ready = {c["type"]: c for c in after.status["conditions"]}["Ready"]
    assert ready["status"] == "False"
    assert ready["reason"] == "PodCompleted"


def test_a_deleted_pod_whose_containers_exit_in_the_grace_period_goes_then() -> None:
    p = pod({"run_seconds": 15}, deleted_at=T0 + timedelta(seconds=40))
    assert decide(p, 10.0).next_at == T0 + timedelta(seconds=16)
    done = decide(p, 16.0)
    assert done.delete
    assert done.status is not None
    assert done.status["phase"] == "Succeeded"
    assert state(done)["terminated"]["reason"] == "Completed"


def test_a_deleted_pod_with_nothing_running_goes_at_once() -> None:
    p = pod({"image_pull_error": True}, deleted_at=T0 + timedelta(seconds=40))
    decision = decide(p, 5.0)
    assert decision.delete
    assert decision.status is not None
    assert decision.status["phase"] == "Failed"
    assert state(decision)["terminated"]["reason"] == "ContainerStatusUnknown"


def test_a_finished_pod_is_left_alone_until_deleted_then_deleted_at_once() -> None:
    finished = {"phase": "Succeeded", "startTime": "2026-01-01T12:00:00Z"}
    assert decide(pod(status=finished), 100.0) == nodeagent.Decision(None)
    deleted = pod(status=finished, deleted_at=T0 + timedelta(seconds=130))
    assert decide(deleted, 100.0) == nodeagent.Decision(None, delete=True)
    # once deleted with gracePeriodSeconds 0 it only waits for its finalizers
    deleted["metadata"]["deletionGracePeriodSeconds"] = 0
    assert decide(deleted, 101.0) == nodeagent.Decision(None)


# --- helpers ----------------------------------------------------------------------------


def test_started_at_resumes_from_start_time_else_now_in_whole_seconds() -> None:
    now = T0 + timedelta(seconds=5, microseconds=700_000)
    assert nodeagent.started_at(pod(), now) == T0 + timedelta(seconds=5)
    resumed = pod(status={"startTime": "2026-01-01T12:00:00Z"})
    assert nodeagent.started_at(resumed, now) == T0


@pytest.mark.parametrize(
    ("incoming", "cached", "expected"),
    [
        (("u", "5"), None, True),
        (("u", "5"), ("u", "4"), True),
        (("u", "5"), ("u", "5"), True),
        (("u", "4"), ("u", "5"), False),
        (("v", "1"), ("u", "5"), True),  # another pod of that name
    ],
)
def test_newer(incoming: tuple[str, str], cached: tuple[str, str] | None, expected: bool) -> None:
    def obj(uid: str, version: str) -> Obj:
        return {"metadata": {"uid": uid, "resourceVersion": version}}

    assert nodeagent.newer(obj(*incoming), None if cached is None else obj(*cached)) == expected


def test_ip_pool_gives_each_pod_its_own_ip_and_keeps_a_pods_current_one() -> None:
    pool = nodeagent.IpPool()
    first, second = pool.claim("a"), pool.claim("b")
    assert first != second
    assert pool.claim("a") == first
    assert pool.claim("c", current="10.128.9.9") == "10.128.9.9"
    assert pool.claim("d", current=first) not in {first, second, "10.128.9.9"}
    pool.release("a")
    assert pool.claim("e", current=first) == first


def test_only_annotated_nodes_are_fake_and_their_ip_is_the_internal_one() -> None:
    node = {
        "metadata": {"annotations": {"kwok.x-k8s.io/node": "fake"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]},
    }
    assert nodeagent.is_fake_node(node)
    assert not nodeagent.is_fake_node({"metadata": {}})
    assert nodeagent.node_ip(node) == "127.0.0.1"
