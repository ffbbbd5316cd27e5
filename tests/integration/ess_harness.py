"""A real ESS on a free port against the test's own database and a private Redis key
prefix, talked to over a real gRPC channel: the ``ess_factory`` and ``ess`` fixtures (the
integration conftest provides them), the :class:`Ess` they return, and the test callers'
tokens and the task signing key."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis

from ess.app import EssOptions, EssServer
from tests.integration.support import FakeClock
from tests.servers import REDIS_URL
from tests.stack import delete_prefixed_keys
from tests.waiting import eventually
from xmc.auth_settings import AuthSettings
from xmc.redis_client import connect_redis
from xmc.settings import Settings
from xmc.streams import StreamNames
from xmc_api.cloud.xmanager.v1 import api_pb2_grpc
from xmc_api.internal.v1 import executions_pb2_grpc, scheduling_pb2_grpc

SIGNING_KEY = "test-signing-key-of-at-least-32-bytes!!"

#: Bearer tokens of the test callers (static tokens: no clock games with JWT expiry).
TOKENS = {
    "alice": "alice@example.com",
    "bob": "bob@example.com",
    "root": "root@example.com",
    "reconciler": "reconciler@xmc.internal",
}


def auth_settings() -> AuthSettings:
    return AuthSettings(
        static_tokens={f"token-{who}": email for who, email in TOKENS.items()},
        admins=frozenset({"root@example.com"}),
        service_accounts=frozenset({"reconciler@xmc.internal"}),
    )


def metadata(who: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer token-{who}"),)


@dataclass
class Ess:
    """A running ESS and typed clients for it."""

    server: EssServer
    channel: grpc.aio.Channel
    api: api_pb2_grpc.ExperimentStateServiceStub
    executions: executions_pb2_grpc.WorkUnitExecutionServiceStub
    scheduling: scheduling_pb2_grpc.SchedulingServiceStub
    redis: Any
    names: StreamNames
    clock: FakeClock
    database_url: str

    async def stream(self, name: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """The entries of stream ``name``; for the task stream, once the outbox relay has
        published every task committed so far."""
        if name == self.names.tasks:
            await self.relayed()
        entries: list[tuple[bytes, dict[bytes, bytes]]] = await self.redis.xrange(name)
        return entries

    async def unpublished(self) -> int:
        """Committed tasks the relay has not put on the stream yet."""
        assert self.server.store is not None
        async with self.server.store.transaction() as conn:
            count: int = await conn.fetchval(
                "SELECT count(*) FROM task_outbox WHERE status = 'pending'"
            )
        return count

    async def relayed(self, within: float = 10.0) -> None:
        """Wait until the outbox relay has published every committed task."""
        await eventually(self.unpublished, 0, within=within)


EssFactory = Callable[..., Any]


@pytest.fixture
async def ess_factory(database_url: str) -> AsyncIterator[EssFactory]:
    """Start ESS instances (``redis_url`` or ``redis_cluster_nodes``, and options
    overridable); all stopped at the end."""
    started: list[tuple[EssServer, grpc.aio.Channel]] = []
    cluster_clients: list[Any] = []
    prefix = f"test-{uuid.uuid4().hex[:10]}:"
    redis = aioredis.Redis.from_url(REDIS_URL)

    async def start(
        *,
        redis_url: str = REDIS_URL,
        redis_cluster_nodes: str = "",
        start_time: datetime | None = None,
        clock: FakeClock | None = None,
        stream_prefix: str | None = None,
        kube_url: str = "",
        **option_overrides: Any,
    ) -> Ess:
        """``start_time`` sets the ESS's (fixed, test-controlled) clock; processes that use
        the wall clock (an Actuator checking token expiry) need it near now. ``clock``
        replaces it outright (``WallClock()`` for flows tested at real time).
        ``stream_prefix`` replaces the test's own prefix (``""``: SPEC's bare names, on a
        private Redis or cluster only). ``kube_url``: the API server a live log read goes to
        (none: a live read says it has no cluster)."""
        if clock is None:
            clock = FakeClock() if start_time is None else FakeClock(start_time)
        settings = Settings(
            database_url=database_url,
            redis_url=redis_url,
            redis_cluster_nodes=tuple(redis_cluster_nodes.split(","))
            if redis_cluster_nodes
            else (),
            ess_listen="127.0.0.1:0",
            kube_url=kube_url,
            task_signing_key=SIGNING_KEY,
            stream_prefix=prefix if stream_prefix is None else stream_prefix,
        )
        ess_redis = redis
        if redis_cluster_nodes:
            ess_redis = connect_redis(settings)
            cluster_clients.append(ess_redis)
        options = dataclasses.replace(
            EssOptions(auth=auth_settings(), resume_sweep_seconds=3600), **option_overrides
        )
        server = EssServer(settings, options, clock=clock)
        port = await server.start()
        if redis_url != REDIS_URL and not redis_cluster_nodes:
            ess_redis = server.redis  # a private Redis: the ESS's own client reaches it
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        started.append((server, channel))
        return Ess(
            server=server,
            channel=channel,
            api=api_pb2_grpc.ExperimentStateServiceStub(channel),
            executions=executions_pb2_grpc.WorkUnitExecutionServiceStub(channel),
            scheduling=scheduling_pb2_grpc.SchedulingServiceStub(channel),
            redis=ess_redis,
            names=StreamNames.with_prefix(settings.stream_prefix),
            clock=clock,
            database_url=database_url,
        )

    yield start
    for server, channel in started:
        await channel.close()
        await server.stop(grace=1)
    await delete_prefixed_keys(redis, prefix)
    await redis.aclose()
    for cluster_client in cluster_clients:
        await cluster_client.aclose()


@pytest.fixture
async def ess(ess_factory: EssFactory) -> Ess:
    started: Ess = await ess_factory()
    return started
