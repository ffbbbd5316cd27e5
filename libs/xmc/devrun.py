"""``make run``: the whole system on one machine, as separate processes.

Checks, before it starts anything, that every port it will bind is free (naming a taken
one with the variable that moves it) and that Postgres and Redis answer (``make run``
brought them up with ``make services``), prepares the database, then starts kubesim (with
its simulated JobSet, Kueue and kubelet and the default queues), the ESS, the Actuator,
the Reconciler and the dashboard (``xmc-ui``), each its own OS process with its own log
prefix, and prints the banner only once every one of them answers ``/readyz``. Ctrl-C
(or SIGTERM) stops them all. A second ``make run`` while one is running says so instead
of failing on a taken port.

``make run CLUSTER=real`` (``XMC_RUN_CLUSTER=real``) runs the same services against the
loopback Kubernetes control plane of ``make cluster`` instead of kubesim: no kubesim, no
``XMC_KUBE_URL``; the Actuator and the Reconciler each get ``KUBECONFIG`` set to the
kubeconfig of its own ServiceAccount of k8s/base (a TokenRequest token, TLS to the API
server), which ``tools/cluster/xmc_setup.py`` wrote, and ``XMC_NAMESPACE=xmc``, where
k8s/base grants them their Roles (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from xmc.devrun_checks import Probe, local_endpoints, port_problems, split_listen, wait_ready
from xmc.local_run_settings import LocalRunSettings
from xmc.settings import Settings, UiSettings, load_settings
from xmc.store.migrate import migrate

BIN = Path(sys.executable).parent
#: Development only: a fixed signing key, printed nowhere, never used outside this run.
DEV_SIGNING_KEY = "xmc-local-development-signing-key-0001"
#: k8s/base's namespace: the Roles of its ServiceAccounts are granted there.
REAL_CLUSTER_NAMESPACE = "xmc"
#: The services that call the Kubernetes API (each with its own ServiceAccount).
KUBE_CLIENTS = ("ess", "actuator", "reconciler")


def already_running(pidfile: Path) -> int | None:
    """The pid of a live ``make run``, or None (a stale pidfile is ignored)."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def check_stores(settings: Settings) -> str | None:
    """What is wrong with Postgres or Redis, or None. ``make run`` brings both up first
    (``make services``); this names the fix for a direct ``python -m xmc.devrun`` or a
    server configured elsewhere."""
    db = urlsplit(settings.database_url)
    if not _port_open(db.hostname or "127.0.0.1", db.port or 5432):
        return (
            f"Postgres is not reachable at {db.hostname}:{db.port or 5432}: run `make services` "
            "(installs and starts it on 127.0.0.1:5432) or set XMC_DATABASE_URL"
        )
    if settings.redis_cluster_nodes or settings.redis_sentinels:
        return None  # a Redis Cluster or Sentinels are the user's to run; services report them
    redis = urlsplit(settings.redis_url)
    if not _port_open(redis.hostname or "127.0.0.1", redis.port or 6379):
        return (
            f"Redis is not reachable at {redis.hostname}:{redis.port or 6379}: run `make "
            "services` (installs and starts it on 127.0.0.1:6379) or set XMC_REDIS_URL"
        )
    return None


def check_real_cluster(run: LocalRunSettings) -> str | None:
    """With ``CLUSTER=real``: what is missing of the ServiceAccount kubeconfigs, or None."""
    if not run.real_cluster:
        return None
    missing = [str(p) for s in KUBE_CLIENTS if not (p := run.service_kubeconfig(s)).is_file()]
    if missing:
        return (
            f"no ServiceAccount kubeconfig {', '.join(missing)}: `make run CLUSTER=real` "
            "starts the cluster and writes them (tools/cluster/xmc_setup.py)"
        )
    return None


def service_env(base: dict[str, str], run: LocalRunSettings, name: str) -> dict[str, str]:
    """The environment of one service: on the real cluster no XMC_KUBE_URL and no
    in-cluster variables, so the kubeconfig path is taken, with the service's own
    ServiceAccount kubeconfig (the dashboard makes no Kubernetes calls; the ESS reads
    live logs)."""
    if not run.real_cluster:
        return base
    env = {k: v for k, v in base.items() if not k.startswith("KUBERNETES_SERVICE_")}
    env["XMC_KUBE_URL"] = ""
    env["XMC_NAMESPACE"] = REAL_CLUSTER_NAMESPACE
    env.pop("KUBECONFIG", None)
    if name in KUBE_CLIENTS:
        env["KUBECONFIG"] = str(run.service_kubeconfig(name).resolve())
    return env


async def ensure_database(dsn: str) -> None:
    """Create the database named in ``dsn`` when the server lacks it."""
    parts = urlsplit(dsn)
    name = parts.path.lstrip("/") or "postgres"
    admin = urlunsplit(parts._replace(path="/postgres"))
    conn = await asyncpg.connect(admin)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def _pipe(name: str, stream: asyncio.StreamReader | None) -> None:
    """Prefix each log line with the process name, so four services stay readable."""
    if stream is None:
        return
    while line := await stream.readline():
        sys.stdout.write(f"{name:>10} | {line.decode(errors='replace')}")
        sys.stdout.flush()


async def serve(settings: Settings, run: LocalRunSettings, ui: UiSettings) -> int:
    # The children inherit this environment (one .env configures them all), with the
    # wiring of a local run on top.
    env = {
        **os.environ,
        "XMC_DATABASE_URL": settings.database_url,
        "XMC_REDIS_URL": settings.redis_url,
        "XMC_ESS_LISTEN": settings.ess_listen,
        "XMC_ESS_TARGET": settings.ess_listen,
        "XMC_KUBE_URL": f"http://127.0.0.1:{run.kubesim_port}",
        "XMC_TASK_SIGNING_KEY": settings.task_signing_key or DEV_SIGNING_KEY,
        "XMC_AUTH_DISABLED": "true",
        # Notifications link to the dashboard (docs/notifications.md), unless set already.
        "XMC_UI_PUBLIC_URL": ui.public_url or _ui_url(ui),
    }
    commands: dict[str, list[str]] = {
        "kubesim": [
            "xmc-kubesim",
            "--host",
            "127.0.0.1",
            "--port",
            str(run.kubesim_port),
            "--time-scale",
            str(run.time_scale),
            f"--clock-offset={run.clock_offset}",
            f"--kueue-version={run.kueue_version}",
            f"--state-dir={run.run_dir}",  # `make run` again resumes the same cluster
        ],
        "ess": ["xmc-ess", "serve", "--metrics-listen", f"127.0.0.1:{run.metrics_base}"],
        "actuator": ["xmc-actuator", "--metrics-listen", f"127.0.0.1:{run.metrics_base + 1}"],
        "reconciler": [
            "xmc-reconciler",
            "--no-leader-election",
            "--metrics-listen",
            f"127.0.0.1:{run.metrics_base + 2}",
        ],
        "ui": [
            "xmc-ui",
            "--listen",
            ui.listen,
            "--metrics-listen",
            f"127.0.0.1:{run.metrics_base + 3}",
        ],
    }
    processes: dict[str, asyncio.subprocess.Process] = {}
    pipes: list[asyncio.Task[None]] = []
    metrics = run.metrics_base
    probes = [
        Probe("kubesim", f"http://127.0.0.1:{run.kubesim_port}/readyz"),
        *(
            Probe(name, f"http://127.0.0.1:{metrics + offset}/readyz")
            for offset, name in enumerate(("ess", "actuator", "reconciler", "ui"))
        ),
    ]
    if run.real_cluster:  # the cluster of `make cluster` runs already
        del commands["kubesim"]
        probes = probes[1:]

    def first_exited() -> str | None:
        return next((n for n, p in processes.items() if p.returncode is not None), None)

    async def start_all() -> None:
        for name, command in commands.items():
            process = await asyncio.create_subprocess_exec(
                str(BIN / command[0]),
                *command[1:],
                env=service_env(env, run, name),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            processes[name] = process
            pipes.append(asyncio.create_task(_pipe(name, process.stdout)))
            if name == "kubesim":  # the Actuator and Reconciler need the API at start
                await wait_ready(probes[:1], exited=first_exited, report=_say, within=START_SECONDS)
        # The banner is a promise that XMC works: only once every service says so.
        await wait_ready(probes, exited=first_exited, report=_say, within=START_SECONDS)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return_code = 0
    try:
        if await _unless_stopped(stop, start_all()):
            _banner(settings.ess_listen, run, ui)
            exited = [asyncio.create_task(p.wait()) for p in processes.values()]
            await asyncio.wait(
                [asyncio.create_task(stop.wait()), *exited], return_when="FIRST_COMPLETED"
            )
    except RuntimeError as error:
        print(f"XMC did not start: {error}", file=sys.stderr, flush=True)
        return_code = 1
    finally:
        for process in reversed(list(processes.values())):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        await asyncio.gather(*(p.wait() for p in processes.values()))
        await asyncio.gather(*pipes, return_exceptions=True)
    failed = [name for name, p in processes.items() if p.returncode not in (0, -signal.SIGTERM)]
    if failed and not stop.is_set():
        print(f"stopped because {', '.join(failed)} exited", file=sys.stderr)
        return 1
    print("XMC stopped.")
    return return_code


async def _unless_stopped(stop: asyncio.Event, work: Coroutine[Any, Any, None]) -> bool:
    """Run ``work`` until it ends or ``stop`` is set (Ctrl-C while starting): True when
    it ended first; its exception propagates."""
    task = asyncio.create_task(work)
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait([task, stopped], return_when="FIRST_COMPLETED")
    stopped.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False
    task.result()
    return True


#: Seconds the services get to answer /readyz (a first run migrates the database and
#: installs kubesim's CRDs; a few seconds on an idle machine).
START_SECONDS = 120.0


def _say(line: str) -> None:
    print(f"{'make run':>10} | {line}", flush=True)


def _kube_lines(run: LocalRunSettings) -> str:
    if run.real_cluster:
        admin = Path(run.cluster_dir).resolve() / "kubeconfig"
        return (
            f"  kubernetes:   the cluster of `make cluster` (KUBECONFIG={admin} kubectl -n "
            f"{REAL_CLUSTER_NAMESPACE} get jobsets)\n"
            f"                ESS, Actuator and Reconciler as ServiceAccounts "
            f"{REAL_CLUSTER_NAMESPACE}/xmc-ess, xmc-actuator, xmc-reconciler (k8s/base)"
        )
    kube = f"http://127.0.0.1:{run.kubesim_port}"
    return (
        f"  kubesim:      {kube}   (kubectl -s {kube} get jobsets)\n"
        f"                its cluster is saved in {run.run_dir}/: `make run` again resumes it"
    )


def _ui_url(ui: UiSettings) -> str:
    host, port = split_listen(ui.listen)
    return f"http://{host}:{port}"


def _banner(endpoint: str, run: LocalRunSettings, ui: UiSettings) -> None:
    ui_url = _ui_url(ui)
    print(
        f"""
XMC is running.
  dashboard:    {ui_url}
  ESS (gRPC):   {endpoint}   (auth disabled: any token works)
  xmanager:     export XMANAGER_ENDPOINT=http://{endpoint} XMC_AUTH_TOKEN=dev \\
                       XMC_USER_EMAIL=you@example.com XMANAGER_UI_URL={ui_url}
                (README: Launching from xmanager)
{_kube_lines(run)}
  metrics:      http://127.0.0.1:{run.metrics_base}/metrics (ESS), +1 Actuator, +2 Reconciler,
                +3 dashboard
  health:       /healthz and /readyz on the same ports (docs/operations.md)

Try, in another terminal (.venv/bin on PATH):
  xmc launch --title "my sweep" --image python:3.11 --command "python train.py" \\
      --count 5 --cpu 16000 \\
      --annotation 'kubesim.xmc/behavior={{"start_seconds": 2, "run_seconds": 8}}' --watch
  (five 16-CPU units on the 64-CPU local queue: one waits in SCHEDULING first)

Ctrl-C stops everything.""",
        flush=True,
    )


async def _prepare(settings: Settings) -> None:
    await ensure_database(settings.database_url)
    await migrate(settings.database_url)


def main() -> None:
    loaded = load_settings()
    settings, run = loaded.core, loaded.local_run
    pid = already_running(run.pidfile)
    if pid is not None:
        print(f"XMC is already running (pid {pid}); stop it with Ctrl-C in its terminal.")
        sys.exit(1)
    # Before anything starts: a taken port used to give a banner pointing at another
    # program, then a stack that died a second later.
    problems = port_problems(local_endpoints(settings, run, loaded.ui))
    if problems:
        print("make run: cannot start:\n  " + "\n  ".join(problems), file=sys.stderr)
        sys.exit(1)
    problem = check_stores(settings) or check_real_cluster(run)
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(1)
    asyncio.run(_prepare(settings))
    run.pidfile.parent.mkdir(parents=True, exist_ok=True)
    run.pidfile.write_text(str(os.getpid()))
    try:
        code = asyncio.run(serve(settings, run, loaded.ui))
    finally:
        run.pidfile.unlink(missing_ok=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
