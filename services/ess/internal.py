"""Internal API (SPEC §2.3): observation writes, the listing of deployed executions (the
Reconciler's vanished-JobSet sweep) and the global scheduling switch.

Only service identities (Reconciler, Actuator, operators' tools) may call these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import structlog
from google.protobuf.message import Message

from ess.auth import require_service
from ess.business_metrics import FirstStarts, count_batch
from ess.interceptor import actor, caller
from ess.leader_fence import admit, fence_of_call
from ess.retries import Retries
from xmc.errors import InvalidArgumentError, ResourceExhaustedError, UnavailableError
from xmc.model.audit import AuditAction, AuditEntry
from xmc.model.business import Transition
from xmc.model.merge import ExecutionUpdate
from xmc.model.notifications import ExperimentChange
from xmc.model.retries import Failure
from xmc.names import parse_work_unit_name, work_unit_ids, work_unit_name
from xmc.store.transactions import (
    ItemResult,
    SchedulingControl,
    Store,
    UpdateOutcome,
    decode_deployed_page_token,
    deployed_page_size,
    encode_deployed_page_token,
    fetch_scheduling_control,
    list_deployed,
    queue_settled_events,
    record_audit,
    set_paused,
    update_work_unit_executions,
)
from xmc.streams import REDIS_UNAVAILABLE, StreamNames
from xmc.timestamps import set_timestamp
from xmc_api.internal.v1 import (
    executions_pb2,
    executions_pb2_grpc,
    scheduling_pb2,
    scheduling_pb2_grpc,
)

log = structlog.get_logger()

#: Largest batch one UpdateWorkUnitExecutions call may carry.
MAX_BATCH = 10_000

_OUTCOMES = {
    UpdateOutcome.APPLIED: executions_pb2.UpdateWorkUnitExecutionResult.APPLIED,
    UpdateOutcome.UNCHANGED: executions_pb2.UpdateWorkUnitExecutionResult.UNCHANGED,
    UpdateOutcome.STALE_EXECUTION: executions_pb2.UpdateWorkUnitExecutionResult.STALE_EXECUTION,
    UpdateOutcome.NOT_FOUND: executions_pb2.UpdateWorkUnitExecutionResult.NOT_FOUND,
}


def parse_updates(
    request: executions_pb2.UpdateWorkUnitExecutionsRequest,
) -> list[ExecutionUpdate]:
    if len(request.updates) > MAX_BATCH:
        raise ResourceExhaustedError(
            f"updates: {len(request.updates)} items; at most {MAX_BATCH} per call"
        )
    items = []
    for i, update in enumerate(request.updates):
        ids = work_unit_ids(update.work_unit)
        if ids is None:  # raises, naming the item
            parse_work_unit_name(update.work_unit, field=f"updates[{i}].work_unit")
            raise AssertionError("unreachable")
        items.append(
            ExecutionUpdate(
                ids[0],
                ids[1],
                update.execution_id,
                update.execution,
                tuple(update.update_mask.paths),
                update.force_status_message_update,
                _failure(update) if update.HasField("failure") else None,
            )
        )
    return items


def _failure(update: executions_pb2.WorkUnitExecutionUpdate) -> Failure:
    facts = update.failure
    return Failure(
        exit_code=facts.exit_code if facts.HasField("exit_code") else None,
        disrupted=facts.disrupted,
        cause=facts.cause[:64],
    )


def add_results(
    response: executions_pb2.UpdateWorkUnitExecutionsResponse,
    updates: Sequence[executions_pb2.WorkUnitExecutionUpdate],
    results: Sequence[ItemResult],
) -> None:
    """One result per update, in order, built in place in the response."""
    add = response.results.add
    for update, result in zip(updates, results, strict=True):
        rejection = result.state_rejection
        add(
            work_unit=update.work_unit,
            execution_id=update.execution_id,
            outcome=_OUTCOMES[result.outcome],
            state_changed=result.state_changed,
            state=int(result.state),
            state_rejection=rejection.value if rejection is not None else "",
        )


class WorkUnitExecutionService(executions_pb2_grpc.WorkUnitExecutionServiceServicer):
    """``committed`` is called after a batch whose transaction retried a failed unit
    (its RESTART task waits in the outbox: the relay's ``wake``); ``first_starts`` is
    offered each committed batch's changes into RUNNING (docs/metrics.md)."""

    def __init__(
        self,
        store: Store,
        retries: Retries | None = None,
        *,
        committed: Callable[[], None] = lambda: None,
        first_starts: FirstStarts | None = None,
    ) -> None:
        self._store = store
        self._retries = retries or Retries()
        self._committed = committed
        #: Where the changes into RUNNING go to be told first starts (business metrics).
        self._first_starts = first_starts

    async def UpdateWorkUnitExecutions(
        self, request: executions_pb2.UpdateWorkUnitExecutionsRequest, context: Any
    ) -> executions_pb2.UpdateWorkUnitExecutionsResponse:
        identity = caller()
        require_service(identity, "UpdateWorkUnitExecutions")
        if len(request.writer) > 200:
            raise InvalidArgumentError("writer: at most 200 characters")
        writer = f"{identity.email}/{request.writer}" if request.writer else identity.email
        items = parse_updates(request)
        fence = fence_of_call(context)
        events: list[ExperimentChange] = []
        transitions: list[Transition] = []
        async with self._store.transaction() as conn:
            now = self._store.clock()
            await admit(conn, fence, writer=writer, now=now)  # first: a refusal writes nothing
            results = await update_work_unit_executions(
                conn, items, writer=writer, actor=actor(), now=now, events=events,
                transitions=transitions,
            )  # fmt: skip
            judged = await self._retries.after_update(
                conn, items, results, request_id=actor().request_id, now=now
            )
            # Notifications on the net effect: a retried failure is not final (decision 42).
            await queue_settled_events(conn, events, judged.retried, notes=judged.notes, now=now)
        count_batch(transitions, items, verdicts=judged.verdicts)
        if self._first_starts is not None:
            self._first_starts.offer(transitions, now)
        if judged.retried:
            self._committed()
        response = executions_pb2.UpdateWorkUnitExecutionsResponse()
        add_results(response, request.updates, results)
        return response

    async def ListDeployedExecutions(
        self, request: executions_pb2.ListDeployedExecutionsRequest, context: Any
    ) -> executions_pb2.ListDeployedExecutionsResponse:
        require_service(caller(), "ListDeployedExecutions")
        after = decode_deployed_page_token(request.page_token)
        limit = deployed_page_size(request.page_size)
        async with self._store.connection() as conn:
            found, upper = await list_deployed(conn, after=after, limit=limit)
        response = executions_pb2.ListDeployedExecutionsResponse(
            next_page_token=encode_deployed_page_token(upper)
        )
        for execution in found:
            item = response.executions.add(
                work_unit=work_unit_name(execution.xid, execution.wid),
                execution_id=execution.eid,
                state=int(execution.state),
            )
            set_timestamp(item.state_update_time, execution.state_update_time)
            if execution.deploy_time is not None:
                set_timestamp(item.deploy_time, execution.deploy_time)
        return response


def _state_to_proto(control: SchedulingControl) -> scheduling_pb2.SchedulingState:
    state = scheduling_pb2.SchedulingState(
        paused=control.paused,
        updated_by=control.updated_by,
        reason=control.reason,
        paused_task_count=control.paused_task_count,
    )
    set_timestamp(state.update_time, control.update_time)
    return state


class SchedulingService(scheduling_pb2_grpc.SchedulingServiceServicer):
    """Pause and resume global scheduling (SPEC §9)."""

    def __init__(
        self, store: Store, redis: Any, names: StreamNames, *, clock: Callable[[], datetime]
    ) -> None:
        self._store = store
        self._redis = redis
        self._names = names
        self._clock = clock

    async def _set(self, *, paused: bool, reason: str, rpc: str) -> SchedulingControl:
        identity = caller()
        require_service(identity, rpc)
        if len(reason) > 1000:
            raise InvalidArgumentError("reason: at most 1000 characters")
        now = self._clock()
        action = AuditAction.PAUSE_SCHEDULING if paused else AuditAction.RESUME_SCHEDULING
        async with self._store.transaction() as conn:
            control = await set_paused(
                conn, paused=paused, reason=reason, updated_by=identity.email, now=now
            )
            entry = AuditEntry(action, "scheduling", None, reason)
            await record_audit(conn, actor(), entry, now=now)
        return control

    async def PauseScheduling(
        self, request: scheduling_pb2.PauseSchedulingRequest, context: Any
    ) -> scheduling_pb2.SchedulingState:
        control = await self._set(paused=True, reason=request.reason, rpc="PauseScheduling")
        log.warning("scheduling paused", reason=request.reason, by=control.updated_by)
        return _state_to_proto(control)

    async def ResumeScheduling(
        self, request: scheduling_pb2.ResumeSchedulingRequest, context: Any
    ) -> scheduling_pb2.SchedulingState:
        control = await self._set(paused=False, reason="", rpc="ResumeScheduling")
        try:
            await self._redis.xadd(self._names.resume, {"by": control.updated_by})
        except REDIS_UNAVAILABLE as exc:
            # The flag is durable; the resume worker's periodic sweep picks the tasks up.
            raise UnavailableError(
                f"scheduling resumed, but the resume trigger could not be queued ({exc}); "
                "parked tasks are re-enqueued by the next periodic sweep"
            ) from exc
        log.warning("scheduling resumed", by=control.updated_by)
        return _state_to_proto(control)

    async def GetSchedulingState(
        self, request: Message, context: Any
    ) -> scheduling_pb2.SchedulingState:
        require_service(caller(), "GetSchedulingState")
        async with self._store.transaction() as conn:
            return _state_to_proto(await fetch_scheduling_control(conn))
