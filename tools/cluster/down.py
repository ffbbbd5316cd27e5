"""Stop the loopback cluster that up.py started (``make cluster-down``).

Each process is found by its pid file in .cluster/pids and checked to be ours;
all get SIGTERM at once, then SIGKILL after a grace period. .cluster/ itself is
kept (logs, kubeconfig) until the next ``make cluster`` replaces it."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import pid_files, pid_of  # noqa: E402

GRACE_SECONDS = 10.0


def main() -> None:
    running = {p: pid for p in pid_files() if (pid := pid_of(p)) is not None}
    for pid in running.values():
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while running and time.monotonic() < deadline:
        time.sleep(0.1)
        running = {p: pid for p, pid in running.items() if pid_of(p) == pid}
    for pid_file, pid in running.items():
        print(f"cluster-down: {pid_file.stem} (pid {pid}) ignored SIGTERM; SIGKILL", file=sys.stderr)
        os.kill(pid, signal.SIGKILL)
    for pid_file in pid_files():
        pid_file.unlink()
    print("cluster-down: stopped", file=sys.stderr)


if __name__ == "__main__":
    main()
