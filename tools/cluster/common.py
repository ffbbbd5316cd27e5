"""Paths and process bookkeeping shared by up.py and down.py."""

from __future__ import annotations

import socket
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent.parent
CLUSTER = ROOT / ".cluster"


def pid_files() -> list[Path]:
    return sorted((CLUSTER / "pids").glob("*.pid"))


def pid_of(pid_file: Path) -> int | None:
    """The pid in pid_file while that process is still ours: its command line names
    .cluster/ of this work tree (a reused pid belongs to someone else)."""
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    if stat.rsplit(")", 1)[1].split()[0] == "Z" or str(CLUSTER).encode() not in cmdline:
        return None
    return pid


def alive(pid_file: Path) -> bool:
    return pid_of(pid_file) is not None


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
