"""Wiring of the ESS process: stores, services, background workers, lifecycle.

``EssServer`` is what ``xmc-ess serve`` runs and what the integration tests start on a
free port: the same code path either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ess import unit_gauges
from ess.auth import Authenticator
from ess.business_metrics import FirstStarts
from ess.cluster import LazyKube
from ess.intents import Intents
from ess.interceptor import EssInterceptor
from ess.jwks import JwksKeys
from ess.quotas import QuotaGate
from ess.read_gate import ReadGate
from ess.relay import OutboxRelay
from ess.resume import ResumeWorker
from ess.servicers import SERVICE_NAMES, Parts, add_servicers
from ess.usage import Meter
from ess.watch_hub import WatchHub, WatchSettings
from ess.webhooks import WebhookWorker
from xmc.auth_settings import AuthSettings
from xmc.errors import InvalidArgumentError
from xmc.health import Check, probe
from xmc.keepalive import grpc_server_options
from xmc.model.outbox import RelaySettings
from xmc.model.retries import DEFAULT_PER_MINUTE
from xmc.model.watch import EXPERIMENT_EVENT_RETENTION
from xmc.model.webhooks import WebhookSettings
from xmc.quota_settings import QuotaSettings
from xmc.redis_client import connect_redis
from xmc.settings import LogSettings, Settings, XmcSettings
from xmc.store.transactions import (
    Store,
    delete_expired_audit,
    delete_expired_experiment_events,
    delete_expired_operations,
    delete_expired_outbox_rows,
    delete_expired_paused_tasks,
    migrate,
    wait_for_postgres,
)
from xmc.streams import StreamNames, TaskPublisher
from xmc.supervise import finish, supervise
from xmc.timestamps import utc_now

log = structlog.get_logger()


@dataclass(frozen=True)
class EssOptions:
    """ESS-only settings on top of the shared ``Settings``."""

    #: XMC_TLS_CERT_FILE / XMC_TLS_KEY_FILE: serve TLS when both are set.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    #: Largest request accepted; bigger ones get RESOURCE_EXHAUSTED from gRPC itself.
    max_message_bytes: int = 16 * 1024 * 1024
    #: How often the janitor drops expired operations and parked tasks.
    janitor_interval: timedelta = timedelta(hours=1)
    resume_sweep_seconds: float = 30.0
    relay: RelaySettings = field(default_factory=RelaySettings)
    pool_size: int = 10
    run_migrations: bool = True
    #: Seconds a starting ESS waits for Postgres (restarting, say) before it exits.
    startup_wait_seconds: float = 60.0
    auth: AuthSettings = field(default_factory=AuthSettings)
    #: What is kept of each container's log, and each experiment's cap.
    logs: LogSettings = field(default_factory=LogSettings)
    #: The push API's shared poller (decision 0043).
    watch: WatchSettings = field(default_factory=WatchSettings)
    #: XMC_RETRIES_PER_MINUTE: the cluster's cap on automatic retries (docs/retries.md).
    retries_per_minute: int = DEFAULT_PER_MINUTE
    #: The webhook delivery worker's timeouts and retry schedule (docs/notifications.md).
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)
    #: The dashboard's base URL, linked from notifications; empty: no link.
    dashboard_url: str = ""
    #: Default limits and the limits table's reread interval (docs/quotas.md).
    quotas: QuotaSettings = field(default_factory=QuotaSettings)
    #: XMC_METRICS_REFRESH_SECONDS: how often ``xmc_work_units`` is re-read.
    metrics_refresh_seconds: float = unit_gauges.DEFAULT_INTERVAL

    @classmethod
    def from_settings(cls, settings: XmcSettings) -> EssOptions:
        """The ESS's groups of ``load_settings()``; fails unless callers can be verified."""
        settings.auth.require_verifier()
        return cls(
            tls_cert_file=settings.tls.cert_file,
            tls_key_file=settings.tls.key_file,
            auth=settings.auth,
            logs=settings.logs,
            retries_per_minute=settings.retries.per_minute,
            dashboard_url=settings.ui.public_url,
            quotas=settings.quotas,
            metrics_refresh_seconds=settings.metrics.refresh_seconds,
        )


async def run_janitor_once(store: Store, *, now: datetime) -> tuple[int, int, int]:
    """TTL cleanup (SPEC §11): operations and audit rows after 90 days, processed parked
    tasks 7 days after ``processed_time``, finished outbox tasks 7 days after they finished.
    Returns
    how many of each were dropped."""
    async with store.transaction() as conn:
        dropped_ops = await delete_expired_operations(conn, now=now)
        dropped_audit = await delete_expired_audit(conn, now=now)
        dropped_tasks = await delete_expired_paused_tasks(conn, now=now)
        dropped_outbox = await delete_expired_outbox_rows(conn, now=now)
        dropped_events = await delete_expired_experiment_events(
            conn, before=now - EXPERIMENT_EVENT_RETENTION
        )
    if dropped_ops or dropped_audit or dropped_tasks or dropped_outbox or dropped_events:
        log.info(
            "expired rows dropped",
            operations=dropped_ops,
            audit_rows=dropped_audit,
            paused_tasks=dropped_tasks,
            outbox_tasks=dropped_outbox,
            experiment_events=dropped_events,
        )
    return dropped_ops, dropped_tasks, dropped_outbox


class EssServer:
    """One ESS process: gRPC server, resume worker and janitor over shared clients."""

    def __init__(
        self,
        settings: Settings,
        options: EssOptions,
        *,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.options = options
        self.clock = clock
        self.port: int = 0
        self._stop = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
        self._server: Any = None
        self._health: health.aio.HealthServicer | None = None
        self.store: Store | None = None
        self._intents: Intents | None = None
        #: The read-only cluster client (live logs, the queue view), made on first use.
        self._kube: LazyKube | None = None
        self.relay: OutboxRelay | None = None
        self.watch_hub: WatchHub | None = None
        #: Sends queued webhook deliveries (docs/notifications.md).
        self.webhooks: WebhookWorker | None = None
        self.redis: Any = None
        #: The OIDC issuer's keys, when XMC_AUTH_JWKS_URL is set.
        self.jwks: JwksKeys | None = None

    async def start(self) -> int:
        """Bind, start serving and the workers; returns the bound port."""
        settings, options = self.settings, self.options
        if not settings.task_signing_key:
            raise InvalidArgumentError("XMC_TASK_SIGNING_KEY: required to sign tasks")
        await wait_for_postgres(settings.database_url, within=options.startup_wait_seconds)
        if options.run_migrations:
            await migrate(settings.database_url)
        self.store = await Store.connect(
            settings.database_url,
            max_size=options.pool_size,
            clock=self.clock,
            dead_peer_seconds=settings.dead_peer_seconds,
            startup_wait=options.startup_wait_seconds,
        )
        self.redis = connect_redis(settings, socket_timeout=5, socket_connect_timeout=2)
        names = StreamNames.with_prefix(settings.stream_prefix)
        publisher = TaskPublisher(
            self.redis, names, signing_key=settings.task_signing_key, clock=self.clock
        )
        relay = self.relay = OutboxRelay(
            self.store, self.redis, names, publisher, clock=self.clock, settings=options.relay
        )
        gate = QuotaGate(self.store, options.quotas, clock=self.clock)
        await gate.load()
        intents = self._intents = Intents(
            self.store, clock=self.clock, committed=relay.wake, quotas=gate
        )

        auth = options.auth
        if auth.jwks_url:
            self.jwks = JwksKeys(
                auth.jwks_url,
                refresh_seconds=auth.jwks_refresh_seconds,
                min_refetch_seconds=auth.jwks_min_refetch_seconds,
                wait_seconds=auth.jwks_wait_seconds,
            )
        authenticator = Authenticator(auth, clock=self.clock, jwks=self.jwks)
        server = grpc.aio.server(
            interceptors=[EssInterceptor(authenticator, ReadGate(self.store))],
            options=[
                ("grpc.max_receive_message_length", options.max_message_bytes),
                ("grpc.max_send_message_length", options.max_message_bytes),
                # A second ESS on a taken port must fail, not silently share it.
                ("grpc.so_reuseport", 0),
                *grpc_server_options(settings.dead_peer_seconds),
            ],
        )
        kube = self._kube = LazyKube(settings)
        hub = self.watch_hub = WatchHub(self.store, options.watch)
        self.store.on_commit(hub.wake)
        first_starts = FirstStarts(self.store)
        add_servicers(
            server,
            Parts(
                self.store,
                intents,
                gate,
                relay,
                self.redis,
                names,
                kube,
                hub,
                first_starts,
                self.clock,
            ),
            retries_per_minute=options.retries_per_minute,
            logs=options.logs,
        )
        health_servicer = self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        try:
            self.port = self._bind(server, settings.ess_listen)
        except RuntimeError as exc:  # gRPC's "Failed to bind to address …"
            log.error("cannot bind", listen=settings.ess_listen)
            raise RuntimeError(
                f"XMC_ESS_LISTEN: cannot bind {settings.ess_listen} (in use, or not local)"
            ) from exc
        await server.start()
        # What is alive now (modules, descriptors, settings) lives as long as the process:
        # out of the collector's generations, it is not scanned again on every collection.
        gc.freeze()
        self._server = server
        for name in (*SERVICE_NAMES, ""):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)

        webhooks = self.webhooks = WebhookWorker(
            self.store,
            settings=options.webhooks,
            dashboard_url=options.dashboard_url,
            clock=self.clock,
        )
        worker = ResumeWorker(
            self.store,
            self.redis,
            names,
            clock=self.clock,
            consumer=f"{socket.gethostname()}-{os.getpid()}",
            committed=relay.wake,
            sweep_interval=options.resume_sweep_seconds,
        )
        self._background = [
            asyncio.create_task(relay.run(self._stop), name="outbox-relay"),
            asyncio.create_task(worker.run(self._stop), name="resume-worker"),
            asyncio.create_task(self._janitor(), name="janitor"),
            asyncio.create_task(hub.run(self._stop), name="watch-hub"),
            asyncio.create_task(webhooks.run(self._stop), name="webhook-worker"),
            asyncio.create_task(gate.run(self._stop), name="quota-refresh"),
            asyncio.create_task(first_starts.run(self._stop), name="first-starts"),
            asyncio.create_task(
                unit_gauges.run(self.store, self._stop, interval=options.metrics_refresh_seconds),
                name="unit-gauges",
            ),
            asyncio.create_task(Meter(self.store).run(self._stop), name="usage-meter"),
        ]
        if self.jwks is not None:
            # Not awaited here: probes and static tokens answer while the issuer is slow;
            # /readyz waits for the first key set.
            self._background.append(
                asyncio.create_task(self.jwks.run(self._stop), name="jwks-refresher")
            )
        if options.auth.restricted_reads:
            log.info(
                "reads are restricted: an experiment is readable by its creator, its ACL's "
                "principals, admins and services (XMC_READ_AUTHORIZATION)",
                groups_claim=options.auth.groups_claim,
            )
        if options.auth.disabled:
            log.warning(
                "authentication is DISABLED: every caller is an admin, named by the "
                "x-goog-user-email it claims (else dev@localhost)"
            )
        log.info("ess serving", port=self.port, tls=bool(options.tls_cert_file))
        return self.port

    def _bind(self, server: Any, listen: str) -> int:
        options = self.options
        if options.tls_cert_file and options.tls_key_file:
            with open(options.tls_cert_file, "rb") as cert, open(options.tls_key_file, "rb") as key:
                credentials = grpc.ssl_server_credentials([(key.read(), cert.read())])
            return int(server.add_secure_port(listen, credentials))
        log.warning("serving plaintext gRPC: set XMC_TLS_CERT_FILE and XMC_TLS_KEY_FILE for TLS")
        return int(server.add_insecure_port(listen))

    async def _janitor(self) -> None:
        assert self.store is not None
        interval = self.options.janitor_interval.total_seconds()
        while not self._stop.is_set():
            try:
                await run_janitor_once(self.store, now=self.clock())
            except Exception:
                log.exception("janitor run failed; trying again next interval")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=interval)

    async def readiness(self) -> list[Check]:
        """``/readyz``: serving (not draining), Postgres answering and, with
        XMC_AUTH_JWKS_URL, the issuer's keys held (fetched once; cached keys keep an ESS
        ready while the issuer is down). Redis is not a condition: intents land in the
        outbox while it is down."""
        serving = self._server is not None and not self._stop.is_set()
        grpc_check = Check("grpc", serving, "serving" if serving else "draining or not started")
        checks = [grpc_check, await probe("postgres", self.store.ping() if self.store else None)]
        if self.jwks is not None:
            checks.append(self.jwks.check())
        return checks

    async def stop(self, grace: float = 10.0) -> None:
        """Graceful: report NOT_SERVING (health checks and ``/readyz``), refuse new RPCs, let
        in-flight ones finish (``grace`` s), stop the workers, close the clients."""
        self._stop.set()
        if self._health is not None:
            # Every service name NOT_SERVING from now on, so load balancers stop routing here.
            await self._health.enter_graceful_shutdown()
        if self.watch_hub is not None:
            self.watch_hub.close()  # watch streams end now, not after the grace period
        if self._server is not None:
            await self._server.stop(grace)
        if self._intents is not None:
            await self._intents.drain()
        if self.relay is not None:
            # Publish what the drained creates committed; whatever this misses (Redis
            # down) stays in the outbox for the next ESS to relay.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.relay.relay_once(), timeout=grace)
        await finish(self._background, within=grace)
        if self.redis is not None:
            await self.redis.aclose()
        if self._kube is not None:
            await self._kube.close()
        if self.store is not None:
            await self.store.close()
        log.info("ess stopped")

    async def wait(self) -> None:
        """Until a stop is requested; raises ``TaskEnded`` if a background worker ends
        first (the process then exits non-zero instead of serving half an ESS)."""
        await supervise(self._background, stopping=self._stop)

    def request_stop(self) -> None:
        self._stop.set()
