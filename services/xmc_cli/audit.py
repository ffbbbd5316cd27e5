"""``xmc audit`` (admins: who changed what, docs/audit.md) and the "created / restarted /
stopped by" lines of ``xmc wu get``, through the ESS's AuditService and TimelineService."""

from __future__ import annotations

from datetime import datetime

import click
from google.protobuf.timestamp_pb2 import Timestamp

from xmc.errors import InvalidArgumentError
from xmc.model.audit import parse_time_bound
from xmc.timestamps import set_timestamp, utc_now
from xmc_api.xmc.v1 import audit_pb2, audit_pb2_grpc, timeline_pb2, timeline_pb2_grpc

from .client import Client, experiment_name, fmt_time, pass_client, print_table, to_dict


def parse_time(text: str, *, now: datetime, option: str) -> datetime | None:
    """``--since``/``--until`` as :func:`parse_time_bound` reads them; a usage error
    naming the option otherwise."""
    try:
        return parse_time_bound(text, now=now, field=option)
    except InvalidArgumentError as error:
        raise click.BadParameter(str(error), param_hint=option) from None


def _timestamp(value: datetime) -> Timestamp:
    stamp = Timestamp()
    set_timestamp(stamp, value)
    return stamp


@click.command("audit")
@click.option("--principal", default="", help="Only this email's or account's changes.")
@click.option("--experiment", default="", help="Only this experiment's (7 or experiments/7).")
@click.option("--since", default="", help="From then on: 30m, 2h, 7d or an ISO time.")
@click.option("--until", default="", help="Before then: 30m, 2h, 7d or an ISO time.")
@click.option("--filter", "filter_", default="", help='e.g. action = "StopWorkUnit"')
@click.option("--limit", default=100, show_default=True, help="Most events to show.")
@pass_client
def audit(
    client: Client,
    principal: str,
    experiment: str,
    since: str,
    until: str,
    filter_: str,
    limit: int,
) -> None:
    """Who changed what (admins only): creates, stops, restarts, edits, policies, webhooks,
    pause and resume, newest first, each with its request id."""
    now = utc_now()
    request = audit_pb2.ListAuditEventsRequest(
        principal=principal,
        experiment=experiment_name(experiment) if experiment else "",
        filter=filter_,
        page_size=min(limit, 1000),
    )
    for field, text, option in (
        (request.since, since, "--since"),
        (request.until, until, "--until"),
    ):
        bound = parse_time(text, now=now, option=option)
        if bound is not None:
            field.CopyFrom(_timestamp(bound))
    stub = audit_pb2_grpc.AuditServiceStub(client.channel())
    events: list[audit_pb2.AuditEvent] = []
    while len(events) < limit:
        found = client.call(stub.ListAuditEvents, request)
        events.extend(found.events)
        request.page_token = found.next_page_token
        if not request.page_token:
            break
    events = events[:limit]
    rows = [
        [fmt_time(e.time), e.principal, e.action, e.target, e.request_id, e.detail] for e in events
    ]
    client.show(
        [to_dict(e) for e in events],
        lambda: print_table(
            None, ["time", "principal", "action", "target", "request id", "detail"], rows
        ),
    )


def fetch_attributions(client: Client, work_unit: str) -> timeline_pb2.WorkUnitTimeline:
    """The unit's timeline, for its created / restarted / stopped by."""
    stub = timeline_pb2_grpc.TimelineServiceStub(client.channel())
    found: timeline_pb2.WorkUnitTimeline = client.call(
        stub.GetWorkUnitTimeline, timeline_pb2.GetWorkUnitTimelineRequest(name=work_unit)
    )
    return found


def attribution_lines(timeline: timeline_pb2.WorkUnitTimeline) -> list[str]:
    """ "stopped by alice@example.com at 2026-12-03 08:01:02 (request r-1)", and the like."""
    lines = []
    for verb in ("created", "restarted", "stopped"):
        if timeline.HasField(verb):
            who: timeline_pb2.Attribution = getattr(timeline, verb)
            request = f" (request {who.request_id})" if who.request_id else ""
            lines.append(f"{verb} by {who.principal} at {fmt_time(who.time)}{request}")
    return lines


def attributions_dict(timeline: timeline_pb2.WorkUnitTimeline) -> dict[str, object]:
    return {
        verb: to_dict(getattr(timeline, verb))
        for verb in ("created", "restarted", "stopped")
        if timeline.HasField(verb)
    }
