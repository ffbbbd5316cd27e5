"""A log stream (``xmc.v1.LogService.ReadWorkUnitLogs``) as text, the one rendering the
``xmc logs`` command, the dashboard's live tail and its download share (docs/logs.md): a
header names each container run when the output moves to it (like ``tail`` with several
files), a run's bytes follow as they came or with their control characters shown as
visible symbols (``xmc.model.container_logs.visible_text``), and notes about the stream
itself are kept apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xmc.model.container_logs import visible_text
from xmc_api.xmc.v1 import logs_pb2


def run_label(log: logs_pb2.ContainerLog) -> str:
    """``pod/container`` and what is known of the run: its execution, restart and end."""
    parts = [f"execution {log.execution_id}"]
    if log.run:
        parts.append(f"restart {log.run}")
    if log.HasField("exit_code"):
        parts.append(f"exit code {log.exit_code}" + (f" ({log.reason})" if log.reason else ""))
    elif not log.terminated:
        parts.append("running")
    if log.truncated:
        parts.append("earlier output dropped")
    return f"{log.pod}/{log.container} ({', '.join(parts)})"


@dataclass
class LogPrinter:
    """Turns chunks into (stdout bytes, stderr text); keeps which run it printed last."""

    raw: bool = False
    headers: bool = True
    _last: tuple[str, str, int] | None = field(default=None, init=False)

    def render(self, chunk: logs_pb2.LogChunk) -> tuple[bytes, str]:
        out = b""
        source = (chunk.log.pod, chunk.log.container, chunk.log.run)
        moved = chunk.start or (bool(chunk.data) and source != self._last)
        if self.headers and chunk.HasField("log") and moved:
            out += f"==> {run_label(chunk.log)} <==\n".encode()
            self._last = source
        if chunk.data:
            out += chunk.data if self.raw else visible_text(chunk.data).encode()
        note = f"xmc: {chunk.notice}\n" if chunk.notice else ""
        return out, note
