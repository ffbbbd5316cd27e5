"""The /usage page (docs/usage.md): usage per user, experiment, queue or unit over a range,
with a chart per bucket. The layout is ``ui.usage_view``'s; this is the handler."""

from __future__ import annotations

from aiohttp import web

from ui.context import ess, render
from ui.gateway import UiError
from ui.usage_view import BUCKETS, GROUPS, METRICS, usage_chart, usage_query, usage_row, usage_rows
from xmc.errors import InvalidArgumentError
from xmc.timestamps import to_datetime, utc_now


async def usage(request: web.Request) -> web.Response:
    try:
        form, query = usage_query(request.query, utc_now())
    except InvalidArgumentError as error:
        raise UiError(400, str(error)) from None
    report = await ess(request).usage(query)
    chart = usage_chart(
        report.buckets,
        since=to_datetime(report.since),
        until=to_datetime(report.until),
        bucket=form.bucket,
        metric=form.metric,
    )
    context = {
        "form": form,
        "groups": GROUPS,
        "buckets": BUCKETS,
        "metrics": {name: label for name, (_, label) in METRICS.items()},
        "rows": usage_rows(report),
        "total": usage_row("total", report.total),
        "truncated": report.truncated,
        "unknown": report.total.unknown_runtime_hours,
        "since": to_datetime(report.since).isoformat(timespec="minutes"),
        "until": to_datetime(report.until).isoformat(timespec="minutes"),
        "chart": chart,
    }
    return render(request, "usage.html", context)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/usage", usage, name="usage")
