"""Accounting (docs/usage.md, decision 0045): what a unit asked for, and how much of it
an execution used over a time range.

Pure: the ESS stores :func:`requested_resources` at create, the database keeps each
execution's running stretches (``execution_runs``, migration 0012), and usage over a range
is each stretch clipped to it (:func:`clipped`) times what the unit asked for. The SQL of
``xmc.store.usage`` restates :func:`clipped` for the aggregates; the per-execution listing
uses it as written (tests check the two agree).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from xmc.model.tpu import tpu_chips_per_host
from xmc_api.cloud.xmanager.v1.resources_pb2 import ResourceSet
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import KubernetesJob, WorkUnit

#: The accelerator type of a GPU or TPU request that names none.
UNNAMED_GPU: Final = "gpu"
UNNAMED_TPU: Final = "tpu"
#: Bucket widths the usage series is drawn in.
BUCKETS: Final[Mapping[str, timedelta]] = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
#: The most buckets one answer holds: a year of days, or two months of hours.
MAX_BUCKETS: Final = 1500
#: Distinct values a Prometheus label takes before the rest are counted as :data:`OTHER`.
MAX_LABEL_VALUES: Final = 64
OTHER: Final = "other"


@dataclass(frozen=True)
class Requested:
    """What one pod, a job or a whole unit asks of the cluster."""

    cpu_millicores: int = 0
    memory_bytes: int = 0
    gpus: int = 0
    tpu_chips: int = 0
    #: Accelerators per type (GPUs and TPU chips alike).
    accelerators: Mapping[str, int] = field(default_factory=dict)

    def __add__(self, other: Requested) -> Requested:
        return Requested(
            self.cpu_millicores + other.cpu_millicores,
            self.memory_bytes + other.memory_bytes,
            self.gpus + other.gpus,
            self.tpu_chips + other.tpu_chips,
            _merge(self.accelerators, other.accelerators, lambda a, b: a + b),
        )

    def times(self, count: int) -> Requested:
        return Requested(
            self.cpu_millicores * count,
            self.memory_bytes * count,
            self.gpus * count,
            self.tpu_chips * count,
            {k: v * count for k, v in self.accelerators.items()},
        )

    def most(self, other: Requested) -> Requested:
        """Per resource, the larger of the two (how an init container counts)."""
        return Requested(
            max(self.cpu_millicores, other.cpu_millicores),
            max(self.memory_bytes, other.memory_bytes),
            max(self.gpus, other.gpus),
            max(self.tpu_chips, other.tpu_chips),
            _merge(self.accelerators, other.accelerators, max),
        )


def _merge(
    a: Mapping[str, int], b: Mapping[str, int], how: Callable[[int, int], int]
) -> dict[str, int]:
    merged = dict(a)
    for key, value in b.items():
        merged[key] = how(merged[key], value) if key in merged else value
    return merged


def container_request(resources: ResourceSet) -> Requested:
    """One container's request, as ``actuator.manifest.resources`` writes it."""
    kind = resources.WhichOneof("resources")
    if kind == "cpu_resources":
        cpu = resources.cpu_resources
        return Requested(cpu_millicores=cpu.cpu_millicores, memory_bytes=cpu.memory_bytes)
    if kind == "gpu_resources" and resources.gpu_resources.count > 0:
        gpu = resources.gpu_resources
        return Requested(gpus=gpu.count, accelerators={gpu.type or UNNAMED_GPU: gpu.count})
    if kind == "tpu_resources":
        tpu = resources.tpu_resources
        chips = tpu_chips_per_host(tpu.topology) or 0
        if chips:
            return Requested(tpu_chips=chips, accelerators={tpu.type or UNNAMED_TPU: chips})
    return Requested()


def pod_request(job: KubernetesJob) -> Requested:
    """A pod's request as Kubernetes counts it: its containers summed, or its largest init
    container where that is more (init containers run one at a time, before the rest)."""
    running = _sum(container_request(s.resources) for s in (job.spec, *job.sidecars))
    init = Requested()
    for spec in job.init_containers:
        init = init.most(container_request(spec.resources))
    return running.most(init)


def requested_resources(work_unit: WorkUnit) -> Requested:
    """What the whole unit asks for while it runs: each job's pod times its replicas (one
    pod per Job, ``replicas`` Jobs; 0 means 1, as the Actuator reads it)."""
    executable = work_unit.executable
    if not executable.HasField("jobset"):
        return Requested()
    return _sum(pod_request(job).times(job.replicas or 1) for job in executable.jobset.jobs)


def _sum(parts: Iterable[Requested]) -> Requested:
    total = Requested()
    for part in parts:
        total = total + part
    return total


def queue_of(work_unit: WorkUnit) -> str:
    """The LocalQueue the unit was submitted to (required at create)."""
    return work_unit.executable.scheduling_constraints.queue_name


@dataclass(frozen=True)
class Window:
    """The time range usage is asked over: [since, until)."""

    since: datetime
    until: datetime


def window_problem(since: datetime, until: datetime) -> str | None:
    if until <= since:
        return f"until ({until.isoformat()}) must be after since ({since.isoformat()})"
    return None


def bucket_problem(window: Window, width: timedelta) -> str | None:
    """Why a series of ``width`` buckets over ``window`` is refused, or None."""
    count = len(bucket_starts(window, width, limit=MAX_BUCKETS + 1))
    if count > MAX_BUCKETS:
        return f"{count}+ buckets over the range; at most {MAX_BUCKETS}: ask for a wider bucket"
    return None


def bucket_starts(window: Window, width: timedelta, *, limit: int = MAX_BUCKETS) -> list[datetime]:
    """The starts of the buckets covering ``window``, aligned to multiples of ``width``
    since the Unix epoch (so days are UTC days), at most ``limit`` of them."""
    epoch = datetime(1970, 1, 1, tzinfo=window.since.tzinfo)
    start = epoch + ((window.since - epoch) // width) * width
    starts: list[datetime] = []
    while start < window.until and len(starts) < limit:
        starts.append(start)
        start += width
    return starts


@dataclass(frozen=True)
class Run:
    """One stretch an execution ran: from ``start`` to ``end`` (None: still running)."""

    start: datetime
    end: datetime | None


def clipped(run: Run, window: Window, now: datetime) -> timedelta:
    """How much of ``run`` falls in ``window``. An open run counts up to ``now``; a run
    whose clocks disagree (ends before it starts, starts after ``now``) counts zero rather
    than a negative time."""
    end = min(run.end if run.end is not None else now, window.until)
    start = max(run.start, window.since)
    return max(end - start, timedelta(0))


@dataclass
class Usage:
    """Usage totals: seconds of each resource and of run time."""

    runtime_seconds: float = 0.0
    cpu_seconds: float = 0.0
    memory_byte_seconds: float = 0.0
    gpu_seconds: float = 0.0
    tpu_chip_seconds: float = 0.0
    accelerator_seconds: dict[str, float] = field(default_factory=dict)
    #: Running time of executions whose unit's resources are unknown (created before
    #: XMC stored them): in runtime_seconds, in no resource.
    unknown_runtime_seconds: float = 0.0

    def add(self, seconds: float, requested: Requested | None) -> None:
        self.runtime_seconds += seconds
        if requested is None:
            self.unknown_runtime_seconds += seconds
            return
        self.cpu_seconds += seconds * requested.cpu_millicores / 1000
        self.memory_byte_seconds += seconds * requested.memory_bytes
        self.gpu_seconds += seconds * requested.gpus
        self.tpu_chip_seconds += seconds * requested.tpu_chips
        for kind, count in requested.accelerators.items():
            self.accelerator_seconds[kind] = self.accelerator_seconds.get(kind, 0.0) + (
                seconds * count
            )


def usage_of(
    runs: Sequence[Run], requested: Requested | None, window: Window, now: datetime
) -> Usage:
    """An execution's usage in ``window`` from its runs (a preempted execution has several)."""
    usage = Usage()
    for run in runs:
        usage.add(clipped(run, window, now).total_seconds(), requested)
    return usage


def bounded_label(value: str, seen: set[str], *, limit: int = MAX_LABEL_VALUES) -> str:
    """``value`` as a metric label: itself while fewer than ``limit`` distinct values were
    used (``seen`` remembers them), :data:`OTHER` after, so a label's cardinality stays
    bounded whatever the callers name their queues."""
    if value in seen:
        return value
    if len(seen) >= limit:
        return OTHER
    seen.add(value)
    return value
