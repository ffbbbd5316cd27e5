"""Restart one component of the running loopback cluster (``make cluster``) in place.

``restart.py kube-apiserver`` stops the process (SIGTERM, SIGKILL after a grace period;
``--kill``: SIGKILL at once, as a crash or the OOM killer would), optionally keeps it
down for ``--down-seconds``, starts it again with the command line ``up.py`` recorded in
``.cluster/procs/<name>.json`` — same binary, flags, data directory, certificates and
ports — and waits until it is healthy again (etcd ``/health``, the apiserver's
``/readyz``, the controllers' ``/healthz``/``/readyz``, the node agent's ready file).
The new pid replaces the old one in ``.cluster/pids/``, so ``down.py`` stops it.

The components that depend on the restarted one are left alone: they reconnect on their
own (docs/cluster.md, "Restarting a component"). The last line of stdout is a JSON
object with the timings, for tests and benchmarks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procs
from common import CLUSTER, ROOT, pid_of, port_in_use
from procs import Record, log

#: Seconds a SIGTERM may take before SIGKILL, as down.py. kube-apiserver stops listening
#: at once but its process lingers while watches stay open (its HTTP server waits up to
#: --request-timeout, 60 s, for them), so with its clients running it ends by SIGKILL.
GRACE_SECONDS = 10.0


def stop(record: Record, sig: signal.Signals) -> float:
    """Signal the component and wait until it is gone and its ports are free (a killed Go
    process shows as a zombie while its other threads still hold the listening sockets);
    returns the seconds that took."""
    name = record.name
    pid_file = CLUSTER / "pids" / f"{name}.pid"
    pid = pid_of(pid_file)
    t0 = time.monotonic()
    if pid is None:
        log(f"{name} was not running")
    else:
        os.kill(pid, sig)
    deadline = t0 + GRACE_SECONDS
    while (pid is not None and pid_of(pid_file) == pid) or any(map(port_in_use, record.ports)):
        if pid is not None and time.monotonic() > deadline:
            log(f"{name} (pid {pid}) outlived {sig.name}; SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        if time.monotonic() > t0 + 2 * GRACE_SECONDS:
            sys.exit(f"{name}: ports {record.ports} still taken {2 * GRACE_SECONDS:.0f}s on")
        time.sleep(0.05)
    log(f"{name} (pid {pid}) stopped by {sig.name}, ports {record.ports} free")
    return time.monotonic() - t0


def restart(name: str, *, kill: bool, down_seconds: float, timeout: float) -> dict[str, object]:
    record = Record.load(name)
    sig = signal.SIGKILL if kill else signal.SIGTERM
    t0 = time.monotonic()
    stopped = stop(record, sig)
    time.sleep(down_seconds)  # the outage the caller asked for, not a synchronization
    started_at = time.monotonic()
    proc = procs.start(name, record.argv, record.health, record.ports)
    procs.wait_until(f"{name} healthy", lambda: procs.healthy(record.health), {name: proc}, timeout)
    done = time.monotonic()
    return {
        "component": name,
        "signal": sig.name,
        "pid": proc.pid,
        "stop_seconds": round(stopped, 2),
        "start_to_healthy_seconds": round(done - started_at, 2),
        "down_seconds": round(done - t0, 2),
    }


def main() -> None:
    names = sorted(p.stem for p in (CLUSTER / "procs").glob("*.json"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("component", choices=names or None)
    parser.add_argument("--kill", action="store_true", help="SIGKILL instead of SIGTERM")
    parser.add_argument(
        "--down-seconds", type=float, default=0.0, help="seconds to stay stopped before starting"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to become healthy")
    args = parser.parse_args()
    result = restart(
        args.component, kill=args.kill, down_seconds=args.down_seconds, timeout=args.timeout
    )
    log(f"{args.component} healthy again, {result['down_seconds']}s after the signal")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
