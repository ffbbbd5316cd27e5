"""Kueue objects → ``xmc.v1.Queue`` (``xmc.model.queues``) and the dashboard's view of it
(``ui.queue_view``): tables of named cases, whole results compared."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.builders import CREATED, WorkloadBuilder
from ui.queue_view import fill_percent, neighbour_classes, quota_row, workload_row
from xmc.labels import parse_jobset_name
from xmc.model.queues import (
    Positions,
    QueueRef,
    flavor_quotas,
    priority_change_problem,
    queue_message,
    queued_workload,
    resolve_queue,
    work_unit_of,
)
from xmc.model.states import WorkUnitState
from xmc_api.xmc.v1.queue_pb2 import FlavorQuota, QueuedWorkload

NOW = datetime(2026, 1, 2, 3, 10, 0, tzinfo=UTC)  # 10 min after builders.CREATED
S = WorkUnitState


def cluster_queue(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    resources = [
        {"name": "cpu", "nominalQuota": "64", "borrowingLimit": "16"},
        {"name": "memory", "nominalQuota": "256Gi"},
    ]
    return {
        "metadata": {"name": "research"},
        "spec": {"resourceGroups": [{"flavors": [{"name": "on-demand", "resources": resources}]}],
                 **spec},
        "status": status or {},
    }  # fmt: skip


def local_queue(name: str, cq: str = "research") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "xmc"}, "spec": {"clusterQueue": cq}}


#: Real Kueue v0.17 (v1beta2): borrowed beyond nominal from the cohort.
REAL_STATUS = {
    "flavorsReservation": [
        {"name": "on-demand", "resources": [{"name": "cpu", "total": "72", "borrowed": "8"}]}
    ],
    "flavorsUsage": [
        {"name": "on-demand", "resources": [{"name": "cpu", "total": "70", "borrowed": "6"}]}
    ],
    "admittedWorkloads": 3,
    "pendingWorkloads": 5,
    "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "ok"}],
}


@pytest.mark.parametrize(
    ("cq", "expected"),
    [
        pytest.param(
            cluster_queue(REAL_STATUS),
            [
                FlavorQuota(flavor="on-demand", resource="cpu", nominal_quota="64",
                            borrowing_limit="16", reserved="72", used="70", borrowed="8"),
                FlavorQuota(flavor="on-demand", resource="memory", nominal_quota="256Gi",
                            reserved="0", used="0", borrowed="0"),
            ],
            id="real Kueue: reservation, usage and borrowing beside the quota",
        ),
        pytest.param(
            cluster_queue(),
            [
                FlavorQuota(flavor="on-demand", resource="cpu", nominal_quota="64",
                            borrowing_limit="16", reserved="0", used="0", borrowed="0"),
                FlavorQuota(flavor="on-demand", resource="memory", nominal_quota="256Gi",
                            reserved="0", used="0", borrowed="0"),
            ],
            id="no status yet: nothing reserved",
        ),
        pytest.param(
            {"spec": {"resourceGroups": [{"flavors": [{"name": "f", "resources": [
                {"name": "cpu", "nominalQuota": 8, "lendingLimit": "2"}]}]}]},
             "status": {"flavorsReservation": None, "flavorsUsage": "junk"}},
            [FlavorQuota(flavor="f", resource="cpu", nominal_quota="8", lending_limit="2",
                         reserved="0", used="0", borrowed="0")],
            id="a JSON number quota, a lending limit, ill-typed status",
        ),
        pytest.param({"spec": None}, [], id="no spec: no rows"),
    ],
)  # fmt: skip
def test_flavor_quotas(cq: dict[str, Any], expected: list[FlavorQuota]) -> None:
    assert flavor_quotas(cq) == expected


def created(builder: WorkloadBuilder) -> dict[str, Any]:
    obj = builder.obj()
    obj["metadata"]["creationTimestamp"] = CREATED
    return obj


def waiting(name: str = "xmc-7-3") -> WorkloadBuilder:
    return WorkloadBuilder(name, "uid-" + name).waiting(
        "Pending", "couldn't assign flavors: insufficient unused quota for cpu"
    )


@pytest.mark.parametrize(
    ("workload", "position", "expected"),
    [
        pytest.param(
            waiting().obj(),
            0,
            QueuedWorkload(workload="jobset-xmc-7-3-abcde", local_queue="default",
                           work_unit="experiments/7/workUnits/3", owner="xmc-7-3", position=1,
                           reason="Pending",
                           message="couldn't assign flavors: insufficient unused quota for cpu"),
            id="pending: 1-based position, Kueue's why",
        ),
        pytest.param(
            waiting().obj(),
            None,
            QueuedWorkload(workload="jobset-xmc-7-3-abcde", local_queue="default",
                           work_unit="experiments/7/workUnits/3", owner="xmc-7-3", position=0,
                           reason="Pending",
                           message="couldn't assign flavors: insufficient unused quota for cpu"),
            id="pending, position unknown",
        ),
        pytest.param(
            WorkloadBuilder("xmc-7-4", "u").admit(("main", {"cpu": "on-demand"})).obj(),
            None,
            QueuedWorkload(workload="jobset-xmc-7-4-abcde", local_queue="default",
                           work_unit="experiments/7/workUnits/4", owner="xmc-7-4",
                           flavors=["on-demand"]),
            id="admitted: its flavors, no position",
        ),
        pytest.param(
            waiting("train-job").obj(),
            3,
            QueuedWorkload(workload="jobset-train-job-abcde", local_queue="default",
                           owner="train-job", position=4, reason="Pending",
                           message="couldn't assign flavors: insufficient unused quota for cpu"),
            id="not XMC's JobSet: no work unit",
        ),
    ],
)  # fmt: skip
def test_queued_workload(
    workload: dict[str, Any], position: int | None, expected: QueuedWorkload
) -> None:
    got = queued_workload(workload, position=position, now=NOW)
    # Times are checked in test_waits; here the rest of the row.
    got.ClearField("queued_time")
    got.ClearField("admitted_time")
    got.ClearField("wait")
    assert got == expected


def test_waits() -> None:
    pending = queued_workload(created(waiting()), position=0, now=NOW)
    assert pending.wait.ToTimedelta() == timedelta(minutes=10)
    admitted = queued_workload(
        created(WorkloadBuilder("xmc-1-1", "u").admit(("main", {"cpu": "f"}))),
        position=None,
        now=NOW,
    )
    assert admitted.wait.ToTimedelta() == timedelta(minutes=4, seconds=5)  # CREATED → ADMITTED
    assert admitted.admitted_time.ToJsonString() == "2026-01-02T03:04:05Z"
    skewed = queued_workload(created(waiting()), position=0, now=NOW - timedelta(hours=1))
    assert skewed.wait.ToTimedelta() == timedelta(0)  # an ESS clock behind: never negative


def with_priority(builder: WorkloadBuilder, name: str, value: int) -> dict[str, Any]:
    obj = builder.obj()
    obj["spec"].update(priority=value, priorityClassRef={"name": name})
    obj["spec"]["queueName"] = "team-a"
    return obj


def test_queue_message_orders_and_filters() -> None:
    workloads = [
        with_priority(waiting("xmc-1-2"), "xmc-priority-normal-low", 400),
        with_priority(waiting("xmc-1-3"), "xmc-priority-normal-normal", 500),
        with_priority(waiting("xmc-1-4"), "xmc-priority-low-low", 100),  # no position
        with_priority(
            WorkloadBuilder("xmc-1-1", "u").admit(("main", {"cpu": "on-demand"})),
            "xmc-priority-normal-normal", 500,
        ),
        with_priority(
            WorkloadBuilder("xmc-2-1", "u").condition("Finished", "True", "Succeeded", "done"),
            "xmc-priority-normal-normal", 500,
        ),
        {**waiting("xmc-3-1").obj(), "spec": {"queueName": "elsewhere"}},
    ]  # fmt: skip
    positions = Positions({"jobset-xmc-1-3-abcde": 0, "jobset-xmc-1-2-abcde": 1})
    queue = queue_message(
        cluster_queue(REAL_STATUS, cohortName="org", preemption={"withinClusterQueue": "Never"}),
        [local_queue("team-a"), local_queue("team-b"), local_queue("x", "other")],
        workloads,
        positions,
        now=NOW,
        titles={"experiments/1": "lr sweep"},
    )
    assert [(w.work_unit, w.position) for w in queue.pending] == [
        ("experiments/1/workUnits/3", 1),
        ("experiments/1/workUnits/2", 2),
        ("experiments/1/workUnits/4", 0),
    ]
    assert [w.work_unit for w in queue.admitted] == ["experiments/1/workUnits/1"]
    assert queue.admitted[0].experiment_title == "lr sweep"
    assert (queue.cohort, queue.preemption, queue.queueing_strategy) == (
        "org", "Never", "BestEffortFIFO"
    )  # fmt: skip
    assert list(queue.local_queues) == ["team-a", "team-b"]
    assert (queue.admitted_workloads, queue.pending_workloads) == (3, 5)
    assert queue.inactive_reason == ""

    only_b = queue_message(
        cluster_queue(), [local_queue("team-a"), local_queue("team-b")], workloads,
        positions, now=NOW, local_queue="team-b",
    )  # fmt: skip
    assert (only_b.local_queue, list(only_b.pending), list(only_b.admitted)) == ("team-b", [], [])

    summary = queue_message(
        cluster_queue(), [], workloads, Positions({}, "visibility: 503"), now=NOW,
        with_workloads=False,
    )  # fmt: skip
    assert (list(summary.pending), summary.positions_unavailable) == ([], "visibility: 503")


def test_an_inactive_cluster_queue_says_why() -> None:
    message = "Can't admit new workloads: FlavorNotFound"
    condition = {
        "type": "Active",
        "status": "False",
        "reason": "FlavorNotFound",
        "message": message,
    }
    inactive = {"conditions": [condition]}
    queue = queue_message(cluster_queue(inactive), [], [], Positions({}), now=NOW)
    assert queue.inactive_reason == "Can't admit new workloads: FlavorNotFound"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("research", QueueRef("research"), id="a ClusterQueue"),
        pytest.param("team-a", QueueRef("research", "team-a"), id="a LocalQueue"),
        pytest.param("both", QueueRef("both"), id="a ClusterQueue wins over a LocalQueue"),
        pytest.param("nope", None, id="neither"),
    ],
)
def test_resolve_queue(name: str, expected: QueueRef | None) -> None:
    cqs = [{"metadata": {"name": "research"}}, {"metadata": {"name": "both"}}]
    lqs = [local_queue("team-a"), local_queue("both")]
    assert resolve_queue(name, cqs, lqs) == expected


@pytest.mark.parametrize(
    ("refs", "expected"),
    [
        pytest.param([{"kind": "JobSet", "name": "xmc-7-3", "controller": True}],
                     ("xmc-7-3", "experiments/7/workUnits/3"), id="XMC's JobSet"),
        pytest.param([{"kind": "JobSet", "name": "xmc-7-3"}], ("", ""), id="not the controller"),
        pytest.param([{"kind": "Job", "name": "xmc-7-3", "controller": True}],
                     ("xmc-7-3", ""), id="a Job named like ours"),
        pytest.param(None, ("", ""), id="no owners"),
    ],
)  # fmt: skip
def test_work_unit_of(refs: Any, expected: tuple[str, str]) -> None:
    assert work_unit_of({"metadata": {"ownerReferences": refs}}) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("xmc-7-3", (7, 3)),
        ("xmc-12-345", (12, 345)),
        ("xmc-0-3", None),
        ("xmc-7", None),
        ("xmc-7-3-x", None),
        ("jobset-xmc-7-3", None),
    ],
)
def test_parse_jobset_name(name: str, expected: tuple[int, int] | None) -> None:
    assert parse_jobset_name(name) == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (S.SCHEDULING, None),
        (S.RUNNING, None),
        (S.INITIALIZING, None),
        (S.RESTARTING, None),
        (S.DESCHEDULING, None),
        (S.SCHEDULING_PAUSED, "scheduling is paused: its JobSet is not created yet"),
        (S.STOPPING, "its execution is STOPPING: its JobSet is going or gone"),
        (S.COMPLETED, "its execution is COMPLETED: its JobSet is going or gone"),
    ],
)
def test_priority_change_problem(state: WorkUnitState, expected: str | None) -> None:
    assert priority_change_problem(state) == expected


@pytest.mark.parametrize(
    ("used", "nominal", "expected"),
    [("40", "64", 62), ("72", "64", 112), ("0", "64", 0), ("", "64", 0), ("8Gi", "16Gi", 50),
     ("1", "0", None), ("1", "lots", None)],
)  # fmt: skip
def test_fill_percent(used: str, nominal: str, expected: int | None) -> None:
    assert fill_percent(used, nominal) == expected


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        ("xmc-priority-normal-normal", ("xmc-priority-normal-high", "xmc-priority-normal-low")),
        ("xmc-priority-high-high", ("", "xmc-priority-high-normal")),
        ("xmc-priority-low-low", ("xmc-priority-low-normal", "")),
        ("someone-elses", ("", "")),
    ],
)
def test_neighbour_classes(current: str, expected: tuple[str, str]) -> None:
    assert neighbour_classes(current) == expected


def test_rows_of_the_view() -> None:
    row = quota_row(FlavorQuota(flavor="f", resource="cpu", nominal_quota="64", reserved="72",
                                used="70", borrowed="8"))  # fmt: skip
    assert (row["fill"], row["borrowed"], row["borrowing_limit"]) == (112, "8", "—")
    unit = workload_row(QueuedWorkload(work_unit="experiments/7/workUnits/3", position=2,
                                       priority_class="xmc-priority-low-high"))  # fmt: skip
    assert (unit["xid"], unit["wid"], unit["position"]) == (7, 3, 2)
    assert (unit["raise_to"], unit["lower_to"]) == (
        "xmc-priority-normal-low",
        "xmc-priority-low-normal",
    )
    foreign = workload_row(
        QueuedWorkload(owner="train-job", priority_class="xmc-priority-low-high")
    )
    assert (foreign["wid"], foreign["raise_to"], foreign["position"]) == (None, "", "")
