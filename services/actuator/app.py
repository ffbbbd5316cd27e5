"""Wiring of one Actuator process: Postgres, Redis, the Kubernetes client, the admission
and pause gates, the JobSet handlers and the stream consumer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any

import structlog

from actuator.admission import AdmissionGate
from actuator.consumer import ConsumerSettings, TaskConsumer
from actuator.handlers import JobSetHandlers
from actuator.kube import JobSetClient
from actuator.pause import PauseFlag, TaskPauseHandler
from actuator.repair import RepairSettings, RepairSweep
from actuator.settle import TaskSettler
from xmc.errors import InvalidArgumentError
from xmc.health import Check, probe
from xmc.redis_client import connect_redis
from xmc.settings import Settings
from xmc.store.transactions import Store
from xmc.streams import StreamNames
from xmc.supervise import supervise
from xmc.timestamps import utc_now

log = structlog.get_logger()

#: Seconds a starting Actuator waits for Postgres (restarting, say) before it exits.
STARTUP_WAIT_SECONDS = 60.0
#: Seconds past a blocking read's ``block`` before a Redis reply counts as never coming.
READ_TIMEOUT_MARGIN = 5.0


class Actuator:
    """Start with ``start()``, serve with ``run()``, stop gracefully with ``stop()``."""

    def __init__(
        self,
        settings: Settings,
        consumer_settings: ConsumerSettings | None = None,
        *,
        repair_settings: RepairSettings | None = None,
        clock: Callable[[], datetime] = utc_now,
        consumer_name: str | None = None,
    ) -> None:
        if not settings.task_signing_key:
            raise InvalidArgumentError("XMC_TASK_SIGNING_KEY: required to verify tasks")
        self.settings = settings
        self.consumer_settings = consumer_settings or ConsumerSettings()
        self.repair_settings = repair_settings or RepairSettings()
        self.clock = clock
        self.consumer_name = consumer_name
        self.store: Store | None = None
        self.consumer: TaskConsumer | None = None
        self.repair: RepairSweep | None = None
        self._stop_sweep = asyncio.Event()
        self._stopping = asyncio.Event()
        self._redis: Any = None
        self._kube: JobSetClient | None = None

    async def start(self) -> None:
        settings = self.settings
        self.store = await Store.connect(
            settings.database_url,
            clock=self.clock,
            dead_peer_seconds=settings.dead_peer_seconds,
            startup_wait=STARTUP_WAIT_SECONDS,
        )
        # XREADGROUP blocks for ConsumerSettings.block on purpose; a reply later than that
        # plus a margin means the server is gone without closing the connection (a host
        # died, a master frozen): give up, and the next connection asks the Sentinels or
        # the cluster where the master is now. With no timeout the read waited forever on
        # a dead master while the promoted replica filled up (decision 0052).
        read_timeout = self.consumer_settings.block + READ_TIMEOUT_MARGIN
        self._redis = connect_redis(settings, socket_timeout=read_timeout, socket_connect_timeout=5)
        self._kube = await JobSetClient.from_settings(settings)
        handlers = JobSetHandlers(
            self._kube, self.store, namespace=settings.namespace, clock=self.clock
        )
        pause = TaskPauseHandler(self.store, PauseFlag(self.store), clock=self.clock)
        admission = AdmissionGate(self.store, TaskSettler(self.store, clock=self.clock))
        self.consumer = TaskConsumer(
            self._redis,
            StreamNames.with_prefix(settings.stream_prefix),
            self.store,
            handlers,
            signing_key=settings.task_signing_key,
            clock=self.clock,
            settings=self.consumer_settings,
            pause=pause,
            admission=admission,
            consumer_name=self.consumer_name,
        )
        self.repair = RepairSweep(
            self.store,
            self._kube,
            namespace=settings.namespace,
            clock=self.clock,
            settings=self.repair_settings,
        )
        log.info(
            "actuator started", consumer=self.consumer.name, kube=settings.kube_url or "config"
        )

    async def run(self) -> None:
        """Consume tasks and sweep for repairs until :meth:`stop`. Either ending on its own
        ends both and raises ``TaskEnded`` naming it: an Actuator doing half its job must
        exit, not look healthy."""
        assert self.consumer is not None, "start() first"
        assert self.repair is not None
        jobs = [
            asyncio.create_task(self.consumer.run(), name="task consumer"),
            asyncio.create_task(self.repair.run(self._stop_sweep), name="repair sweep"),
        ]
        try:
            await supervise(jobs, stopping=self._stopping)
        finally:
            self._stop_sweep.set()
            await self.consumer.stop()
            await asyncio.gather(*jobs, return_exceptions=True)

    async def readiness(self) -> list[Check]:
        """``/readyz``: consuming, Redis and Postgres answering."""
        consuming = self.consumer is not None and not self._stopping.is_set()
        checks = [Check("consumer", consuming, "consuming" if consuming else "not consuming")]
        checks.append(await probe("redis", self._redis.ping() if self._redis else None))
        checks.append(await probe("postgres", self.store.ping() if self.store else None))
        return checks

    async def stop(self) -> None:
        """Stop reading, let held tasks finish (bounded), then close the clients."""
        self._stopping.set()
        self._stop_sweep.set()
        if self.consumer is not None:
            await self.consumer.stop()
        if self._kube is not None:
            await self._kube.close()
        if self._redis is not None:
            await self._redis.aclose()
        if self.store is not None:
            await self.store.close()
        log.info("actuator stopped")
