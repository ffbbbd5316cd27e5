"""The POST forms: stop / restart one unit, the batch for the filtered set, and the
scheduling pause. Each redirects back to the page it came from with a notice (POST,
redirect, GET), so a reload never repeats an action."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from aiohttp import web

from ui import sweep_table, views
from ui.context import ess
from ui.gateway import UiError
from xmc_api.xmc.v1 import notifications_pb2


def back_to(target: str, notice: str, fallback: str) -> str:
    """``target`` (a path of this site only: no open redirect) with ``notice`` in its
    query, replacing an earlier one (pure)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/") or target.startswith("//"):
        parts = urlsplit(fallback)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "notice"]
    query.append(("notice", notice))
    return urlunsplit(("", "", parts.path, urlencode(query), ""))


def _ids(request: web.Request) -> tuple[int, int]:
    return int(request.match_info["xid"]), int(request.match_info.get("wid", "0"))


def came_from(referer: str, host: str) -> str:
    """The path and query of the page a form was sent from, when it is of this host (pure)."""
    parts = urlsplit(referer)
    if parts.netloc != host:
        return ""
    return urlunsplit(("", "", parts.path, parts.query, ""))


async def _redirect(request: web.Request, notice: str, fallback: str) -> web.Response:
    """Back to the form's ``back`` field, else to the page it was sent from (Referer)."""
    form = await request.post()
    target = str(form.get("back", "")) or came_from(
        request.headers.get("Referer", ""), request.host
    )
    raise web.HTTPSeeOther(back_to(target, notice, fallback))


async def stop(request: web.Request) -> web.Response:
    xid, wid = _ids(request)
    await ess(request).stop(xid, wid)
    return await _redirect(request, f"stop of work unit {wid} requested", f"/experiments/{xid}")


async def restart(request: web.Request) -> web.Response:
    xid, wid = _ids(request)
    await ess(request).restart(xid, wid)
    return await _redirect(request, f"restart of work unit {wid} requested", f"/experiments/{xid}")


async def _batch_filter(request: web.Request) -> tuple[int, str, str]:
    """The experiment and the filter a batch form acts on: the view's state choice and
    typed filter, exactly the units the page shows; and how the notice names them."""
    xid, _ = _ids(request)
    form = await request.post()
    if form.get("confirm") != "on":
        raise UiError(400, "tick the confirmation box to act on every unit of the filter")
    view = sweep_table.View(state=str(form.get("state", "")), filter=str(form.get("filter", "")))
    try:
        views.state_filter(view.state)
    except ValueError as error:
        raise UiError(400, str(error)) from None
    filter_ = view.unit_filter()
    return xid, filter_, f"units matching {filter_} " if filter_ else "all units "


async def batch_stop(request: web.Request) -> web.Response:
    xid, filter_, which = await _batch_filter(request)
    await ess(request).batch_stop(xid, filter_)
    return await _redirect(request, f"stop of {which}requested", f"/experiments/{xid}")


async def batch_restart(request: web.Request) -> web.Response:
    xid, filter_, which = await _batch_filter(request)
    await ess(request).batch_restart(xid, filter_)
    return await _redirect(request, f"restart of {which}requested", f"/experiments/{xid}")


async def selected(request: web.Request) -> web.Response:
    """Stop or restart the ticked units: one batch call per filter of their wids
    (``sweep_table.selection_filters``), so a selection of hundreds is a few calls."""
    xid, _ = _ids(request)
    form = await request.post()
    verb = str(form.get("action", ""))
    if verb not in ("stop", "restart"):
        raise UiError(400, f"action: expected stop or restart, got {verb!r}")
    try:
        wids = sweep_table.selected_wids(str(v) for v in form.getall("wid", []))
    except ValueError as error:
        raise UiError(400, str(error)) from None
    client = ess(request)
    act = client.batch_stop if verb == "stop" else client.batch_restart
    for filter_ in sweep_table.selection_filters(wids):
        await act(xid, filter_)
    named = ", ".join(str(w) for w in wids[:10]) + (" …" if len(wids) > 10 else "")
    notice = f"{verb} of {len(wids)} selected work unit(s) requested: {named}"
    return await _redirect(request, notice, f"/experiments/{xid}")


def _number(form: Any, key: str, kind: type[int] | type[float]) -> Any:
    raw = str(form.get(key, "")).strip()
    try:
        return kind(raw) if raw else kind(0)
    except ValueError:
        raise UiError(400, f"{key}: expected a number, got {raw[:32]!r}") from None


async def _webhook(request: web.Request) -> notifications_pb2.Webhook:
    """The Add form's webhook. A secret left empty is made by the ESS and never shown (a
    notice must not carry it into the URL): give one to verify signatures."""
    form = await request.post()
    return notifications_pb2.Webhook(
        url=str(form.get("url", "")).strip(),
        events=[str(e) for e in form.getall("event", [])],
        failed_count=_number(form, "failed_count", int),
        failed_fraction=_number(form, "failed_fraction", float),
        secret=str(form.get("secret", "")),
    )


def _page_of(request: web.Request) -> tuple[str, str]:
    """The parent a webhook form acts on and the page it comes back to."""
    if "xid" in request.match_info:
        xid, _ = _ids(request)
        return f"experiments/{xid}", f"/experiments/{xid}"
    return "users/me", "/webhooks"


async def add_webhook(request: web.Request) -> web.Response:
    parent, page = _page_of(request)
    name = await ess(request).add_webhook(parent, await _webhook(request))
    return await _redirect(request, f"{name} added", page)


async def delete_webhook(request: web.Request) -> web.Response:
    _, page = _page_of(request)
    name = f"webhooks/{request.match_info['hook']}"
    await ess(request).delete_webhook(name)
    return await _redirect(request, f"{name} removed", page)


async def set_priority(request: web.Request) -> web.Response:
    """An admin's priority change from a queue page (the ESS refuses anyone else)."""
    xid, wid = _ids(request)
    form = await request.post()
    priority_class = str(form.get("priority_class", "")).strip()
    await ess(request).set_priority(xid, wid, priority_class)
    notice = f"work unit {wid} of experiment {xid}: {priority_class} requested"
    return await _redirect(request, notice, "/queues")


async def pause(request: web.Request) -> web.Response:
    form = await request.post()
    await ess(request).pause(str(form.get("reason", "")).strip() or "paused from the dashboard")
    raise web.HTTPSeeOther(back_to("/scheduling", "scheduling paused", "/scheduling"))


async def resume(request: web.Request) -> web.Response:
    await ess(request).resume()
    raise web.HTTPSeeOther(back_to("/scheduling", "scheduling resumed", "/scheduling"))


def add_routes(app: web.Application) -> None:
    unit = r"/experiments/{xid:\d+}/workUnits/{wid:\d+}"
    app.router.add_post(f"{unit}/stop", stop)
    app.router.add_post(f"{unit}/restart", restart)
    app.router.add_post(f"{unit}/priority", set_priority)
    app.router.add_post(r"/experiments/{xid:\d+}/stop", batch_stop)
    app.router.add_post(r"/experiments/{xid:\d+}/restart", batch_restart)
    app.router.add_post(r"/experiments/{xid:\d+}/selected", selected)
    app.router.add_post(r"/experiments/{xid:\d+}/webhooks", add_webhook)
    app.router.add_post(r"/experiments/{xid:\d+}/webhooks/{hook:\d+}/delete", delete_webhook)
    app.router.add_post("/webhooks", add_webhook)
    app.router.add_post(r"/webhooks/{hook:\d+}/delete", delete_webhook)
    app.router.add_post("/scheduling/pause", pause)
    app.router.add_post("/scheduling/resume", resume)
