"""Network namespaces of a test's own making, and faults on the path between two of them.

Every part of a stack (kubesim, Postgres, Redis, ESS, Actuator, Reconciler) runs in a
namespace of its own, ``xmc-<run>-<node>``, with one veth into a hub namespace whose
bridge joins them all on a private /24 (``10.213.<k>.0/24``). The test itself stays in
the root namespace and reaches the bridge through one more veth (``xmc-<run>``, address
``.254``), so its view of the ESS and of kubesim is never faulted.

A fault on the path A↔B is a set of iptables rules in A's and B's namespaces only, each
matching the other end's address on INPUT (``iptables-legacy``: the kernel has the xt
NFQUEUE target but no nft ``queue``), so every other path is untouched and the sender
sees what a real partition shows — silence, not an error:

- **cut**: DROP at both ends, removed to heal;
- **loss**: ``-m statistic --mode random --probability p`` DROP at both ends (each
  direction loses ``p``);
- **delay**: at A (the client end), NFQUEUE to :mod:`tests.ha.delayer`, which holds each
  packet from B for the delay (one direction, as ``tc netem delay`` on one interface: the
  round trip grows by the delay).

The kernel here has no ``sch_netem`` (decision 0053). Nothing is ever added to the root
namespace's firewall. :meth:`Network.remove` deletes every namespace (and with them every
veth and rule), after killing whatever still runs in them; it is idempotent and
:func:`network` calls it whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

NODES: Final = ("kubesim", "postgres", "redis", "ess", "actuator", "reconciler")
#: The six paths the issue names, client end first (the end that holds the delay).
PATHS: Final = (
    ("ess", "postgres"), ("ess", "redis"), ("actuator", "redis"), ("actuator", "kubesim"),
    ("reconciler", "kubesim"), ("reconciler", "ess"),
)  # fmt: skip
FaultKind = Literal["cut", "loss", "delay"]
IPTABLES: Final = "iptables-legacy"
ROOT: Final = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Fault:
    """One fault on one path: ``net-cut:ess-postgres``, ``net-loss:actuator-redis``."""

    kind: FaultKind
    client: str
    server: str
    loss: float = 0.2
    delay: float = 0.5

    @classmethod
    def parse(cls, scenario: str) -> Fault:
        """``net-<kind>:<client>-<server>`` for one of :data:`PATHS`; ValueError otherwise."""
        kind, _, path = scenario.removeprefix("net-").partition(":")
        client, _, server = path.partition("-")
        if kind not in ("cut", "loss", "delay") or (client, server) not in PATHS:
            raise ValueError(f"not a network fault scenario: {scenario!r}")
        return cls(kind, client, server)  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        return f"net-{self.kind}:{self.client}-{self.server}"


def scenarios() -> tuple[str, ...]:
    """Every fault on every path, cuts first (the order the matrix runs them)."""
    kinds: tuple[FaultKind, ...] = ("cut", "loss", "delay")
    return tuple(Fault(k, c, s).name for k in kinds for c, s in PATHS)


def rules(fault: Fault, *, at: str, peer: str, queue: int = 1) -> list[list[str]]:
    """The iptables rules (arguments after ``-A``/``-D``) that ``fault`` puts in the
    namespace of node ``at``, whose other end has address ``peer``: pure, so the table
    tests read exactly what reaches the kernel."""
    match_peer = ["INPUT", "-i", "eth0", "-s", peer]
    if fault.kind == "cut":
        return [[*match_peer, "-j", "DROP"]]
    if fault.kind == "loss":
        chance = ["-m", "statistic", "--mode", "random", "--probability", f"{fault.loss:g}"]
        return [[*match_peer, *chance, "-j", "DROP"]]
    if at != fault.client:
        return []  # one direction, as netem on one interface
    return [[*match_peer, "-j", "NFQUEUE", "--queue-num", str(queue)]]


def addresses(subnet: int) -> dict[str, str]:
    """Node → its address on ``10.213.<subnet>.0/24`` (``host``: the root namespace's)."""
    base = ipaddress.IPv4Address(f"10.213.{subnet}.0")
    return {name: str(base + i) for i, name in enumerate(NODES, 1)} | {"host": str(base + 254)}


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip() or done.returncode}")


def _used_subnets() -> set[int]:
    listed = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True)
    return {
        int(word.split(".")[2])
        for word in listed.stdout.split()
        if word.startswith("10.213.") and word.count(".") == 3
    }


def unavailable() -> str | None:
    """Why this machine cannot run the harness (a skip reason), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", IPTABLES) if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (.ci/run: ensure_netfault)"
    probe = f"xmc-probe-{uuid.uuid4().hex[:6]}"
    try:
        _run("ip", "netns", "add", probe)
    except RuntimeError as error:
        return f"cannot create a network namespace: {error}"
    _run("ip", "netns", "del", probe)
    return None


@dataclass
class Network:
    """The namespaces, bridge and addresses of one run, and the faults now applied."""

    run: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    subnet: int = 0
    address: dict[str, str] = field(default_factory=dict)
    _delayers: list[asyncio.subprocess.Process] = field(default_factory=list)

    def netns(self, node: str) -> str:
        return f"xmc-{self.run}-{node}"

    def exec_prefix(self, node: str) -> list[str]:
        """Prefix a command with this to run it in ``node``'s namespace."""
        return ["ip", "netns", "exec", self.netns(node)]

    def create(self) -> None:
        used = _used_subnets()  # at random among the free: two runs starting together
        self.subnet = random.choice([k for k in range(1, 250) if k not in used])
        self.address = addresses(self.subnet)
        hub = self.netns("hub")
        _run("ip", "netns", "add", hub)
        _run("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", hub, "link", "set", "br0", "up")
        for node in NODES:
            ns = self.netns(node)
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            self._plug(ns, "eth0", f"v-{node}", self.address[node])
        # The root namespace's end: created there, so its name must be unique on the host.
        self._plug(None, f"xmc-{self.run}", "v-host", self.address["host"])

    def _plug(self, ns: str | None, inner: str, outer: str, address: str) -> None:
        """A veth from ``ns`` (None: the root namespace) to the hub's bridge."""
        hub = self.netns("hub")
        where = ["netns", ns] if ns else []
        _run("ip", "link", "add", inner, *where, "type", "veth", "peer", "name", outer,
             "netns", hub)  # fmt: skip
        inside = ["-n", ns] if ns else []
        _run("ip", *inside, "addr", "add", f"{address}/24", "dev", inner)
        _run("ip", *inside, "link", "set", inner, "up")
        _run("ip", "-n", hub, "link", "set", outer, "master", "br0", "up")

    async def apply(self, fault: Fault) -> None:
        """Put ``fault`` on its path (for a delay, its delayer first: see the module)."""
        if fault.kind == "delay":
            await self._start_delayer(fault)
        for at, peer in ((fault.client, fault.server), (fault.server, fault.client)):
            for rule in rules(fault, at=at, peer=self.address[peer]):
                _run(*self.exec_prefix(at), IPTABLES, "-A", *rule)

    async def heal(self, fault: Fault) -> None:
        """Take ``fault`` off its path; a delayer releases what it still holds."""
        for at, peer in ((fault.client, fault.server), (fault.server, fault.client)):
            for rule in rules(fault, at=at, peer=self.address[peer]):
                _run(*self.exec_prefix(at), IPTABLES, "-D", *rule)
        while self._delayers:
            process = self._delayers.pop()
            process.send_signal(signal.SIGTERM)
            await process.wait()

    @contextlib.contextmanager
    def host_silenced(self, node: str) -> Iterator[None]:
        """While inside, ``node`` and the root namespace (the test) hear nothing from each
        other: the test's connections to ``node`` go silent as across a cut. Both rules
        sit in ``node``'s namespace (OUTPUT too: the root namespace's firewall is never
        touched)."""
        host = self.address["host"]
        silence = [["INPUT", "-i", "eth0", "-s", host, "-j", "DROP"],
                   ["OUTPUT", "-o", "eth0", "-d", host, "-j", "DROP"]]  # fmt: skip
        for rule in silence:
            _run(*self.exec_prefix(node), IPTABLES, "-A", *rule)
        try:
            yield
        finally:
            for rule in silence:
                _run(*self.exec_prefix(node), IPTABLES, "-D", *rule)

    async def _start_delayer(self, fault: Fault) -> None:
        command = [sys.executable, "-m", "tests.ha.delayer", "--queue", "1"]
        process = await asyncio.create_subprocess_exec(
            *self.exec_prefix(fault.client), *command, "--delay", str(fault.delay),
            stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip
        self._delayers.append(process)
        assert process.stdout is not None
        async with asyncio.timeout(10):
            line = await process.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"the delayer did not start (exit {await process.wait()})")

    def remove(self) -> None:
        """Kill what still runs in the namespaces (all started by this run), delete them."""
        for process in self._delayers:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        for node in (*NODES, "hub"):
            ns = self.netns(node)
            listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in map(int, listed.stdout.split()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@contextlib.asynccontextmanager
async def network() -> AsyncIterator[Network]:
    """A fresh :class:`Network`, removed on exit whatever happened (also half-created)."""
    net = Network()
    try:
        net.create()
        yield net
    finally:
        net.remove()
