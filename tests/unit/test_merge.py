"""Table tests of ``merge_work_unit_execution`` and its helpers (SPEC §5.2–§5.3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from xmc.errors import InvalidArgumentError
from xmc.model.guard import GuardReason
from xmc.model.merge import (
    ExecutionUpdate,
    MergeResult,
    MessageField,
    defer_to_existing_message,
    merge_metadata,
    merge_work_unit_execution,
    should_reset_status_message,
    validate_batch,
)
from xmc.model.states import Severity, WorkUnitState
from xmc.model.stored import StoredExecution
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import (
    ClusterInfo,
    WorkUnitExecution,
    WorkUnitExecutionMetadata,
)

S = WorkUnitState
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=10)


def msg(severity: Severity, text: str, *, stamped: bool = True) -> StructuredMessage:
    message = StructuredMessage(severity=int(severity), user_facing_text=text)  # type: ignore[arg-type]
    if stamped:
        message.create_time.FromDatetime(T0)
    return message


def execution(
    state: WorkUnitState | None = None,
    *,
    at: datetime = T0,
    system: StructuredMessage | None = None,
    user: StructuredMessage | None = None,
    scheduling: StructuredMessage | None = None,
    metadata: WorkUnitExecutionMetadata | None = None,
) -> WorkUnitExecution:
    ex = WorkUnitExecution(name="experiments/1/workUnits/1/executions/1")
    if state is not None:
        ex.status.state = int(state)  # type: ignore[assignment]
        ex.status.state_update_time.FromDatetime(at)
    if system is not None:
        ex.status.system_message.CopyFrom(system)
    if user is not None:
        ex.status.user_message.CopyFrom(user)
    if scheduling is not None:
        ex.status.scheduling_information.CopyFrom(scheduling)
    if metadata is not None:
        ex.metadata.CopyFrom(metadata)
    return ex


@dataclass(frozen=True)
class Case:
    stored: WorkUnitExecution
    new: WorkUnitExecution
    mask: tuple[str, ...]
    force: bool = False
    want_state: WorkUnitState | None = None
    want_state_change: bool = False
    want_rejection: GuardReason | None = None
    want_system: str | None = None
    want_user: str | None = None
    want_changed: bool = True
    want_complete_time: bool = False
    want_new_messages: tuple[MessageField, ...] = field(default=())


CASES = [
    pytest.param(
        Case(
            stored=execution(S.SCHEDULING),
            new=execution(S.RUNNING, at=T0 + timedelta(seconds=1)),
            mask=("status.state",),
            want_state=S.RUNNING,
            want_state_change=True,
        ),
        id="accepted state change",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, at=T0),
            new=execution(
                S.SCHEDULING, at=T0 - timedelta(seconds=5), system=msg(Severity.INFO, "waiting")
            ),
            mask=("status.state", "status.system_message"),
            want_state=S.RUNNING,
            want_rejection=GuardReason.STALE_TIME,
            want_system="waiting",
            want_new_messages=(MessageField.SYSTEM,),
        ),
        id="rejected state still merges the other masked paths",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, system=msg(Severity.INFO, "old")),
            new=execution(
                S.COMPLETED, at=T0 + timedelta(seconds=1), system=msg(Severity.INFO, "x")
            ),
            mask=("status.system_message",),
            want_state=S.RUNNING,
            want_system="x",
            want_new_messages=(MessageField.SYSTEM,),
        ),
        id="only masked paths are copied (state not in mask)",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, system=msg(Severity.ERROR, "first error")),
            new=execution(system=msg(Severity.ERROR, "second error")),
            mask=("status.system_message",),
            want_state=S.RUNNING,
            want_system="first error",
            want_changed=False,
        ),
        id="new ERROR defers to an existing ERROR",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, system=msg(Severity.ERROR, "first error")),
            new=execution(system=msg(Severity.ERROR, "second error")),
            mask=("status.system_message",),
            force=True,
            want_state=S.RUNNING,
            want_system="second error",
            want_new_messages=(MessageField.SYSTEM,),
        ),
        id="force replaces an existing ERROR",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, system=msg(Severity.WARNING, "warn")),
            new=execution(system=msg(Severity.ERROR, "error")),
            mask=("status.system_message",),
            want_state=S.RUNNING,
            want_system="error",
            want_new_messages=(MessageField.SYSTEM,),
        ),
        id="ERROR replaces a message of another severity",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, user=msg(Severity.ERROR, "user error 1")),
            new=execution(user=msg(Severity.ERROR, "user error 2")),
            mask=("status.user_message",),
            want_state=S.RUNNING,
            want_user="user error 1",
            want_changed=False,
        ),
        id="DeferToExistingMessage applies to the user message too",
    ),
    pytest.param(
        Case(
            stored=execution(S.STARTING, system=msg(Severity.ERROR, "image pull")),
            new=execution(S.RUNNING, at=T0 + timedelta(seconds=1)),
            mask=("status.state",),
            want_state=S.RUNNING,
            want_state_change=True,
            want_system=None,
        ),
        id="accepted state change resets a stale system message",
    ),
    pytest.param(
        Case(
            stored=execution(S.STARTING, system=msg(Severity.ERROR, "image pull")),
            new=execution(S.RUNNING, at=T0 - timedelta(seconds=1)),
            mask=("status.state",),
            want_state=S.STARTING,
            want_rejection=GuardReason.STALE_TIME,
            want_system="image pull",
            want_changed=False,
        ),
        id="rejected state change keeps the system message",
    ),
    pytest.param(
        Case(
            stored=execution(S.STARTING, system=msg(Severity.INFO, "old")),
            new=execution(
                S.RUNNING, at=T0 + timedelta(seconds=1), system=msg(Severity.INFO, "new")
            ),
            mask=("status.state", "status.system_message"),
            want_state=S.RUNNING,
            want_state_change=True,
            want_system="new",
            want_new_messages=(MessageField.SYSTEM,),
        ),
        id="no reset when the same item sets a system message",
    ),
    pytest.param(
        Case(
            stored=execution(S.INITIALIZING, system=msg(Severity.FATAL, "cannot create")),
            new=execution(S.SCHEDULING, at=T0 + timedelta(seconds=1)),
            mask=("status.state",),
            want_state=S.SCHEDULING,
            want_state_change=True,
            want_system="cannot create",
        ),
        id="no reset of a FATAL system message",
    ),
    pytest.param(
        Case(
            stored=execution(S.INITIALIZING, system=msg(Severity.FATAL, "cannot create")),
            new=execution(S.SCHEDULING, at=T0 + timedelta(seconds=1)),
            mask=("status.state",),
            force=True,
            want_state=S.SCHEDULING,
            want_state_change=True,
            want_system=None,
        ),
        id="force resets even a FATAL system message",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, system=msg(Severity.ERROR, "OOM")),
            new=execution(S.FAILED, at=T0 + timedelta(seconds=1)),
            mask=("status.state",),
            want_state=S.FAILED,
            want_state_change=True,
            want_system="OOM",
            want_complete_time=True,
        ),
        id="retaining state FAILED keeps the diagnostic",
    ),
    pytest.param(
        Case(
            stored=execution(S.STOPPING, system=msg(Severity.WARNING, "slow")),
            new=execution(S.STOPPED, at=T0 + timedelta(seconds=1)),
            mask=("status.state",),
            want_state=S.STOPPED,
            want_state_change=True,
            want_system="slow",
            want_complete_time=True,
        ),
        id="retaining state STOPPED keeps the diagnostic",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, system=msg(Severity.WARNING, "slow")),
            new=execution(S.COMPLETED, at=T0 + timedelta(seconds=1)),
            mask=("status.state",),
            want_state=S.COMPLETED,
            want_state_change=True,
            want_system=None,
            want_complete_time=True,
        ),
        id="COMPLETED is not retaining: message reset, complete_time set",
    ),
    pytest.param(
        Case(
            stored=execution(S.COMPLETED, system=msg(Severity.INFO, "done")),
            new=execution(
                S.RUNNING,
                at=T0 + timedelta(seconds=1),
                system=msg(Severity.ERROR, "late"),
                user=msg(Severity.INFO, "user says bye"),
            ),
            mask=("status.state", "status.system_message", "status.user_message"),
            want_state=S.COMPLETED,
            want_rejection=GuardReason.TERMINAL,
            want_system="done",
            want_user="user says bye",
            want_new_messages=(MessageField.USER,),
        ),
        id="terminal execution accepts only the user message",
    ),
    pytest.param(
        Case(
            stored=execution(S.FAILED),
            new=execution(scheduling=msg(Severity.INFO, "queued")),
            mask=("status.scheduling_information",),
            want_state=S.FAILED,
            want_changed=False,
        ),
        id="terminal execution ignores observations without a state",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, system=msg(Severity.INFO, "same", stamped=True)),
            new=execution(system=msg(Severity.INFO, "same", stamped=False)),
            mask=("status.system_message",),
            want_state=S.RUNNING,
            want_system="same",
            want_changed=False,
        ),
        id="a resent message without create_time is not a new message",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, system=msg(Severity.INFO, "bye")),
            new=execution(),
            mask=("status.system_message",),
            want_state=S.RUNNING,
            want_system=None,
        ),
        id="a masked but unset message clears it",
    ),
    pytest.param(
        Case(
            stored=execution(S.SCHEDULING, scheduling=msg(Severity.INFO, "position 3")),
            new=execution(scheduling=msg(Severity.INFO, "position 2")),
            mask=("status.scheduling_information",),
            want_state=S.SCHEDULING,
        ),
        id="scheduling information is replaced and not mirrored to history",
    ),
    pytest.param(
        Case(
            stored=execution(S.RUNNING, at=T0 + timedelta(seconds=5)),
            new=execution(S.STOPPING, at=T0),
            mask=("status.state",),
            want_state=S.STOPPING,
            want_state_change=True,
        ),
        id="STOPPING ignores a reconciler clock that runs ahead",
    ),
    pytest.param(
        Case(
            stored=execution(S.SCHEDULING),
            new=execution(S.RUNNING, at=datetime(1970, 1, 1, tzinfo=UTC)),
            mask=("status.state",),
            want_state=S.SCHEDULING,
            want_rejection=GuardReason.ZERO_TIME,
            want_changed=False,
        ),
        id="epoch-zero state_update_time drops the state change",
    ),
]


def merge(
    stored: WorkUnitExecution,
    new: WorkUnitExecution,
    mask: tuple[str, ...],
    *,
    force: bool = False,
) -> tuple[MergeResult, WorkUnitExecution]:
    """Run the merge on the stored form of ``stored``; also return the result as the API
    would show it."""
    result = merge_work_unit_execution(
        StoredExecution.from_proto(stored), new, mask, force_status_message_update=force, now=NOW
    )
    return result, result.execution.to_proto(stored.name)


@pytest.mark.parametrize("case", CASES)
def test_merge_work_unit_execution(case: Case) -> None:
    new_before = WorkUnitExecution()
    new_before.CopyFrom(case.new)

    result, out = merge(case.stored, case.new, case.mask, force=case.force)

    assert case.new == new_before, "the incoming item must not be mutated"
    assert int(out.status.state) == case.want_state
    assert (result.state_change is not None) == case.want_state_change
    assert result.state_rejection == case.want_rejection
    system = (
        out.status.system_message.user_facing_text
        if out.status.HasField("system_message")
        else None
    )
    user = out.status.user_message.user_facing_text if out.status.HasField("user_message") else None
    assert system == case.want_system
    if case.want_user is not None:
        assert user == case.want_user
    assert result.changed == case.want_changed
    assert out.HasField("complete_time") == case.want_complete_time
    if case.want_complete_time:
        assert out.complete_time.ToDatetime(tzinfo=UTC) == NOW
    assert tuple(f for f, _ in result.new_messages) == case.want_new_messages
    if result.changed:
        assert out.update_time.ToDatetime(tzinfo=UTC) == NOW
        assert out.status.update_time.ToDatetime(tzinfo=UTC) == NOW
    else:
        assert result.execution == StoredExecution.from_proto(case.stored)


def test_accepted_state_carries_its_state_update_time() -> None:
    later = T0 + timedelta(seconds=42)
    result, out = merge(execution(S.STARTING), execution(S.RUNNING, at=later), ("status.state",))
    assert result.execution.state_update_time == later
    assert out.status.state_update_time.ToDatetime(tzinfo=UTC) == later


def test_new_message_without_create_time_is_stamped_with_now() -> None:
    result, out = merge(
        execution(S.RUNNING),
        execution(user=msg(Severity.INFO, "epoch 3", stamped=False)),
        ("status.user_message",),
    )
    assert out.status.user_message.create_time.ToDatetime(tzinfo=UTC) == NOW
    ((field_name, message),) = result.new_messages
    assert field_name is MessageField.USER
    assert message.create_time.ToDatetime(tzinfo=UTC) == NOW


def test_stored_execution_round_trips_through_the_api_form() -> None:
    original = execution(
        S.RUNNING,
        system=msg(Severity.WARNING, "w"),
        scheduling=msg(Severity.INFO, "q"),
        metadata=WorkUnitExecutionMetadata(resource_name="xmc-1-1", node_selectors={"a": "b"}),
    )
    for timestamp in (original.create_time, original.update_time, original.status.update_time):
        timestamp.FromDatetime(T0)
    original.complete_time.FromDatetime(NOW)
    original.status.detailed_status.SetInParent()
    stored = StoredExecution.from_proto(original)
    assert stored.to_proto(original.name) == original
    assert stored.detailed_status == b"", "a present but empty message keeps its presence"


def test_metadata_from_two_sources_coexists_through_the_merge() -> None:
    jobset = execution(metadata=WorkUnitExecutionMetadata(resource_name="xmc-1-1"))
    workload = execution(metadata=WorkUnitExecutionMetadata(resource_flavor="a100"))
    first = merge_work_unit_execution(
        StoredExecution.from_proto(execution(S.RUNNING)),
        jobset,
        ("metadata",),
        force_status_message_update=False,
        now=NOW,
    )
    second = merge_work_unit_execution(
        first.execution, workload, ("metadata",), force_status_message_update=False, now=NOW
    )
    resent = merge_work_unit_execution(
        second.execution, jobset, ("metadata",), force_status_message_update=False, now=NOW
    )
    out = resent.execution.to_proto("x")
    assert (out.metadata.resource_name, out.metadata.resource_flavor) == ("xmc-1-1", "a100")
    assert not resent.changed, "resending known metadata changes nothing"


def test_metadata_merges_field_wise_so_two_sources_coexist() -> None:
    from_jobset = WorkUnitExecutionMetadata(
        type=WorkUnitExecutionMetadata.JOB_SET, resource_name="xmc-1-1", namespace="default"
    )
    from_workload = WorkUnitExecutionMetadata(
        resource_flavor="a100",
        node_selectors={"pool": "gpu"},
        executing_cluster=ClusterInfo(cluster_name="east"),
    )
    merged = merge_metadata(merge_metadata(WorkUnitExecutionMetadata(), from_jobset), from_workload)
    assert merged.resource_name == "xmc-1-1"
    assert merged.resource_flavor == "a100"
    assert dict(merged.node_selectors) == {"pool": "gpu"}

    moved = merge_metadata(merged, WorkUnitExecutionMetadata(node_selectors={"pool": "tpu"}))
    assert dict(moved.node_selectors) == {"pool": "tpu"}, "a set map replaces the stored one"
    assert moved.executing_cluster.cluster_name == "east"


@pytest.mark.parametrize(
    ("existing", "new", "force", "want"),
    [
        pytest.param(None, Severity.ERROR, False, False, id="nothing to defer to"),
        pytest.param(Severity.ERROR, Severity.ERROR, False, True, id="first error stays"),
        pytest.param(Severity.ERROR, Severity.ERROR, True, False, id="forced"),
        pytest.param(Severity.FATAL, Severity.ERROR, False, False, id="different severity"),
        pytest.param(Severity.ERROR, Severity.FATAL, False, False, id="new is not ERROR"),
    ],
)
def test_defer_to_existing_message(
    existing: Severity | None, new: Severity, force: bool, want: bool
) -> None:
    stored = None if existing is None else msg(existing, "a")
    assert defer_to_existing_message(stored, msg(new, "b"), force=force) is want


@pytest.mark.parametrize(
    ("stored", "sets", "new_state", "force", "want"),
    [
        pytest.param(None, False, S.RUNNING, False, False, id="nothing stored"),
        pytest.param(Severity.INFO, False, S.RUNNING, False, True, id="stale text is cleared"),
        pytest.param(Severity.INFO, True, S.RUNNING, False, False, id="item sets its own"),
        pytest.param(Severity.FATAL, False, S.RUNNING, False, False, id="FATAL survives"),
        pytest.param(Severity.FATAL, False, S.RUNNING, True, True, id="forced FATAL reset"),
        pytest.param(Severity.ERROR, False, S.STOPPED, False, False, id="retaining STOPPED"),
        pytest.param(Severity.ERROR, False, S.FAILED, False, False, id="retaining FAILED"),
        pytest.param(Severity.ERROR, False, S.COMPLETED, False, True, id="COMPLETED resets"),
    ],
)
def test_should_reset_status_message(
    stored: Severity | None, sets: bool, new_state: WorkUnitState, force: bool, want: bool
) -> None:
    stored_message = None if stored is None else msg(stored, "x")
    got = should_reset_status_message(
        stored_message, item_sets_system_message=sets, new_state=new_state, force=force
    )
    assert got is want


def _item(
    mask: tuple[str, ...], ex: WorkUnitExecution | None = None, eid: int = 1
) -> ExecutionUpdate:
    return ExecutionUpdate(1, 1, eid, ex or execution(S.RUNNING), mask)


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        pytest.param(_item(("status.foo",)), "unknown path 'status.foo'", id="unknown path"),
        pytest.param(
            _item(("status.state_update_time",)),
            "not a path of its own",
            id="state_update_time alone",
        ),
        pytest.param(_item(()), "update_mask: must name at least one path", id="empty mask"),
        pytest.param(_item(("metadata",), eid=0), "execution_id: must be >= 1", id="eid 0"),
        pytest.param(
            _item(("status.state",), WorkUnitExecution()),
            "status.state: 0 is not a settable WorkUnitState",
            id="unspecified state",
        ),
        pytest.param(
            _item(("status.state",), WorkUnitExecution(status={"state": 4})),  # type: ignore[arg-type]
            "status.state_update_time: required",
            id="nil state_update_time",
        ),
    ],
)
def test_validate_batch_names_the_field(item: ExecutionUpdate, fragment: str) -> None:
    good = _item(("metadata",))
    with pytest.raises(InvalidArgumentError, match="updates\\[1\\]") as info:
        validate_batch([good, item])
    assert fragment in str(info.value)


def test_stored_execution_keeps_its_field_order() -> None:
    """The tuple's order is ``EXECUTION_COLUMNS``'s, which the codec and the wire encoder
    read it in."""
    stored = StoredExecution(T0, T0, None, S.RUNNING, T0, NOW, b"s", None, b"", b"d", b"m")
    names = list(StoredExecution._fields)
    assert list(stored) == [getattr(stored, name) for name in names]
    changed = stored._replace(state=S.COMPLETED, complete_time=NOW, metadata=None)
    assert changed == StoredExecution(
        T0, T0, NOW, S.COMPLETED, T0, NOW, b"s", None, b"", b"d", None
    )
    assert stored.state is S.RUNNING, "the original is untouched"
