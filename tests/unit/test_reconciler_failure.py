"""Why a JobSet failed (``reconciler.failure``): one named case per kind of evidence,
compared as whole results, then the FAILED observation that carries the reason and the
merge that stores it once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reconciler.failure import (
    MAX_TEXT,
    NOT_FAILED,
    FailureCause,
    FailureReason,
    decide_failure_reason,
    failure_message,
    named_failed_job,
)
from reconciler.observe import (
    FAILED_JOBSET_MASK,
    JOBSET_MASK,
    FinalizerAction,
    decide_finalizer,
    observe_jobset,
)
from tests import builders, pod_builders
from tests.builders import JobSetBuilder
from tests.pod_builders import PodBuilder, waiting
from xmc.model.merge import MessageField, merge_work_unit_execution
from xmc.model.states import WorkUnitState
from xmc.model.stored import StoredExecution
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage

C = FailureCause
XID, WID, EID = 7, 3, 2
JS = f"xmc-{XID}-{WID}"
JS_UID = "uid-jobset"
JOB = f"{JS}-main-0"
POD = f"{JOB}-0-bcdfg"
T_START = "2026-01-02T03:00:00Z"
T_FAIL = "2026-01-02T03:05:00Z"
T_FAILED = "2026-01-02T03:05:02Z"
NOW = datetime(2026, 1, 2, 3, 10, tzinfo=UTC)
FAILED_JOBS = "jobset failed due to one or more job failures"
DEADLINE = "Job was active longer than specified deadline"
BACKOFF = "Job has reached the specified backoff limit"


# --- builders ---------------------------------------------------------------------------


def failed_jobset(
    message: str = f"{FAILED_JOBS} (first failed job: {JOB})",
    *,
    reason: str = "FailedJobs",
    restarts: int = 0,
    failed: bool = True,
) -> dict[str, Any]:
    return (
        JobSetBuilder(JS, namespace="default")
        .uid(JS_UID)
        .execution(XID, WID, EID)
        .replicated_job("main")
        .restarts(restarts)
        .condition(
            "Failed", "True" if failed else "False", T_FAILED, reason=reason, message=message
        )
        .obj()
    )


def job(
    name: str = JOB,
    reason: str = "BackoffLimitExceeded",
    message: str = BACKOFF,
    *,
    at: str = T_FAILED,
    type_: str = "Failed",
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"jobset.sigs.k8s.io/jobset-uid": JS_UID},
        },
        "status": {"conditions": [builders.condition(type_, "True", reason, message, at)]},
    }


def terminated(
    code: int, reason: str = "Error", *, at: str = T_FAIL, message: str | None = None
) -> dict[str, Any]:
    return pod_builders.terminated(
        code, reason, started_at=T_START, finished_at=at, message=message
    )


def pod(name: str = POD, *, job: str = JOB, phase: str = "Failed") -> PodBuilder:
    """A pod of job ``job`` of the failed JobSet."""
    return PodBuilder(name).of_jobset(JS, JS_UID, restart_attempt=0).of_job(job).phase(phase)


def reason(
    cause: FailureCause, text: str, job_name: str = JOB, *, code: int | None = None
) -> FailureReason:
    return FailureReason(cause, text, job_name, exit_code=code)


PREFIX = f'job "{JOB}" failed (BackoffLimitExceeded)'
OF_POD = f'of pod "{POD}"'


# --- the decision -----------------------------------------------------------------------

CASES = [
    pytest.param(
        failed_jobset(failed=False), [], [], NOT_FAILED, id="a JobSet that has not failed"
    ),
    pytest.param(
        failed_jobset(),
        [job()],
        [pod().container("main", terminated(1)).obj()],
        reason(
            C.CONTAINER, f'{PREFIX}: container "main" {OF_POD} exited with code 1 (Error)', code=1
        ),
        id="a container exits 1",
    ),
    pytest.param(
        failed_jobset(),
        [job()],
        [pod().container("main", terminated(137, "OOMKilled")).obj()],
        reason(
            C.CONTAINER,
            f'{PREFIX}: container "main" {OF_POD} exited with code 137 (OOMKilled)',
            code=137,
        ),
        id="a container is OOMKilled",
    ),
    pytest.param(
        failed_jobset(),
        [job()],
        [pod().container("main", terminated(2, message="loss is NaN\n")).obj()],
        reason(
            C.CONTAINER,
            f'{PREFIX}: container "main" {OF_POD} exited with code 2 (Error): loss is NaN',
            code=2,
        ),
        id="the termination message is quoted",
    ),
    pytest.param(
        failed_jobset(),
        [job()],
        [
            pod()
            .init_container("fetch", terminated(3, at="2026-01-02T03:01:00Z"))
            .container("main", waiting("PodInitializing"))
            .obj()
        ],
        reason(
            C.CONTAINER,
            f'{PREFIX}: init container "fetch" {OF_POD} exited with code 3 (Error)',
            code=3,
        ),
        id="an init container fails",
    ),
    pytest.param(
        failed_jobset(),
        [job()],
        [
            pod(phase="Running")
            .container("main", waiting("CrashLoopBackOff"), last=terminated(1))
            .obj()
        ],
        reason(
            C.CONTAINER, f'{PREFIX}: container "main" {OF_POD} exited with code 1 (Error)', code=1
        ),
        id="a container restarted in place: its last state",
    ),
    pytest.param(
        failed_jobset(),
        [job()],
        [
            pod()
            .container("sidecar", terminated(0, "Completed", at="2026-01-02T03:00:30Z"))
            .container("main", terminated(1, at="2026-01-02T03:02:00Z"))
            .container("logger", terminated(143, at="2026-01-02T03:04:00Z"))
            .obj()
        ],
        reason(
            C.CONTAINER, f'{PREFIX}: container "main" {OF_POD} exited with code 1 (Error)', code=1
        ),
        id="the earliest non-zero exit of the pod, not a clean one",
    ),
    pytest.param(
        failed_jobset(),
        [job()],
        [
            pod(f"{JOB}-0-later").container("main", terminated(1, at=T_FAILED)).obj(),
            pod().container("main", terminated(137, "OOMKilled", at=T_FAIL)).obj(),
        ],
        reason(
            C.CONTAINER,
            f'{PREFIX}: container "main" {OF_POD} exited with code 137 (OOMKilled)',
            code=137,
        ),
        id="the first failed pod of the job",
    ),
    pytest.param(
        failed_jobset(),
        [job(), job(f"{JS}-other-0", at=T_START)],
        [
            pod("other-pod", job=f"{JS}-other-0")
            .container("main", terminated(9, at=T_START))
            .obj(),
            pod().container("main", terminated(1)).obj(),
        ],
        reason(
            C.CONTAINER, f'{PREFIX}: container "main" {OF_POD} exited with code 1 (Error)', code=1
        ),
        id="the job the JobSet names, not another failed one",
    ),
    pytest.param(
        failed_jobset(),
        [job(reason="DeadlineExceeded", message=DEADLINE)],
        [
            pod(phase="Running")
            .deleting(T_FAILED)
            .container("main", terminated(143, at=T_FAILED))
            .obj()
        ],
        reason(C.JOB, f'job "{JOB}" failed (DeadlineExceeded): {DEADLINE}'),
        id="DeadlineExceeded: the pods it killed are not the cause",
    ),
    pytest.param(
        failed_jobset(),
        [job(reason="DeadlineExceeded", message=DEADLINE)],
        [
            pod(phase="Pending")
            .container("main", waiting("ImagePullBackOff", 'Back-off pulling image "x"'))
            .obj()
        ],
        reason(
            C.STARTUP,
            f'job "{JOB}" failed (DeadlineExceeded): {DEADLINE}; container "main" {OF_POD} '
            'could not start: ImagePullBackOff (Back-off pulling image "x")',
        ),
        id="an image that never pulled, ended by the deadline",
    ),
    pytest.param(
        failed_jobset(),
        [],
        [pod(phase="Pending").container("main", waiting("ErrImagePull", "not found")).obj()],
        reason(
            C.STARTUP,
            f'job "{JOB}" failed: container "main" {OF_POD} could not start: '
            "ErrImagePull (not found)",
        ),
        id="an image pull error, the Job unreadable",
    ),
    pytest.param(
        failed_jobset(),
        [job()],
        [],
        reason(C.JOB, f"{PREFIX}: {BACKOFF}"),
        id="BackoffLimitExceeded with its pods gone",
    ),
    pytest.param(
        failed_jobset(),
        [
            job(
                reason="PodFailurePolicy",
                message=f"Container main for pod default/{POD} failed with exit code 42 "
                "matching FailJob rule at index 0",
            )
        ],
        [pod().container("main", terminated(42)).obj()],
        reason(
            C.CONTAINER,
            f'job "{JOB}" failed (PodFailurePolicy): container "main" {OF_POD} '
            "exited with code 42 (Error)",
            code=42,
        ),
        id="PodFailurePolicy: the container it matched",
    ),
    pytest.param(
        failed_jobset(),
        [job(reason="BackoffLimitExceeded", type_="FailureTarget")],
        [],
        reason(C.JOB, f"{PREFIX}: {BACKOFF}"),
        id="a FailureTarget while the pods terminate",
    ),
    pytest.param(
        failed_jobset(),
        [],
        [],
        reason(
            C.JOBSET, f'JobSet "{JS}" failed (FailedJobs): {FAILED_JOBS} (first failed job: {JOB})'
        ),
        id="nothing but the JobSet's message",
    ),
    pytest.param(
        failed_jobset(
            f"jobset failed due to reaching max number of restarts (first failed job: {JOB})",
            reason="ReachedMaxRestarts",
            restarts=2,
        ),
        [],
        [
            pod()
            .label("jobset.sigs.k8s.io/restart-attempt", "1")
            .container("main", terminated(1))
            .obj()
        ],
        reason(
            C.JOBSET,
            f'JobSet "{JS}" failed (ReachedMaxRestarts): jobset failed due to reaching max '
            f"number of restarts (first failed job: {JOB})",
        ),
        id="pods of an earlier restart attempt do not count",
    ),
    pytest.param(
        failed_jobset(),
        [],
        [
            pod()
            .label("jobset.sigs.k8s.io/jobset-uid", "uid-older")
            .container("main", terminated(1))
            .obj()
        ],
        reason(
            C.JOBSET, f'JobSet "{JS}" failed (FailedJobs): {FAILED_JOBS} (first failed job: {JOB})'
        ),
        id="a pod of an older JobSet of the same name does not count",
    ),
    pytest.param(
        failed_jobset(FAILED_JOBS),
        [],
        [pod().container("main", terminated(1)).obj()],
        reason(
            C.CONTAINER,
            f'job "{JOB}" failed: container "main" {OF_POD} exited with code 1 (Error)',
            code=1,
        ),
        id="no job named: the job of the first failed pod",
    ),
    pytest.param(
        failed_jobset(FAILED_JOBS),
        [job(f"{JS}-b-0", at=T_FAILED), job(f"{JS}-a-0", at=T_FAIL)],
        [],
        reason(C.JOB, f'job "{JS}-a-0" failed (BackoffLimitExceeded): {BACKOFF}', f"{JS}-a-0"),
        id="no job named: the oldest failed Job",
    ),
    pytest.param(
        failed_jobset(FAILED_JOBS),
        [],
        [],
        reason(C.JOBSET, f'JobSet "{JS}" failed (FailedJobs): {FAILED_JOBS}', ""),
        id="no job known at all",
    ),
    pytest.param(
        failed_jobset(),
        [job()],
        [
            pod()
            .reason("Evicted", "The node was low on resource: memory.")
            .container("main", terminated(137))
            .obj()
        ],
        reason(
            C.POD,
            f'{PREFIX}: pod "{POD}" failed: Evicted (The node was low on resource: memory.)',
        ),
        id="a pod's own reason stands for its killed containers",
    ),
    pytest.param(
        failed_jobset(),
        [job()],
        [pod().deleting("2026-01-02T03:06:00Z").container("main", terminated(1, at=T_FAIL)).obj()],
        reason(
            C.CONTAINER, f'{PREFIX}: container "main" {OF_POD} exited with code 1 (Error)', code=1
        ),
        id="a pod deleted after its container failed still tells",
    ),
]


@pytest.mark.parametrize(("jobset", "jobs", "pods", "want"), CASES)
def test_decide_failure_reason(
    jobset: dict[str, Any],
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    want: FailureReason,
) -> None:
    assert decide_failure_reason(jobset, jobs, pods) == want


def test_the_text_is_printable_and_bounded() -> None:
    long = "\x1b[31m" + "x" * 5000
    got = decide_failure_reason(
        failed_jobset(), [job()], [pod().container("main", terminated(1, message=long)).obj()]
    )
    assert len(got.text) == MAX_TEXT
    assert got.text.endswith("…")
    assert "\\x1b[31m" in got.text
    assert "\x1b" not in got.text


@pytest.mark.parametrize(
    ("message", "want"),
    [
        pytest.param(f"{FAILED_JOBS} (first failed job: {JOB})", JOB, id="upstream's suffix"),
        pytest.param(FAILED_JOBS, "", id="an older JobSet controller names none"),
        pytest.param("", "", id="no message"),
    ],
)
def test_named_failed_job(message: str, want: str) -> None:
    assert named_failed_job(failed_jobset(message)) == want


def test_failure_message_is_an_error_from_the_cluster() -> None:
    jobset = failed_jobset()
    message = failure_message(jobset, decide_failure_reason(jobset))
    assert message == StructuredMessage(
        severity=StructuredMessage.ERROR,
        source=StructuredMessage.KUBERNETES,
        parent=f"experiments/{XID}/workUnits/{WID}",
        user_facing_text=f'JobSet "{JS}" failed (FailedJobs): {FAILED_JOBS} '
        f"(first failed job: {JOB})",
    )
    assert failure_message(jobset, NOT_FAILED) is None


# --- the FAILED observation -------------------------------------------------------------


def _message(text: str = "why") -> StructuredMessage:
    return StructuredMessage(
        severity=StructuredMessage.ERROR, source=StructuredMessage.KUBERNETES, user_facing_text=text
    )


def test_a_failed_observation_carries_the_reason_forced() -> None:
    observation = observe_jobset(failed_jobset(), observed_at=NOW, failure=_message())
    assert observation is not None
    assert observation.update_mask == FAILED_JOBSET_MASK
    assert observation.force_status_message_update
    assert observation.execution.status.system_message == _message()


def test_only_a_failed_observation_carries_a_reason() -> None:
    observation = observe_jobset(failed_jobset(failed=False), observed_at=NOW, failure=_message())
    assert observation is not None
    assert observation.update_mask == JOBSET_MASK
    assert not observation.execution.status.HasField("system_message")


def test_the_finalizer_writes_the_reason_of_a_failed_jobset() -> None:
    jobset = failed_jobset()
    jobset["metadata"]["deletionTimestamp"] = "2026-01-02T03:09:00Z"
    decision = decide_finalizer(jobset, now=NOW, last_write_failed=False, failure=_message())
    assert decision.action is FinalizerAction.WRITE_THEN_REMOVE
    assert decision.observation is not None
    assert WorkUnitState(decision.observation.execution.status.state) is WorkUnitState.FAILED
    assert decision.observation.execution.status.system_message == _message()


# --- stored once ------------------------------------------------------------------------


def _stored(state: WorkUnitState, system: StructuredMessage | None = None) -> StoredExecution:
    at = NOW - timedelta(hours=1)
    return StoredExecution(
        create_time=at,
        update_time=at,
        complete_time=None,
        state=state,
        state_update_time=at,
        status_update_time=at,
        system_message=None if system is None else system.SerializeToString(),
    )


def _merge(stored: StoredExecution, failure: StructuredMessage) -> Any:
    observation = observe_jobset(failed_jobset(), observed_at=NOW, failure=failure)
    assert observation is not None
    return merge_work_unit_execution(
        stored,
        observation.execution,
        observation.update_mask,
        force_status_message_update=observation.force_status_message_update,
        now=NOW,
    )


def test_the_reason_is_stored_once_however_often_it_is_observed() -> None:
    first = _merge(_stored(WorkUnitState.RUNNING), _message())
    assert first.state_change == (WorkUnitState.RUNNING, WorkUnitState.FAILED)
    assert [field for field, _ in first.new_messages] == [MessageField.SYSTEM]
    again = _merge(first.execution, _message())
    assert (again.changed, again.new_messages) == (False, ())


def test_the_reason_replaces_an_earlier_startup_error() -> None:
    startup = _message("Container main cannot start: ImagePullBackOff.")
    result = _merge(_stored(WorkUnitState.STARTING, startup), _message("job failed"))
    assert [m.user_facing_text for _, m in result.new_messages] == ["job failed"]
    stored = StructuredMessage.FromString(result.execution.system_message)
    assert stored.user_facing_text == "job failed"


# --- the facts a retry decision reads ---------------------------------------------------


def test_a_disrupted_pod_marks_the_failure_disrupted() -> None:
    got = decide_failure_reason(
        failed_jobset(),
        [job()],
        [pod().disruption("DeletionByTaintManager").container("main", terminated(137)).obj()],
    )
    assert got.disrupted
    assert got.exit_code == 137


def test_a_disrupted_bystander_pod_does_not_mark_a_container_failure() -> None:
    """The evidence is the pod that failed on its own; another pod of the Job that was
    evicted and replaced did not end the run."""
    got = decide_failure_reason(
        failed_jobset(),
        [job()],
        [
            pod("a").container("main", terminated(1, at=T_FAIL)).obj(),
            pod("b", phase="Running").disruption().obj(),
        ],
    )
    assert (got.exit_code, got.disrupted) == (1, False)


def test_the_facts_carry_the_exit_code_only_when_known() -> None:
    with_code = FailureReason(C.CONTAINER, "x", JOB, exit_code=137, disrupted=False).facts()
    assert with_code.HasField("exit_code")
    assert with_code.exit_code == 137
    assert with_code.cause == "container"
    without = FailureReason(C.JOB, "deadline", JOB, disrupted=True).facts()
    assert not without.HasField("exit_code")
    assert without.disrupted
