"""What handling one task came to, as data: the consumer acts on it (ack, DLQ, retry),
the handlers only decide it. Expected failures are outcomes, never exceptions."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from xmc_api.internal.v1.tasks_pb2 import Task


class Outcome(enum.StrEnum):
    """Low-cardinality: also the ``outcome`` label of the task metrics."""

    #: The task's effect is in place (created, deleted, patched); the Operation is closed.
    DONE = "done"
    #: Nothing to do (superseded, redelivered, already gone); the Operation is closed.
    SKIPPED = "skipped"
    #: Scheduling is paused: the task was written to PausedTasks; its Operation stays open.
    PARKED = "parked"
    #: Can never succeed; the handler closed the Operation with ``code`` — DLQ and ack.
    PERMANENT = "permanent"
    #: Worth another try (timeouts, 429, 5xx); nothing is closed yet.
    RETRY = "retry"


@dataclass(frozen=True)
class TaskResult:
    outcome: Outcome
    reason: str
    #: gRPC status code name of a PERMANENT (or, once retries run out, RETRY) failure.
    code: str = "OK"
    #: Seconds the server asked us to wait (Retry-After), for RETRY.
    retry_after: float | None = None


class TaskHandler(Protocol):
    """Carries out one verified task (Create / Delete / Restart / Update)."""

    async def handle(self, task: Task) -> TaskResult: ...
