"""The whole system as separate OS processes that a test can kill and restart one by one.

``make run`` (``xmc.devrun``) runs the same four services under one parent that stops
everything when one exits; fault tests need the opposite: kill the ESS with SIGKILL
between a commit and a publish, restart Redis under a running sweep, and watch the rest
carry on. Used by ``tests/integration/test_faults.py`` and by ``bench/faults.py``.

Every stack gets its own database, Redis key prefix and ports, so stacks run side by side
and next to other users of the same servers. Each service logs to ``<log_dir>/<name>.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg

from xmc.streams import StreamNames

BIN: Final = Path(sys.executable).parent
SIGNING_KEY: Final = "fault-test-signing-key-of-at-least-32-bytes"
SERVICES: Final = ("kubesim", "ess", "actuator", "reconciler")


#: The lowest port :func:`free_port` picks (below it: well-known and registered services).
LOWEST_PORT: Final = 20_000
_EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_ports(count: int) -> list[int]:
    """``count`` different free ports."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range. A server is started on it
    some seconds later; in the ephemeral range any outgoing connection of any test (to
    Postgres, Redis, gRPC) could be given the port meanwhile, and the server would fail
    to bind (pg_autoctl then retries the bind for ever: a CI failure's symptom).
    Below it, only another test's pick can meet it."""
    highest = ephemeral_low() - 1
    while True:
        port = random.randint(LOWEST_PORT, highest)
        if is_free(port):
            return port


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def is_free(port: int) -> bool:
    """Nothing is bound to ``port`` on loopback now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def delete_prefixed_keys(redis: Any, prefix: str) -> None:
    """Delete a run's Redis keys: its streams and the keys tagged with them
    (``StreamNames.owns``). SCAN walks the whole keyspace whatever the pattern, so each
    step asks for 10,000 keys: a shared Redis holding other users' keys (once 190,000
    publish markers) costs a few round trips, not the thousands that made every test's
    teardown take seconds."""
    names = StreamNames.with_prefix(prefix)
    keys = [
        key
        async for key in redis.scan_iter(match=names.scan_pattern, count=10_000)
        if names.owns(key.decode() if isinstance(key, bytes) else key)
    ]
    if keys:
        await redis.delete(*keys)


def database_dsn(admin_dsn: str, name: str) -> str:
    return urlunsplit(urlsplit(admin_dsn)._replace(path=f"/{name}"))


async def create_database(admin_dsn: str) -> str:
    """A new, empty database on the server of ``admin_dsn``; returns its DSN."""
    name = f"xmc_stack_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return database_dsn(admin_dsn, name)


async def drop_database(admin_dsn: str, dsn: str) -> None:
    name = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@dataclass(frozen=True)
class StackOptions:
    time_scale: float = 1.0
    #: kubesim's clock against the host's (``--clock-offset``).
    clock_offset: str = "0s"
    #: Seconds before another Actuator consumer may claim an unacked task.
    claim_idle: float = 10.0
    #: The repair sweep's bound and step interval (seconds).
    repair_after: float = 15.0
    repair_interval: float = 2.0
    extra_env: dict[str, str] = field(default_factory=dict)
    #: kubesim keeps its cluster here across restarts; None: ``--ephemeral``.
    kubesim_state_dir: Path | None = None
    #: Extra arguments of every Reconciler (``--vanished-grace=5``, say).
    reconciler_args: tuple[str, ...] = ()
    #: Processes of each XMC service (ESS, Actuator, Reconciler): the first is named after
    #: the service, the others ``ess-2``, ``ess-3``, ...; kubesim is always one.
    replicas: int = 1
    #: The Reconcilers elect a leader (a Lease) instead of each writing on its own.
    leader_election: bool = False
    #: A real API server instead of kubesim (``tests/real``): no kubesim process.
    real: RealCluster | None = None
    #: Service → where it runs, if not on loopback (``tests/ha/netns.py``).
    placement: dict[str, Placement] = field(default_factory=dict)


@dataclass(frozen=True)
class Placement:
    """A service in a network namespace of its own: its command runs behind ``prefix``
    (``ip netns exec NS``) and it listens on, and is reached at, ``address``."""

    address: str
    prefix: tuple[str, ...] = ()


@dataclass(frozen=True)
class RealCluster:
    """How the services reach a real API server: no ``XMC_KUBE_URL``, each service with
    ``KUBECONFIG`` set to its own ServiceAccount's kubeconfig (TLS, bearer token)."""

    namespace: str
    #: Service (``actuator``, ``reconciler``) → its kubeconfig.
    kubeconfigs: dict[str, Path]


def replica_names(replicas: int, *, kubesim: bool = True) -> list[str]:
    """Every process of a stack, in start order: ``kubesim, ess, ess-2, actuator, ...``."""
    return ["kubesim"] * kubesim + [
        name if i == 1 else f"{name}-{i}" for name in SERVICES[1:] for i in range(1, replicas + 1)
    ]


def service_of(process: str) -> str:
    """``ess-2`` → ``ess``."""
    return process.split("-", 1)[0]


class Stack:
    """kubesim, ESS, Actuator and Reconciler against one database and one Redis (with
    ``StackOptions.replicas``, several processes of each XMC service)."""

    def __init__(
        self,
        *,
        database_url: str,
        redis_url: str,
        log_dir: Path,
        options: StackOptions | None = None,
    ) -> None:
        self.options = options or StackOptions()
        self.database_url = database_url
        self.redis_url = redis_url
        self.prefix = f"stack-{uuid.uuid4().hex[:8]}:"
        self.names = replica_names(self.options.replicas, kubesim=self.options.real is None)
        ess_names = [n for n in self.names if service_of(n) == "ess"]
        # Distinct ports: each probe releases its port, so two probes may return the same
        # one (an ESS and a metrics listener once did, and the Reconciler exited on it).
        services = [n for n in self.names if n != "kubesim"]
        ports = free_ports(1 + len(ess_names) + len(services))
        self.kube_port = ports[0]
        #: The gRPC port of each ESS process.
        self.ess_ports = dict(zip(ess_names, ports[1 : 1 + len(ess_names)], strict=True))
        self.ess_port = self.ess_ports["ess"]
        #: ``/metrics``, ``/healthz`` and ``/readyz`` of each XMC service process.
        self.ops_ports = dict(zip(services, ports[1 + len(ess_names) :], strict=True))
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.processes: dict[str, asyncio.subprocess.Process] = {}
        #: Per process, environment over the stack's (a Reconciler's own way to the ESS).
        self.process_env: dict[str, dict[str, str]] = {}

    def host(self, name: str) -> str:
        """The address process ``name`` listens on."""
        placed = self.options.placement.get(service_of(name))
        return placed.address if placed else "127.0.0.1"

    @property
    def endpoint(self) -> str:
        return f"{self.host('ess')}:{self.ess_port}"

    @property
    def target(self) -> str:
        """A gRPC target for every ESS (``ipv4:a:p1,a:p2``: gRPC picks one that answers,
        as a Kubernetes Service would); the one ESS's endpoint when there is one."""
        if len(self.ess_ports) == 1:
            return self.endpoint
        return "ipv4:" + ",".join(f"{self.host(n)}:{port}" for n, port in self.ess_ports.items())

    @property
    def kube_url(self) -> str:
        return f"http://{self.host('kubesim')}:{self.kube_port}"

    def _env(self, name: str = "ess") -> dict[str, str]:
        env = self._base_env(name)
        real = self.options.real
        if real is not None:
            env = {k: v for k, v in env.items() if not k.startswith("KUBERNETES_SERVICE_")}
            env.pop("KUBECONFIG", None)
            env["XMC_KUBE_URL"] = ""
            env["XMC_NAMESPACE"] = real.namespace
            kubeconfig = real.kubeconfigs.get(service_of(name))
            if kubeconfig is not None:
                env["KUBECONFIG"] = str(kubeconfig)
        return env

    def _base_env(self, name: str) -> dict[str, str]:
        return {
            **os.environ,
            "XMC_DATABASE_URL": self.database_url,
            "XMC_REDIS_URL": self.redis_url,
            "XMC_ESS_LISTEN": f"{self.host(name)}:{self.ess_ports.get(name, self.ess_port)}",
            "XMC_ESS_TARGET": self.target,
            "XMC_KUBE_URL": self.kube_url,
            "XMC_TASK_SIGNING_KEY": SIGNING_KEY,
            "XMC_AUTH_DISABLED": "true",
            "XMC_STREAM_PREFIX": self.prefix,
            "XMC_METRICS_LISTEN": "",
            **self.options.extra_env,
            **self.process_env.get(name, {}),
        }

    def ops_url(self, name: str, path: str) -> str:
        return f"http://{self.host(name)}:{self.ops_ports[name]}{path}"

    def _command(self, name: str) -> list[str]:
        o = self.options
        commands = {
            "kubesim": [
                "xmc-kubesim", "--host", self.host("kubesim"), "--port", str(self.kube_port),
                "--time-scale", str(o.time_scale),
                f"--clock-offset={o.clock_offset}",
                *(["--ephemeral"] if o.kubesim_state_dir is None
                  else ["--state-dir", str(o.kubesim_state_dir)]),
            ],
            "ess": ["xmc-ess", "serve"],
            "actuator": [
                "xmc-actuator", "--claim-idle", str(o.claim_idle),
                "--repair-after", str(o.repair_after), "--repair-interval", str(o.repair_interval),
            ],
            "reconciler": ["xmc-reconciler", *o.reconciler_args]
            + ([f"--identity={name}"] if o.leader_election else ["--no-leader-election"]),
        }  # fmt: skip
        command = commands[service_of(name)]
        if name in self.ops_ports:
            command.append(f"--metrics-listen={self.host(name)}:{self.ops_ports[name]}")
        placed = self.options.placement.get(service_of(name))
        return [*(placed.prefix if placed else ()), str(BIN / command[0]), *command[1:]]

    async def start(self) -> None:
        """Migrate, then start every service, each once its dependencies listen."""
        migrate = await asyncio.create_subprocess_exec(
            str(BIN / "xmc-ess"), "migrate", env=self._env(),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        if await migrate.wait() != 0:
            raise RuntimeError("xmc-ess migrate failed")
        for name in self.names:
            await self.start_service(name)

    async def start_service(self, name: str) -> None:
        if name in self.processes and self.processes[name].returncode is None:
            raise RuntimeError(f"{name} is already running")
        log = (self.log_dir / f"{name}.log").open("ab")
        try:
            self.processes[name] = await asyncio.create_subprocess_exec(
                *self._command(name), env=self._env(name), stdout=log, stderr=log
            )
        finally:
            log.close()
        listening = {"kubesim": self.kube_port, **self.ess_ports}
        if name in listening:
            await wait_listening(listening[name], self.processes[name], name, host=self.host(name))

    async def kill(self, name: str) -> None:
        """SIGKILL: no flush, no cleanup, as the kernel's OOM killer would."""
        process = self.processes[name]
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
        await process.wait()

    def signal(self, name: str, signum: signal.Signals) -> None:
        """SIGSTOP / SIGCONT a running process (a pause the process cannot see coming)."""
        process = self.processes[name]
        if process.returncode is None:
            process.send_signal(signum)

    async def restart(self, name: str) -> None:
        await self.kill(name)
        await self.start_service(name)

    async def stop(self) -> dict[str, int | None]:
        """SIGTERM every service (the Reconciler first, kubesim last); return codes."""
        for name in reversed(self.names):
            process = self.processes.get(name)
            if process is not None:
                await terminate(process)
        return {name: p.returncode for name, p in self.processes.items()}

    def print_logs(self, lines: int = 60) -> None:
        """The last lines of every service's log (for a failed test's output)."""
        for name in self.names:
            path = self.log_dir / f"{name}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                print(f"----- {name} ({path}) -----", *tail, sep="\n")

    def alive(self) -> dict[str, bool]:
        return {name: p.returncode is None for name, p in self.processes.items()}


async def terminate(process: asyncio.subprocess.Process, within: float = 30.0) -> None:
    """SIGTERM, and SIGKILL if it has not exited within ``within`` seconds."""
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGTERM)
    process.send_signal(signal.SIGCONT)  # a paused one must run to stop
    try:
        await asyncio.wait_for(process.wait(), timeout=within)
    except TimeoutError:
        process.kill()
        await process.wait()


async def wait_listening(
    port: int,
    process: asyncio.subprocess.Process,
    name: str,
    within: float = 60.0,
    *,
    host: str = "127.0.0.1",
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        if process.returncode is not None:
            raise RuntimeError(f"{name} exited with {process.returncode} before listening")
        try:
            _reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            if loop.time() > deadline:
                raise RuntimeError(f"{name} did not listen on {port} within {within}s") from None
            await asyncio.sleep(0.05)  # not listening yet: poll again
            continue
        writer.close()
        await writer.wait_closed()
        return


class JobSetLedger:
    """Every JobSet the cluster ever created, from a watch on kubesim's API (a duplicate
    run of one execution shows as two uids for the same name and execution id)."""

    def __init__(self, kube_url: str, namespace: str = "default") -> None:
        self._url = f"{kube_url}/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
        self.created: dict[tuple[str, str], set[str]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def duplicated(self) -> list[tuple[str, str]]:
        return sorted(key for key, uids in self.created.items() if len(uids) > 1)

    async def _watch(self) -> None:
        async with aiohttp.ClientSession() as http:
            version = "0"
            while True:
                params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "30"}
                try:
                    async with http.get(self._url, params=params) as response:
                        async for line in response.content:
                            version = self._record(json.loads(line)) or version
                except aiohttp.ClientError:
                    await asyncio.sleep(0.2)  # kubesim restarting: watch again

    def _record(self, event: dict[str, Any]) -> str | None:
        """Note an ADDED JobSet; returns the event's resourceVersion ("0" after an ERROR:
        410 Expired ends the stream, and resuming from the same version would only get
        410 again, so re-list — a re-listed JobSet's uid is already in its set)."""
        if event.get("type") == "ERROR":
            return "0"
        meta = (event.get("object") or {}).get("metadata") or {}
        if event.get("type") == "ADDED":
            eid = (meta.get("labels") or {}).get("xmc.google.com/execution-id", "")
            self.created.setdefault((meta["name"], eid), set()).add(meta["uid"])
        version: str | None = meta.get("resourceVersion")
        return version
