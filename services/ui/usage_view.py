"""The /usage page (docs/usage.md): the query its form asks, the table of groups, and a
bar chart of one resource per bucket drawn as plain SVG (no chart library, no CDN).

Pure: the page handler reads the query string through :func:`usage_query`, asks the ESS,
and renders what :func:`usage_rows` and :func:`usage_chart` return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from google.protobuf.timestamp_pb2 import Timestamp

from xmc.errors import InvalidArgumentError
from xmc.model.usage import parse_when
from xmc_api.xmc.v1 import usage_pb2

GROUPS: Final = {
    "user": usage_pb2.USER,
    "experiment": usage_pb2.EXPERIMENT,
    "queue": usage_pb2.QUEUE,
    "work-unit": usage_pb2.WORK_UNIT,
}
BUCKETS: Final = {"day": usage_pb2.DAY, "hour": usage_pb2.HOUR}
#: What the chart can draw: field of Usage, label.
METRICS: Final = {
    "gpu": ("gpu_hours", "GPU-hours"),
    "tpu": ("tpu_chip_hours", "TPU-chip-hours"),
    "cpu": ("cpu_hours", "CPU-hours"),
    "memory": ("memory_gib_hours", "memory GiB-hours"),
    "runtime": ("runtime_hours", "run-hours"),
}
#: Chart geometry (SVG user units).
WIDTH: Final = 720
HEIGHT: Final = 200
LEFT: Final = 56
BOTTOM: Final = 24


@dataclass(frozen=True)
class UsageForm:
    """The page's query, as the form shows it back."""

    by: str = "user"
    #: Empty: the ESS's default, a week before until.
    since: str = ""
    until: str = ""
    bucket: str = "day"
    metric: str = "gpu"
    experiment: str = ""


def _choice(
    query: Mapping[str, str], name: str, choices: Mapping[str, object], default: str
) -> str:
    value = query.get(name) or default
    if value not in choices:
        raise InvalidArgumentError(f"{name}: {value!r} is not one of {', '.join(choices)}")
    return value


def _stamp(name: str, text: str, now: datetime) -> Timestamp | None:
    if not text:
        return None
    try:
        when = parse_when(text, now)
    except ValueError:
        raise InvalidArgumentError(
            f"{name}: {text!r} is neither a time (2026-12-01T00:00Z) nor an age (7d, 24h)"
        ) from None
    stamp = Timestamp()
    stamp.FromDatetime(when)
    return stamp


def usage_query(
    query: Mapping[str, str], now: datetime
) -> tuple[UsageForm, usage_pb2.GetUsageRequest]:
    """The form's values and the request they make; INVALID_ARGUMENT naming the field."""
    experiment = (query.get("experiment") or "").strip()
    if experiment and not experiment.isdigit():
        raise InvalidArgumentError(f"experiment: {experiment!r} is not an experiment id")
    form = UsageForm(
        by=_choice(query, "by", GROUPS, "user"),
        since=(query.get("since") or "").strip(),
        until=(query.get("until") or "").strip(),
        bucket=_choice(query, "bucket", BUCKETS, "day"),
        metric=_choice(query, "metric", METRICS, "gpu"),
        experiment=experiment,
    )
    request = usage_pb2.GetUsageRequest(
        group_by=GROUPS[form.by],
        since=_stamp("since", form.since, now),
        until=_stamp("until", form.until, now),
        bucket=BUCKETS[form.bucket],
        experiment=f"experiments/{experiment}" if experiment else "",
    )
    return form, request


def hours(value: float) -> str:
    return f"{value:,.2f}"


@dataclass(frozen=True)
class UsageRow:
    key: str
    #: Where the key links to (an experiment's or unit's page), or "".
    href: str
    gpu: str
    tpu: str
    cpu: str
    memory: str
    runtime: str
    executions: int
    accelerators: str


def _href(key: str) -> str:
    return f"/{key}" if key.startswith("experiments/") else ""


def usage_row(key: str, usage: usage_pb2.Usage) -> UsageRow:
    kinds = sorted(usage.accelerator_hours.items())
    return UsageRow(
        key=key,
        href=_href(key),
        gpu=hours(usage.gpu_hours),
        tpu=hours(usage.tpu_chip_hours),
        cpu=hours(usage.cpu_hours),
        memory=hours(usage.memory_gib_hours),
        runtime=hours(usage.runtime_hours),
        executions=usage.executions,
        accelerators=", ".join(f"{k} {hours(v)}" for k, v in kinds),
    )


def usage_rows(report: usage_pb2.UsageReport) -> list[UsageRow]:
    return [usage_row(g.key or "(no queue)", g.usage) for g in report.groups]


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    #: The bucket's start and value, for the tooltip and the axis.
    label: str
    value: str


@dataclass(frozen=True)
class Chart:
    title: str
    bars: list[Bar]
    #: The largest value, the top of the y axis.
    top: str
    #: A few of the buckets' labels under the x axis: (x, text).
    ticks: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom: int = BOTTOM


def _bucket_label(start: datetime, width: timedelta) -> str:
    return start.strftime("%Y-%m-%d" if width >= timedelta(days=1) else "%m-%d %H:00")


def usage_chart(
    buckets: Sequence[usage_pb2.UsageBucketTotal],
    *,
    since: datetime,
    until: datetime,
    bucket: str,
    metric: str,
) -> Chart:
    """Bars of ``metric`` per bucket over [since, until), empty buckets drawn as gaps."""
    field, label = METRICS[metric]
    width = timedelta(days=1) if bucket == "day" else timedelta(hours=1)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    first = epoch + ((since - epoch) // width) * width
    slots = max(1, -(-(until - first) // width))
    values = {b.start_time.ToDatetime(tzinfo=UTC): float(getattr(b.usage, field)) for b in buckets}
    top = max(values.values(), default=0.0)
    plot_width, plot_height = WIDTH - LEFT, HEIGHT - BOTTOM
    step = plot_width / slots
    bars: list[Bar] = []
    for start, value in sorted(values.items()):
        index = (start - first) // width
        height = plot_height * value / top if top > 0 else 0.0
        bars.append(
            Bar(
                x=round(LEFT + index * step + step * 0.1, 2),
                y=round(plot_height - height, 2),
                width=round(step * 0.8, 2),
                height=round(height, 2),
                label=_bucket_label(start, width),
                value=hours(value),
            )
        )
    every = max(1, slots // 6)
    ticks = [
        (round(LEFT + i * step + step / 2, 2), _bucket_label(first + i * width, width))
        for i in range(0, slots, every)
    ]
    return Chart(title=f"{label} per {bucket}", bars=bars, top=hours(top), ticks=ticks)
