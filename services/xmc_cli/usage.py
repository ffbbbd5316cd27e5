"""``xmc usage``: GPU-hours and the rest per user, experiment, queue, unit or execution over
a time range, from the ESS's UsageService (docs/usage.md)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

import click
from google.protobuf.timestamp_pb2 import Timestamp

from xmc_api.xmc.v1 import usage_pb2, usage_pb2_grpc

from .client import Client, experiment_name, fail, fmt_time, pass_client, print_table, to_dict

_GROUPS: Final = {
    "user": usage_pb2.USER,
    "experiment": usage_pb2.EXPERIMENT,
    "queue": usage_pb2.QUEUE,
    "work-unit": usage_pb2.WORK_UNIT,
    "execution": usage_pb2.EXECUTION,
}
_BUCKETS: Final = {"hour": usage_pb2.HOUR, "day": usage_pb2.DAY}
_AGO: Final = re.compile(r"^(\d+)([mhdw])$")
_UNITS: Final = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_when(value: str, now: datetime) -> datetime:
    """``7d``, ``24h``, ``90m``, ``2w`` (that long before ``now``), or an ISO 8601 time
    (UTC when it names no zone); ValueError on anything else."""
    if match := _AGO.match(value.strip()):
        return now - timedelta(**{_UNITS[match[2]]: int(match[1])})
    parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _timestamp(option: str, value: str | None, now: datetime) -> Timestamp | None:
    if value is None:
        return None
    try:
        when = parse_when(value, now)
    except ValueError:
        fail(f"{option}: {value!r} is neither a time (2026-12-01T00:00Z) nor an age (7d, 24h)")
    stamp = Timestamp()
    stamp.FromDatetime(when)
    return stamp


def hours(value: float) -> str:
    return f"{value:,.2f}"


def usage_row(key: str, usage: usage_pb2.Usage) -> list[str]:
    kinds = ", ".join(f"{k} {hours(v)}" for k, v in sorted(usage.accelerator_hours.items()))
    return [
        key,
        hours(usage.gpu_hours),
        hours(usage.tpu_chip_hours),
        hours(usage.cpu_hours),
        hours(usage.memory_gib_hours),
        hours(usage.runtime_hours),
        str(usage.executions),
        kinds,
    ]


_COLUMNS: Final = [
    "gpu-h",
    "tpu-chip-h",
    "cpu-h",
    "mem-GiB-h",
    "run-h",
    "executions",
    "by accelerator (h)",
]


def _print_report(report: usage_pb2.UsageReport, by: str) -> None:
    click.echo(f"usage from {fmt_time(report.since)} to {fmt_time(report.until)}, by {by}")
    rows = [usage_row(g.key or "(none)", g.usage) for g in report.groups]
    rows.append(usage_row("TOTAL", report.total))
    print_table(None, [by, *_COLUMNS], rows)
    if report.truncated:
        click.echo(f"(the {len(report.groups)} largest groups; raise --limit for more)")
    if report.total.unknown_runtime_hours:
        click.echo(
            f"{hours(report.total.unknown_runtime_hours)} run-hours are of units created "
            "before XMC stored resources: counted in run-h only"
        )
    if report.buckets:
        print_table(
            None,
            ["bucket", *_COLUMNS],
            [usage_row(fmt_time(b.start_time), b.usage) for b in report.buckets],
        )


@click.command("usage")
@click.option("--by", "by", type=click.Choice(list(_GROUPS)), default="user", show_default=True)
@click.option("--since", help="Start: an ISO 8601 time or an age (7d, 24h); default: until − 7d.")
@click.option("--until", help="End (exclusive): an ISO 8601 time or an age; default: now.")
@click.option("--experiment", help="Only this experiment (7 or experiments/7).")
@click.option("--bucket", type=click.Choice(list(_BUCKETS)), help="Also a series over time.")
@click.option("--limit", type=click.IntRange(min=1, max=10_000), help="Most groups (100).")
@click.option("--json", "as_json", is_flag=True, help="JSON output (the same as -o json).")
@pass_client
def usage(
    client: Client,
    by: str,
    since: str | None,
    until: str | None,
    experiment: str | None,
    bucket: str | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """GPU-hours, TPU-chip-hours, CPU-hours, memory GiB-hours and run time per user,
    experiment, queue, work unit or execution: what each asked for × the time it ran."""
    if as_json:
        client.output = "json"
    now = datetime.now(UTC)
    request = usage_pb2.GetUsageRequest(
        group_by=_GROUPS[by],
        since=_timestamp("--since", since, now),
        until=_timestamp("--until", until, now),
        experiment=experiment_name(experiment) if experiment else "",
        bucket=_BUCKETS[bucket] if bucket else usage_pb2.USAGE_BUCKET_UNSPECIFIED,
        limit=limit or 0,
    )
    stub = usage_pb2_grpc.UsageServiceStub(client.channel())
    report: usage_pb2.UsageReport = client.call(stub.GetUsage, request)
    client.show(to_dict(report), lambda: _print_report(report, by))
