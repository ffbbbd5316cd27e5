"""Settings from environment variables (SPEC §11), validated once at load time.

Every service reads the same variables, so one ``.env`` (or one ConfigMap) configures the
whole system. Each field documents its variable and default; flags may override fields.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from xmc.errors import InvalidArgumentError

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidArgumentError(f"{name}: expected true or false, got {raw!r}")


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return float(raw)
    except ValueError:
        raise InvalidArgumentError(f"{name}: expected seconds, got {raw!r}") from None


def _nodes(raw: str) -> tuple[str, ...]:
    return tuple(node.strip() for node in raw.split(",") if node.strip())


@dataclass(frozen=True)
class Settings:
    #: XMC_DATABASE_URL — Postgres DSN.
    database_url: str = "postgresql://postgres@127.0.0.1:5432/xmc"
    #: XMC_REDIS_URL — Redis URL for the task, DLQ and resume streams (one node).
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: XMC_REDIS_CLUSTER_NODES — ``host:port,...`` of a Redis Cluster's nodes (any few of
    #: them: the client discovers the rest); when set, XMC_REDIS_URL is not used.
    redis_cluster_nodes: tuple[str, ...] = ()
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
    #: XMC_AUTH_DISABLED — development only: every caller is the admin ``dev@localhost``.
    auth_disabled: bool = False
    #: XMC_STREAM_PREFIX — prefix of every Redis key, so tests and tenants never collide
    #: (it goes inside the keys' hash tag, so it may not contain braces).
    stream_prefix: str = ""
    #: XMC_METRICS_LISTEN — host:port of the Prometheus /metrics endpoint ('' = off).
    metrics_listen: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        defaults = cls()
        settings = cls(
            database_url=env.get("XMC_DATABASE_URL", defaults.database_url),
            redis_url=env.get("XMC_REDIS_URL", defaults.redis_url),
            redis_cluster_nodes=_nodes(env.get("XMC_REDIS_CLUSTER_NODES", "")),
            ess_listen=env.get("XMC_ESS_LISTEN", defaults.ess_listen),
            ess_target=env.get("XMC_ESS_TARGET", defaults.ess_target),
            kube_url=env.get("XMC_KUBE_URL", defaults.kube_url),
            kube_request_timeout=_seconds(
                env, "XMC_KUBE_REQUEST_TIMEOUT", defaults.kube_request_timeout
            ),
            namespace=env.get("XMC_NAMESPACE", defaults.namespace),
            task_signing_key=env.get("XMC_TASK_SIGNING_KEY", defaults.task_signing_key),
            auth_disabled=_flag(env, "XMC_AUTH_DISABLED", defaults.auth_disabled),
            stream_prefix=env.get("XMC_STREAM_PREFIX", defaults.stream_prefix),
            metrics_listen=env.get("XMC_METRICS_LISTEN", defaults.metrics_listen),
        )
        settings.validate()
        return settings

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
        for node in self.redis_cluster_nodes:
            host, _, port = node.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise InvalidArgumentError(
                    f"XMC_REDIS_CLUSTER_NODES: expected host:port,..., got {node!r}"
                )
        if "{" in self.stream_prefix or "}" in self.stream_prefix:
            raise InvalidArgumentError(
                f"XMC_STREAM_PREFIX: may not contain braces (it is inside the keys' hash "
                f"tag), got {self.stream_prefix!r}"
            )
        if not 0 < self.kube_request_timeout < float("inf"):
            raise InvalidArgumentError(
                f"XMC_KUBE_REQUEST_TIMEOUT: must be a positive number of seconds, "
                f"got {self.kube_request_timeout!r}"
            )
        if not self.namespace:
            raise InvalidArgumentError("XMC_NAMESPACE: must not be empty")
        if self.task_signing_key and len(self.task_signing_key.encode()) < 32:
            raise InvalidArgumentError(
                "XMC_TASK_SIGNING_KEY: must be at least 32 bytes (HS256 key length)"
            )
