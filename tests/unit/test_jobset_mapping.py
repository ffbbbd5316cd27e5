"""JobSet → WorkUnitState (SPEC §8.1): a named case per rule and per ordering that matters."""

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.builders import JobSetBuilder
from tests.pod_builders import PodBuilder
from xmc.model.jobset import (
    NO_PODS,
    JobTotals,
    MappingRule,
    PodSummary,
    StateDecision,
    decide_work_unit_state,
    is_finishing,
    job_totals,
    observation_state_update_time,
    reads_pods,
    summarize_pods,
    to_work_unit_state,
)
from xmc.model.states import WorkUnitState

S = WorkUnitState
R = MappingRule
T0 = "2026-01-02T03:04:05Z"
OBSERVED_AT = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)
NAME = "wu-1-eid-1"


def two_workers() -> JobSetBuilder:
    """A JobSet with one replicated job of two Jobs, the usual shape in these cases."""
    return JobSetBuilder(NAME).replicated_job("workers", replicas=2)


MAPPING_CASES = [
    # R1: the finalizer path.
    pytest.param(
        two_workers()
        .status_counts("workers", succeeded=2)
        .condition("Completed", "True")
        .deleting()
        .obj(),
        StateDecision(S.COMPLETED, R.R1),
        id="R1 deleting a completed jobset is COMPLETED",
    ),
    pytest.param(
        two_workers()
        .status_counts("workers", failed=1)
        .condition("Failed", "True")
        .deleting()
        .obj(),
        StateDecision(S.FAILED, R.R1),
        id="R1 deleting a failed jobset is FAILED",
    ),
    pytest.param(
        two_workers().status_counts("workers", ready=2).deleting().obj(),
        StateDecision(S.STOPPED, R.R1),
        id="R1 deleting a running jobset is STOPPED",
    ),
    pytest.param(
        two_workers().condition("Completed", "False").condition("Failed", "False").deleting().obj(),
        StateDecision(S.STOPPED, R.R1),
        id="R1 conditions with status False do not count",
    ),
    pytest.param(
        two_workers().condition("Failed", "True").condition("Completed", "True").deleting().obj(),
        StateDecision(S.COMPLETED, R.R1),
        id="R1 Completed wins over Failed when both are True",
    ),
    # R2 and R3: terminal conditions beat every count.
    pytest.param(
        two_workers().status_counts("workers", succeeded=2).condition("Completed", "True").obj(),
        StateDecision(S.COMPLETED, R.R2),
        id="R2 Completed=True is COMPLETED",
    ),
    pytest.param(
        two_workers().condition("Failed", "True").condition("Completed", "True").obj(),
        StateDecision(S.COMPLETED, R.R2),
        id="R2 before R3 when Completed and Failed are both True",
    ),
    pytest.param(
        two_workers()
        .status_counts("workers", active=1, succeeded=1)
        .suspend(True)
        .condition("Completed", "True")
        .obj(),
        StateDecision(S.COMPLETED, R.R2),
        id="R2 before R4 Completed while suspended with active jobs",
    ),
    pytest.param(
        two_workers().status_counts("workers", failed=1).condition("Failed", "True").obj(),
        StateDecision(S.FAILED, R.R3),
        id="R3 Failed=True is FAILED",
    ),
    pytest.param(
        two_workers()
        .status_counts("workers", ready=1, active=1, failed=1)
        .condition("Failed", "True")
        .obj(),
        StateDecision(S.FAILED, R.R3),
        id="R3 before R5 Failed=True with jobs still running is FAILED",
    ),
    # R4: eviction while pods still terminate.
    pytest.param(
        two_workers().status_counts("workers", ready=2, active=2).suspend(True).obj(),
        StateDecision(S.DESCHEDULING, R.R4),
        id="R4 suspended with ready jobs is DESCHEDULING",
    ),
    pytest.param(
        two_workers().status_counts("workers", active=1).suspend(True).obj(),
        StateDecision(S.DESCHEDULING, R.R4),
        id="R4 suspended with only active jobs is DESCHEDULING",
    ),
    pytest.param(
        two_workers().status_counts("workers", active=1, failed=1).suspend(True).obj(),
        StateDecision(S.DESCHEDULING, R.R4),
        id="R4 before R5 suspended with a failed job and an active one",
    ),
    # R5: a job failed while others run.
    pytest.param(
        two_workers().status_counts("workers", ready=1, active=1, failed=1).obj(),
        StateDecision(S.PARTIALLY_FAILED, R.R5),
        id="R5 one job failed while another is ready",
    ),
    pytest.param(
        two_workers().status_counts("workers", active=1, failed=1).suspend(False).obj(),
        StateDecision(S.PARTIALLY_FAILED, R.R5),
        id="R5 one job failed while another is active",
    ),
    # R6: everything unfinished is ready.
    pytest.param(
        two_workers().status_counts("workers", ready=2, active=2).suspend(False).obj(),
        StateDecision(S.RUNNING, R.R6),
        id="R6 all jobs ready is RUNNING",
    ),
    pytest.param(
        two_workers().status_counts("workers", ready=1, active=1, succeeded=1).obj(),
        StateDecision(S.RUNNING, R.R6),
        id="R6 one succeeded and the rest ready is RUNNING",
    ),
    pytest.param(
        JobSetBuilder(NAME)
        .replicated_job("leader", replicas=None)
        .replicated_job("workers", replicas=2)
        .status_counts("leader", ready=1, active=1)
        .status_counts("workers", ready=2, active=2)
        .obj(),
        StateDecision(S.RUNNING, R.R6),
        id="R6 missing replicas counts as 1",
    ),
    # R7: admitted, not all ready yet.
    pytest.param(
        two_workers().status_counts("workers", ready=1, active=2).suspend(False).obj(),
        StateDecision(S.STARTING, R.R7),
        id="R7 one of two jobs ready is STARTING",
    ),
    pytest.param(
        two_workers().status_counts("workers", active=2).obj(),
        StateDecision(S.STARTING, R.R7),
        id="R7 jobs active but none ready is STARTING",
    ),
    pytest.param(
        two_workers().status_counts("workers").suspend(False).obj(),
        StateDecision(S.STARTING, R.R7),
        id="R7 unsuspended with all totals zero is STARTING",
    ),
    pytest.param(
        two_workers().status_counts("workers").obj(),
        StateDecision(S.STARTING, R.R7),
        id="R7 suspend missing means false",
    ),
    pytest.param(
        two_workers().without_status().obj(),
        StateDecision(S.STARTING, R.R7),
        id="R7 new unsuspended jobset without status is STARTING",
    ),
    # R8: nothing running any more, but something finished.
    pytest.param(
        two_workers().status_counts("workers", failed=1).suspend(True).obj(),
        StateDecision(S.PARTIALLY_FAILED, R.R8A),
        id="R8a suspended with a failed job and nothing running",
    ),
    pytest.param(
        two_workers().status_counts("workers", succeeded=1, failed=1).obj(),
        StateDecision(S.PARTIALLY_FAILED, R.R8A),
        id="R8a before R8b failed and succeeded with nothing running",
    ),
    pytest.param(
        two_workers().status_counts("workers", succeeded=1, suspended=1).suspend(True).obj(),
        StateDecision(S.RUNNING, R.R8B),
        id="R8b preempted after a job succeeded stays RUNNING",
    ),
    pytest.param(
        two_workers().status_counts("workers", succeeded=1).obj(),
        StateDecision(S.RUNNING, R.R8B),
        id="R8b unsuspended with one job succeeded and none running",
    ),
    # R9: waiting for resources.
    pytest.param(
        two_workers().suspend(True).obj(),
        StateDecision(S.SCHEDULING, R.R9),
        id="R9 created suspended and not admitted is SCHEDULING",
    ),
    pytest.param(
        two_workers().status_counts("workers", suspended=2).suspend(True).obj(),
        StateDecision(S.SCHEDULING, R.R9),
        id="R9 evicted with pods gone and nothing finished is SCHEDULING",
    ),
    pytest.param(
        two_workers().suspend(True).without_status().obj(),
        StateDecision(S.SCHEDULING, R.R9),
        id="R9 suspended without status is SCHEDULING",
    ),
]


@pytest.mark.parametrize(("jobset", "expected"), MAPPING_CASES)
def test_decide_work_unit_state(jobset: dict[str, Any], expected: StateDecision) -> None:
    assert decide_work_unit_state(jobset) == expected


@pytest.mark.parametrize(("jobset", "expected"), MAPPING_CASES)
def test_to_work_unit_state_returns_the_decided_state(
    jobset: dict[str, Any], expected: StateDecision
) -> None:
    assert to_work_unit_state(jobset) == expected.state


def test_every_rule_has_a_case() -> None:
    decisions = [case.values[1] for case in MAPPING_CASES]
    covered = {d.rule for d in decisions if isinstance(d, StateDecision)}
    assert covered == set(MappingRule)


def test_preemption_goes_running_descheduling_scheduling() -> None:
    """What a real cluster shows: once the Jobs are suspended their Terminating pods are
    no longer active, so only the pods tell DESCHEDULING from SCHEDULING (ADR 0019)."""
    running = two_workers().status_counts("workers", ready=2, active=2).obj()
    evicted = two_workers().status_counts("workers", suspended=2).suspend(True).obj()

    path = [
        decide_work_unit_state(running),
        decide_work_unit_state(evicted, PodSummary(terminating=2)),
        decide_work_unit_state(evicted, PodSummary(terminating=0)),
    ]

    assert path == [
        StateDecision(S.RUNNING, R.R6),
        StateDecision(S.DESCHEDULING, R.R4),
        StateDecision(S.SCHEDULING, R.R9),
    ]


POD_CASES = [
    pytest.param(
        two_workers().status_counts("workers", suspended=2).suspend(True).obj(),
        PodSummary(terminating=1),
        StateDecision(S.DESCHEDULING, R.R4),
        id="R4 suspended, Jobs inactive, a pod still terminating",
    ),
    pytest.param(
        two_workers().status_counts("workers", suspended=2).suspend(True).obj(),
        NO_PODS,
        StateDecision(S.SCHEDULING, R.R9),
        id="R9 suspended and every pod gone",
    ),
    pytest.param(
        two_workers().status_counts("workers", succeeded=1, suspended=1).suspend(True).obj(),
        PodSummary(terminating=1),
        StateDecision(S.DESCHEDULING, R.R4),
        id="R4 before R8b while the evicted pods terminate",
    ),
    pytest.param(
        two_workers().status_counts("workers", succeeded=1, suspended=1).suspend(True).obj(),
        NO_PODS,
        StateDecision(S.RUNNING, R.R8B),
        id="R8b once they are gone",
    ),
    pytest.param(
        two_workers().status_counts("workers", ready=2, active=2).suspend(False).obj(),
        PodSummary(terminating=1),
        StateDecision(S.RUNNING, R.R6),
        id="a terminating pod of a running JobSet is no eviction",
    ),
    pytest.param(
        two_workers().status_counts("workers", suspended=2).suspend(True).deleting().obj(),
        PodSummary(terminating=2),
        StateDecision(S.STOPPED, R.R1),
        id="R1 before R4 while deleting",
    ),
    pytest.param(
        two_workers()
        .status_counts("workers", failed=1)
        .suspend(True)
        .condition("Failed", "True")
        .obj(),
        PodSummary(terminating=1),
        StateDecision(S.FAILED, R.R3),
        id="R3 before R4",
    ),
]


@pytest.mark.parametrize(("jobset", "pods", "expected"), POD_CASES)
def test_decide_work_unit_state_with_pods(
    jobset: dict[str, Any], pods: PodSummary, expected: StateDecision
) -> None:
    assert decide_work_unit_state(jobset, pods) == expected
    assert to_work_unit_state(jobset, pods) == expected.state


def _pod(phase: str, *, deleted: bool) -> dict[str, Any]:
    pod = PodBuilder("p").phase(phase)
    return (pod.deleting(T0) if deleted else pod).obj()


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([], PodSummary(), id="no pods"),
        pytest.param([_pod("Running", deleted=False)], PodSummary(total=1), id="running"),
        pytest.param(
            [_pod("Running", deleted=True)],
            PodSummary(terminating=1, total=1),
            id="deleted while running",
        ),
        pytest.param(
            [_pod("Pending", deleted=True)],
            PodSummary(terminating=1, total=1),
            id="deleted while pending",
        ),
        pytest.param(
            [_pod("Failed", deleted=True)],
            PodSummary(total=1, finished=1),
            id="deleted after it failed",
        ),
        pytest.param(
            [_pod("Succeeded", deleted=False), _pod("Failed", deleted=False)],
            PodSummary(total=2, finished=2),
            id="finished",
        ),
        pytest.param(
            [{"metadata": {"deletionTimestamp": T0}}],
            PodSummary(terminating=1, total=1),
            id="no status yet",
        ),
        pytest.param([{}, {"metadata": None, "status": None}], PodSummary(total=2), id="sparse"),
    ],
)
def test_summarize_pods(pods: list[dict[str, Any]], expected: PodSummary) -> None:
    assert summarize_pods(pods) == expected


def _finished_pods(count: int) -> PodSummary:
    return PodSummary(total=count, finished=count)


FINISHING_CASES = [
    pytest.param(
        two_workers().status_counts("workers").obj(), _finished_pods(2), True,
        id="every total zero and every pod finished: the Jobs are finishing",
    ),
    pytest.param(
        two_workers().status_counts("workers").suspend(False).obj(), _finished_pods(1), True,
        id="one of the pods finished and no other left",
    ),
    pytest.param(
        two_workers().status_counts("workers").obj(), PodSummary(), False,
        id="no pods yet: just admitted, STARTING",
    ),
    pytest.param(
        two_workers().status_counts("workers").obj(), PodSummary(total=2, finished=1), False,
        id="a pod not finished: STARTING",
    ),
    pytest.param(
        two_workers().status_counts("workers", active=1).obj(), _finished_pods(2), False,
        id="a Job still counts one active: the counts decide",
    ),
    pytest.param(
        two_workers().status_counts("workers", succeeded=1).obj(), _finished_pods(2), False,
        id="a Job already counted succeeded: R8b decides",
    ),
    pytest.param(
        two_workers().status_counts("workers").suspend(True).obj(), _finished_pods(2), False,
        id="suspended: R9",
    ),
    pytest.param(
        two_workers().status_counts("workers").condition("Failed", "True").obj(),
        _finished_pods(2), False,
        id="the terminal condition is there: R3",
    ),
    pytest.param(
        two_workers().status_counts("workers").deleting().obj(), _finished_pods(2), False,
        id="being deleted: R1",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("jobset", "pods", "expected"), FINISHING_CASES)
def test_is_finishing(jobset: dict[str, Any], pods: PodSummary, expected: bool) -> None:
    assert is_finishing(jobset, pods) is expected


def test_a_failing_job_reads_starting_by_its_counts_and_finishing_by_its_pods() -> None:
    """What the real cluster showed (docs/decisions/0030): between the pod failing and the
    Job's Failed condition every total is zero, which R7 alone reads as STARTING."""
    interim = two_workers().status_counts("workers").obj()

    assert decide_work_unit_state(interim, _finished_pods(2)).state is S.STARTING
    assert is_finishing(interim, _finished_pods(2))


@pytest.mark.parametrize(
    ("jobset", "expected"),
    [
        pytest.param(two_workers().suspend(True).obj(), True, id="suspended: R4 reads pods"),
        pytest.param(two_workers().obj(), True, id="no status: finishing reads pods"),
        pytest.param(two_workers().status_counts("workers").obj(), True, id="all totals zero"),
        pytest.param(
            two_workers().status_counts("workers", ready=2, active=2).obj(), False, id="running"
        ),
        pytest.param(
            two_workers().status_counts("workers").condition("Completed", "True").obj(),
            False,
            id="completed",
        ),
        pytest.param(two_workers().suspend(True).deleting().obj(), False, id="being deleted"),
    ],
)
def test_reads_pods(jobset: dict[str, Any], expected: bool) -> None:
    assert reads_pods(jobset) is expected


def test_rule_is_a_plain_string_label() -> None:
    assert decide_work_unit_state(two_workers().suspend(True).obj()).rule == "R9"
    assert str(MappingRule.R8A) == "R8a"


def test_builder_produces_an_api_shaped_object() -> None:
    jobset = two_workers().status_counts("workers", ready=2).condition("Completed", "True").obj()

    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert jobset["kind"] == "JobSet"
    assert jobset["metadata"]["uid"] == "uid-wu-1-eid-1"
    assert jobset["spec"]["replicatedJobs"][0]["replicas"] == 2
    assert jobset["status"]["replicatedJobsStatus"][0]["ready"] == 2
    assert jobset["status"]["conditions"][0]["reason"] == "AllJobsCompleted"
    assert jobset["status"]["terminalState"] == "Completed"


@pytest.mark.parametrize(
    ("jobset", "expected"),
    [
        pytest.param({}, JobTotals(0, 0, 0, 0, 0), id="empty object"),
        pytest.param(
            {"spec": None, "status": None}, JobTotals(0, 0, 0, 0, 0), id="null spec and status"
        ),
        pytest.param(
            JobSetBuilder(NAME).replicated_job("workers", replicas=None).without_status().obj(),
            JobTotals(replicas=1, ready=0, active=0, succeeded=0, failed=0),
            id="missing replicas counts as 1 and missing status as 0",
        ),
        pytest.param(
            JobSetBuilder(NAME)
            .replicated_job("leader", replicas=1)
            .replicated_job("workers", replicas=3)
            .status_counts("leader", ready=1, active=1)
            .status_counts("workers", ready=1, active=2, succeeded=1, failed=0)
            .obj(),
            JobTotals(replicas=4, ready=2, active=3, succeeded=1, failed=0),
            id="sums across replicated jobs",
        ),
        pytest.param(
            {
                "spec": {"replicatedJobs": [{"name": "w", "replicas": 2}]},
                "status": {"replicatedJobsStatus": [{"name": "w", "failed": 1}]},
            },
            JobTotals(replicas=2, ready=0, active=0, succeeded=0, failed=1),
            id="missing counts are 0",
        ),
    ],
)
def test_job_totals(jobset: dict[str, Any], expected: JobTotals) -> None:
    assert job_totals(jobset) == expected


@pytest.mark.parametrize(
    ("jobset", "observed_at", "expected"),
    [
        pytest.param(
            two_workers().without_status().obj(), OBSERVED_AT, OBSERVED_AT, id="no status"
        ),
        pytest.param(two_workers().obj(), OBSERVED_AT, OBSERVED_AT, id="no conditions"),
        pytest.param(
            two_workers()
            .condition("StartupPolicyCompleted", "True", "2026-01-02T03:00:00Z")
            .condition("Completed", "True", "2026-01-02T04:00:00Z")
            .condition("Suspended", "False", "2026-01-02T02:00:00Z")
            .obj(),
            OBSERVED_AT,
            datetime(2026, 1, 2, 4, 0, 0, tzinfo=UTC),
            id="newest condition wins whatever its position",
        ),
        pytest.param(
            two_workers().condition("Completed", "True", "2026-01-02T03:04:05.250Z").obj(),
            OBSERVED_AT,
            datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=UTC),
            id="fractional seconds",
        ),
        pytest.param(
            two_workers().condition("Completed", "True", "2026-01-02T05:04:05+02:00").obj(),
            OBSERVED_AT,
            datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
            id="offset converted to UTC",
        ),
        pytest.param(
            two_workers().condition("Completed", "True", "").condition("Failed", "x", "bad").obj(),
            OBSERVED_AT,
            OBSERVED_AT,
            id="empty and malformed times are skipped",
        ),
        pytest.param(
            two_workers().without_status().obj(),
            datetime(2026, 1, 2, 12, 0, 0),
            OBSERVED_AT,
            id="naive observation time is read as UTC",
        ),
        pytest.param(
            two_workers().created("2026-01-02T11:59:50Z").obj(),
            OBSERVED_AT,
            datetime(2026, 1, 2, 11, 59, 50, tzinfo=UTC),
            id="no conditions: the cluster's creation time, not the Reconciler's clock",
        ),
        pytest.param(
            two_workers()
            .created("2026-01-02T11:59:50Z")
            .condition("Suspended", "True", "2026-01-02T11:59:51Z")
            .obj(),
            OBSERVED_AT,
            datetime(2026, 1, 2, 11, 59, 51, tzinfo=UTC),
            id="a condition outranks the creation time",
        ),
        pytest.param(
            two_workers().created("garbage").obj(),
            OBSERVED_AT,
            OBSERVED_AT,
            id="malformed creation time falls back to the observation",
        ),
        pytest.param(
            two_workers().without_status().obj(),
            datetime(2026, 1, 2, 13, 0, 0, tzinfo=timezone(timedelta(hours=1))),
            OBSERVED_AT,
            id="observation time converted to UTC",
        ),
    ],
)
def test_observation_state_update_time(
    jobset: dict[str, Any], observed_at: datetime, expected: datetime
) -> None:
    got = observation_state_update_time(jobset, observed_at)

    assert got == expected
    assert got.tzinfo is UTC


EVICTED, READMITTED = "2026-01-02T12:00:25Z", "2026-01-02T12:00:31Z"


@pytest.mark.parametrize(
    ("jobset", "expected"),
    [
        pytest.param(
            two_workers()
            .suspend(False)
            .condition("Suspended", "True", EVICTED)
            .suspend_set_by("kueue", READMITTED)
            .obj(),
            READMITTED,
            id="re-admitted, the controller behind: when Kueue resumed it, not the eviction",
        ),
        pytest.param(
            two_workers()
            .suspend(True)
            .status_counts("workers", active=2, ready=2)
            .condition("Suspended", "False", "2026-01-02T12:00:10Z")
            .suspend_set_by("kueue", EVICTED)
            .obj(),
            EVICTED,
            id="evicted, the controller behind: when Kueue suspended it, not the admission",
        ),
        pytest.param(
            two_workers()
            .suspend(False)
            .condition("Suspended", "False", READMITTED)
            .suspend_set_by("kueue", EVICTED)
            .obj(),
            READMITTED,
            id="the condition agrees with the spec: the condition's time alone",
        ),
        pytest.param(
            two_workers()
            .suspend(False)
            .created("2026-01-02T12:00:05Z")
            .suspend_set_by("xmc-actuator", "2026-01-02T12:00:05Z")
            .suspend_set_by("kueue", "2026-01-02T12:00:07Z")
            .obj(),
            "2026-01-02T12:00:07Z",
            id="admitted before any condition: when Kueue admitted it, not its creation",
        ),
        pytest.param(
            two_workers().suspend(False).condition("Suspended", "True", EVICTED).obj(),
            EVICTED,
            id="no managedFields (kubesim): the conditions as before",
        ),
    ],
)
def test_a_condition_behind_the_spec_dates_the_state_by_the_spec_s_change(
    jobset: dict[str, Any], expected: str
) -> None:
    """The JobSet controller writes ``Suspended`` after Kueue changes ``spec.suspend``;
    a state read from the spec in between is dated by that change (tests/real's
    preemption once read a zero re-queue: the re-admission was dated at the eviction)."""
    expected_time = datetime.fromisoformat(expected)
    assert observation_state_update_time(jobset, OBSERVED_AT) == expected_time
    # Only the API server's clock dates it: a Reconciler clock far behind or ahead of the
    # cluster's changes nothing.
    for skew in (timedelta(hours=-3), timedelta(hours=3)):
        assert observation_state_update_time(jobset, OBSERVED_AT + skew) == expected_time


def test_an_observation_time_never_outranks_a_condition_of_the_same_second() -> None:
    """Kubernetes stamps conditions to the second: an observation at 12:00:00.700 must not
    make a Completed condition stamped 12:00:00 (set later that second) look stale."""
    seen_at = datetime(2026, 1, 2, 12, 0, 0, 700_000, tzinfo=UTC)
    first = observation_state_update_time(two_workers().obj(), seen_at)
    completed = two_workers().condition("Completed", "True", "2026-01-02T12:00:00Z").obj()
    later = observation_state_update_time(completed, seen_at)
    assert first == datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
    assert later >= first


def test_a_reconciler_clock_ahead_of_the_cluster_never_makes_admission_look_stale() -> None:
    """The Reconciler's clock is 5 s ahead: the JobSet's first (condition-less) sighting
    and its admission are both stamped by the cluster, so the admission is not older."""
    reconciler_now = datetime(2026, 1, 2, 12, 0, 10, 400_000, tzinfo=UTC)
    created = two_workers().created("2026-01-02T12:00:05Z")
    first = observation_state_update_time(created.obj(), reconciler_now)
    admitted = created.condition("Suspended", "False", "2026-01-02T12:00:06Z").obj()
    later = observation_state_update_time(admitted, reconciler_now)
    assert first == datetime(2026, 1, 2, 12, 0, 5, tzinfo=UTC)
    assert later > first
