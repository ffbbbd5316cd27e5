"""A watcher of ``xmc.v1.WatchService`` for the tests: reads one stream in the background
into a list, and names each event compactly so whole sequences compare at once."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any, Protocol

import grpc
from google.protobuf.field_mask_pb2 import FieldMask

from tests.integration.ess_harness import Ess, metadata
from tests.integration.support import T0
from tests.waiting import eventually
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.internal.v1 import executions_pb2
from xmc_api.xmc.v1 import watch_pb2, watch_pb2_grpc

SERVICE = metadata("reconciler")


def describe(event: watch_pb2.WatchEvent) -> tuple[Any, ...]:
    """What an event says, without its cursor."""
    kind = event.WhichOneof("kind")
    if kind == "state_change":
        change = event.state_change
        return (
            "state",
            change.work_unit,
            change.execution_id,
            WorkUnitState(change.from_state).name,
            WorkUnitState(change.to_state).name,
            change.new_execution,
        )
    if kind == "message":
        return ("message", event.message.name, event.message.content.user_facing_text)
    if kind == "experiment_change":
        moved = event.experiment_change
        return ("experiment", event.experiment, moved.created, moved.active_state)
    return ("sync",)


class Channelled(Protocol):
    """What a watcher needs of an ESS harness (``Ess``, the process stack's ``Client``)."""

    channel: grpc.aio.Channel


class Watcher:
    """One stream, read into ``events`` until closed; ``error`` if it ended with one."""

    def __init__(self, ess: Channelled, who: str = "alice", **request: Any) -> None:
        stub = watch_pb2_grpc.WatchServiceStub(ess.channel)
        self.call = stub.WatchExperiments(watch_pb2.WatchRequest(**request), metadata=metadata(who))
        self.events: list[watch_pb2.WatchEvent] = []
        self.error: grpc.aio.AioRpcError | None = None
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for batch in self.call:
                self.events.extend(batch.events)
        except grpc.aio.AioRpcError as error:
            self.error = error

    async def started(self) -> Watcher:
        """Once the opening Sync arrived: from here on every commit is seen."""
        await eventually(lambda: len(self.events), lambda n: n >= 1, within=10, what="sync")
        return self

    def changes(self) -> list[tuple[Any, ...]]:
        return [describe(e) for e in self.events if e.WhichOneof("kind") != "sync"]

    def change_events(self) -> list[watch_pb2.WatchEvent]:
        return [e for e in self.events if e.WhichOneof("kind") != "sync"]

    async def until(self, count: int, within: float = 15) -> list[tuple[Any, ...]]:
        await eventually(
            lambda: len(self.changes()), lambda n: n >= count, within=within, what="changes"
        )
        return self.changes()

    async def close(self) -> None:
        self.call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def observe(
    ess: Ess,
    work_unit: str,
    state: WorkUnitState,
    seconds: float,
    *,
    eid: int = 1,
    text: str = "",
) -> None:
    """What the Reconciler would send: a state at T0 + ``seconds``, with a user message."""
    update = executions_pb2.WorkUnitExecutionUpdate(
        work_unit=work_unit, execution_id=eid, update_mask=FieldMask(paths=["status.state"])
    )
    update.execution.status.state = int(state)  # type: ignore[assignment]
    update.execution.status.state_update_time.FromDatetime(T0 + timedelta(seconds=seconds))
    if text:
        update.update_mask.paths.append("status.user_message")
        message = StructuredMessage(user_facing_text=text, severity=StructuredMessage.INFO)
        message.create_time.FromDatetime(T0 + timedelta(seconds=seconds))
        update.execution.status.user_message.CopyFrom(message)
    await ess.executions.UpdateWorkUnitExecutions(
        executions_pb2.UpdateWorkUnitExecutionsRequest(updates=[update], writer="test"),
        metadata=SERVICE,
    )
