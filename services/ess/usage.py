"""``xmc.v1.UsageService``: who used how much of the cluster over a time range (docs/usage.md,
decision 0045), and the metering loop that counts each run into Prometheus once it ends.

Who may read what is decided in one place, :func:`usage_visible_to`: today any
authenticated caller reads the usage of everyone (like every other read of the ESS).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import structlog

from ess.auth import Identity
from ess.interceptor import caller
from ess.metrics import (
    ACCELERATOR_SECONDS,
    CPU_SECONDS,
    GPU_SECONDS,
    MEMORY_GIB_SECONDS,
    RUN_SECONDS,
)
from xmc.errors import InvalidArgumentError
from xmc.model.usage import (
    BUCKETS,
    Usage,
    Window,
    bounded_label,
    bucket_problem,
    clipped,
    usage_of,
    window_problem,
)
from xmc.names import execution_name, parse_experiment_name
from xmc.store.transactions import (
    ClosedRun,
    ExecutionRuns,
    GroupBy,
    Grouped,
    Store,
    claim_closed_runs,
    fetch_execution_runs,
    fetch_grouped_usage,
    fetch_series,
)
from xmc.timestamps import set_timestamp, to_datetime
from xmc_api.xmc.v1 import usage_pb2, usage_pb2_grpc

log = structlog.get_logger()

#: The range asked for when since is unset: the week before until.
DEFAULT_RANGE: Final = timedelta(days=7)
DEFAULT_LIMIT: Final = 100
MAX_LIMIT: Final = 10_000
_GIB: Final = 1 << 30
_HOUR: Final = 3600.0
_GROUP_BY: Final = {
    usage_pb2.USAGE_GROUP_BY_UNSPECIFIED: GroupBy.USER,
    usage_pb2.USER: GroupBy.USER,
    usage_pb2.EXPERIMENT: GroupBy.EXPERIMENT,
    usage_pb2.QUEUE: GroupBy.QUEUE,
    usage_pb2.WORK_UNIT: GroupBy.WORK_UNIT,
    usage_pb2.EXECUTION: GroupBy.EXECUTION,
}
_BUCKET_NAMES: Final = {usage_pb2.HOUR: "hour", usage_pb2.DAY: "day"}


@dataclass(frozen=True)
class UsageQuery:
    """A GetUsage request, checked and resolved."""

    group_by: GroupBy
    window: Window
    xid: int | None
    bucket: timedelta | None
    limit: int


def usage_visible_to(identity: Identity, query: UsageQuery) -> UsageQuery:
    """The one place that decides whose usage ``identity`` may read: today every
    authenticated caller reads all of it, so the query is answered as asked. A read
    authorization mode narrows it here (or refuses with PERMISSION_DENIED)."""
    del identity
    return query


def _time(request: usage_pb2.GetUsageRequest, field: str) -> datetime | None:
    if not request.HasField(field):
        return None
    try:
        return to_datetime(getattr(request, field))
    except (OverflowError, ValueError):
        raise InvalidArgumentError(f"{field}: not a time XMC can represent") from None


def parse_query(request: usage_pb2.GetUsageRequest, *, now: datetime) -> UsageQuery:
    """Check a request field by field; resolve the defaults (until now, since a week
    before until, 100 groups)."""
    if request.group_by not in _GROUP_BY:
        raise InvalidArgumentError(f"group_by: unknown value {request.group_by}")
    if request.bucket not in (usage_pb2.USAGE_BUCKET_UNSPECIFIED, *_BUCKET_NAMES):
        raise InvalidArgumentError(f"bucket: unknown value {request.bucket}")
    if not 0 <= request.limit <= MAX_LIMIT:
        raise InvalidArgumentError(f"limit: {request.limit} is not in 0..{MAX_LIMIT}")
    until = _time(request, "until") or now
    since = _time(request, "since") or until - DEFAULT_RANGE
    if problem := window_problem(since, until):
        raise InvalidArgumentError(f"since, until: {problem}")
    window = Window(since, until)
    bucket = BUCKETS[_BUCKET_NAMES[request.bucket]] if request.bucket in _BUCKET_NAMES else None
    if bucket is not None and (problem := bucket_problem(window, bucket)):
        raise InvalidArgumentError(f"bucket: {problem}")
    xid = (
        parse_experiment_name(request.experiment, field="experiment")
        if request.experiment
        else None
    )
    return UsageQuery(
        _GROUP_BY[request.group_by], window, xid, bucket, request.limit or DEFAULT_LIMIT
    )


def usage_message(usage: Usage, executions: int) -> usage_pb2.Usage:
    return usage_pb2.Usage(
        runtime_hours=usage.runtime_seconds / _HOUR,
        cpu_hours=usage.cpu_seconds / _HOUR,
        memory_gib_hours=usage.memory_byte_seconds / _GIB / _HOUR,
        gpu_hours=usage.gpu_seconds / _HOUR,
        tpu_chip_hours=usage.tpu_chip_seconds / _HOUR,
        accelerator_hours={k: v / _HOUR for k, v in usage.accelerator_seconds.items()},
        unknown_runtime_hours=usage.unknown_runtime_seconds / _HOUR,
        executions=executions,
    )


def _ranked(key: tuple[str, Usage, int]) -> tuple[float, float, str]:
    return (-key[1].gpu_seconds, -key[1].runtime_seconds, key[0])


def per_execution(
    executions: Sequence[ExecutionRuns], window: Window, now: datetime, limit: int
) -> Grouped:
    """The per-execution listing, from each execution's runs (``usage_of``)."""
    rows: list[tuple[str, Usage, int]] = []
    total = Usage()
    for execution in executions:
        usage = usage_of(execution.runs, execution.requested, window, now)
        ran = int(usage.runtime_seconds > 0)
        rows.append((execution_name(execution.xid, execution.wid, execution.eid), usage, ran))
        for run in execution.runs:
            total.add(clipped(run, window, now).total_seconds(), execution.requested)
    rows.sort(key=_ranked)
    return Grouped(rows[:limit], total, sum(r[2] for r in rows), len(rows) > limit)


class UsageService(usage_pb2_grpc.UsageServiceServicer):
    def __init__(self, store: Store, *, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def GetUsage(
        self, request: usage_pb2.GetUsageRequest, context: Any
    ) -> usage_pb2.UsageReport:
        now = self._clock()
        query = usage_visible_to(caller(), parse_query(request, now=now))
        window = query.window
        async with self._store.connection() as conn:
            if query.group_by is GroupBy.EXECUTION:
                runs = await fetch_execution_runs(conn, window, xid=query.xid)
                grouped = per_execution(runs, window, now, query.limit)
            else:
                grouped = await fetch_grouped_usage(
                    conn, query.group_by, window, now=now, xid=query.xid, limit=query.limit
                )
            series = (
                await fetch_series(conn, window, query.bucket, now=now, xid=query.xid)
                if query.bucket is not None
                else []
            )
        report = usage_pb2.UsageReport(
            group_by=request.group_by or usage_pb2.USER,
            truncated=grouped.truncated,
            total=usage_message(grouped.total, grouped.total_executions),
        )
        for key, usage, executions in grouped.groups:
            report.groups.add(key=key, usage=usage_message(usage, executions))
        for start, usage, executions in series:
            bucket = report.buckets.add(usage=usage_message(usage, executions))
            set_timestamp(bucket.start_time, start)
        set_timestamp(report.since, window.since)
        set_timestamp(report.until, window.until)
        set_timestamp(report.now, now)
        return report


class Meter:
    """Counts each run into the Prometheus counters once it has ended (labels: the queue
    and the accelerator type, each bounded by ``bounded_label``)."""

    def __init__(self, store: Store, *, interval: float = 5.0, batch: int = 1000) -> None:
        self._store = store
        self._interval = interval
        self._batch = batch
        self._queues: set[str] = set()
        self._kinds: set[str] = set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                while len(await self.meter_once()) == self._batch:
                    pass
            except Exception:
                log.exception("metering runs failed; trying again next interval")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._interval)

    async def meter_once(self) -> list[ClosedRun]:
        async with self._store.transaction() as conn:
            runs = await claim_closed_runs(conn, limit=self._batch)
        for run in runs:
            self.count(run)
        return runs

    def count(self, run: ClosedRun) -> None:
        queue = bounded_label(run.queue or "", self._queues)
        RUN_SECONDS.labels(queue).inc(run.seconds)
        requested = run.requested
        if requested is None:
            return
        CPU_SECONDS.labels(queue).inc(run.seconds * requested.cpu_millicores / 1000)
        MEMORY_GIB_SECONDS.labels(queue).inc(run.seconds * requested.memory_bytes / _GIB)
        GPU_SECONDS.labels(queue).inc(run.seconds * requested.gpus)
        for kind, count in requested.accelerators.items():
            label = bounded_label(kind, self._kinds)
            ACCELERATOR_SECONDS.labels(queue, label).inc(run.seconds * count)
