"""``bench/sweep_timeline.py``: which watch event marks which milestone, and how the
database's per-work-unit moments join the JobSet's."""

from __future__ import annotations

from typing import Any

from bench.sweep_timeline import Timeline, stage_lines


def jobset(name: str, wid: str | None = None, **status: Any) -> dict[str, Any]:
    labels = {"xmc.google.com/work-unit-id": wid} if wid else {}
    suspend = status.pop("suspend", True)
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"suspend": suspend},
        "status": status,
    }


def test_each_event_marks_its_milestone_once_at_the_first_sighting() -> None:
    t = Timeline()
    t.on_jobset({"type": "ADDED", "object": jobset("js-1", "7")})
    t.on_workload({"type": "ADDED", "object": {
        "metadata": {"ownerReferences": [{"kind": "JobSet", "name": "js-1"}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]},
    }})  # fmt: skip
    assert "js-1" in t.marks["jobset"]
    assert not t.marks["admitted"]
    t.on_workload({"type": "MODIFIED", "object": {
        "metadata": {"ownerReferences": [{"kind": "JobSet", "name": "js-1"}]},
        "status": {"conditions": [{"type": "Admitted", "status": "True"}]},
    }})  # fmt: skip
    t.on_jobset({"type": "MODIFIED", "object": jobset("js-1", "7", suspend=False)})
    pod = {"metadata": {"labels": {"jobset.sigs.k8s.io/jobset-name": "js-1"}}, "spec": {}}
    t.on_pod({"type": "ADDED", "object": pod})
    assert set(t.marks["pod"]) == {"js-1"}
    assert not t.marks["scheduled"]
    t.on_pod({"type": "MODIFIED", "object": {**pod, "spec": {"nodeName": "n"},
                                             "status": {"phase": "Succeeded"}}})  # fmt: skip
    first = t.marks["jobset"]["js-1"]
    t.on_jobset({"type": "MODIFIED", "object": jobset(
        "js-1", "7", suspend=False, conditions=[{"type": "Completed", "status": "True"}],
        replicatedJobsStatus=[{"ready": 0, "succeeded": 1}],
    )})  # fmt: skip
    assert t.marks["jobset"]["js-1"] == first
    reached = {m for m, moments in t.marks.items() if "js-1" in moments}
    # a pod already finished counts as Running too; the JobSet never showed a ready pod
    assert reached == {"jobset", "admitted", "unsuspended", "pod", "scheduled", "running",
                       "finished", "completed"}  # fmt: skip


def test_moments_known_by_work_unit_join_once_its_jobset_is_seen() -> None:
    t = Timeline(began=100.0)
    t.mark_wid("created", "7", 100.5)
    t.mark_wid("completed_stored", "8", 109.0)  # a unit whose JobSet was never seen
    t.on_jobset({"type": "ADDED", "object": jobset("js-7", "7")})
    joined = t.joined()
    assert joined["created"] == {"js-7": 100.5}
    assert joined["completed_stored"] == {}


def test_stage_lines_print_reached_milestones_only() -> None:
    t = Timeline(began=0.0)
    for i in range(10):
        t.mark_wid("created", str(i), 0.1 * i)
        t.on_jobset({"type": "ADDED", "object": jobset(f"js-{i}", str(i))})
    lines = stage_lines(t)
    assert [line.split()[0] for line in lines] == ["milestone", "create", "JobSet"]
