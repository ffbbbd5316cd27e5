"""Accounting's pure parts (xmc.model.usage): what a unit asks for, and the interval
arithmetic of its runs: preemption, restart, an open run, clipping to a range, and clocks
that disagree (docs/usage.md, decision 0045)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from xmc.model.usage import (
    BUCKETS,
    MAX_BUCKETS,
    OTHER,
    Requested,
    Run,
    Window,
    bounded_label,
    bucket_problem,
    bucket_starts,
    clipped,
    requested_resources,
    usage_of,
    window_problem,
)
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import KubernetesJob, WorkUnit

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
GIB = 1 << 30


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _cpu(job: KubernetesJob, millicores: int, memory: int) -> None:
    job.spec.resources.cpu_resources.cpu_millicores = millicores
    job.spec.resources.cpu_resources.memory_bytes = memory


def unit_with(*jobs: tuple[int, str]) -> WorkUnit:
    """Jobs of (replicas, kind): kind "gpu" (2 × A100), "tpu" (v5e 4x4: 4 chips a host),
    "cpu" (1500m, 2 GiB)."""
    unit = WorkUnit()
    unit.executable.scheduling_constraints.queue_name = "q"
    for i, (replicas, kind) in enumerate(jobs):
        job = unit.executable.jobset.jobs.add(name=f"j{i}", replicas=replicas)
        if kind == "gpu":
            job.spec.resources.gpu_resources.type = "nvidia-tesla-a100"
            job.spec.resources.gpu_resources.count = 2
        elif kind == "tpu":
            job.spec.resources.tpu_resources.type = "tpu-v5-lite-podslice"
            job.spec.resources.tpu_resources.topology = "4x4"
        elif kind == "cpu":
            _cpu(job, 1500, 2 * GIB)
    return unit


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        pytest.param((), Requested(), id="no-jobs"),
        pytest.param(((0, "cpu"),), Requested(1500, 2 * GIB), id="replicas-0-is-1"),
        pytest.param(
            ((3, "gpu"),), Requested(gpus=6, accelerators={"nvidia-tesla-a100": 6}), id="gpus"
        ),
        pytest.param(
            ((4, "tpu"),),
            Requested(tpu_chips=16, accelerators={"tpu-v5-lite-podslice": 16}),
            id="tpu-slice-of-4-hosts",
        ),
        pytest.param(
            ((1, "gpu"), (2, "cpu")),
            Requested(3000, 4 * GIB, 2, 0, {"nvidia-tesla-a100": 2}),
            id="mixed-jobs",
        ),
        pytest.param(((1, "none"),), Requested(), id="asks-nothing"),
    ],
)
def test_requested_resources(jobs: tuple[tuple[int, str], ...], expected: Requested) -> None:
    assert requested_resources(unit_with(*jobs)) == expected


def test_a_pod_counts_its_sidecars_and_its_largest_init_container() -> None:
    unit = unit_with((2, "cpu"))
    job = unit.executable.jobset.jobs[0]
    job.sidecars.add().resources.cpu_resources.cpu_millicores = 500
    big_init = job.init_containers.add()
    big_init.resources.cpu_resources.cpu_millicores = 4000  # more than 1500 + 500
    job.init_containers.add().resources.cpu_resources.memory_bytes = GIB  # less than 2 GiB
    # Per pod: max(1500 + 500, 4000) = 4000m, max(2 GiB, 1 GiB) = 2 GiB; two pods.
    assert requested_resources(unit) == Requested(8000, 4 * GIB)


def test_a_tpu_topology_that_does_not_parse_asks_for_no_chips() -> None:
    unit = unit_with((1, "tpu"))
    unit.executable.jobset.jobs[0].spec.resources.tpu_resources.topology = "big"
    assert requested_resources(unit) == Requested()


WEEK = Window(t(0), t(1000))


@pytest.mark.parametrize(
    ("run", "window", "now", "seconds"),
    [
        pytest.param(Run(t(10), t(40)), WEEK, t(2000), 30, id="inside"),
        pytest.param(Run(t(-50), t(40)), WEEK, t(2000), 40, id="clipped-at-since"),
        pytest.param(Run(t(900), t(1500)), WEEK, t(2000), 100, id="clipped-at-until"),
        pytest.param(Run(t(-50), t(1500)), WEEK, t(2000), 1000, id="spans-the-range"),
        pytest.param(Run(t(-50), t(-10)), WEEK, t(2000), 0, id="before"),
        pytest.param(Run(t(1000), t(1200)), WEEK, t(2000), 0, id="starts-at-until"),
        pytest.param(Run(t(100), None), WEEK, t(300), 200, id="open-counts-to-now"),
        pytest.param(Run(t(100), None), WEEK, t(5000), 900, id="open-clipped-at-until"),
        pytest.param(Run(t(400), None), WEEK, t(300), 0, id="open-started-after-now-skew"),
        pytest.param(Run(t(400), t(350)), WEEK, t(2000), 0, id="ends-before-it-starts-skew"),
    ],
)
def test_clipped(run: Run, window: Window, now: datetime, seconds: float) -> None:
    assert clipped(run, window, now) == timedelta(seconds=seconds)


def test_a_preempted_execution_counts_each_run_and_not_the_requeue() -> None:
    gpus = Requested(gpus=4, accelerators={"a100": 4})
    # Ran 10-40, preempted and re-queued 40-70, ran 70-100.
    usage = usage_of([Run(t(10), t(40)), Run(t(70), t(100))], gpus, WEEK, t(2000))
    assert (usage.runtime_seconds, usage.gpu_seconds) == (60, 240)
    assert usage.accelerator_seconds == {"a100": 240}


def test_a_restarted_unit_counts_each_execution_up_to_its_replacement() -> None:
    cpu = Requested(cpu_millicores=2000, memory_bytes=4 * GIB)
    replaced = usage_of([Run(t(20), t(200))], cpu, WEEK, t(300))  # closed by the restart
    current = usage_of([Run(t(210), None)], cpu, WEEK, t(300))
    assert (replaced.runtime_seconds, current.runtime_seconds) == (180, 90)
    assert replaced.cpu_seconds == 360
    assert replaced.memory_byte_seconds == 180 * 4 * GIB


def test_unknown_resources_count_run_time_only() -> None:
    usage = usage_of([Run(t(0), t(60))], None, WEEK, t(2000))
    assert (usage.runtime_seconds, usage.unknown_runtime_seconds, usage.gpu_seconds) == (60, 60, 0)


def test_window_and_bucket_problems() -> None:
    assert window_problem(t(10), t(10)) is not None
    assert window_problem(t(10), t(11)) is None
    hour = BUCKETS["hour"]
    assert bucket_problem(Window(t(0), t(3600 * MAX_BUCKETS)), hour) is None
    assert "at most 1500" in (bucket_problem(Window(t(0), t(3600 * MAX_BUCKETS + 1)), hour) or "")


def test_buckets_are_aligned_to_utc_days_and_hours() -> None:
    window = Window(t(-30 * 60), t(2 * 3600))  # 11:30 to 14:00
    assert bucket_starts(window, BUCKETS["hour"]) == [t(-3600), t(0), t(3600)]
    assert bucket_starts(window, BUCKETS["day"]) == [T0.replace(hour=0)]


def test_buckets_up_to_the_last_representable_time() -> None:
    end = datetime.max.replace(tzinfo=UTC)
    starts = bucket_starts(Window(end - timedelta(days=2), end), BUCKETS["day"])
    assert len(starts) == 3
    assert starts[-1] <= end


def test_labels_stay_bounded() -> None:
    seen: set[str] = set()
    assert [bounded_label(v, seen, limit=2) for v in ("a", "b", "c", "a")] == ["a", "b", OTHER, "a"]
