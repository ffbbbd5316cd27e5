"""Stop the loopback cluster that up.py started (``make cluster-down``).

Each process is found by its pid file in .cluster/pids and checked to be ours. The
API's clients stop first, then kube-apiserver (with no watches left open it exits at
once), then etcd; each gets SIGTERM, and SIGKILL after a grace period. .cluster/
itself (logs, kubeconfig) stays until the next ``make cluster`` replaces it."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import pid_files, pid_of

GRACE_SECONDS = 10.0
LAST = ("kube-apiserver", "etcd")  # stopped in this order, after everything else


def stop(group: list[Path]) -> None:
    running = {p: pid for p in group if (pid := pid_of(p)) is not None}
    for pid in running.values():
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while running and time.monotonic() < deadline:
        time.sleep(0.05)
        running = {p: pid for p, pid in running.items() if pid_of(p) == pid}
    for pid_file, pid in running.items():
        print(f"cluster-down: {pid_file.stem} (pid {pid}) outlived SIGTERM", file=sys.stderr)
        os.kill(pid, signal.SIGKILL)
    for pid_file in group:
        pid_file.unlink()


def main() -> None:
    files = pid_files()
    stop([p for p in files if p.stem not in LAST])
    for name in LAST:
        stop([p for p in files if p.stem == name])
    print("cluster-down: stopped", file=sys.stderr)


if __name__ == "__main__":
    main()
