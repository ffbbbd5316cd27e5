"""Every setting XMC takes from the environment (SPEC §11): the one reader of it.

Modelled on kopf's ``OperatorSettings``: a frozen dataclass per concern — :class:`Settings`
(what every service shares), :class:`~xmc.auth_settings.AuthSettings` (who may call the
ESS; its own module),
:class:`TlsSettings` (the ESS's certificate), :class:`ServiceClientSettings` (how the
Reconciler calls the ESS), :class:`~xmc.local_run_settings.LocalRunSettings` (``make
run``; its own module), :class:`UiSettings`
(the dashboard) and :class:`CliSettings` (the ``xmc`` command) — each field documenting
its variable, and :func:`load_settings`, which reads the environment once and builds them
all (each kind of value parsed by ``xmc.setting_values``). Every service and ``make run``
take their settings from it (the ``xmc`` command, a client, from
:func:`load_cli_settings`); nothing else reads ``os.environ``.

One ``.env`` (or one ConfigMap) configures the whole system, so a malformed value fails
whichever process reads it, at start, with an error that names the variable. What only
one service needs is checked by that service (the ESS: a way to authenticate callers,
:meth:`AuthSettings.require_verifier`; a task signing key). Flags may override fields
(:meth:`Settings.replace`), which validates again.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from xmc.auth_settings import AuthSettings
from xmc.errors import InvalidArgumentError
from xmc.local_run_settings import LocalRunSettings
from xmc.model.container_logs import DEFAULT_EXPERIMENT_BYTES, DEFAULT_TAIL_BYTES
from xmc.model.retries import DEFAULT_PER_MINUTE, MAX_PER_MINUTE
from xmc.quota_settings import QuotaSettings
from xmc.sentinel_settings import sentinel_problem
from xmc.setting_values import (
    Env,
    ReadFile,
    items,
    number,
    read_text,
    seconds,
)

# --- the groups -------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What every service shares."""

    #: XMC_DATABASE_URL — Postgres DSN.
    database_url: str = "postgresql://postgres@127.0.0.1:5432/xmc"
    #: XMC_REDIS_URL — Redis URL for the task, DLQ and resume streams (one node).
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: XMC_REDIS_CLUSTER_NODES — ``host:port,...`` of a Redis Cluster's nodes (any few of
    #: them: the client discovers the rest); when set, XMC_REDIS_URL is not used.
    redis_cluster_nodes: tuple[str, ...] = ()
    #: XMC_REDIS_SENTINELS — ``host:port,...`` of Redis Sentinels; with
    #: XMC_REDIS_SENTINEL_MASTER, the master is the one they name (followed across a
    #: failover); XMC_REDIS_URL then gives only the database number and credentials.
    redis_sentinels: tuple[str, ...] = ()
    #: XMC_REDIS_SENTINEL_MASTER — the master's name in the Sentinels' ``sentinel monitor``.
    redis_sentinel_master: str = ""
    #: XMC_ESS_LISTEN — host:port the ESS binds.
    ess_listen: str = "127.0.0.1:50051"
    #: XMC_ESS_TARGET — where the Reconciler finds the ESS.
    ess_target: str = "127.0.0.1:50051"
    #: XMC_KUBE_URL — API server URL (e.g. kubesim); empty = in-cluster config or kubeconfig.
    kube_url: str = ""
    #: XMC_KUBE_REQUEST_TIMEOUT — seconds one Kubernetes API call may take (a watch: until
    #: its answer starts) before it fails as "no response"; never an endless wait.
    kube_request_timeout: float = 30.0
    #: XMC_NAMESPACE — namespace of the JobSets.
    namespace: str = "default"
    #: XMC_TASK_SIGNING_KEY — HMAC key that signs tasks on the stream.
    task_signing_key: str = field(default="", repr=False)
    #: XMC_STREAM_PREFIX — prefix of every Redis key, so tests and tenants never collide
    #: (``<prefix>xmc-tasks-stream``, …; it may not contain braces: decision 0027).
    stream_prefix: str = ""
    #: XMC_METRICS_LISTEN — host:port of the Prometheus /metrics endpoint ('' = off).
    metrics_listen: str = ""
    #: XMC_DEAD_PEER_SECONDS — how long a connection to Postgres, Redis or the ESS may go
    #: unanswered (TCP keepalive and user timeout; gRPC pings) before it is dropped and
    #: made again, instead of waiting out a network cut (``xmc.keepalive``).
    dead_peer_seconds: float = 20.0

    @classmethod
    def _from_env(cls, env: Env) -> Settings:
        d = cls()
        return cls(
            database_url=env.get("XMC_DATABASE_URL", d.database_url),
            redis_url=env.get("XMC_REDIS_URL", d.redis_url),
            redis_cluster_nodes=tuple(items(env.get("XMC_REDIS_CLUSTER_NODES", ""))),
            redis_sentinels=tuple(items(env.get("XMC_REDIS_SENTINELS", ""))),
            redis_sentinel_master=env.get("XMC_REDIS_SENTINEL_MASTER", "").strip(),
            ess_listen=env.get("XMC_ESS_LISTEN", d.ess_listen),
            ess_target=env.get("XMC_ESS_TARGET", d.ess_target),
            kube_url=env.get("XMC_KUBE_URL", d.kube_url),
            kube_request_timeout=seconds(env, "XMC_KUBE_REQUEST_TIMEOUT", d.kube_request_timeout),
            namespace=env.get("XMC_NAMESPACE", d.namespace),
            task_signing_key=env.get("XMC_TASK_SIGNING_KEY", d.task_signing_key),
            stream_prefix=env.get("XMC_STREAM_PREFIX", d.stream_prefix),
            metrics_listen=env.get("XMC_METRICS_LISTEN", d.metrics_listen),
            dead_peer_seconds=seconds(env, "XMC_DEAD_PEER_SECONDS", d.dead_peer_seconds),
        )

    def replace(self, **changes: str) -> Settings:
        """A copy with some fields overridden (command-line flags), validated again."""
        updated = dataclasses.replace(self, **changes)  # type: ignore[arg-type]
        updated.validate()
        return updated

    def validate(self) -> None:
        if not self.database_url.startswith(("postgresql://", "postgres://")):
            raise InvalidArgumentError(
                f"XMC_DATABASE_URL: must start with postgresql://, got {self.database_url!r}"
            )
        if not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise InvalidArgumentError(
                f"XMC_REDIS_URL: must be a redis:// URL, got {self.redis_url!r}"
            )
        _check_nodes("XMC_REDIS_CLUSTER_NODES", self.redis_cluster_nodes)
        _check_nodes("XMC_REDIS_SENTINELS", self.redis_sentinels)
        if problem := sentinel_problem(
            self.redis_sentinels, self.redis_sentinel_master, cluster=bool(self.redis_cluster_nodes)
        ):
            raise InvalidArgumentError(problem)
        if "{" in self.stream_prefix or "}" in self.stream_prefix:
            raise InvalidArgumentError(
                f"XMC_STREAM_PREFIX: may not contain braces (Redis Cluster would hash only "
                f"part of each stream name, and a stream and its tagged keys could land in "
                f"different slots), got {self.stream_prefix!r}"
            )
        if not 0 < self.kube_request_timeout < float("inf"):
            raise InvalidArgumentError(
                f"XMC_KUBE_REQUEST_TIMEOUT: must be a positive number of seconds, "
                f"got {self.kube_request_timeout!r}"
            )
        if not 2 <= self.dead_peer_seconds <= 3600:
            raise InvalidArgumentError(
                f"XMC_DEAD_PEER_SECONDS: seconds from 2 to 3600, got {self.dead_peer_seconds!r}"
            )
        if not self.namespace:
            raise InvalidArgumentError("XMC_NAMESPACE: must not be empty")
        if self.task_signing_key and len(self.task_signing_key.encode()) < 32:
            raise InvalidArgumentError(
                "XMC_TASK_SIGNING_KEY: must be at least 32 bytes (HS256 key length)"
            )


def _check_nodes(variable: str, nodes: tuple[str, ...]) -> None:
    for node in nodes:
        host, _, port = node.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgumentError(f"{variable}: expected host:port,..., got {node!r}")


@dataclass(frozen=True)
class TlsSettings:
    """The ESS serves TLS when both files are set."""

    #: XMC_TLS_CERT_FILE — PEM certificate chain.
    cert_file: str = ""
    #: XMC_TLS_KEY_FILE — PEM private key.
    key_file: str = ""

    @classmethod
    def _from_env(cls, env: Env) -> TlsSettings:
        return cls(env.get("XMC_TLS_CERT_FILE", ""), env.get("XMC_TLS_KEY_FILE", ""))


@dataclass(frozen=True)
class ServiceClientSettings:
    """How an internal service (the Reconciler) authenticates to the ESS."""

    #: XMC_SERVICE_TOKEN — bearer token; unset = none (works only with XMC_AUTH_DISABLED
    #: on the ESS side).
    token: str | None = field(default=None, repr=False)

    @classmethod
    def _from_env(cls, env: Env) -> ServiceClientSettings:
        return cls(env.get("XMC_SERVICE_TOKEN") or None)


@dataclass(frozen=True)
class UiSettings:
    """``xmc-ui``, the dashboard and REST/JSON face; it calls the ESS at
    ``Settings.ess_target``."""

    #: XMC_UI_LISTEN — host:port of the pages and of /v1 (port 0 = any free one).
    listen: str = "127.0.0.1:8080"
    #: XMC_UI_TOKEN — bearer token for callers whose request carries no Authorization
    #: header (a single-user or development dashboard); '' = send none.
    token: str = field(default="", repr=False)
    #: XMC_UI_POLL_SECONDS — how often a page refreshes its live region.
    poll_seconds: float = 2.0
    #: XMC_UI_PUBLIC_URL — the dashboard as its users reach it (``https://xmc.example``);
    #: the ESS links notifications to it (docs/notifications.md). '' = no links.
    public_url: str = ""

    @classmethod
    def _from_env(cls, env: Env) -> UiSettings:
        d = cls()
        public_url = env.get("XMC_UI_PUBLIC_URL", d.public_url).strip()
        if public_url and not public_url.startswith(("http://", "https://")):
            raise InvalidArgumentError(
                f"XMC_UI_PUBLIC_URL: must start with http:// or https://, got {public_url!r}"
            )
        poll = seconds(env, "XMC_UI_POLL_SECONDS", d.poll_seconds)
        if not 0 < poll < float("inf"):
            raise InvalidArgumentError(
                f"XMC_UI_POLL_SECONDS: must be a positive number of seconds, got {poll!r}"
            )
        return cls(
            listen=env.get("XMC_UI_LISTEN", d.listen),
            token=env.get("XMC_UI_TOKEN", d.token),
            poll_seconds=poll,
            public_url=public_url,
        )


@dataclass(frozen=True)
class LogSettings:
    """Container logs kept by XMC (docs/logs.md): read by the Reconciler (what it
    captures) and the ESS (what it stores)."""

    #: XMC_LOG_TAIL_BYTES — bytes of each container run's log tail XMC keeps.
    tail_bytes: int = DEFAULT_TAIL_BYTES
    #: XMC_LOG_EXPERIMENT_BYTES — bytes of log text one experiment may hold; past it the
    #: oldest captures lose their text (they keep their exit code and say "evicted").
    experiment_bytes: int = DEFAULT_EXPERIMENT_BYTES
    #: XMC_LOG_CAPTURE_SECONDS — how long the finalizer path waits for a deleted JobSet's
    #: logs to be captured before it lets the deletion go on without them.
    capture_seconds: float = 15.0

    @classmethod
    def _from_env(cls, env: Env) -> LogSettings:
        d = cls()
        tail = number(env, "XMC_LOG_TAIL_BYTES", d.tail_bytes, what="a number of bytes")
        cap = number(env, "XMC_LOG_EXPERIMENT_BYTES", d.experiment_bytes, what="a number of bytes")
        wait = seconds(env, "XMC_LOG_CAPTURE_SECONDS", d.capture_seconds)
        if not (1024 <= tail <= 16 * 1024 * 1024 and tail == int(tail)):
            raise InvalidArgumentError(
                f"XMC_LOG_TAIL_BYTES: a whole number from 1024 to 16 MiB, got {tail!r}"
            )
        if not (tail <= cap < 2**62 and cap == int(cap)):
            raise InvalidArgumentError(
                f"XMC_LOG_EXPERIMENT_BYTES: a whole number of at least XMC_LOG_TAIL_BYTES "
                f"({int(tail)}), got {cap!r}"
            )
        if not 0 < wait < float("inf"):
            raise InvalidArgumentError(
                f"XMC_LOG_CAPTURE_SECONDS: must be a positive number of seconds, got {wait!r}"
            )
        return cls(tail_bytes=int(tail), experiment_bytes=int(cap), capture_seconds=wait)


@dataclass(frozen=True)
class RetrySettings:
    """Automatic retries (docs/retries.md), decided by the ESS."""

    #: XMC_RETRIES_PER_MINUTE — the cluster's cap on automatic retries: past it, retries
    #: are spaced 60/N seconds apart, so a sweep failing at once cannot storm the cluster.
    per_minute: int = DEFAULT_PER_MINUTE

    @classmethod
    def _from_env(cls, env: Env) -> RetrySettings:
        d = cls()
        value = number(env, "XMC_RETRIES_PER_MINUTE", d.per_minute, what="a number of retries")
        if not (1 <= value <= MAX_PER_MINUTE and value == int(value)):
            raise InvalidArgumentError(
                f"XMC_RETRIES_PER_MINUTE: a whole number from 1 to {MAX_PER_MINUTE}, got {value!r}"
            )
        return cls(per_minute=int(value))


@dataclass(frozen=True)
class MetricsSettings:
    """The business metrics (docs/metrics.md)."""

    #: XMC_METRICS_REFRESH_SECONDS — how often the ESS re-reads the live work units by
    #: owner, queue and state (``xmc_work_units``) from Postgres.
    refresh_seconds: float = 15.0

    @classmethod
    def _from_env(cls, env: Env) -> MetricsSettings:
        d = cls()
        value = number(env, "XMC_METRICS_REFRESH_SECONDS", d.refresh_seconds, what="seconds")
        if not 0.1 <= value <= 3600:
            raise InvalidArgumentError(
                f"XMC_METRICS_REFRESH_SECONDS: seconds from 0.1 to 3600, got {value!r}"
            )
        return cls(refresh_seconds=value)


@dataclass(frozen=True)
class CliSettings:
    """The ``xmc`` command line (its ``--endpoint`` and ``--token`` flags read
    XMANAGER_ENDPOINT and XMC_AUTH_TOKEN themselves, through click)."""

    #: XMANAGER_INSECURE_GRPC — the xmanager client's switch: ``false``/``0``/``no`` means
    #: TLS; anything else (the default ``true``) plaintext, when neither ``--tls`` nor the
    #: endpoint's scheme says.
    tls: bool = False

    @classmethod
    def _from_env(cls, env: Env) -> CliSettings:
        raw = env.get("XMANAGER_INSECURE_GRPC", "true")
        return cls(tls=raw.strip().lower() in ("false", "0", "no"))


@dataclass(frozen=True)
class XmcSettings:
    """Every group, as :func:`load_settings` read them."""

    core: Settings = field(default_factory=Settings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    service_client: ServiceClientSettings = field(default_factory=ServiceClientSettings)
    local_run: LocalRunSettings = field(default_factory=LocalRunSettings)
    ui: UiSettings = field(default_factory=UiSettings)
    cli: CliSettings = field(default_factory=CliSettings)
    logs: LogSettings = field(default_factory=LogSettings)
    retries: RetrySettings = field(default_factory=RetrySettings)
    quotas: QuotaSettings = field(default_factory=QuotaSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)


def load_settings(env: Env | None = None, *, read_file: ReadFile | None = None) -> XmcSettings:
    """Read the environment (``os.environ`` unless given) and build every group,
    validated; a malformed value raises InvalidArgumentError naming its variable.

    ``read_file`` reads XMC_AUTH_PUBLIC_KEY_FILE (injected by tests).
    """
    env = os.environ if env is None else env
    settings = XmcSettings(
        core=Settings._from_env(env),
        auth=AuthSettings._from_env(env, read_file or read_text),
        tls=TlsSettings._from_env(env),
        service_client=ServiceClientSettings._from_env(env),
        local_run=LocalRunSettings._from_env(env),
        ui=UiSettings._from_env(env),
        cli=CliSettings._from_env(env),
        logs=LogSettings._from_env(env),
        retries=RetrySettings._from_env(env),
        quotas=QuotaSettings._from_env(env),
        metrics=MetricsSettings._from_env(env),
    )
    settings.core.validate()
    settings.auth.validate()
    return settings


def load_cli_settings(env: Env | None = None) -> CliSettings:
    """The ``xmc`` command's group alone: a client on a laptop must not fail on a
    server's variable it never uses."""
    return CliSettings._from_env(os.environ if env is None else env)
