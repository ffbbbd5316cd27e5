"""``Store``: the pool-owning facade over the store modules.

Each public method is one transaction. The functions it calls take a connection, so a
caller that needs several steps in one transaction (the ESS writing a work unit and its
Operation, say) can compose them under ``Store.transaction()``.

Services reach ``Store`` through ``xmc.store.transactions``, the store's one surface: it
stays a public class because each service process owns one pool and decides where its
transactions begin and end; what runs inside them is named in that module.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

import asyncpg
import structlog

from xmc.errors import AlreadyExistsError, XmcError
from xmc.keepalive import apply_tcp_options, connect_timeout, postgres_server_settings
from xmc.model.audit import Actor
from xmc.model.merge import ExecutionUpdate
from xmc.model.states import LaunchState
from xmc.store import executions, experiments, status_messages, work_units
from xmc.store.connection import Connection
from xmc.store.creation import CreateOutcome, NewWorkUnit, create_work_units
from xmc.store.executions import ItemResult
from xmc.store.listing import ListRequest
from xmc.timestamps import utc_now
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_message_pb2 import StatusMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

Clock = Callable[[], datetime]
T = TypeVar("T")


#: Postgres not there (yet): refused, shutting down, starting up, or (a multi-host DSN
#: with ``target_session_attrs=read-write``) only a standby answering while it is being
#: promoted. What a process starting next to a restarting or failing-over Postgres waits
#: out instead of exiting at once.
_NOT_UP_YET: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.TargetServerAttributeNotMatched,
)
#: Seconds between attempts of :func:`wait_for_postgres`.
_WAIT_STEP = 1.0


async def wait_for_postgres(dsn: str, *, within: float) -> None:
    """Return once Postgres accepts a connection; after ``within`` seconds, raise the last
    error (the process then exits non-zero and its supervisor restarts it)."""
    timeout = max(1.0, min(10.0, within))
    conn = await _when_up(lambda: asyncpg.connect(dsn, timeout=timeout), within=within)
    await conn.close()


async def _when_up(attempt: Callable[[], Awaitable[T]], *, within: float) -> T:
    """``attempt()``'s result, tried again every ``_WAIT_STEP`` while Postgres is not up
    (a handshake that times out included: ``TimeoutError`` is an ``OSError``); after
    ``within`` seconds the last error is raised."""
    log = structlog.get_logger()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        try:
            return await attempt()
        except _NOT_UP_YET as error:
            if loop.time() + _WAIT_STEP > deadline:
                raise
            log.warning("waiting for postgres", error=f"{type(error).__name__}: {error}")
            await asyncio.sleep(_WAIT_STEP)  # a bounded, logged retry, not synchronisation


def socket_of(conn: asyncpg.Connection) -> Any:
    """The socket under an asyncpg connection. asyncpg has no keepalive settings (its
    issue 606 points at the transport's socket instead), so this is the way in."""
    return conn._transport.get_extra_info("socket")


async def _keep_session(conn: Connection) -> None:
    """The pool's reset on release, which asyncpg runs after rolling back any open
    transaction. Its default also sends ``RESET ALL; UNLISTEN *; CLOSE ALL;
    pg_advisory_unlock_all()`` — one more round trip per pooled use, a fifth of a
    100-row ListWorkUnits — and XMC keeps no session state (no SET, LISTEN, cursors
    outside a transaction or advisory locks), so there is nothing to reset."""


class Store:
    """All of XMC's Postgres state behind one pool; ``clock`` is injected for tests."""

    def __init__(self, pool: asyncpg.Pool, *, clock: Clock = utc_now) -> None:
        self._pool = pool
        self._clock = clock
        self._committed: list[Callable[[], None]] = []

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every transaction of :meth:`transaction` commits (the
        watch hub's wake, decision 0043): it must be cheap and must not raise."""
        self._committed.append(callback)

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        min_size: int = 2,
        max_size: int = 10,
        clock: Clock = utc_now,
        dead_peer_seconds: float | None = None,
        startup_wait: float = 0.0,
    ) -> Store:
        """``dead_peer_seconds``: drop a pooled connection whose Postgres went silent that
        long, have Postgres drop it as soon when this side went silent, and give up
        opening one sooner (``xmc.keepalive``); None leaves asyncpg's, Postgres's and the
        system's defaults. ``startup_wait``: seconds a starting process keeps trying to
        open the pool while Postgres is not up — or too busy to finish a handshake within
        that bound (a first connection timed out on a loaded machine just after
        :func:`wait_for_postgres` had succeeded, and the service died at start)."""

        async def keepalive(conn: asyncpg.Connection) -> None:
            if dead_peer_seconds is not None:
                apply_tcp_options(socket_of(conn), dead_peer_seconds)

        bounded: dict[str, Any] = {}
        if dead_peer_seconds is not None:
            bounded["timeout"] = connect_timeout(dead_peer_seconds)
            bounded["server_settings"] = postgres_server_settings(dead_peer_seconds)
        pool = await _when_up(
            lambda: asyncpg.create_pool(
                dsn, min_size=min_size, max_size=max_size, reset=_keep_session, init=keepalive,
                **bounded,
            ),
            within=startup_wait,
        )  # fmt: skip
        return cls(pool, clock=clock)

    async def close(self) -> None:
        await self._pool.close()

    async def ping(self, *, within: float = 2.0) -> None:
        """One round trip to Postgres (readiness); raises when it cannot be made in time."""
        async with self._pool.acquire(timeout=within) as conn:
            await conn.fetchval("SELECT 1", timeout=within)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        async with self._pool.acquire() as conn, conn.transaction():
            yield conn
        for callback in self._committed:
            callback()

    def clock(self) -> datetime:
        """The time on the store's clock (what its own writes are stamped with)."""
        return self._clock()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A pooled connection outside any transaction: for a single read, which then
        costs one round trip instead of three (BEGIN, the query, COMMIT)."""
        async with self._pool.acquire() as conn:
            yield conn

    # Experiments.

    async def create_experiment(self, experiment: Experiment, *, creator: str) -> Experiment:
        async with self.transaction() as conn:
            return await experiments.insert_experiment(
                conn, experiment, creator=creator, now=self._clock()
            )

    async def update_experiment_launch_state(
        self, xid: int, launch_state: LaunchState
    ) -> Experiment:
        async with self.transaction() as conn:
            return await experiments.update_launch_state(conn, xid, launch_state, now=self._clock())

    async def get_experiment(self, xid: int) -> Experiment:
        async with self._pool.acquire() as conn:
            return await experiments.fetch_experiment(conn, xid)

    # Work units: full-row writes (SPEC §4) and reads.

    # The facade's writes are for tests, benches and tools; without an ``actor`` they are
    # attributed to their ``writer`` label.

    async def create_work_units(
        self, items: Sequence[NewWorkUnit], *, writer: str
    ) -> list[CreateOutcome]:
        async with self.transaction() as conn:
            return await create_work_units(conn, items, writer=writer, now=self._clock())

    async def insert_work_unit(
        self,
        xid: int,
        work_unit: WorkUnit,
        *,
        wid: int | None = None,
        writer: str,
        requester: str = "",
    ) -> WorkUnit:
        """Create one work unit (and its CREATE Operation); errors are raised."""
        (outcome,) = await self.create_work_units(
            [NewWorkUnit(xid, wid, work_unit, Actor(requester))], writer=writer
        )
        if isinstance(outcome, XmcError):
            raise outcome
        if outcome.work_unit is None:
            raise AlreadyExistsError(f"work_unit_id: workUnits/{wid} already exists")
        return outcome.work_unit

    async def restart_work_unit(
        self, xid: int, wid: int, *, writer: str, actor: Actor | None = None
    ) -> WorkUnit:
        async with self.transaction() as conn:
            return await work_units.restart_work_unit(
                conn, xid, wid, writer=writer, actor=actor or Actor(writer), now=self._clock()
            )

    async def get_work_unit(self, xid: int, wid: int) -> WorkUnit:
        async with self._pool.acquire() as conn:
            return await work_units.fetch_work_unit(conn, xid, wid)

    async def list_work_unit_executions(self, xid: int, wid: int) -> list[WorkUnitExecution]:
        async with self.transaction() as conn:
            return await work_units.fetch_work_unit_executions(conn, xid, wid)

    async def list_status_messages(
        self, xid: int, wid: int | None = None, request: ListRequest | None = None
    ) -> tuple[list[StatusMessage], str]:
        async with self._pool.acquire() as conn:
            return await status_messages.list_status_messages(
                conn, xid, wid, request or ListRequest()
            )

    # The masked observation path (SPEC §5).

    async def update_work_unit_executions(
        self, items: Sequence[ExecutionUpdate], *, writer: str, actor: Actor | None = None
    ) -> list[ItemResult]:
        async with self.transaction() as conn:
            return await executions.update_work_unit_executions(
                conn, items, writer=writer, actor=actor or Actor(writer), now=self._clock()
            )
