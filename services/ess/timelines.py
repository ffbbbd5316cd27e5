"""``xmc.v1.TimelineService``: work unit timelines and experiment timings, read from the
status history (docs/timelines.md). Behind the same interceptor as the public API: any
authenticated caller may read, as with every other read of the ESS (unless reads are
restricted: ``ess.read_gate``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from google.protobuf.duration_pb2 import Duration

from xmc.model import timeline
from xmc.model.audit import Attributions, attribute
from xmc.model.states import WorkUnitState
from xmc.names import (
    experiment_name,
    parse_experiment_name,
    parse_work_unit_name,
    work_unit_name,
)
from xmc.store.transactions import (
    PhaseStatistics,
    Store,
    StoredDecision,
    fetch_decisions,
    fetch_timings,
    fetch_unit_history,
)
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.status_pb2 import WorkUnitStatus
from xmc_api.xmc.v1 import timeline_pb2, timeline_pb2_grpc


def _state(state: WorkUnitState) -> WorkUnitStatus.WorkUnitState.ValueType:
    return WorkUnitStatus.WorkUnitState.ValueType(state)


def _duration(value: timedelta) -> Duration:
    duration = Duration()
    duration.FromTimedelta(value)
    return duration


def _phase_fields(name: str, phase: timeline.Phase | None) -> dict[str, Any]:
    if phase is None:
        return {}
    return {name: _duration(phase.duration), f"{name}_ongoing": phase.ongoing}


def execution_message(execution: timeline.ExecutionTimeline) -> timeline_pb2.ExecutionTimeline:
    message = timeline_pb2.ExecutionTimeline(
        execution_id=execution.eid,
        state=_state(execution.state),
        terminal=execution.terminal,
        superseded=execution.superseded,
        phases=timeline_pb2.PhaseDurations(
            **_phase_fields("queue_wait", execution.phases.queue_wait),
            **_phase_fields("startup", execution.phases.startup),
            **_phase_fields("run", execution.phases.run),
            requeue=_duration(execution.phases.requeue),
            preemptions=execution.phases.preemptions,
        ),
    )
    for state, total in execution.state_totals().items():
        message.state_totals.add(state=_state(state), duration=_duration(total))
    for change in execution.changes:
        item = message.changes.add(
            from_state=_state(change.old_state),
            to_state=_state(change.new_state),
            writer=change.writer,
            principal=change.principal,
            request_id=change.request_id,
        )
        set_timestamp(item.time, change.time)
        set_timestamp(item.record_time, change.record_time)
    for segment in execution.segments:
        part = message.segments.add(
            state=_state(segment.state),
            duration=_duration(segment.duration),
            ongoing=segment.ongoing,
        )
        set_timestamp(part.start_time, segment.start)
        set_timestamp(part.end_time, segment.end)
    return message


def add_attempts(
    executions: Sequence[timeline_pb2.ExecutionTimeline], decisions: Sequence[StoredDecision]
) -> None:
    """Each execution's place in the unit's retries, from the verdicts on its failures."""
    judged = {d.eid: d for d in decisions}
    made = {d.retry_eid: d for d in decisions if d.retry_eid is not None}
    for execution in executions:
        by_retry = made.get(execution.execution_id)
        execution.attempt = by_retry.retry_attempt or 1 if by_retry else 1
        if by_retry is not None:
            execution.retried_after = by_retry.reason
        verdict = judged.get(execution.execution_id)
        if verdict is not None:
            execution.retry_verdict = verdict.verdict
            execution.retry_reason = verdict.reason


def add_attributions(response: timeline_pb2.WorkUnitTimeline, found: Attributions) -> None:
    """Created, restarted and stopped by whom (docs/audit.md); a missing one stays unset."""
    for field, who in (
        (response.created, found.created),
        (response.restarted, found.restarted),
        (response.stopped, found.stopped),
    ):
        if who is not None:
            field.principal = who.principal
            field.request_id = who.request_id
            set_timestamp(field.time, who.time)


def _statistics(stats: PhaseStatistics) -> timeline_pb2.PhaseStatistics:
    message = timeline_pb2.PhaseStatistics(count=stats.count, ongoing=stats.ongoing)
    if stats.median is not None and stats.p90 is not None:
        message.median.CopyFrom(_duration(stats.median))
        message.p90.CopyFrom(_duration(stats.p90))
    return message


class TimelineService(timeline_pb2_grpc.TimelineServiceServicer):
    def __init__(self, store: Store, *, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def GetWorkUnitTimeline(
        self, request: timeline_pb2.GetWorkUnitTimelineRequest, context: Any
    ) -> timeline_pb2.WorkUnitTimeline:
        xid, wid = parse_work_unit_name(request.name)
        async with self._store.transaction() as conn:
            history = await fetch_unit_history(conn, xid, wid)
            decisions = await fetch_decisions(conn, xid, wid)
        now = self._clock()
        response = timeline_pb2.WorkUnitTimeline(
            name=work_unit_name(xid, wid),
            executions=[
                execution_message(e) for e in timeline.work_unit_timeline(history, now=now)
            ],
        )
        add_attempts(response.executions, decisions)
        add_attributions(response, attribute(history))
        set_timestamp(response.now, now)
        return response

    async def GetExperimentTimings(
        self, request: timeline_pb2.GetExperimentTimingsRequest, context: Any
    ) -> timeline_pb2.ExperimentTimings:
        xid = parse_experiment_name(request.name)
        limit = timeline.stuck_limit(request.stuck_limit)
        now = self._clock()
        async with self._store.connection() as conn:
            timings = await fetch_timings(conn, xid, now=now, stuck=limit)
        response = timeline_pb2.ExperimentTimings(
            name=experiment_name(xid),
            work_units=timings.work_units,
            queue_wait=_statistics(timings.queue_wait),
            startup=_statistics(timings.startup),
            run=_statistics(timings.run),
        )
        for unit in timings.stuck:
            item = response.stuck.add(
                name=work_unit_name(xid, unit.wid),
                execution_id=unit.eid,
                state=_state(unit.state),
                duration=_duration(timeline.elapsed(unit.since, now)),
            )
            set_timestamp(item.since, unit.since)
        set_timestamp(response.now, now)
        return response
