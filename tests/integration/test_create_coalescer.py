"""The CreateWorkUnit group commit against a real database (issue 24): a caller that
gives up while its group waits on Postgres costs the others nothing and gets no unit;
one that gives up during COMMIT is the counted unknown-outcome window."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterable
from contextlib import asynccontextmanager
from typing import Any, cast

import asyncpg
import pytest
from google.longrunning.operations_proto_pb2 import Operation
from prometheus_client import REGISTRY

from ess.auth import Identity
from ess.creates import CreateCoalescer
from ess.intents import WRITER, Intents
from tests.integration.support import FakeClock, minimal_work_unit
from tests.waiting import eventually
from xmc.model.audit import Actor
from xmc.names import parse_experiment_name, work_unit_name
from xmc.store.repository import Store
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.operations_pb2 import OperationMetadata

ALICE = Identity("alice@example.com")
AFTER_COMMIT = "xmc_ess_creates_abandoned_after_commit_total"


def _coalescer(store: Store | Any) -> CreateCoalescer:
    clock = FakeClock()
    intents = Intents(cast(Store, store), clock=clock)
    return CreateCoalescer(cast(Store, store), intents, clock=clock, writer=WRITER)


async def _experiment(store: Store) -> int:
    experiment = await store.create_experiment(Experiment(title="group"), creator=ALICE.email)
    return parse_experiment_name(experiment.name)


def _submit(coalescer: CreateCoalescer, xid: int, count: int) -> list[asyncio.Task[Operation]]:
    return [
        asyncio.create_task(
            coalescer.submit(ALICE, xid, minimal_work_unit(), None, by=Actor(ALICE.email))
        )
        for _ in range(count)
    ]


def _target(operation: Operation) -> str:
    meta = OperationMetadata()
    operation.metadata.Unpack(meta)
    return meta.target


async def _stored_units(database_url: str) -> list[str]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT xid, wid FROM work_units")
    finally:
        await conn.close()
    return sorted(work_unit_name(r["xid"], r["wid"]) for r in rows)


async def _answers(calls: Iterable[Awaitable[Operation]]) -> list[str]:
    return sorted(_target(operation) for operation in await asyncio.gather(*calls))


@asynccontextmanager
async def _experiment_locked(database_url: str, xid: int) -> AsyncIterator[Any]:
    """Another transaction holds the experiment's row (the lock a group takes first)."""
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1 FROM experiments WHERE xid = $1 FOR UPDATE", xid)
            yield conn
    finally:
        await conn.close()


async def _lock_waiters(conn: Any) -> int:
    count: int = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return count


async def test_callers_giving_up_while_queued_or_in_the_transaction_get_no_unit(
    store: Store, database_url: str
) -> None:
    coalescer = _coalescer(store)
    xid = await _experiment(store)
    async with _experiment_locked(database_url, xid) as holder:
        in_transaction = _submit(coalescer, xid, 3)  # one group, waiting on the lock
        await eventually(lambda: _lock_waiters(holder), 1)
        queued = _submit(coalescer, xid, 2)  # the next group, waiting in the queue

        async def queue_length() -> int:
            return coalescer.queued

        await eventually(queue_length, 2)
        in_transaction[1].cancel()
        queued[0].cancel()
    survivors = [in_transaction[0], in_transaction[2], queued[1]]

    answered = await asyncio.wait_for(_answers(survivors), 10)

    assert in_transaction[1].cancelled()
    assert queued[0].cancelled()
    assert await _stored_units(database_url) == answered
    assert len(answered) == 3


async def test_a_caller_giving_up_during_commit_is_counted_and_the_others_answered(
    store: Store, database_url: str
) -> None:
    class CancelAtCommit:
        """The store, but the caller ``victim`` gives up once the body is done: as the
        group's COMMIT is sent, past the last check that could still undo its create."""

        victim: asyncio.Task[Operation] | None = None

        @asynccontextmanager
        async def transaction(self) -> AsyncIterator[Any]:
            async with store.transaction() as conn:
                yield conn
                if self.victim is not None:
                    self.victim.cancel()

    hooked = CancelAtCommit()
    coalescer = _coalescer(hooked)
    xid = await _experiment(store)
    before = REGISTRY.get_sample_value(AFTER_COMMIT) or 0.0
    calls = _submit(coalescer, xid, 3)
    hooked.victim = calls[1]

    answered = await asyncio.wait_for(_answers([calls[0], calls[2]]), 10)

    assert calls[1].cancelled()
    assert len(answered) == 2
    stored = await _stored_units(database_url)
    assert set(answered) < set(stored)
    assert len(stored) == 3
    assert REGISTRY.get_sample_value(AFTER_COMMIT) == before + 1


async def test_an_error_one_callers_request_meets_reaches_only_that_caller(
    store: Store, database_url: str
) -> None:
    coalescer = _coalescer(store)
    xid = await _experiment(store)
    poison = minimal_work_unit()
    poison.notes = "a NUL \x00 the request checks refuse, past them here"
    good = _submit(coalescer, xid, 1)
    bad = asyncio.create_task(coalescer.submit(ALICE, xid, poison, None, by=Actor(ALICE.email)))
    good += _submit(coalescer, xid, 1)

    answered = await asyncio.wait_for(_answers(good), 10)

    with pytest.raises(asyncpg.exceptions.DataError):
        await bad
    assert await _stored_units(database_url) == answered
    assert len(answered) == 2
