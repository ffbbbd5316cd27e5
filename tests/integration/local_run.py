"""``make run`` (``python -m xmc.devrun``) for tests: its seven ports, and a local run on its
own database, ports and key prefix that the system tests share per worker.

The ports. ``make run`` binds seven fixed ports (kubesim, the ESS, four metrics listeners
and the dashboard), so a test picks a free block and hands it over; between that check and
the services' binds another process can take one. Two things make that harmless:

- The block lies below the kernel's ephemeral range (``ip_local_port_range``), where no
  outgoing connection and no bind to port 0 is ever given a port: every other test's
  clients (Postgres, Redis, gRPC) are out of its way. Only another test's pick (a block,
  or a private server's port: ``tests.stack.free_port``) can meet it.
- :func:`local_run` starts the run again on a fresh block when a service failed to bind
  (the run's log says a port is "already in use", or the ESS "cannot bind"): losing the
  race costs a restart, never the test. A Reconciler whose metrics port was taken this way
  once failed ``test_every_stop_lands_at_real_time``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tests.servers import ADMIN_DSN, REDIS_URL
from tests.stack import LOWEST_PORT, ephemeral_low, is_free

#: Ports ``make run`` binds from its base: kubesim, ESS, four metrics, dashboard.
PORTS: Final = 7
#: How many blocks :func:`local_run` tries before it believes a bind failure.
ATTEMPTS: Final = 5
#: What a run's log says when a service could not bind its port.
_TAKEN: Final = re.compile(r"already in use|cannot bind", re.IGNORECASE)


@dataclass(frozen=True)
class LocalSystem:
    endpoint: str
    kube_url: str
    database_url: str
    ui_url: str


def free_base(count: int = PORTS) -> int:
    """The first of ``count`` consecutive ports, free now, below the ephemeral range."""
    highest = ephemeral_low() - count
    while True:
        base = random.randint(LOWEST_PORT, highest)
        if all(is_free(base + i) for i in range(count)):
            return base


def local_run_env(database_url: str, run_dir: Path, base: int) -> dict[str, str]:
    """A ``make run`` on seven ports from ``base`` with its own database, run directory
    and Redis prefix."""
    return {
        **os.environ,
        "XMC_DATABASE_URL": database_url,
        "XMC_REDIS_URL": REDIS_URL,
        "XMC_KUBESIM_PORT": str(base),
        "XMC_ESS_LISTEN": f"127.0.0.1:{base + 1}",
        "XMC_METRICS_BASE_PORT": str(base + 2),  # 4 services: base + 2 .. base + 5
        "XMC_UI_LISTEN": f"127.0.0.1:{base + 6}",
        "XMC_RUN_DIR": str(run_dir),
        "XMC_STREAM_PREFIX": f"localrun-{uuid.uuid4().hex[:8]}:",
    }


def lost_a_port(log: str) -> bool:
    """The run stopped because a service could not bind its port."""
    return bool(_TAKEN.search(log))


def _start(
    env: dict[str, str], log: Path, *, within: float = 90
) -> tuple[subprocess.Popen[bytes] | None, str]:
    """Start the run and wait for its banner: (the process, '') once it is up, or (None,
    its log) once it has stopped."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "xmc.devrun"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + within
    while b"Ctrl-C stops everything" not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            return None, log.read_text(errors="replace")
        time.sleep(0.2)  # polling the log of another process, with a deadline
    return process, ""


@contextlib.contextmanager
def local_run(
    tmp_path_factory: pytest.TempPathFactory, *, clock_offset: str = "0s"
) -> Iterator[LocalSystem]:
    """``python -m xmc.devrun`` at kubesim time scale 1 on its own database, ports and key
    prefix; on a fresh block of ports again when one was taken (the module docstring)."""
    name = f"xmc_e2e_{uuid.uuid4().hex[:10]}"
    dsn = urlunsplit(urlsplit(ADMIN_DSN)._replace(path=f"/{name}"))
    try:
        for _ in range(ATTEMPTS):
            base = free_base()
            env = local_run_env(dsn, tmp_path_factory.mktemp("run"), base)
            env.update(XMC_KUBESIM_TIME_SCALE="1.0", XMC_KUBESIM_CLOCK_OFFSET=clock_offset)
            process, log = _start(env, tmp_path_factory.mktemp("log") / "devrun.log")
            if process is not None:
                break
            if not lost_a_port(log):
                raise AssertionError(f"the local run did not start:\n{log[-4000:]}")
        else:
            raise AssertionError(f"a port was taken in {ATTEMPTS} starts:\n{log[-4000:]}")
        yield LocalSystem(
            f"127.0.0.1:{base + 1}",
            f"http://127.0.0.1:{base}",
            dsn,
            f"http://127.0.0.1:{base + 6}",
        )
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
    finally:
        asyncio.run(_drop(name))


async def _drop(name: str) -> None:
    conn = await asyncpg.connect(ADMIN_DSN)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
