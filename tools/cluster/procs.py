"""Starting the cluster's processes, and what it takes to start one again.

``up.py`` starts every component through :func:`start`, which also writes
``.cluster/procs/<name>.json``: the exact command line, the working directory and how to
tell the process is healthy (:class:`Health`). ``restart.py`` reads that record to stop
one component and start it again with the same command line, data and ports — what a
kubelet does to a crashed static pod — so tests can restart kube-apiserver or etcd under
load. The environment is not recorded: no component takes configuration from it (every
setting is a flag or a file under ``.cluster/``), and a copy of the caller's environment
on disk could hold its secrets.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from common import CLUSTER

PKI = CLUSTER / "pki"
LOGS = CLUSTER / "logs"
RECORDS = CLUSTER / "procs"
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[cluster {time.monotonic() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Health:
    """How to tell a started component serves: a GET of ``url`` answering 200 (``tls``:
    ``admin`` presents the cluster-admin client certificate and checks the CA, ``insecure``
    accepts the component's self-signed serving certificate), or ``file`` existing (the
    process writes it once ready; removed before each start)."""

    url: str | None = None
    tls: str | None = None
    file: str | None = None


@dataclass(frozen=True)
class Record:
    name: str
    argv: list[str]
    cwd: str
    health: Health
    #: The ports it listens on: a restart waits for them to be free.
    ports: list[int]

    @staticmethod
    def load(name: str) -> Record:
        raw = json.loads((RECORDS / f"{name}.json").read_text())
        return Record(raw["name"], raw["argv"], raw["cwd"], Health(**raw["health"]), raw["ports"])

    def save(self) -> None:
        RECORDS.mkdir(parents=True, exist_ok=True)
        (RECORDS / f"{self.name}.json").write_text(json.dumps(asdict(self), indent=1) + "\n")


def start(name: str, argv: list[str], health: Health, ports: list[int]) -> subprocess.Popen[bytes]:
    """Start a component in its own session (it outlives its starter), log to
    ``.cluster/logs/<name>.log`` (appended: a restart keeps the history), record its pid
    in ``.cluster/pids/`` (``down.py``) and its command line in ``.cluster/procs/``."""
    record = Record(name, argv, str(CLUSTER), health, ports)
    record.save()
    if health.file:
        Path(health.file).unlink(missing_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    (CLUSTER / "pids").mkdir(parents=True, exist_ok=True)
    with open(LOGS / f"{name}.log", "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=record.cwd,
        )
    (CLUSTER / "pids" / f"{name}.pid").write_text(f"{proc.pid}\n")
    log(f"started {name} (pid {proc.pid}, log .cluster/logs/{name}.log)")
    return proc


def healthy(health: Health) -> bool:
    if health.file is not None:
        return Path(health.file).exists()
    if health.url is None:
        return True
    return http_ok(health.url, _context(health.tls))


def http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=3, context=ctx) as resp:
        return bool(resp.status == 200)


def admin_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    ctx.load_cert_chain(PKI / "admin.crt", PKI / "admin.key")
    return ctx


def _context(tls: str | None) -> ssl.SSLContext | None:
    if tls == "admin":
        return admin_context()
    if tls == "insecure":  # kcm/scheduler serve /healthz with a self-signed certificate
        return ssl._create_unverified_context()
    return None


def wait_until(
    what: str,
    probe: Callable[[], bool],
    watched: dict[str, subprocess.Popen[bytes]],
    timeout: float = 120.0,
) -> None:
    """Poll probe until true; exit naming the log of a watched process that died."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            if probe():
                log(f"{what}: ready")
                return
        except Exception as exc:  # anything not ready yet is retried
            last = exc
        for name, proc in watched.items():
            if proc.poll() is not None:
                sys.exit(f"{name} exited ({proc.returncode}); see .cluster/logs/{name}.log")
        time.sleep(0.3)
    sys.exit(f"{what}: not ready after {timeout:.0f}s (last error: {last})")
