"""A private Postgres cluster, for fault tests that restart or freeze Postgres (the
machine's shared server serves every other test and must never restart or stall)."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stack import free_port


class PostgresServer:
    """A throw-away Postgres cluster on a free port (the shared one must never restart)."""

    def __init__(self, *, host: str = "127.0.0.1", prefix: tuple[str, ...] = ()) -> None:
        """``host``/``prefix``: listen there, run behind ``prefix`` (``ip netns exec NS``:
        ``tests/ha/netns.py``), and accept clients from the subnets it is on."""
        self.bin = postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="xmc-pg-"))
        self.data, self.log, self.port = self.root / "data", self.root / "pg.log", free_port()
        self.host = host
        self._as: list[str] = list(prefix)
        if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to postgres
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as += ["runuser", "-u", "postgres", "--"]

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def _pg_ctl(self, *args: str) -> list[str]:
        pg_ctl = str(self.bin / "pg_ctl")
        return [*self._as, pg_ctl, "-D", str(self.data), "-l", str(self.log), "-w", *args]

    def start(self) -> None:
        initdb = [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust"]
        subprocess.run([*self._as, *initdb, "--no-sync"], check=True, capture_output=True)
        if self.host != "127.0.0.1":
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all samenet trust\n")
        options = f"-p {self.port} -c listen_addresses={self.host} -k {self.root}"
        subprocess.run(self._pg_ctl("-o", options, "start"), check=True, capture_output=True)

    async def restart(self) -> None:
        """Fast shutdown (every connection is cut), then up again with the same options."""
        process = await asyncio.create_subprocess_exec(
            *self._pg_ctl("-m", "fast", "restart"),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        if await process.wait() != 0:
            raise RuntimeError(f"pg_ctl restart failed; see {self.log}")

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Postgres stalled, not gone (a lock wait or a checkpoint everywhere at once): the
        postmaster and every backend SIGSTOPped, so connections stay open and every query
        and new connection waits; all SIGCONTed on exit, whatever happened."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)  # first: a stopped postmaster forks nothing new
        stopped = [postmaster]
        try:
            found = subprocess.run(
                ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
            )
            for pid in map(int, found.stdout.split()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            yield
        finally:
            for pid in reversed(stopped):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(self._pg_ctl("-m", "immediate", "stop"), capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def postgres_bin() -> Path:
    """The directory of the newest installed Postgres's programs (initdb, pg_ctl, ...)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major)
    initdb = found[-1] if found else shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("no initdb: install postgresql")
    return Path(initdb).parent


def _major(initdb: str) -> int:
    """``/usr/lib/postgresql/15/bin/initdb`` → 15: the newest installed one is used."""
    version = Path(initdb).parent.parent.name.split(".")[0]
    return int(version) if version.isdigit() else 0


@pytest.fixture
def private_postgres() -> Iterator[PostgresServer]:
    """A throw-away cluster of the test's own (it may be stopped, frozen or restarted)."""
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.remove()
