"""The pure half of the kubesim-vs-real comparison (``tests.contract.fidelity``): what a
snapshot keeps of the objects, and when two recordings count as different."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.fidelity import (
    GONE,
    Recording,
    Snapshot,
    comparable_states,
    compare,
    distinct_states,
    snapshot,
)

RUNNING_JOBSET: dict[str, Any] = {
    "metadata": {"name": "xmc-1-1"},
    "spec": {"suspend": False},
    "status": {
        "conditions": [
            {"type": "Suspended", "status": "False", "reason": "ResumeJobs"},
        ],
        "replicatedJobsStatus": [{"name": "main", "active": 1, "ready": 1}],
    },
}


def pod(phase: str, state: dict[str, Any], deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {}
    return {"metadata": meta, "status": {"phase": phase, "containerStatuses": [{"state": state}]}}


def test_a_snapshot_keeps_what_xmc_reads_and_no_names_or_times() -> None:
    shot = snapshot(
        RUNNING_JOBSET,
        [{"status": {"conditions": [{"type": "Admitted", "status": "True", "reason": "A"},
                                    {"type": "Evicted", "status": "False", "reason": "E"}]}}],
        [{"status": {"active": 1}}, {"status": {"succeeded": 2, "failed": "x"}}],
        [pod("Running", {"running": {"startedAt": "t"}}),
         pod("Failed", {"terminated": {"reason": "Error", "exitCode": 3}}),
         pod("Running", {"running": {}}, deleting=True)],
    )  # fmt: skip
    assert shot == Snapshot(
        state="RUNNING",
        jobset=(),
        workload=(("Admitted", "A"),),
        jobs=(1, 2, 0),
        pods=(("Failed", "Error", 3), ("Running", "running", None)),
    )


def test_a_deleted_jobset_is_gone() -> None:
    assert snapshot(None, [], [], []) == GONE


def test_a_finishing_jobset_is_recorded_as_reporting_nothing() -> None:
    """All totals zero, every pod finished: the real cluster's window before the Job's
    Failed condition, where the Reconciler sends nothing (decision 0030)."""
    interim = {**RUNNING_JOBSET, "status": {"replicatedJobsStatus": [{"name": "main"}]}}
    failed = pod("Failed", {"terminated": {"reason": "Error", "exitCode": 3}})
    assert snapshot(interim, [], [], [failed]).state == ""
    assert snapshot(interim, [], [], []).state == "STARTING"


#: A look where XMC reports nothing (the Jobs finishing, decision 0030) is skipped; a
#: STARTING between RUNNING and the end is a difference again.
HELD = ["RUNNING", "", "FAILED"]
FLAP = ["RUNNING", "STARTING", "FAILED"]


@pytest.mark.parametrize(
    ("states", "distinct", "comparable"),
    [
        (["SCHEDULING", "SCHEDULING", "RUNNING"], ["SCHEDULING", "RUNNING"], ["RUNNING"]),
        (["RUNNING", "SCHEDULING", "RUNNING"], ["RUNNING", "SCHEDULING", "RUNNING"],
         ["RUNNING", "SCHEDULING", "RUNNING"]),
        ([], [], []),
        (HELD, ["RUNNING", "FAILED"], ["RUNNING", "FAILED"]),
        (FLAP, FLAP, FLAP),
    ],
)  # fmt: skip
def test_states_in_order_and_the_admission_wait_left_out(
    states: list[str], distinct: list[str], comparable: list[str]
) -> None:
    assert distinct_states([Snapshot(state=s) for s in states]) == distinct
    assert comparable_states(distinct) == comparable


def test_compare_names_each_difference() -> None:
    sim = Recording(
        [Snapshot("SCHEDULING"), Snapshot("RUNNING"), Snapshot("FAILED", jobs=(0, 0, 1))]
    )
    real = Recording([Snapshot("RUNNING"), Snapshot("FAILED", jobs=(0, 0, 2))])
    assert compare(sim, real) == ["final jobs: kubesim (0, 0, 1), real (0, 0, 2)"]
    assert compare(sim, sim) == []
