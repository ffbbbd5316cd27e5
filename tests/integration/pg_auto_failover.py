"""A Postgres primary with a synchronous standby under pg_auto_failover, on loopback, for
the failover fault (bench/faults.py ``pg-failover``, tests/integration/test_pg_failover.py).

Three ``pg_autoctl run`` processes under one temp dir: the monitor (a Postgres of its own
that health-checks the nodes and drives their state machines) and two data nodes; the
second is cloned from the first and replicates synchronously
(``synchronous_standby_names = 'ANY 1 (...)'``, ``synchronous_commit = on``), so a commit
is acknowledged only once the standby has it. pg_autoctl refuses to run as root: as root,
every process runs as the ``postgres`` user, as :class:`PostgresServer` does for initdb.

The monitor's timings are shortened (:data:`MONITOR_SETTINGS`) so that a run takes
seconds, not the default minute; docs/operations.md gives both figures. Clients reach the
primary through the formation's multi-host DSN (:meth:`AutoFailover.dsn`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import pwd
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import asyncpg
import pytest

from tests.integration.postgres_server import postgres_bin
from tests.stack import free_ports, terminate
from tests.waiting import eventually

T = TypeVar("T")

#: The monitor's failure detection and promotion, shortened from their defaults (5 s
#: checks, 20 s to call a node unhealthy, 30 s to wait for a lost primary to demote).
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "2000",
    "pgautofailover.primary_demote_timeout": "6000",
}
#: Seconds a primary cut off from the monitor and its standby keeps serving before it
#: demotes itself. Must stay below ``primary_demote_timeout``: the standby is promoted
#: only after the old primary must have stopped taking writes (no split brain).
NETWORK_PARTITION_TIMEOUT = "4"
#: Reported states of a node that takes writes.
WRITABLE = ("single", "primary", "wait_primary")
#: Formations :func:`start_formation` starts before it believes a taken port.
ATTEMPTS = 3
#: A server the probes poll cannot be reached right now (refused, reset, timed out, going
#: down): they read as "not yet".
_UNREACHABLE = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)
#: What a log says when a Postgres of the formation could not bind its port.
_PORT_TAKEN = "Address already in use"


class PortTaken(RuntimeError):
    """A port of the formation was taken between its pick and its server's bind:
    pg_autoctl would retry that bind for ever, so the formation is given up at once."""


@dataclass(frozen=True)
class Node:
    name: str
    port: int
    data: Path


class AutoFailover:
    """The monitor and two nodes on free ports of 127.0.0.1, all under one temp dir."""

    def __init__(self) -> None:
        if shutil.which("pg_autoctl") is None:
            raise RuntimeError(
                "pg_autoctl is not installed (apt-get install postgresql-15-auto-failover)"
            )
        self.bin = postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="xmc-pgaf-"))
        monitor, first, second = free_ports(3)
        self.monitor = Node("monitor", monitor, self.root / "monitor")
        self.nodes = (
            Node("node1", first, self.root / "node1"),
            Node("node2", second, self.root / "node2"),
        )
        self._owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:  # pg_autoctl refuses root: the cluster belongs to postgres
            self._owner = pwd.getpwnam("postgres")
            os.chown(self.root, self._owner.pw_uid, self._owner.pw_gid)
        self._keepers: dict[str, asyncio.subprocess.Process] = {}
        #: The last error of a probe that could not reach a server (for a failure's message).
        self._unreached: str | None = None

    def dsn(self, database: str = "postgres") -> str:
        """Both nodes; libpq and asyncpg try them in order and keep the one that takes
        writes (``target_session_attrs=read-write``), as ``pg_autoctl show uri`` prints."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    @property
    def admin_dsn(self) -> str:
        return self.dsn()

    @property
    def monitor_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.monitor.port}/pg_auto_failover"

    async def start(self, within: float = 120.0) -> None:
        """The monitor, then the primary, then its standby; returns once the standby is
        a synchronous ``secondary``. :class:`PortTaken` as soon as a log says a port was
        taken; any other failure to come up carries the last lines of every log (the
        directory is removed by :meth:`stop`)."""
        try:
            await self._start(within)
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{self._log_tails()}") from failure

    async def _start(self, within: float) -> None:
        await self._initdb(self.monitor)
        await self._autoctl(
            "create", "monitor", "--pgdata", str(self.monitor.data),
            "--pgport", str(self.monitor.port), "--hostname", "127.0.0.1",
            "--auth", "trust", "--no-ssl", "--pgctl", str(self.bin / "pg_ctl"),
        )  # fmt: skip
        await self._autoctl(
            "config", "set", "--pgdata", str(self.monitor.data),
            "postgresql.listen_addresses", "127.0.0.1",
        )  # fmt: skip
        await self._run(self.monitor)
        await eventually(
            self._checked(self._monitor_up), within=within, every=0.2, what="monitor up"
        )
        await self._configure_monitor()
        first, second = self.nodes
        await self._initdb(first)  # the standby is cloned by pg_autoctl (pg_basebackup)
        for node in self.nodes:
            await self._create_node(node)
            await self._run(node)
            await eventually(
                self._checked(self._states), functools.partial(_serving, node),
                within=within, every=0.2, what=f"{node.name} registered and running",
            )  # fmt: skip
        await eventually(
            self._checked(self._states), {first.name: "primary", second.name: "secondary"},
            within=within, every=0.2, what="primary with a synchronous secondary",
        )  # fmt: skip
        await eventually(
            self._checked(self._synchronous), within=within, every=0.2, what="sync replication"
        )

    async def primary(self, within: float = 30.0) -> Node:
        """The node the monitor has as the writable one (waited for: the monitor may be
        unreachable for a moment)."""
        states = await eventually(
            self._states, lambda s: any(s.get(n.name) in WRITABLE for n in self.nodes),
            within=within, every=0.2, what="a writable node",
        )  # fmt: skip
        (node,) = [n for n in self.nodes if states.get(n.name) in WRITABLE]
        return node

    async def kill_primary(self) -> Node:
        """The primary's host dies: SIGKILL its postmaster and its pg_autoctl together
        (alone, the postmaster would be restarted by its pg_autoctl within a second: a
        restart, not a failover). Returns the killed node."""
        node = await self.primary()
        keeper = self._keepers[node.name]
        postmaster = int((node.data / "postmaster.pid").read_text().split()[0])
        doomed = [postmaster, *await _descendants(keeper.pid), keeper.pid]
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await keeper.wait()
        return node

    async def wait_promoted(self, other_than: Node, within: float = 120.0) -> Node:
        """The standby once the monitor reports it writable."""
        await eventually(
            self._states, lambda s: any(s.get(n.name) in WRITABLE for n in self.nodes
                                        if n != other_than),
            within=within, every=0.2, what="the standby promoted",
        )  # fmt: skip
        return await self.primary()

    async def stop(self) -> None:
        """Stop every pg_autoctl (it stops its Postgres), then anything left, then remove
        the directory: also after a failed start or a kill."""
        for name in [n.name for n in self.nodes] + [self.monitor.name]:
            keeper = self._keepers.get(name)
            if keeper is not None:
                await terminate(keeper)
        for node in (self.monitor, *self.nodes):
            pid_file = node.data / "postmaster.pid"
            if pid_file.exists():
                pg_ctl = [str(self.bin / "pg_ctl"), "-D", str(node.data), "-m", "immediate"]
                await self._exec(*pg_ctl, "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    # Its logs.

    def _checked(self, probe: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """``probe``, failing with :class:`PortTaken` first if a port was taken."""

        async def checked() -> T:
            self._raise_if_a_port_was_taken()
            return await probe()

        return checked

    def _raise_if_a_port_was_taken(self) -> None:
        """Postgres logs a failed bind at once (``<data>/log``); pg_autoctl repeats it
        in its own log some seconds later."""
        for log in (*self.root.glob("*.log"), *self.root.glob("*/log/*.log")):
            for line in log.read_text(errors="replace").splitlines():
                if _PORT_TAKEN in line:
                    raise PortTaken(f"{log.relative_to(self.root)}: {line.strip()}")

    def _log_tails(self, lines: int = 15) -> str:
        """The last error of a probe, then the last lines of every log."""
        tails = [f"last error reaching a server: {self._unreached}"] if self._unreached else []
        for log in sorted(self.root.glob("*.log")):
            last = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append("\n".join([f"--- {log.name}:", *last]))
        return "\n".join(tails)

    # The monitor's view.

    async def _read(
        self, dsn: str, read: Callable[[asyncpg.Connection], Awaitable[T]], otherwise: T
    ) -> T:
        """``read`` on a connection of its own to ``dsn``; ``otherwise`` while the server
        cannot be reached (in CI the monitor once reset a connection while the nodes
        registered): every caller polls. The error is kept for a failure's message."""
        try:
            conn = await asyncpg.connect(dsn, timeout=2)
            try:
                return await read(conn)
            finally:
                await conn.close()
        except _UNREACHABLE as error:
            self._unreached = repr(error)
            return otherwise

    async def _monitor_up(self) -> bool:
        async def connected(_: asyncpg.Connection) -> bool:
            return True

        return await self._read(self.monitor_dsn, connected, otherwise=False)

    async def _configure_monitor(self) -> None:
        conn = await asyncpg.connect(self.monitor_dsn)
        try:
            for name, value in MONITOR_SETTINGS.items():
                await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()

    async def _states(self) -> dict[str, str]:
        """Each node's reported state, where it agrees with the state assigned to it; {}
        while the monitor cannot be read."""

        async def agreed(conn: asyncpg.Connection) -> dict[str, str]:
            rows = await conn.fetch(
                "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node"
            )
            return {r["nodename"]: r["reportedstate"] for r in rows
                    if r["reportedstate"] == r["goalstate"]}  # fmt: skip

        return await self._read(self.monitor_dsn, agreed, otherwise={})

    async def _synchronous(self) -> bool:
        primary = await self.primary()

        async def synchronous(conn: asyncpg.Connection) -> bool:
            names = await conn.fetchval("SHOW synchronous_standby_names")
            level = await conn.fetchval("SHOW synchronous_commit")
            return bool(names) and level == "on"

        dsn = f"postgresql://postgres@127.0.0.1:{primary.port}/postgres"
        return await self._read(dsn, synchronous, otherwise=False)

    # Processes, as the cluster's owner.

    async def _initdb(self, node: Node) -> None:
        """A data directory whose Unix socket lives in our temp dir, not the machine's."""
        initdb = [str(self.bin / "initdb"), "-D", str(node.data), "-U", "postgres", "-A", "trust"]
        await self._exec(*initdb, "--no-sync")
        with (node.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"unix_socket_directories = '{self.root}'\n")

    async def _create_node(self, node: Node) -> None:
        await self._autoctl(
            "create", "postgres", "--pgdata", str(node.data), "--pgport", str(node.port),
            "--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--name", node.name,
            "--username", "postgres", "--dbname", "postgres", "--auth", "trust", "--no-ssl",
            "--pgctl", str(self.bin / "pg_ctl"),
            "--monitor", f"postgresql://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable",
        )  # fmt: skip
        await self._autoctl(
            "config", "set", "--pgdata", str(node.data),
            "timeout.network_partition_timeout", NETWORK_PARTITION_TIMEOUT,
        )  # fmt: skip

    async def _autoctl(self, *args: str) -> None:
        await self._exec("pg_autoctl", *args, log=self.root / "create.log")

    async def _run(self, node: Node) -> None:
        self._keepers[node.name] = await self._spawn(
            "pg_autoctl", "run", "--pgdata", str(node.data), log=self.root / f"{node.name}.log"
        )

    async def _exec(self, *command: str, log: Path | None = None, check: bool = True) -> None:
        process = await self._spawn(*command, log=log or self.root / "setup.log")
        code = await process.wait()
        if check and code != 0:
            self._raise_if_a_port_was_taken()
            raise RuntimeError(f"{' '.join(command[:3])} exited {code}:\n{self._log_tails()}")

    async def _spawn(self, *command: str, log: Path) -> asyncio.subprocess.Process:
        """``command`` in its own environment (its config and state dirs under the temp
        dir, not the user's) and, as root, as the ``postgres`` user, in a session of its
        own: formations started side by side (pytest-xdist workers) had every keeper of
        one SIGTERMed as another's standby finished its ``create`` (most likely a signal to the
        process group they all shared with the workers); on their own they never were."""
        env = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(self.root),
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_DATA_HOME": str(self.root / "share"),
            "XDG_RUNTIME_DIR": str(self.root),
            "PGHOST": str(self.root),
        }
        owner = self._owner
        with log.open("ab") as out:
            return await asyncio.create_subprocess_exec(
                *command, stdout=out, stderr=out, env=env, cwd=self.root,
                user=None if owner is None else owner.pw_uid,
                group=None if owner is None else owner.pw_gid,
                extra_groups=None if owner is None else [],
                start_new_session=True,
            )  # fmt: skip


def _serving(node: Node, states: dict[str, str]) -> bool:
    return states.get(node.name) in (*WRITABLE, "secondary")


async def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first found, then theirs)."""
    found: list[int] = []
    frontier: Sequence[int] = [pid]
    while frontier:
        children = await _children(frontier)
        found += children
        frontier = children
    return found


async def _children(parents: Iterable[int]) -> list[int]:
    process = await asyncio.create_subprocess_exec(
        "pgrep", "-P", ",".join(map(str, parents)), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    return [int(pid) for pid in out.split()]


async def start_formation(attempts: int = ATTEMPTS) -> AutoFailover:
    """A started formation; on fresh ports again when one was taken (:class:`PortTaken`)."""
    for attempt in range(1, attempts + 1):
        formation = AutoFailover()
        try:
            await formation.start()
            return formation
        except PortTaken:
            await formation.stop()
            if attempt == attempts:
                raise
        except BaseException:
            await formation.stop()
            raise
    raise AssertionError("unreachable: the last attempt returns or raises")


@pytest.fixture
async def auto_failover() -> AsyncIterator[AutoFailover]:
    """A started formation of the test's own, stopped and removed whatever happened.
    Without pg_autoctl the test is skipped, except under CI (``CI=true``), where .ci/run
    installs it and its absence is a failure."""
    if shutil.which("pg_autoctl") is None:
        missing = "pg_autoctl is missing: apt-get install postgresql-15-auto-failover"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} (.ci/run installs it)")
        pytest.skip(missing)
    formation = await start_formation()
    try:
        yield formation
    finally:
        await formation.stop()
