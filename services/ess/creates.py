"""Group commit for CreateWorkUnit.

Concurrent CreateWorkUnit calls wait in a queue; a flusher takes everything queued (up to
``max_batch``) and creates it in one transaction (``create_work_units``) together with
their CREATE tasks in the outbox, which the relay then publishes in one Redis round trip.
Under load a group forms by itself while the previous one is in the database; an idle
server flushes a lone call at once, so a single client pays no batching delay. Each
caller still gets its own outcome.

One flush in flight at a time (``max_in_flight``): with two, 64 callers formed groups of
~3 under a profiler, each paying a whole transaction's round trips; with one, what
arrives during a flush goes in the next, and ``bench/ess_create.py`` measured ~8 % more
creates/s at 16 and 64 callers (1,063 vs 955 and 1,427 vs 1,297 /s, same hour).

A group is only as strong as its weakest caller, so no caller's fate may decide
another's. A caller gives up (its deadline passes, it cancels) by cancelling its future
while the group waits on Postgres (a lock wait, a checkpoint, a failover). Issue 24: the
answers were then set without looking, the first cancelled future raised
``InvalidStateError``, and every later caller of the group got INTERNAL for a unit that
had been created, which a retrying client (no ``work_unit_id``, the published client's
default) duplicated. Now:

- a caller that gave up while queued is left out of the next group: nothing is created;
- one that gave up while its group was in the transaction is found just before COMMIT:
  the group rolls back and its live callers go back to the front of the queue, to be
  redone without it (each redo loses at least one caller, so redoing ends);
- one that gives up during the COMMIT round trip itself cannot be helped: its unit
  exists and nobody is told (DEADLINE_EXCEEDED means "unknown outcome" in gRPC). Those
  are logged and counted (``xmc_ess_creates_abandoned_after_commit_total``);
- answers and errors go only to futures not done, so the others get theirs;
- a group that fails for a reason other than storage being unavailable (which is every
  caller's) is redone one caller at a time: a value of one request that Postgres refuses
  (a gap in the request checks) fails that caller only, not the 255 grouped with it;
- quotas (docs/quotas.md) are decided per caller, in queue order, under the group's
  locks on the counter rows: a caller over its limit is refused RESOURCE_EXHAUSTED and
  the others of the group are created as if it had not asked.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import structlog
from google.longrunning.operations_proto_pb2 import Operation

from ess.auth import Identity, acl_writer_emails, can_write_experiment
from ess.metrics import CREATES_ABANDONED_AFTER_COMMIT
from ess.quotas import UNBOUND, Bound, QuotaGate, caller_bound
from ess.status_codes import storage_unavailable
from xmc.errors import PermissionDeniedError, QuotaExceededError, XmcError
from xmc.model.audit import Actor
from xmc.store.transactions import (
    Created,
    CreateOutcome,
    ExperimentAccess,
    NewWorkUnit,
    Store,
    create_work_units,
)
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

if TYPE_CHECKING:
    from ess.intents import Intents

log = structlog.get_logger()


@dataclass(eq=False)
class QueuedCreate:
    """One CreateWorkUnit call waiting for its group's outcome."""

    identity: Identity
    xid: int
    wid: int | None
    work_unit: WorkUnit
    #: The caller and its request id, recorded on the unit's Operation and history row.
    by: Actor
    future: asyncio.Future[Operation] = field(repr=False)
    #: Whom it counts against, and the limits that bind them.
    bound: Bound = UNBOUND

    @property
    def abandoned(self) -> bool:
        """The caller gave up (its handler was cancelled, which cancels the future)."""
        return self.future.done()


class _CallerGaveUp(Exception):
    """Raised inside a group's transaction to roll it back: a caller gave up before COMMIT."""


def take_live(queue: deque[QueuedCreate], limit: int) -> list[QueuedCreate]:
    """Up to ``limit`` requests from the front of ``queue`` whose callers still wait; those
    that gave up are dropped on the way (removed, never created)."""
    batch: list[QueuedCreate] = []
    while queue and len(batch) < limit:
        request = queue.popleft()
        if not request.abandoned:
            batch.append(request)
    return batch


def creates_for_the_gone(gave_up: Sequence[bool], outcomes: Sequence[CreateOutcome]) -> bool:
    """Whether a group would create a unit for a caller that gave up: then it rolls back.
    A caller refused (an error outcome) or answered with an earlier create creates
    nothing, so its giving up costs the others no redo."""
    return any(
        gone and isinstance(outcome, Created) and outcome.work_unit is not None
        for gone, outcome in zip(gave_up, outcomes, strict=True)
    )


def answer(request: QueuedCreate, outcome: CreateOutcome | BaseException) -> bool:
    """Give a caller its outcome; False when it had given up already (nobody to tell)."""
    if request.abandoned:
        return False
    if isinstance(outcome, BaseException):
        request.future.set_exception(outcome)
    else:
        request.future.set_result(outcome.operation)
    return True


class CreateCoalescer:
    def __init__(
        self,
        store: Store,
        intents: Intents,
        *,
        clock: Callable[[], datetime],
        writer: str,
        max_batch: int = 256,
        max_in_flight: int = 1,
        quotas: QuotaGate | None = None,
    ) -> None:
        self._store = store
        self._quotas = quotas
        self._intents = intents
        self._clock = clock
        self._writer = writer
        self._max_batch = max_batch
        self._queue: deque[QueuedCreate] = deque()
        self._max_in_flight = max_in_flight
        self._flushers: set[asyncio.Task[None]] = set()

    @property
    def queued(self) -> int:
        """Calls waiting for a group (those that gave up included until a group drops them)."""
        return len(self._queue)

    async def submit(
        self,
        identity: Identity,
        xid: int,
        work_unit: WorkUnit,
        wid: int | None,
        bound: Bound | None = None,
        *,
        by: Actor,
    ) -> Operation:
        future: asyncio.Future[Operation] = asyncio.get_running_loop().create_future()
        bound = bound or caller_bound(None, identity)
        self._queue.append(QueuedCreate(identity, xid, wid, work_unit, by, future, bound))
        if len(self._flushers) < self._max_in_flight:
            task = asyncio.create_task(self._flush())
            self._flushers.add(task)
            task.add_done_callback(self._flushers.discard)
        return await future

    async def _flush(self) -> None:
        while batch := take_live(self._queue, self._max_batch):
            await self._run(batch)

    async def _run(self, batch: Sequence[QueuedCreate]) -> None:
        """Create a group; the ways it can fail without being every caller's failure are
        handled here (see the module docstring)."""
        try:
            await self._create(batch)
        except _CallerGaveUp:
            live = [r for r in batch if not r.abandoned]
            self._queue.extendleft(reversed(live))
            log.info(
                "create group rolled back: callers gave up before commit; redoing the rest",
                gave_up=len(batch) - len(live),
                redo=len(live),
            )
        except Exception as exc:
            if len(batch) == 1 or storage_unavailable(exc):
                for request in batch:
                    answer(request, exc)
                return
            log.warning(
                "create group failed; redoing its callers one by one",
                error=repr(exc),
                callers=len(batch),
            )
            for request in batch:
                if not request.abandoned:
                    await self._run([request])

    async def _create(self, batch: Sequence[QueuedCreate]) -> None:
        def authorize(index: int, experiment: ExperimentAccess) -> XmcError | None:
            identity = batch[index].identity
            writers = acl_writer_emails(experiment.acls)
            if can_write_experiment(identity, creator=experiment.creator, writers=writers):
                return None
            return PermissionDeniedError(
                f"{experiment.name}: {identity.email} may not change this experiment "
                "(only its creator, an ACL owner or writer, or an admin)"
            )

        gate = self._quotas
        async with self._store.transaction() as conn:
            admission = await gate.admission(conn, [r.bound for r in batch]) if gate else None

            def admit(index: int) -> XmcError | None:
                assert admission is not None
                return admission.admit(batch[index].bound.principals, "work_unit")

            outcomes = await create_work_units(
                conn,
                [NewWorkUnit(r.xid, r.wid, r.work_unit, r.by, r.bound.principals) for r in batch],
                writer=self._writer,
                now=self._clock(),
                authorize=authorize,
                admit=admit if admission else None,
            )
            created = [o for o in outcomes if isinstance(o, Created) and o.work_unit is not None]
            await self._intents.enqueue_creates(conn, created)
            await QuotaGate.save(conn, admission)
            # The last moment a caller's giving up can still undo its create.
            if creates_for_the_gone([r.abandoned for r in batch], outcomes):
                raise _CallerGaveUp
        if created:
            self._intents.tasks_committed()
        for outcome in outcomes:
            if gate and isinstance(outcome, QuotaExceededError):
                gate.remember(outcome)
        for request, outcome in zip(batch, outcomes, strict=True):
            if not answer(request, outcome):
                _abandoned_after_commit(request, outcome)

    async def drain(self) -> None:
        """Wait for queued creates to finish (shutdown)."""
        while self._flushers:
            await asyncio.gather(*self._flushers, return_exceptions=True)


def _abandoned_after_commit(request: QueuedCreate, outcome: CreateOutcome) -> None:
    """The caller gave up during COMMIT: the outcome is unknown to it (see the module
    docstring); a client retrying without ``work_unit_id`` will create a second unit."""
    if not isinstance(outcome, Created) or outcome.work_unit is None:
        return  # refused, or a repeat of a client-chosen id: nothing new was created
    CREATES_ABANDONED_AFTER_COMMIT.inc()
    log.warning(
        "create committed after its caller gave up",
        work_unit=outcome.work_unit.name,
        operation=outcome.operation.name,
        requester=request.identity.email,
    )
