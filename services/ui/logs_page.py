"""The work unit's Logs tab (docs/ui.md, docs/logs.md): its container runs with their exit
codes, one execution's log as the ESS serves it, a live tail that follows a running
execution, and a download of the bytes as kept.

A log is shown as text, never interpreted: the page renders it through the template's
escaping with control characters as visible symbols (``xmc.log_text``), and the live tail
streams the same rendering as ``text/plain`` that the script appends with
``textContent``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from ui import views
from ui.context import ess, render
from ui.gateway import Ess, UiError
from xmc.log_text import LogPrinter, run_label
from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState
from xmc_api.xmc.v1 import logs_pb2

#: Characters of log text the page itself shows; the live tail and the download have all.
PAGE_TEXT_LIMIT: Final = 512 * 1024
_TEXT: Final = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class LogView:
    """Which log the tab shows: an execution (0 = the current one) and a container
    ('' = every one)."""

    execution: int = 0
    container: str = ""

    def query(self) -> str:
        parts = [f"execution={self.execution}"] if self.execution else []
        if self.container:
            parts.append(f"container={self.container}")
        return "&".join(parts)


def log_view(query: Mapping[str, str]) -> LogView:
    """The view a URL asks for (pure); a malformed one is a 400 naming the parameter."""
    raw = query.get("execution", "").strip()
    if raw and (not raw.isascii() or not raw.isdigit() or len(raw) > 18):
        raise UiError(400, f"execution: a positive whole number, got {raw!r}")
    container = query.get("container", "").strip()
    if len(container) > 253:
        raise UiError(400, "container: at most 253 characters")
    return LogView(int(raw or 0), container)


def run_row(log: logs_pb2.ContainerLog) -> dict[str, Any]:
    notes = [n for n, on in (("earlier output dropped", log.truncated),
                             ("evicted at the experiment's cap", log.evicted)) if on]  # fmt: skip
    if log.unavailable:
        notes.append(log.unavailable)
    return {
        "execution": log.execution_id,
        "pod": log.pod,
        "container": log.container,
        "run": log.run,
        "source": "live" if log.source == logs_pb2.ContainerLog.LIVE else "kept",
        "state": "ended" if log.terminated else "running",
        "exit_code": log.exit_code if log.HasField("exit_code") else None,
        "reason": log.reason,
        "size": log.size_bytes,
        "notes": "; ".join(notes),
        "label": run_label(log),
    }


async def _text(client: Ess, xid: int, wid: int, view: LogView) -> tuple[str, list[str], bool]:
    """The log as the page shows it, the stream's notices, and whether it was cut."""
    printer, parts, notes, size = LogPrinter(), [], [], 0
    stream = client.read_logs(xid, wid, execution=view.execution, container=view.container,
                              follow=False)  # fmt: skip
    async for chunk in stream:
        data, note = printer.render(chunk)
        if note:
            notes.append(note.removeprefix("xmc: ").strip())
        if data and size < PAGE_TEXT_LIMIT:
            parts.append(data.decode())
            size += len(parts[-1])
    return "".join(parts)[:PAGE_TEXT_LIMIT], notes, size > PAGE_TEXT_LIMIT


async def logs_page(request: web.Request) -> web.Response:
    xid, wid = int(request.match_info["xid"]), int(request.match_info["wid"])
    view = log_view(request.query)
    client = ess(request)
    unit = await client.work_unit(xid, wid)
    listed = await client.container_logs(xid, wid)
    text, notes, cut = await _text(client, xid, wid, view)
    current = listed.current_execution_id
    shown = view.execution or current
    state = WorkUnitState(unit.current_work_unit_execution.status.state)
    base = f"/experiments/{xid}/workUnits/{wid}/logs"
    return render(
        request,
        "work_unit_logs.html",
        {
            "xid": xid,
            "unit": views.work_unit_row(unit),
            "view": view,
            "shown_execution": shown,
            "executions": list(range(current, 0, -1)),
            "containers": sorted({log.container for log in listed.logs}),
            "runs": [run_row(log) for log in listed.logs if log.execution_id == shown],
            "text": text,
            "notes": notes,
            "cut": cut,
            "live": shown == current and state not in EXECUTION_TERMINAL_STATES,
            "follow_url": f"{base}/follow?{view.query()}",
            "download_url": f"{base}/download?{view.query()}",
            "base_url": base,
        },
    )


async def _stream(request: web.Request, *, follow: bool, raw: bool) -> web.StreamResponse:
    """The log as text/plain, chunk by chunk as the ESS sends it; an error before the
    first chunk is an error answer, one after it a last ``xmc:`` line."""
    xid, wid = int(request.match_info["xid"]), int(request.match_info["wid"])
    view = log_view(request.query)
    printer = LogPrinter(raw=raw)
    answer = web.StreamResponse(headers={"Content-Type": _TEXT, "Cache-Control": "no-store"})
    if not follow:
        name = f"xmc-{xid}-{wid}" + (f"-e{view.execution}" if view.execution else "")
        answer.headers["Content-Disposition"] = f'attachment; filename="{name}.log"'
    stream = ess(request).read_logs(
        xid, wid, execution=view.execution, container=view.container, follow=follow
    )
    try:
        async for chunk in stream:
            data, note = printer.render(chunk)
            if not answer.prepared:
                await answer.prepare(request)
            await answer.write(data + note.encode())
    except UiError as error:
        if not answer.prepared:
            return web.Response(status=error.status, text=error.message, content_type="text/plain")
        await answer.write(f"xmc: {error.message}\n".encode())
    if not answer.prepared:
        await answer.prepare(request)
    await answer.write_eof()
    return answer


async def logs_follow(request: web.Request) -> web.StreamResponse:
    """The live tail's stream: shown as text (control characters as symbols)."""
    return await _stream(request, follow=True, raw=False)


async def logs_download(request: web.Request) -> web.StreamResponse:
    """The bytes as kept, as a file."""
    return await _stream(request, follow=False, raw=True)


def add_routes(app: web.Application) -> None:
    unit = r"/experiments/{xid:\d+}/workUnits/{wid:\d+}/logs"
    app.router.add_get(unit, logs_page)
    app.router.add_get(f"{unit}/follow", logs_follow)
    app.router.add_get(f"{unit}/download", logs_download)
