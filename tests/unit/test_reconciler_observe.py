"""What the Reconciler reads off JobSets, Workloads and Pods (SPEC §8): one named case per
rule, compared as whole results."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reconciler.observation import Observation, Source
from reconciler.observe import (
    FinalizerAction,
    FinalizerDecision,
    OrphanDecision,
    OrphanReason,
    QueuePosition,
    WorkUnitSnapshot,
    decide_finalizer,
    decide_orphan,
    finalizer_removal_patch,
    jobset_pods,
    jobset_state_rule,
    observe_jobset,
    observe_pods,
    observe_workload,
    startup_diagnostics,
    work_unit_ids,
    workload_owner,
)
from tests.builders import JobSetBuilder, WorkloadBuilder
from tests.pod_builders import PodBuilder, running, waiting
from xmc.labels import EXECUTION_ID, EXPERIMENT_ID, FINALIZER, WORK_UNIT_ID
from xmc.model.jobset import NO_PODS, MappingRule, PodSummary
from xmc.model.states import WorkUnitState
from xmc.timestamps import set_timestamp, to_datetime
from xmc_api.cloud.xmanager.v1.status_pb2 import (
    Condition,
    ExecutableStatus,
    JobSetStatus,
    ReplicatedJobStatus,
    WorkUnitStatus,
)
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import (
    AuxiliaryInfo,
    QueueInfo,
    StructuredMessage,
)
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import (
    ClusterInfo,
    WorkUnitExecution,
    WorkUnitExecutionMetadata,
)

S = WorkUnitState
R = MappingRule
T_CREATED = "2026-01-02T03:00:00Z"
T_ADMITTED = "2026-01-02T03:04:05Z"
T_LATER = "2026-01-02T03:10:00Z"
NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)
XID, WID, EID = 7, 3, 2
PARENT = f"experiments/{XID}/workUnits/{WID}"
JOBSET_NAME = f"xmc-{XID}-{WID}"
JOBSET_UID = "uid-jobset-2"


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def ts_condition(type_: str, status: str, reason: str, message: str, time: str) -> Condition:
    condition = Condition(type=type_, status=status, reason=reason, message=message)
    set_timestamp(condition.update_time, at(time))
    return condition


def make_jobset() -> JobSetBuilder:
    """An execution's JobSet, as the Actuator labels it."""
    return (
        JobSetBuilder(JOBSET_NAME).uid(JOBSET_UID).resource_version("42").execution(XID, WID, EID)
    )


def two_workers() -> JobSetBuilder:
    return make_jobset().replicated_job("workers", replicas=2)


# --- work_unit_ids ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(make_jobset().obj(), (XID, WID, EID), id="all three labels parse"),
        pytest.param(
            make_jobset().label(EXECUTION_ID, None).obj(), None, id="missing execution id"
        ),
        pytest.param({}, None, id="object without metadata is not ours"),
        pytest.param(
            make_jobset().label(WORK_UNIT_ID, "three").obj(), None, id="non-numeric work unit id"
        ),
        pytest.param(make_jobset().label(EXPERIMENT_ID, "0").obj(), None, id="zero is no id"),
        pytest.param(make_jobset().label(EXPERIMENT_ID, "-7").obj(), None, id="negative id"),
        pytest.param(make_jobset().label(EXECUTION_ID, "²").obj(), None, id="unicode digit"),
    ],
)
def test_work_unit_ids(obj: dict[str, Any], expected: tuple[int, int, int] | None) -> None:
    assert work_unit_ids(obj) == expected


# --- observe_jobset: state and rule -------------------------------------------------------

STATE_CASES = [
    pytest.param(
        two_workers()
        .admitted()
        .status_counts("workers", succeeded=2)
        .condition("Completed", "True", T_LATER)
        .deleting(T_LATER)
        .obj(),
        (S.COMPLETED, R.R1),
        id="R1 deleting a completed jobset is COMPLETED",
    ),
    pytest.param(
        two_workers()
        .admitted()
        .status_counts("workers", failed=1)
        .condition("Failed", "True", T_LATER)
        .deleting(T_LATER)
        .obj(),
        (S.FAILED, R.R1),
        id="R1 deleting a failed jobset is FAILED",
    ),
    pytest.param(
        two_workers().admitted().status_counts("workers", ready=2).deleting(T_LATER).obj(),
        (S.STOPPED, R.R1),
        id="R1 deleting a running jobset is STOPPED",
    ),
    pytest.param(
        two_workers()
        .admitted()
        .status_counts("workers", succeeded=2)
        .condition("Completed", "True")
        .obj(),
        (S.COMPLETED, R.R2),
        id="R2 Completed=True is COMPLETED",
    ),
    pytest.param(
        two_workers()
        .admitted()
        .status_counts("workers", failed=1, ready=1)
        .condition("Failed", "True")
        .obj(),
        (S.FAILED, R.R3),
        id="R3 Failed=True with a job still ready is FAILED",
    ),
    pytest.param(
        two_workers().suspend(True).status_counts("workers", ready=1, active=2).obj(),
        (S.DESCHEDULING, R.R4),
        id="R4 evicted with pods still terminating is DESCHEDULING",
    ),
    pytest.param(
        two_workers().admitted().status_counts("workers", failed=1, active=1).obj(),
        (S.PARTIALLY_FAILED, R.R5),
        id="R5 one job failed while the other runs",
    ),
    pytest.param(
        two_workers().admitted().status_counts("workers", ready=2, active=2).obj(),
        (S.RUNNING, R.R6),
        id="R6 all jobs ready is RUNNING",
    ),
    pytest.param(
        two_workers().admitted().status_counts("workers", ready=1, active=2).obj(),
        (S.STARTING, R.R7),
        id="R7 one of two jobs ready is STARTING",
    ),
    pytest.param(
        two_workers().admitted().obj(),
        (S.STARTING, R.R7),
        id="R7 just admitted with all totals zero is STARTING",
    ),
    pytest.param(
        two_workers().suspend(True).status_counts("workers", failed=1).obj(),
        (S.PARTIALLY_FAILED, R.R8A),
        id="R8a evicted after a job failed",
    ),
    pytest.param(
        two_workers().suspend(True).status_counts("workers", succeeded=1).obj(),
        (S.RUNNING, R.R8B),
        id="R8b evicted after a job succeeded stays RUNNING",
    ),
    pytest.param(
        two_workers().suspend(True).condition("Suspended", "True", T_CREATED).obj(),
        (S.SCHEDULING, R.R9),
        id="R9 created suspended and waiting in the queue is SCHEDULING",
    ),
]


@pytest.mark.parametrize(("jobset", "expected"), STATE_CASES)
def test_observe_jobset_state_and_rule(
    jobset: dict[str, Any], expected: tuple[WorkUnitState, MappingRule]
) -> None:
    observation = observe_jobset(jobset, observed_at=NOW)
    assert observation is not None
    assert (S(observation.execution.status.state), jobset_state_rule(jobset)) == expected


# --- observe_jobset: the whole observation ------------------------------------------------


def jobset_observation(
    state: WorkUnitState,
    *,
    state_update_time: datetime,
    conditions: list[Condition],
    replicated: list[ReplicatedJobStatus],
    restarts: int = 0,
    service_account: str = "",
) -> Observation:
    status = WorkUnitStatus(
        state=WorkUnitStatus.WorkUnitState.ValueType(state),
        detailed_status=ExecutableStatus(
            jobset_status=JobSetStatus(
                conditions=conditions, restarts=restarts, replicated_jobs_status=replicated
            )
        ),
    )
    set_timestamp(status.state_update_time, state_update_time)
    metadata = WorkUnitExecutionMetadata(
        type=WorkUnitExecutionMetadata.JOB_SET,
        resource_name=JOBSET_NAME,
        namespace="xmc-jobs",
        service_account=service_account,
    )
    return Observation(
        XID,
        WID,
        EID,
        Source.JOBSET,
        WorkUnitExecution(status=status, metadata=metadata),
        ("status.state", "status.detailed_status", "metadata"),
    )


RESUMED = ts_condition("Suspended", "False", "ResumeJobs", "jobset is resumed", T_ADMITTED)

OBSERVATION_CASES = [
    pytest.param(
        make_jobset()
        .replicated_job("workers", replicas=2, service_account="trainer-sa")
        .replicated_job("ps")
        .admitted()
        .status_counts("workers", ready=2, active=2)
        .status_counts("ps", ready=1, active=1)
        .restarts(1)
        .obj(),
        jobset_observation(
            S.RUNNING,
            state_update_time=at(T_ADMITTED),
            conditions=[RESUMED],
            replicated=[
                ReplicatedJobStatus(name="workers", ready=2, active=2),
                ReplicatedJobStatus(name="ps", ready=1, active=1),
            ],
            restarts=1,
            service_account="trainer-sa",
        ),
        id="running jobset reports conditions counts restarts and the service account",
    ),
    pytest.param(
        two_workers().suspend(True).obj(),
        jobset_observation(
            S.SCHEDULING,
            state_update_time=NOW,
            conditions=[],
            replicated=[],
        ),
        id="without conditions the state time is the observation time",
    ),
    pytest.param(
        two_workers()
        .admitted()
        .status_counts("workers", succeeded=2)
        .condition("Completed", "True", T_LATER)
        .obj(),
        jobset_observation(
            S.COMPLETED,
            state_update_time=at(T_LATER),
            conditions=[
                RESUMED,
                ts_condition(
                    "Completed",
                    "True",
                    "AllJobsCompleted",
                    "jobset completed successfully",
                    T_LATER,
                ),
            ],
            replicated=[ReplicatedJobStatus(name="workers", succeeded=2)],
        ),
        id="state time is the newest condition transition",
    ),
    pytest.param(
        two_workers().admitted().status_counts("workers", ready=2).deleting(T_LATER).obj(),
        jobset_observation(
            S.STOPPED,
            state_update_time=at(T_LATER),
            conditions=[RESUMED],
            replicated=[ReplicatedJobStatus(name="workers", ready=2)],
        ),
        id="R1 state time is the deletion when it is newer than every condition",
    ),
    pytest.param(
        two_workers().label(WORK_UNIT_ID, None).admitted().obj(),
        None,
        id="a jobset without XMC labels is not reported",
    ),
]


@pytest.mark.parametrize(("jobset", "expected"), OBSERVATION_CASES)
def test_observe_jobset(jobset: dict[str, Any], expected: Observation | None) -> None:
    assert observe_jobset(jobset, observed_at=NOW) == expected


# --- observe_workload ---------------------------------------------------------------------


def make_workload() -> WorkloadBuilder:
    return WorkloadBuilder(JOBSET_NAME, JOBSET_UID).pod_set("workers")


def waiting_message(text: str, *, position: int, total: int) -> StructuredMessage:
    message = StructuredMessage(
        severity=StructuredMessage.INFO,
        source=StructuredMessage.SCHEDULER,
        parent=PARENT,
        user_facing_text=text,
        auxiliary_info=AuxiliaryInfo(
            queue_info=QueueInfo(position_in_queue=position, total_workloads_in_queue=total)
        ),
    )
    set_timestamp(message.create_time, at(T_CREATED))
    return message


def workload_observation(
    message: StructuredMessage | None, metadata: WorkUnitExecutionMetadata | None = None
) -> Observation:
    status = WorkUnitStatus(scheduling_information=message)
    return Observation(
        XID,
        WID,
        EID,
        Source.WORKLOAD,
        WorkUnitExecution(status=status, metadata=metadata or WorkUnitExecutionMetadata()),
        ("status.scheduling_information", "metadata"),
    )


NO_FIT = "couldn't assign flavors to pod set workers: insufficient quota for cpu"
NO_QUEUE = "ClusterQueue cq doesn't exist"

WORKLOAD_CASES = [
    pytest.param(
        make_workload().waiting("Pending", NO_FIT).obj(),
        QueuePosition(position_in_cluster_queue=0, total=3),
        workload_observation(waiting_message(NO_FIT, position=1, total=3)),
        id="pending workload reports Kueue's message and a 1-based queue position",
    ),
    pytest.param(
        make_workload().waiting("Inadmissible", NO_QUEUE).obj(),
        QueuePosition(position_in_cluster_queue=None, total=None),
        workload_observation(waiting_message(NO_QUEUE, position=0, total=0)),
        id="inadmissible workload with an unknown position reports position 0",
    ),
    pytest.param(
        make_workload().waiting("Pending", NO_FIT).obj(),
        None,
        workload_observation(waiting_message(NO_FIT, position=0, total=0)),
        id="pending workload without a visibility answer reports position 0",
    ),
    pytest.param(
        make_workload()
        .condition("Evicted", "True", "Preempted", "preempted by a higher priority workload")
        .condition("Preempted", "True", "InClusterQueue", "preempted in ClusterQueue cq")
        .waiting("Pending", NO_FIT)
        .condition("Admitted", "False", "NoReservation", "The workload has no reservation")
        .obj(),
        QueuePosition(position_in_cluster_queue=4, total=5),
        workload_observation(waiting_message(NO_FIT, position=5, total=5)),
        id="evicted workload is waiting again and Evicted is not read",
    ),
    pytest.param(
        WorkloadBuilder(JOBSET_NAME, JOBSET_UID)
        .pod_set("workers", node_selector={"cloud.google.com/gke-accelerator": "tpu-v5e"})
        .pod_set("ps", node_selector={"pool": "cpu"})
        .admit(
            ("workers", {"google.com/tpu": "tpu-v5e", "cpu": "tpu-host"}),
            ("ps", {"cpu": "default"}),
            cluster="worker-cluster-1",
        )
        .obj(),
        None,
        workload_observation(
            None,
            WorkUnitExecutionMetadata(
                multi_kueue_cluster_name="worker-cluster-1",
                executing_cluster=ClusterInfo(cluster_name="worker-cluster-1"),
                resource_flavor="tpu-host",
                node_selectors={"cloud.google.com/gke-accelerator": "tpu-v5e"},
            ),
        ),
        id="admitted on a MultiKueue cluster clears the message and reports placement",
    ),
    pytest.param(
        make_workload().admit(("workers", {"cpu": "default"})).obj(),
        None,
        workload_observation(None, WorkUnitExecutionMetadata(resource_flavor="default")),
        id="admitted without node selectors or cluster reports the flavor only",
    ),
    pytest.param(
        make_workload()
        .admit(("workers", {"cpu": "default"}))
        .condition("Finished", "True", "JobFinished", "Job finished successfully")
        .obj(),
        None,
        workload_observation(None, WorkUnitExecutionMetadata(resource_flavor="default")),
        id="finished workload sends the message unset",
    ),
    pytest.param(
        make_workload().condition("QuotaReserved", "False", "NoReservation", "none").obj(),
        None,
        workload_observation(None),
        id="QuotaReserved False for another reason is not waiting",
    ),
    pytest.param(
        make_workload().obj(),
        QueuePosition(position_in_cluster_queue=0, total=1),
        workload_observation(None),
        id="new workload without conditions sends the message unset",
    ),
    *(
        pytest.param(
            make_workload().waiting(reason, NO_FIT).obj(),
            QueuePosition(position_in_cluster_queue=1, total=2),
            workload_observation(waiting_message(NO_FIT, position=2, total=2)),
            id=f"Kueue after v0.19 (UnadmittedWorkloadsObservability): {reason} is waiting",
        )
        for reason in (
            "WaitingForQuota",
            "ExceedsMaxQuota",
            "WaitingForPreemptedWorkloads",
            "PendingEvaluation",
            "Misconfigured",
        )
    ),
]


@pytest.mark.parametrize(("workload", "position", "expected"), WORKLOAD_CASES)
def test_observe_workload(
    workload: dict[str, Any], position: QueuePosition | None, expected: Observation
) -> None:
    got = observe_workload(
        workload, jobset_ids=(XID, WID, EID), queue_position=position, observed_at=NOW
    )
    assert got == expected


def test_observe_workload_admitted_masks_unset_message() -> None:
    """The clearing relies on the path being masked while the field is absent."""
    got = observe_workload(
        make_workload().admit(("workers", {"cpu": "default"})).obj(),
        jobset_ids=(XID, WID, EID),
        queue_position=None,
        observed_at=NOW,
    )
    assert (
        "status.scheduling_information" in got.update_mask,
        got.execution.status.HasField("scheduling_information"),
    ) == (True, False)


def _ref(kind: str, name: str, *, controller: bool | None) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "name": name, "uid": "u"}
    if controller is not None:
        ref["controller"] = controller
    return ref


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        pytest.param(make_workload().obj(), JOBSET_NAME, id="controller JobSet owner"),
        pytest.param(
            make_workload()
            .owner(
                _ref("JobSet", "not-the-controller", controller=False),
                _ref("JobSet", "the-controller", controller=True),
            )
            .obj(),
            "the-controller",
            id="only the controller reference counts",
        ),
        pytest.param(
            make_workload().owner(_ref("Job", "plain-job", controller=True)).obj(),
            None,
            id="a Workload of a plain Job has no JobSet owner",
        ),
        pytest.param(
            make_workload().owner(_ref("JobSet", "x", controller=None)).obj(),
            None,
            id="a reference without the controller flag is not the owner",
        ),
        pytest.param(make_workload().owner().obj(), None, id="no owner references"),
    ],
)
def test_workload_owner(workload: dict[str, Any], expected: str | None) -> None:
    assert workload_owner(workload) == expected


# --- startup diagnostics ------------------------------------------------------------------


def pod(
    name: str, *, jobset_uid: str | None = JOBSET_UID, jobset_name: str = JOBSET_NAME
) -> PodBuilder:
    """A pending pod of the JobSet (or of ``jobset_name``; without ``jobset_uid``, the
    labels of a JobSet controller that does not write the uid)."""
    return PodBuilder(name).of_jobset(jobset_name, jobset_uid)


def diagnostic(text: str) -> StructuredMessage:
    return StructuredMessage(
        severity=StructuredMessage.ERROR,
        source=StructuredMessage.KUBERNETES,
        parent=PARENT,
        user_facing_text=text,
    )


ADMITTED_AT = at(T_ADMITTED)
PULL_ERROR = 'Back-off pulling image "trainer:nope"'
ADMITTED_JOBSET = two_workers().admitted().status_counts("workers", active=2).obj()
BAD_IMAGE_POD = pod("xmc-7-3-workers-0-0-b").container("main", waiting("ImagePullBackOff")).obj()

DIAGNOSTIC_CASES = [
    pytest.param(
        ADMITTED_JOBSET,
        [BAD_IMAGE_POD],
        ADMITTED_AT + timedelta(minutes=1, seconds=59),
        None,
        id="within the two-minute grace nothing is reported",
    ),
    pytest.param(
        ADMITTED_JOBSET,
        [BAD_IMAGE_POD],
        (ADMITTED_AT + timedelta(minutes=3)).replace(tzinfo=None),
        diagnostic(
            'Container "main" of pod "xmc-7-3-workers-0-0-b" cannot start: ImagePullBackOff.'
        ),
        id="a naive now is read as UTC",
    ),
    pytest.param(
        ADMITTED_JOBSET,
        [
            pod("xmc-7-3-workers-0-0-b")
            .container("main", waiting("ImagePullBackOff", PULL_ERROR))
            .obj()
        ],
        ADMITTED_AT + timedelta(minutes=2),
        diagnostic(
            'Container "main" of pod "xmc-7-3-workers-0-0-b" cannot start: '
            f"ImagePullBackOff ({PULL_ERROR})."
        ),
        id="exactly at the grace an image pull back-off is an ERROR",
    ),
    pytest.param(
        ADMITTED_JOBSET,
        [
            pod("xmc-7-3-workers-0-1-z").container("main", waiting("ErrImagePull")).obj(),
            pod("xmc-7-3-workers-0-0-b")
            .container("sidecar", running())
            .container("main", waiting("CreateContainerConfigError"))
            .container("logger", waiting("InvalidImageName"))
            .obj(),
        ],
        ADMITTED_AT + timedelta(minutes=5),
        diagnostic(
            'Container "main" of pod "xmc-7-3-workers-0-0-b" cannot start: '
            "CreateContainerConfigError; 2 more containers affected."
        ),
        id="several pods name the first pod by name then container order and count the rest",
    ),
    pytest.param(
        ADMITTED_JOBSET,
        [
            pod("xmc-7-3-workers-0-0-b")
            .container("main", waiting("PodInitializing"))
            .init_container("fetch", waiting("ImagePullBackOff"))
            .obj()
        ],
        ADMITTED_AT + timedelta(minutes=5),
        None,
        id="an init container that cannot pull is ignored",
    ),
    pytest.param(
        ADMITTED_JOBSET,
        [pod("xmc-7-3-workers-0-0-b").container("main", waiting("ContainerCreating")).obj()],
        ADMITTED_AT + timedelta(minutes=5),
        None,
        id="a container still being created is not a failure",
    ),
    pytest.param(
        ADMITTED_JOBSET,
        [
            pod("xmc-7-3-workers-0-0-b", jobset_uid="uid-of-the-previous-execution")
            .container("main", waiting("ImagePullBackOff"))
            .obj()
        ],
        ADMITTED_AT + timedelta(minutes=5),
        None,
        id="pods of an earlier execution's same-named JobSet are not ours",
    ),
    pytest.param(
        ADMITTED_JOBSET,
        [
            pod("xmc-7-3-workers-0-0-b", jobset_uid=None)
            .container("main", waiting("RunContainerError"))
            .obj(),
            pod("other-0-0-a", jobset_uid=None, jobset_name="other")
            .container("main", waiting("ErrImagePull"))
            .obj(),
        ],
        ADMITTED_AT + timedelta(minutes=5),
        diagnostic(
            'Container "main" of pod "xmc-7-3-workers-0-0-b" cannot start: RunContainerError.'
        ),
        id="pods without the uid label are matched by JobSet name",
    ),
    pytest.param(
        two_workers().suspend(True).condition("Suspended", "True", T_CREATED).obj(),
        [BAD_IMAGE_POD],
        ADMITTED_AT + timedelta(hours=1),
        None,
        id="a suspended JobSet has nothing to diagnose",
    ),
    pytest.param(
        two_workers().suspend(False).obj(),
        [BAD_IMAGE_POD],
        ADMITTED_AT + timedelta(hours=1),
        None,
        id="without a Suspended=False condition the admission time is unknown",
    ),
]


@pytest.mark.parametrize(("jobset", "pods", "now", "expected"), DIAGNOSTIC_CASES)
def test_startup_diagnostics(
    jobset: dict[str, Any],
    pods: list[dict[str, Any]],
    now: datetime,
    expected: StructuredMessage | None,
) -> None:
    assert startup_diagnostics(jobset, pods, now=now) == expected


def pod_observation(text: str) -> Observation:
    return Observation(
        XID,
        WID,
        EID,
        Source.POD,
        WorkUnitExecution(status=WorkUnitStatus(system_message=diagnostic(text))),
        ("status.system_message",),
    )


@pytest.mark.parametrize(
    ("jobset", "pods", "now", "expected"),
    [
        pytest.param(
            ADMITTED_JOBSET,
            [BAD_IMAGE_POD],
            ADMITTED_AT + timedelta(minutes=3),
            pod_observation(
                'Container "main" of pod "xmc-7-3-workers-0-0-b" cannot start: ImagePullBackOff.'
            ),
            id="a stuck container becomes a system message and nothing else",
        ),
        pytest.param(
            ADMITTED_JOBSET,
            [pod("xmc-7-3-workers-0-0-b").container("main", running()).obj()],
            ADMITTED_AT + timedelta(minutes=3),
            None,
            id="healthy pods report nothing",
        ),
        pytest.param(
            two_workers().admitted().label(EXPERIMENT_ID, None).obj(),
            [BAD_IMAGE_POD],
            ADMITTED_AT + timedelta(minutes=3),
            None,
            id="a JobSet without XMC labels reports nothing",
        ),
    ],
)
def test_observe_pods(
    jobset: dict[str, Any],
    pods: list[dict[str, Any]],
    now: datetime,
    expected: Observation | None,
) -> None:
    assert observe_pods(jobset, pods, now=now) == expected


# --- finalizer ----------------------------------------------------------------------------

DELETED_AT = at(T_LATER)
STOPPED_WRITE = jobset_observation(
    S.STOPPED,
    state_update_time=DELETED_AT,
    conditions=[RESUMED],
    replicated=[ReplicatedJobStatus(name="workers", ready=2)],
)


def deleting() -> JobSetBuilder:
    return two_workers().admitted().status_counts("workers", ready=2).deleting(T_LATER)


@pytest.mark.parametrize(
    ("jobset", "now", "last_write_failed", "expected"),
    [
        pytest.param(
            two_workers().admitted().obj(),
            DELETED_AT,
            False,
            FinalizerDecision(FinalizerAction.NOT_OURS, None, "no XMC finalizer to release"),
            id="a JobSet not being deleted is left alone",
        ),
        pytest.param(
            deleting().finalizers().obj(),
            DELETED_AT,
            False,
            FinalizerDecision(FinalizerAction.NOT_OURS, None, "no XMC finalizer to release"),
            id="a deleting JobSet whose XMC finalizer is already gone is left alone",
        ),
        pytest.param(
            two_workers()
            .admitted()
            .deleting(T_LATER)
            .finalizers("kueue.x-k8s.io/resource-in-use")
            .obj(),
            DELETED_AT,
            False,
            FinalizerDecision(FinalizerAction.NOT_OURS, None, "no XMC finalizer to release"),
            id="only a foreign finalizer is not ours to release",
        ),
        pytest.param(
            deleting().obj(),
            DELETED_AT + timedelta(seconds=1),
            False,
            FinalizerDecision(
                FinalizerAction.WRITE_THEN_REMOVE,
                STOPPED_WRITE,
                "deleting: write the terminal state",
            ),
            id="deleting a running JobSet writes STOPPED for its labelled eid first",
        ),
        pytest.param(
            deleting().obj(),
            DELETED_AT + timedelta(minutes=9, seconds=59),
            True,
            FinalizerDecision(
                FinalizerAction.RETRY_WRITE, STOPPED_WRITE, "terminal-state write failed: retry"
            ),
            id="a failed write is retried within ten minutes of the deletion",
        ),
        pytest.param(
            deleting().obj(),
            DELETED_AT + timedelta(minutes=10),
            True,
            FinalizerDecision(
                FinalizerAction.REMOVE_ANYWAY,
                None,
                "terminal-state write still failing 0:10:00 after deletion",
            ),
            id="after ten minutes of failed writes the finalizer goes anyway",
        ),
        pytest.param(
            deleting().obj(),
            DELETED_AT + timedelta(hours=1),
            False,
            FinalizerDecision(
                FinalizerAction.WRITE_THEN_REMOVE,
                STOPPED_WRITE,
                "deleting: write the terminal state",
            ),
            id="past the cutoff a first attempt still writes",
        ),
        pytest.param(
            deleting().label(EXECUTION_ID, "garbage").obj(),
            DELETED_AT,
            False,
            FinalizerDecision(
                FinalizerAction.REMOVE_ANYWAY, None, "no valid XMC labels: nothing to write"
            ),
            id="a JobSet with unusable labels is released at once",
        ),
    ],
)
def test_decide_finalizer(
    jobset: dict[str, Any], now: datetime, last_write_failed: bool, expected: FinalizerDecision
) -> None:
    assert decide_finalizer(jobset, now=now, last_write_failed=last_write_failed) == expected


def test_decide_finalizer_terminal_write_keeps_the_terminal_condition() -> None:
    decision = decide_finalizer(
        two_workers()
        .admitted()
        .status_counts("workers", failed=1)
        .condition("Failed", "True", T_LATER)
        .deleting("2026-01-02T03:11:00Z")
        .obj(),
        now=NOW,
        last_write_failed=False,
    )
    assert decision.observation is not None
    status = decision.observation.execution.status
    assert (decision.action, S(status.state), to_datetime(status.state_update_time)) == (
        FinalizerAction.WRITE_THEN_REMOVE,
        S.FAILED,
        at("2026-01-02T03:11:00Z"),
    )


@pytest.mark.parametrize(
    ("jobset", "expected"),
    [
        pytest.param(
            deleting().finalizers("kueue.x-k8s.io/resource-in-use", FINALIZER, "other/x").obj(),
            {
                "metadata": {
                    "finalizers": ["kueue.x-k8s.io/resource-in-use", "other/x"],
                    "resourceVersion": "42",
                }
            },
            id="only the XMC finalizer is removed and the resourceVersion is a precondition",
        ),
        pytest.param(
            deleting().finalizers(FINALIZER).obj(),
            {"metadata": {"finalizers": [], "resourceVersion": "42"}},
            id="the last finalizer leaves an empty list",
        ),
    ],
)
def test_finalizer_removal_patch(jobset: dict[str, Any], expected: dict[str, Any]) -> None:
    assert finalizer_removal_patch(jobset) == expected


# --- orphans ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("work_unit", "deleting", "expected"),
    [
        pytest.param(
            WorkUnitSnapshot(EID, S.RUNNING),
            False,
            OrphanDecision(OrphanReason.CURRENT),
            id="the current execution running is kept",
        ),
        pytest.param(
            WorkUnitSnapshot(EID, S.STOPPING),
            False,
            OrphanDecision(OrphanReason.CURRENT),
            id="a stopping execution is left to the Delete task",
        ),
        pytest.param(None, False, OrphanDecision(OrphanReason.WORK_UNIT_GONE), id="work unit gone"),
        pytest.param(
            WorkUnitSnapshot(EID + 1, S.RESTARTING),
            False,
            OrphanDecision(OrphanReason.SUPERSEDED),
            id="a newer execution exists",
        ),
        pytest.param(
            WorkUnitSnapshot(EID, S.COMPLETED),
            False,
            OrphanDecision(OrphanReason.WORK_UNIT_TERMINAL),
            id="the work unit is already terminal",
        ),
        pytest.param(
            WorkUnitSnapshot(EID - 1, S.RUNNING),
            False,
            OrphanDecision(OrphanReason.AHEAD_OF_STORE),
            id="a JobSet ahead of the store is a stale read and kept",
        ),
        pytest.param(
            None,
            True,
            OrphanDecision(OrphanReason.ALREADY_DELETING),
            id="a JobSet already being deleted is left to its finalizer",
        ),
    ],
)
def test_decide_orphan(
    work_unit: WorkUnitSnapshot | None, deleting: bool, expected: OrphanDecision
) -> None:
    assert decide_orphan((XID, WID, EID), work_unit, deleting=deleting) == expected


_ORPHANS = {
    OrphanReason.CURRENT: False,
    OrphanReason.ALREADY_DELETING: False,
    OrphanReason.AHEAD_OF_STORE: False,
    OrphanReason.WORK_UNIT_GONE: True,
    OrphanReason.SUPERSEDED: True,
    OrphanReason.WORK_UNIT_TERMINAL: True,
}


def test_orphan_flag_covers_every_reason() -> None:
    assert {r: OrphanDecision(r).orphan for r in OrphanReason} == _ORPHANS


# --- R4 from the pods (docs/decisions/0019) ---------------------------------------------


def terminating_pod(
    name: str, *, jobset_uid: str | None = JOBSET_UID, jobset_name: str = JOBSET_NAME
) -> dict[str, Any]:
    builder = pod(name, jobset_uid=jobset_uid, jobset_name=jobset_name)
    return builder.container("main", running()).phase("Running").deleting(T_LATER).obj()


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([], NO_PODS, id="no pods"),
        pytest.param(
            [terminating_pod("a"), terminating_pod("b")],
            PodSummary(terminating=2, total=2),
            id="this JobSet's Terminating pods",
        ),
        pytest.param(
            [terminating_pod("old", jobset_uid="uid-of-an-older-execution")],
            NO_PODS,
            id="an older execution's pods under the same name do not count",
        ),
        pytest.param(
            [terminating_pod("other", jobset_uid=None, jobset_name="xmc-7-4")],
            NO_PODS,
            id="another JobSet's pods do not count",
        ),
        pytest.param(
            [pod("running").container("main", running()).obj()],
            PodSummary(total=1),
            id="a live pod",
        ),
    ],
)
def test_jobset_pods(pods: list[dict[str, Any]], expected: PodSummary) -> None:
    assert jobset_pods(two_workers().obj(), pods) == expected


def test_a_finishing_jobset_is_not_observed_until_its_terminal_condition() -> None:
    """Decision 0030: all totals zero while every pod of this execution has finished is
    the Jobs finishing, not a start; the Reconciler says nothing until Failed/Completed."""
    interim = two_workers().admitted().status_counts("workers").obj()
    failed_pod = pod("p").container("main", running()).phase("Failed").obj()
    failed = two_workers().admitted().status_counts("workers", failed=1)

    held = observe_jobset(interim, observed_at=NOW, pods=jobset_pods(interim, [failed_pod]))
    starting = observe_jobset(interim, observed_at=NOW, pods=NO_PODS)
    final = observe_jobset(failed.condition("Failed", "True", T_LATER).obj(), observed_at=NOW)

    assert held is None
    assert starting is not None
    assert S(starting.execution.status.state) is S.STARTING
    assert final is not None
    assert S(final.execution.status.state) is S.FAILED


def test_an_evicted_jobset_is_descheduling_while_its_pods_terminate() -> None:
    evicted = (
        two_workers()
        .suspend(True)
        .condition("Suspended", "True", T_LATER)
        .status_counts("workers")
        .obj()
    )
    draining = observe_jobset(evicted, observed_at=NOW, pods=PodSummary(terminating=2))
    drained = observe_jobset(evicted, observed_at=NOW, pods=NO_PODS)
    assert draining is not None
    assert drained is not None
    assert S(draining.execution.status.state) == S.DESCHEDULING
    assert jobset_state_rule(evicted, PodSummary(terminating=2)) == R.R4
    assert S(drained.execution.status.state) == S.SCHEDULING
    assert (
        draining.execution.status.state_update_time == drained.execution.status.state_update_time
    ), "both at the Suspended transition, so SCHEDULING is not stale after DESCHEDULING"
