"""What ``make run`` checks before it says "XMC is running": that every port it will bind
is free (before anything starts), and that every service answers ``/readyz`` (before the
banner).

Both used to be learned the hard way: with 8080 taken, the banner pointed at the other
program and the stack died a second later, its cause one JSON line in a log. The port
plan and the messages are pure functions (table-tested); probing a port and polling a
``/readyz`` are the thin I/O around them.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp

from xmc.local_run_settings import LocalRunSettings
from xmc.settings import Settings, UiSettings

#: How often ``wait_ready`` asks every service, and how long it lets each request take.
POLL_SECONDS = 0.25
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=2)


@dataclass(frozen=True)
class Endpoint:
    """One port a local run binds: who binds it and the variable that moves it."""

    #: What listens there, as the banner names it ("dashboard", "ESS (gRPC)", ...).
    what: str
    host: str
    port: int
    #: The environment variable that moves it, and its current value as the user sees it.
    variable: str
    value: str


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` too) as a host to probe and an int port; a wildcard
    host is probed on loopback, where the local run's clients connect."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    return (host if host not in ("", "0.0.0.0", "::") else "127.0.0.1"), int(port)


def local_endpoints(settings: Settings, run: LocalRunSettings, ui: UiSettings) -> list[Endpoint]:
    """Every port ``make run`` binds, in the order it starts them (pure)."""
    base = run.metrics_base
    ess_host, ess_port = split_listen(settings.ess_listen)
    ui_host, ui_port = split_listen(ui.listen)
    metrics = "XMC_METRICS_BASE_PORT"
    kubesim = (
        []
        if run.real_cluster
        else [
            Endpoint(
                "kubesim (Kubernetes API)",
                "127.0.0.1",
                run.kubesim_port,
                "XMC_KUBESIM_PORT",
                str(run.kubesim_port),
            ),
        ]
    )
    return [
        *kubesim,
        Endpoint("ESS (gRPC)", ess_host, ess_port, "XMC_ESS_LISTEN", settings.ess_listen),
        Endpoint("ESS metrics and health", "127.0.0.1", base, metrics, str(base)),
        Endpoint("Actuator metrics and health", "127.0.0.1", base + 1, metrics, f"{base} (+1)"),
        Endpoint("Reconciler metrics and health", "127.0.0.1", base + 2, metrics, f"{base} (+2)"),
        Endpoint("dashboard metrics and health", "127.0.0.1", base + 3, metrics, f"{base} (+3)"),
        Endpoint("dashboard", ui_host, ui_port, "XMC_UI_LISTEN", ui.listen),
    ]  # fmt: skip


def clashes(endpoints: Sequence[Endpoint]) -> list[str]:
    """Two parts of the run configured onto one port (pure). Port 0 means "any free one"
    and never clashes."""
    problems = []
    seen: dict[int, Endpoint] = {}
    for endpoint in endpoints:
        if endpoint.port == 0:
            continue
        first = seen.setdefault(endpoint.port, endpoint)
        if first is not endpoint:
            problems.append(
                f"port {endpoint.port} is configured twice: {first.what} "
                f"({first.variable}={first.value}) and {endpoint.what} "
                f"({endpoint.variable}={endpoint.value}); move one of them"
            )
    return problems


def taken_message(endpoint: Endpoint) -> str:
    """What to tell the user about a port something else holds (pure)."""
    return (
        f"port {endpoint.port} ({endpoint.what}) is already in use on {endpoint.host}: "
        f"stop what listens there, or move it with {endpoint.variable} "
        f"(now {endpoint.value})"
    )


def port_free(host: str, port: int) -> bool:
    """Can we bind ``host:port``? (SO_REUSEADDR as the services' servers set it, so a
    socket in TIME_WAIT from a run just stopped does not count as taken.)"""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def port_problems(
    endpoints: Sequence[Endpoint], free: Callable[[str, int], bool] = port_free
) -> list[str]:
    """Every reason the run cannot bind its ports, empty when it can."""
    problems = clashes(endpoints)
    problems += [taken_message(e) for e in endpoints if e.port and not free(e.host, e.port)]
    return problems


@dataclass(frozen=True)
class Probe:
    """A service's readiness URL."""

    name: str
    url: str


async def readiness(session: aiohttp.ClientSession, probe: Probe) -> str | None:
    """None when ``probe`` answers 200, else what it said (for the waiting message)."""
    try:
        async with session.get(probe.url, timeout=REQUEST_TIMEOUT) as response:
            if response.status == 200:
                return None
            body = (await response.text()).strip().replace("\n", " ")
            return f"{response.status} {body[:200]}"
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        return f"not answering ({type(error).__name__})"


def waiting_message(pending: dict[str, str]) -> str:
    """One line naming every service not ready yet and what its /readyz said (pure)."""
    return "waiting for " + "; ".join(f"{name}: {said}" for name, said in pending.items())


async def wait_ready(
    probes: Sequence[Probe],
    *,
    exited: Callable[[], str | None],
    report: Callable[[str], None],
    within: float,
    report_every: float = 10.0,
) -> None:
    """Return once every probe answers 200. Raises RuntimeError when a process exits
    first (``exited`` names it) or ``within`` seconds pass, naming who is not ready."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    next_report = loop.time() + report_every
    async with aiohttp.ClientSession() as session:
        while True:
            said = await asyncio.gather(*(readiness(session, p) for p in probes))
            pending = {p.name: s for p, s in zip(probes, said, strict=True) if s is not None}
            if not pending:
                return
            if (gone := exited()) is not None:
                raise RuntimeError(f"{gone} exited while starting; see its log lines above")
            now = loop.time()
            if now > deadline:
                raise RuntimeError(f"not ready after {within:.0f} s: {waiting_message(pending)}")
            if now >= next_report:
                report(waiting_message(pending))
                next_report = now + report_every
            await asyncio.sleep(POLL_SECONDS)
