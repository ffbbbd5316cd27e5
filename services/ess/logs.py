"""``xmc.v1.LogService``: the logs of a work unit's containers (docs/logs.md). An ended
container's log is what XMC stored when it ended; a live execution's running containers
are read from the API server (``ess.live_logs``). Any authenticated caller may read, as
with every other read of the ESS (unless reads are restricted: ``ess.read_gate``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import Any

from ess.live_logs import LiveEvent, LiveLogs, LiveUnavailable
from xmc.errors import InvalidArgumentError, NotFoundError
from xmc.model.container_logs import exit_code_of
from xmc.model.pod_containers import ContainerRun
from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState
from xmc.names import parse_experiment_name, parse_work_unit_name, work_unit_name
from xmc.store.transactions import (
    Store,
    StoredLog,
    fetch_current_execution,
    fetch_exit_codes,
    fetch_logs,
)
from xmc.timestamps import set_timestamp
from xmc_api.xmc.v1 import logs_pb2, logs_pb2_grpc

#: Work units one ListExitCodes may name (the largest page of ListWorkUnits).
MAX_EXIT_CODES = 1000
_STORED = logs_pb2.ContainerLog.STORED
_LIVE = logs_pb2.ContainerLog.LIVE


def stored_message(row: StoredLog) -> logs_pb2.ContainerLog:
    message = logs_pb2.ContainerLog(
        execution_id=row.eid, pod=row.pod_name, container=row.container, run=row.run,
        source=_STORED, terminated=row.terminated, reason=row.reason,
        size_bytes=len(row.text), truncated=row.truncated, evicted=row.evicted,
        unavailable=row.unavailable,
    )  # fmt: skip
    if row.exit_code is not None:
        message.exit_code = row.exit_code
    set_timestamp(message.finish_time, row.finished_at)
    set_timestamp(message.capture_time, row.capture_time)
    return message


def live_message(eid: int, run: ContainerRun) -> logs_pb2.ContainerLog:
    message = logs_pb2.ContainerLog(
        execution_id=eid, pod=run.pod_name, container=run.container, run=run.run,
        source=_LIVE, terminated=run.terminated, reason=run.reason,
    )  # fmt: skip
    if run.exit_code is not None:
        message.exit_code = run.exit_code
    set_timestamp(message.finish_time, run.finished_at)
    return message


def stored_chunks(row: StoredLog) -> list[logs_pb2.LogChunk]:
    """A stored run as chunks: its start, then its text or why there is none."""
    log = stored_message(row)
    chunks = [logs_pb2.LogChunk(log=log, start=True)]
    if row.text:
        chunks.append(logs_pb2.LogChunk(log=log, data=row.text))
    if row.evicted:
        chunks.append(logs_pb2.LogChunk(log=log, notice="evicted: the experiment reached its "
                                        "log storage cap (XMC_LOG_EXPERIMENT_BYTES)"))  # fmt: skip
    elif row.unavailable:
        note = row.unavailable if row.text else f"not kept: {row.unavailable}"
        chunks.append(logs_pb2.LogChunk(log=log, notice=note))
    return chunks


def live_runs(
    runs: Sequence[ContainerRun], stored: Sequence[StoredLog], container: str
) -> list[ContainerRun]:
    """The runs to read live: those of ``container`` ('' = any) not stored final (pure)."""
    final = {(r.pod_uid, r.container, r.run) for r in stored if r.terminated}
    return [
        run for run in runs
        if (not container or run.container == container) and run.key not in final
    ]  # fmt: skip


class LogService(logs_pb2_grpc.LogServiceServicer):
    def __init__(self, store: Store, live: LiveLogs, *, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._live = live
        self._clock = clock

    async def _read_plan(
        self, name: str, execution_id: int, *, every_execution: bool = False
    ) -> tuple[int, int, int, bool, list[StoredLog]]:
        """(xid, wid, eid, live, stored rows of eid — or of every execution)."""
        if execution_id < 0:
            raise InvalidArgumentError(f"execution_id: must not be negative, got {execution_id}")
        xid, wid = parse_work_unit_name(name)
        async with self._store.connection() as conn:
            current, state = await fetch_current_execution(conn, xid, wid)
            eid = execution_id or current
            if eid > current:
                raise NotFoundError(
                    f"execution_id: {work_unit_name(xid, wid)} has no execution {eid} "
                    f"(its current one is {current})"
                )
            stored = await fetch_logs(conn, xid, wid, None if every_execution else eid)
        live = eid == current and WorkUnitState(state) not in EXECUTION_TERMINAL_STATES
        return xid, wid, eid, live, stored

    async def _still_live(self, xid: int, wid: int, eid: int) -> bool:
        async with self._store.connection() as conn:
            current, state = await fetch_current_execution(conn, xid, wid)
        return current == eid and WorkUnitState(state) not in EXECUTION_TERMINAL_STATES

    async def ListContainerLogs(
        self, request: logs_pb2.ListContainerLogsRequest, context: Any
    ) -> logs_pb2.ListContainerLogsResponse:
        xid, wid, eid, live, stored = await self._read_plan(
            request.parent, request.execution_id, every_execution=not request.execution_id
        )
        response = logs_pb2.ListContainerLogsResponse(
            logs=[stored_message(row) for row in stored], current_execution_id=eid
        )
        if request.execution_id:
            code = exit_code_of([(r.terminated, r.exit_code, r.finished_at) for r in stored])
            if code is not None:
                response.exit_code = code
        if live:
            try:
                runs = live_runs(await self._live.runs(xid, wid, eid), stored, "")
            except LiveUnavailable:
                runs = []
            response.logs.extend(live_message(eid, run) for run in runs)
        return response

    async def ListExitCodes(
        self, request: logs_pb2.ListExitCodesRequest, context: Any
    ) -> logs_pb2.ListExitCodesResponse:
        xid = parse_experiment_name(request.parent, field="parent")
        if len(request.work_unit_ids) > MAX_EXIT_CODES:
            raise InvalidArgumentError(
                f"work_unit_ids: {len(request.work_unit_ids)} ids; at most {MAX_EXIT_CODES}"
            )
        async with self._store.connection() as conn:
            found = await fetch_exit_codes(conn, xid, request.work_unit_ids)
        response = logs_pb2.ListExitCodesResponse()
        for wid, eid, code in found:
            item = response.exit_codes.add(work_unit_id=wid, execution_id=eid)
            if code is not None:
                item.exit_code = code
        return response

    async def ReadWorkUnitLogs(
        self, request: logs_pb2.ReadWorkUnitLogsRequest, context: Any
    ) -> AsyncIterator[logs_pb2.LogChunk]:
        xid, wid, eid, live, stored = await self._read_plan(request.name, request.execution_id)
        container = request.container
        kept = [row for row in stored if not container or row.container == container]
        if container and not kept and not live:
            raise NotFoundError(
                f"container: no log of container {container!r} is kept for execution {eid} "
                f"of {work_unit_name(xid, wid)}"
            )
        for row in kept:
            for chunk in stored_chunks(row):
                yield chunk
        if not live:
            return

        async def runs() -> list[ContainerRun]:
            return live_runs(await self._live.runs(xid, wid, eid), stored, container)

        try:
            if request.follow:
                events = self._live.follow(runs, still_live=lambda: self._still_live(xid, wid, eid))
            else:
                events = self._live.read(await runs())
            async for event in events:
                yield _chunk(eid, event)
        except LiveUnavailable as error:
            yield logs_pb2.LogChunk(notice=f"live logs unavailable: {error}")


def _chunk(eid: int, event: LiveEvent) -> logs_pb2.LogChunk:
    return logs_pb2.LogChunk(
        log=live_message(eid, event.run), start=event.start, data=event.data,
        notice=event.notice,
    )  # fmt: skip
