"""``xmc wu timeline``: a work unit's executions, each state change and the time spent in
each state, from the ESS's TimelineService (docs/timelines.md)."""

from __future__ import annotations

from datetime import timedelta

import click
from google.protobuf.duration_pb2 import Duration

from xmc_api.xmc.v1 import timeline_pb2, timeline_pb2_grpc

from .client import Client, fmt_time, pass_client, print_table, state_name, to_dict


def fmt_duration(value: timedelta) -> str:
    """Whole seconds, largest unit first: ``0s``, ``42s``, ``3m04s``, ``2h00m05s``."""
    seconds = int(value.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{seconds:02d}s"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


def _phase(label: str, value: Duration, ongoing: bool, present: bool) -> str:
    if not present:
        return f"{label} —"
    suffix = " (ongoing)" if ongoing else ""
    return f"{label} {fmt_duration(value.ToTimedelta())}{suffix}"


def execution_summary(execution: timeline_pb2.ExecutionTimeline) -> str:
    """One line: the execution, where it is, and its three phases (docs/timelines.md)."""
    p = execution.phases
    status = "terminal" if execution.terminal else "superseded" if execution.superseded else "live"
    parts = [
        f"execution {execution.execution_id}: {state_name(execution.state)} ({status})",
        _phase("queue wait", p.queue_wait, p.queue_wait_ongoing, p.HasField("queue_wait")),
        _phase("start-up", p.startup, p.startup_ongoing, p.HasField("startup")),
        _phase("run", p.run, p.run_ongoing, p.HasField("run")),
        f"requeued {fmt_duration(p.requeue.ToTimedelta())}, {p.preemptions} preemption(s)",
    ]
    if execution.retried_after or execution.retry_verdict:  # under a retry policy
        attempt = f"attempt {execution.attempt or 1}"
        if execution.retried_after:
            attempt += f", retried after {execution.retried_after}"
        parts.insert(1, attempt)
    return " · ".join(parts)


def _print_timeline(timeline: timeline_pb2.WorkUnitTimeline) -> None:
    click.echo(f"{timeline.name} (now {fmt_time(timeline.now)})")
    for execution in timeline.executions:
        rows = [
            [
                fmt_time(change.time),
                state_name(change.from_state) if change.from_state else "—",  # creation
                state_name(change.to_state),
                fmt_duration(segment.duration.ToTimedelta()) + (" …" if segment.ongoing else ""),
                change.principal or "—",
                change.writer,
            ]
            for change, segment in zip(execution.changes, execution.segments, strict=True)
        ]
        click.echo(execution_summary(execution))
        totals = (
            f"{state_name(t.state)} {fmt_duration(t.duration.ToTimedelta())}"
            for t in execution.state_totals
        )
        click.echo("  in each state: " + " · ".join(totals))
        if execution.retry_verdict:
            click.echo(f"  retry: {execution.retry_verdict} ({execution.retry_reason})")
        print_table(None, ["time", "from", "to", "in state", "by", "writer"], rows)


@click.command("timeline")
@click.argument("xid", type=click.IntRange(min=1))
@click.argument("wid", type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="JSON output (the same as -o json).")
@pass_client
def wu_timeline(client: Client, xid: int, wid: int, as_json: bool) -> None:
    """Each execution of work unit WID of experiment XID: one line per state change, with
    the time spent in the state it entered (… : still in it), and the phase durations."""
    if as_json:
        client.output = "json"
    stub = timeline_pb2_grpc.TimelineServiceStub(client.channel())
    timeline: timeline_pb2.WorkUnitTimeline = client.call(
        stub.GetWorkUnitTimeline,
        timeline_pb2.GetWorkUnitTimelineRequest(name=f"experiments/{xid}/workUnits/{wid}"),
    )
    client.show(to_dict(timeline), lambda: _print_timeline(timeline))
