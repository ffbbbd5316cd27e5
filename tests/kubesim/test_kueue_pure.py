"""Table tests of the Kueue simulator's pure decisions added for upstream fidelity:
waiting reasons per version, no-fit reasons, two-phase preemption, the release of an
evicted Workload, the JobSet ``IsActive`` and the queue-name webhook rule."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from kubesim.controllers.kueue.admission import admit
from kubesim.controllers.kueue.flavors import assign_flavors
from kubesim.controllers.kueue.model import (
    ClusterQueueModel,
    FlavorQuota,
    PodSetRequest,
    QueuedWorkload,
    QueueState,
    ResourceGroup,
    Verdict,
)
from kubesim.controllers.kueue.parse import parse_cluster_queue
from kubesim.controllers.kueue.preemption import choose_victims
from kubesim.controllers.kueue.status import released_status
from kubesim.controllers.kueue.vocabulary import KueueVersion, WaitReason, quota_reserved_reason
from kubesim.controllers.kueue.webhooks import validate_jobset_update
from kubesim.controllers.kueue.workload import jobset_active
from kubesim.errors import ApiError

NOW = "2026-01-02T03:04:05Z"
V19, V20 = KueueVersion.V0_19, KueueVersion.V0_20


def _cq(preemption: str = "LowerPriority", cpu: int = 4) -> ClusterQueueModel:
    flavor = FlavorQuota("default-flavor", {"cpu": Decimal(cpu)})
    return ClusterQueueModel("cq", (ResourceGroup(frozenset({"cpu"}), (flavor,)),), preemption)


def _wl(
    name: str,
    cpu: int,
    *,
    priority: int = 0,
    admitted: bool = False,
    evicted: bool = False,
    at: str = "2026-01-01T00:00:00Z",
) -> QueuedWorkload:
    usage = {("default-flavor", "cpu"): Decimal(cpu)} if admitted else {}
    return QueuedWorkload(
        "default",
        name,
        f"uid-{name}",
        f"job-{name}",
        "lq",
        priority,
        at,
        0,
        (PodSetRequest("main", 1, {"cpu": Decimal(cpu)}),),
        admitted_to="cq" if admitted else None,
        usage=usage,
        admitted_at=at,
        evicted=evicted,
    )


def _state(cq: ClusterQueueModel) -> QueueState:
    return QueueState({"cq": cq}, {("default", "lq"): "cq"})


@pytest.mark.parametrize(
    ("reason", "version", "written"),
    [
        (WaitReason.MISCONFIGURED, V19, "Inadmissible"),
        (WaitReason.MISCONFIGURED, V20, "Misconfigured"),
        (WaitReason.WAITING_FOR_QUOTA, V19, "Pending"),
        (WaitReason.WAITING_FOR_QUOTA, V20, "WaitingForQuota"),
        (WaitReason.EXCEEDS_MAX_QUOTA, V19, "Pending"),
        (WaitReason.EXCEEDS_MAX_QUOTA, V20, "ExceedsMaxQuota"),
        (WaitReason.WAITING_FOR_PREEMPTED_WORKLOADS, V19, "Pending"),
        (WaitReason.WAITING_FOR_PREEMPTED_WORKLOADS, V20, "WaitingForPreemptedWorkloads"),
        (WaitReason.PENDING_EVALUATION, V19, "Pending"),
        (WaitReason.PENDING_EVALUATION, V20, "PendingEvaluation"),
    ],
)
def test_quota_reserved_reason(reason: WaitReason, version: KueueVersion, written: str) -> None:
    assert quota_reserved_reason(reason, version) == written


@pytest.mark.parametrize(
    ("workload", "usage", "reason"),
    [
        pytest.param(_wl("a", 6), {}, WaitReason.EXCEEDS_MAX_QUOTA, id="above nominal"),
        pytest.param(
            _wl("a", 2),
            {("default-flavor", "cpu"): Decimal(3)},
            WaitReason.WAITING_FOR_QUOTA,
            id="quota in use",
        ),
    ],
)
def test_no_fit_reason(
    workload: QueuedWorkload, usage: dict[tuple[str, str], Decimal], reason: WaitReason
) -> None:
    fit = assign_flavors(_cq(), workload, usage)
    assert (fit.fits, fit.reason) == (False, reason)


def test_earlier_pod_sets_count_as_previously_considered_requests() -> None:
    workload = QueuedWorkload(
        "default", "two", "u", "j", "lq", 0, "", 0,
        (PodSetRequest("a", 1, {"cpu": Decimal(3)}), PodSetRequest("b", 1, {"cpu": Decimal(2)})),
    )  # fmt: skip
    fit = assign_flavors(_cq(), workload, {})
    assert fit.message == (
        "couldn't assign flavors to pod set b: insufficient quota for cpu in flavor "
        "default-flavor, previously considered podsets requests (3) + current podset request "
        "(2) > maximum capacity (4)"
    )


def _decided(decision: Any) -> list[tuple[str, str, str]]:
    """(name, verdict, reason): the reason only where the workload waits."""
    return [
        (d.workload[1], str(d.verdict), str(d.reason) if d.verdict == Verdict.PENDING else "")
        for d in decision.decisions
    ]


@pytest.mark.parametrize(
    ("cq", "workloads", "decided"),
    [
        pytest.param(
            _cq(),
            [_wl("low", 4, priority=100, admitted=True), _wl("high", 2, priority=900)],
            [
                ("low", "Evict", ""),
                ("high", "Pending", "WaitingForPreemptedWorkloads"),
            ],
            id="the victim is evicted, the preemptor waits",
        ),
        pytest.param(
            _cq(),
            [
                _wl("low", 4, priority=100, admitted=True, evicted=True),
                _wl("high", 2, priority=900),
            ],
            [("high", "Pending", "WaitingForPreemptedWorkloads")],
            id="an eviction in flight is not issued again",
        ),
        pytest.param(
            _cq(),
            [
                _wl("low", 4, priority=100, admitted=True, evicted=True),
                _wl("high", 2, priority=900, at="2026-01-01T00:00:01Z"),
                _wl("small", 1, priority=0, at="2026-01-01T00:00:02Z"),
            ],
            [
                ("high", "Pending", "WaitingForPreemptedWorkloads"),
                ("small", "Pending", "WaitingForQuota"),
            ],
            id="nothing behind the preemptor takes the room being freed",
        ),
        pytest.param(
            _cq("Never"),
            [_wl("low", 4, priority=100, admitted=True), _wl("high", 2, priority=900)],
            [("high", "Pending", "WaitingForQuota")],
            id="no preemption under Never",
        ),
        pytest.param(
            _cq(),
            [_wl("low", 4, priority=100, admitted=True), _wl("huge", 6, priority=900)],
            [("huge", "Pending", "ExceedsMaxQuota")],
            id="preemption cannot help a request above the quota",
        ),
    ],
)
def test_admit_preempts_in_two_phases(
    cq: ClusterQueueModel, workloads: list[QueuedWorkload], decided: list[tuple[str, str, str]]
) -> None:
    assert _decided(admit(_state(cq), workloads)) == decided


def test_the_preemptor_message_counts_its_victims() -> None:
    decision = admit(
        _state(_cq()), [_wl("low", 4, priority=100, admitted=True), _wl("high", 2, priority=900)]
    )
    evict, wait = decision.decisions
    assert wait.message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        "default-flavor, 2 more needed. Pending the preemption of 1 workload(s)"
    )
    assert evict.verdict == Verdict.EVICT
    assert evict.message == (
        "Preempted to accommodate a workload (UID: uid-high, JobUID: job-high) due to "
        "prioritization in the ClusterQueue; preemptor path: /cq; preemptee path: /cq"
    )


def test_choose_victims_prefers_workloads_already_being_evicted() -> None:
    admitted = [
        _wl("lowest", 2, priority=100, admitted=True),
        _wl("going", 2, priority=500, admitted=True, evicted=True),
    ]
    usage = {("default-flavor", "cpu"): Decimal(4)}
    victims = choose_victims(_cq(), _wl("high", 2, priority=900), admitted, usage)
    assert [v.name for v in victims] == ["going"]


@pytest.mark.parametrize(
    ("spec", "policy"),
    [
        pytest.param({}, "Never", id="upstream default"),
        pytest.param({"preemption": {}}, "Never", id="empty preemption"),
        pytest.param(
            {"preemption": {"withinClusterQueue": "LowerPriority"}}, "LowerPriority", id="set"
        ),
    ],
)
def test_cluster_queue_preemption_default(spec: dict[str, Any], policy: str) -> None:
    assert parse_cluster_queue({"metadata": {"name": "cq"}, "spec": spec}).preemption == policy


def test_released_status_requeues_and_gives_the_quota_back() -> None:
    evicted = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "why"}
    status = {
        "admission": {"clusterQueue": "cq"},
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
            evicted,
        ],
    }
    for version, reason in ((V19, "Pending"), (V20, "PendingEvaluation")):
        released = released_status(status, version, NOW)
        found = {c["type"]: c for c in released["conditions"]}
        assert "admission" not in released
        assert (found["QuotaReserved"]["status"], found["QuotaReserved"]["reason"]) == (
            "False",
            reason,
        )
        assert found["QuotaReserved"]["message"] == "why"
        assert (found["Requeued"]["status"], found["Requeued"]["reason"]) == ("True", "Preempted")
        assert (found["Admitted"]["status"], found["Admitted"]["reason"]) == (
            "False",
            "NoReservation",
        )
        assert found["Evicted"]["status"] == "True"


@pytest.mark.parametrize(
    ("statuses", "active"),
    [
        ([], False),
        ([{"name": "a", "active": 0}, {"name": "b", "active": 0}], False),
        ([{"name": "a", "active": 0}, {"name": "b", "active": 1}], True),
    ],
)
def test_jobset_active(statuses: list[dict[str, Any]], active: bool) -> None:
    assert jobset_active({"status": {"replicatedJobsStatus": statuses}}) is active


def _js(queue: str, *, suspend: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": "js", "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"suspend": suspend},
    }


@pytest.mark.parametrize(
    ("old", "new", "denied"),
    [
        pytest.param(_js("a", suspend=False), _js("b", suspend=False), True, id="running"),
        pytest.param(_js("a", suspend=True), _js("b", suspend=False), True, id="resumed at once"),
        pytest.param(_js("a", suspend=True), _js("b", suspend=True), False, id="suspended"),
        pytest.param(_js("a", suspend=False), _js("b", suspend=True), False, id="suspending"),
        pytest.param(_js("a", suspend=False), _js("a", suspend=False), False, id="unchanged"),
    ],
)
def test_queue_name_is_immutable_unless_suspended(
    old: dict[str, Any], new: dict[str, Any], denied: bool
) -> None:
    if not denied:
        validate_jobset_update(old, new)
        return
    with pytest.raises(ApiError) as raised:
        validate_jobset_update(old, new)
    assert (raised.value.code, raised.value.reason) == (422, "Invalid")
    assert raised.value.message == (
        'admission webhook "vjobset.kb.io" denied the request: '
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "b": field is immutable'
    )
