"""The GET pages: experiments, one experiment's work units, one work unit, scheduling,
the queues; and
the HTML fragments their live regions poll."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web

from ui import sweep_table, views
from ui.context import ess, render
from ui.gateway import Ess, Page, UiError
from ui.manifest_view import manifest_view
from ui.notifications_view import EVENTS, SHOWN_DELIVERIES, notifications_view, webhook_row
from ui.queue_view import queue_summary, queue_view
from ui.retry_view import retries_view
from ui.timeline_view import attributions_view, timeline_view, timings_view
from xmc.model.usage import requested_resources
from xmc.model.work_unit_spec import spec_view
from xmc.timestamps import utc_now

#: Experiments per page of ``/``.
EXPERIMENTS_PAGE = 50
#: Work units per page of ``/experiments/{xid}``: a sweep's overview is its state bar;
#: the table pages like Lookout's, and each poll of the live region costs one page.
UNITS_PAGE = 100
#: The most ``?page_size=`` may ask for (the ESS's largest page).
MAX_UNITS_PAGE = 1000


def _page_size(request: web.Request, default: int, largest: int | None = None) -> int:
    raw, largest = request.query.get("page_size", ""), largest or default
    if not raw:
        return default
    if not raw.isdigit() or not 0 < int(raw) <= largest:
        raise UiError(400, f"page_size: expected 1..{largest}, got {raw!r}")
    return int(raw)


T = TypeVar("T")
R = TypeVar("R")


async def _part(read: Awaitable[T], view: Callable[[T], R]) -> tuple[R | None, str]:
    """A part of a page that may fail alone: its view, or None and the error to show in
    its place. The timelines are additions to pages that were whole without them, so a
    slow aggregation or an older ESS costs that block, not the Stop button beside it."""
    try:
        return view(await read), ""
    except UiError as error:
        return None, error.message


def _ids(request: web.Request) -> tuple[int, int | None]:
    wid = request.match_info.get("wid")
    return int(request.match_info["xid"]), int(wid) if wid is not None else None


async def experiments(request: web.Request) -> web.Response:
    query = request.query.get("q", "").strip()
    token = request.query.get("page_token", "")
    found = await ess(request).experiments(query, token, _page_size(request, EXPERIMENTS_PAGE))
    rows = [views.experiment_row(e) for e in found.items]
    return render(
        request,
        "experiments.html",
        {"rows": rows, "q": query, "next_page_token": found.next_page_token, "paged": bool(token)},
    )


async def _arg_columns(
    request: web.Request, client: Ess, xid: int
) -> tuple[list[str], list[tuple[str, str]]]:
    """The arg columns and the constant args. A live poll names its page's columns
    (``cols``), so polling costs no aggregate over the experiment's args."""
    if "cols" in request.query:
        return [k for k in request.query["cols"].split(",") if k], []
    return sweep_table.split_keys((await client.arg_keys(xid)).keys)


async def _refused(call: Awaitable[T], empty: T) -> tuple[T, str]:
    """The answer, or ``empty`` and the ESS's message when it refused the request (a bad
    filter, order or group key): the page shows it as a notice above an empty table."""
    try:
        return await call, ""
    except UiError as error:
        if error.status != 400:
            raise
        return empty, error.message


async def _experiment_context(request: web.Request) -> dict[str, Any]:
    xid, _ = _ids(request)
    view = sweep_table.parse_view(request.query)
    try:
        views.state_filter(view.state)
    except ValueError as error:
        raise UiError(400, str(error)) from None
    client = ess(request)
    size = _page_size(request, UNITS_PAGE, MAX_UNITS_PAGE)
    unit_filter = view.unit_filter()
    listing = client.work_units(xid, unit_filter, view.page_token, size, view.order_by)
    grouping = client.arg_groups(xid, view.group, unit_filter) if view.group else _nothing()
    (
        experiment,
        (arg_keys, constant),
        artifacts,
        (units, problem),
        (groups, group_problem),
    ) = await asyncio.gather(
        client.experiment(xid),
        _arg_columns(request, client, xid),
        client.artifacts(xid),
        _refused(listing, Page([], "")),
        _refused(grouping, None),
    )
    now = utc_now()
    wids = [int(u.name.rsplit("/", 1)[1]) for u in units.items]
    codes, _ = await _part(client.exit_codes(xid, wids), lambda found: found)
    links = sweep_table.artifacts_by_parent(artifacts)
    columns = sweep_table.columns(arg_keys)
    row = views.experiment_row(experiment)
    return {
        "experiment": row,
        "experiment_links": [sweep_table.link(u) for u in experiment.urls]
        + links.get(experiment.name, []),
        "notes": experiment.notes,
        "view": view,
        "live_query": view.live_href(arg_keys),
        "columns": columns,
        "headers": [sweep_table.sort_header(view, c) for c in columns],
        "arg_keys": arg_keys,
        "groupable": [c.arg for c in columns if c.kind == "arg" and c.order],
        "constant_args": constant,
        "units": [
            {**sweep_table.unit_row(u, now, links), "exit_code": _code((codes or {}).get(w))}
            for u, w in zip(units.items, wids, strict=True)
        ],
        "groups": sweep_table.group_rows(view.group, groups.groups, view) if groups else [],
        "groups_truncated": bool(groups and groups.truncated),
        "problem": problem or group_problem,
        "states": views.FILTER_STATES,
        "next_page_token": units.next_page_token,
        "page_size": size,
        "max_page_size": MAX_UNITS_PAGE,
        "max_selected": sweep_table.MAX_SELECTED,
        "unit_count": row["total"],
    }


def _code(code: int | None) -> str:
    return "—" if code is None else str(code)


async def _nothing() -> None:
    return None


async def experiment(request: web.Request) -> web.Response:
    """The page, and below its live table the timings block, read once per page load
    (the aggregation over every unit costs more than a poll should, docs/ui.md) and
    beside the table's reads rather than after them. A view the ESS refused (a bad
    filter) is still the page, with the refusal as its notice and a 400, so the filter
    box is there to fix it."""
    xid, _ = _ids(request)
    client = ess(request)
    context, (timings, error), (notifications, notifications_error) = await asyncio.gather(
        _experiment_context(request),
        _part(client.timings(xid), timings_view),
        _part(client.notifications(xid, SHOWN_DELIVERIES), notifications_view),
    )
    context["timings"], context["timings_error"] = timings, error
    context["notifications"], context["notifications_error"] = notifications, notifications_error
    context["webhook_events"] = EVENTS
    return render(request, "experiment.html", context, status=400 if context["problem"] else 200)


async def experiment_live(request: web.Request) -> web.Response:
    return render(request, "experiment_live.html", await _experiment_context(request))


async def _work_unit_context(request: web.Request) -> dict[str, Any]:
    xid, wid = _ids(request)
    assert wid is not None
    client = ess(request)
    unit = await client.work_unit(xid, wid)
    executions = await client.executions(xid, wid)
    messages = await client.messages(xid, wid)
    current = unit.current_work_unit_execution
    found, timeline_error = await _part(client.timeline(xid, wid), lambda found: found)
    timeline = None if found is None else timeline_view(found)
    codes, _ = await _part(client.exit_codes(xid, [wid]), lambda found: found)
    retries, retries_error = await _part(client.retries(xid, wid), retries_view)
    return {
        "xid": xid,
        "retries": retries,
        "retries_error": retries_error,
        "unit": views.work_unit_row(unit),
        "executions": [views.execution_row(e) for e in executions],
        "messages": [views.message_row(m) for m in messages],
        "jobset": views.jobset_detail(current.status),
        "scheduling": views.scheduling_info(current),
        "spec": spec_view(unit),
        "requested": sweep_table.resource_cells(requested_resources(unit)),
        "timeline": timeline,
        "timeline_error": timeline_error,
        "attributions": [] if found is None else attributions_view(found),
        "exit_code": (codes or {}).get(wid),
    }


async def work_unit(request: web.Request) -> web.Response:
    """The page; the manifest is read once here, not in the live region: it never changes
    once stored."""
    context = await _work_unit_context(request)
    unit = context["unit"]
    eid = unit["execution"]
    manifest: dict[str, Any] = {"eid": eid, "yaml": "", "recorded": "", "task": "",
                                "note": f"No manifest stored for execution {eid}."}  # fmt: skip
    if eid:
        read = ess(request).manifest(f"{unit['name']}/executions/{eid}")
        view, error = await _part(read, lambda found: manifest_view(eid, found))
        manifest = view or {**manifest, "note": f"Manifest unavailable: {error}"}
    return render(request, "work_unit.html", {**context, "manifest": manifest})


async def work_unit_live(request: web.Request) -> web.Response:
    return render(request, "work_unit_live.html", await _work_unit_context(request))


async def scheduling(request: web.Request) -> web.Response:
    state = await ess(request).scheduling()
    return render(
        request,
        "scheduling.html",
        {
            "paused": state.paused,
            "reason": state.reason,
            "by": state.updated_by,
            "since": views.fmt_time(state.update_time),
            "parked": state.paused_task_count,
        },
    )


async def queues(request: web.Request) -> web.Response:
    """Every ClusterQueue with its quota, usage and counts (docs/queues.md)."""
    found = await ess(request).queues()
    return render(request, "queues.html", {"queues": [queue_summary(q) for q in found]})


async def _queue_context(request: web.Request) -> dict[str, Any]:
    name = request.match_info["name"]
    return {"queue": queue_view(await ess(request).queue(name)), "asked": name}


async def queue(request: web.Request) -> web.Response:
    """One queue: quota and usage, admitted and pending units, an admin's priority change."""
    return render(request, "queue.html", await _queue_context(request))


async def queue_live(request: web.Request) -> web.Response:
    return render(request, "queue_live.html", await _queue_context(request))


async def webhooks(request: web.Request) -> web.Response:
    """The caller's own webhooks (docs/notifications.md)."""
    found = await ess(request).my_webhooks()
    context = {"webhooks": [webhook_row(w) for w in found], "webhook_events": EVENTS}
    return render(request, "webhooks.html", context)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", experiments, name="experiments")
    app.router.add_get(r"/experiments/{xid:\d+}", experiment, name="experiment")
    app.router.add_get(r"/experiments/{xid:\d+}/live", experiment_live)
    app.router.add_get(r"/experiments/{xid:\d+}/workUnits/{wid:\d+}", work_unit)
    app.router.add_get(r"/experiments/{xid:\d+}/workUnits/{wid:\d+}/live", work_unit_live)
    app.router.add_get("/scheduling", scheduling, name="scheduling")
    app.router.add_get("/webhooks", webhooks, name="webhooks")
    app.router.add_get("/queues", queues, name="queues")
    app.router.add_get(r"/queues/{name:[a-z0-9][-a-z0-9.]*}", queue)
    app.router.add_get(r"/queues/{name:[a-z0-9][-a-z0-9.]*}/live", queue_live)
