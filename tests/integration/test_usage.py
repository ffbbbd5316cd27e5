"""UsageService over real gRPC against a real ESS and Postgres (docs/usage.md): resources
stored at create, runs kept by migration 0012's trigger through preemption, restart and
an open run, grouped by user, experiment, queue, unit and execution, clipped to a range,
the SQL aggregates agreeing with the per-execution model, refusals, and the counters."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg
import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from prometheus_client import REGISTRY

from tests.integration.ess_harness import Ess, metadata
from tests.integration.support import T0, minimal_work_unit
from tests.integration.test_ess_api import expect_error
from tests.integration.test_timelines import observe
from tests.waiting import eventually
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.xmc.v1 import usage_pb2, usage_pb2_grpc

S = WorkUnitState
ALICE, BOB = metadata("alice"), metadata("bob")
HOUR = 3600.0
GIB = 1 << 30


def gpu_unit() -> WorkUnit:
    """Two Jobs of one pod, each asking for 2 A100s: 4 GPUs."""
    unit = minimal_work_unit(queue="gpu-queue")
    job = unit.executable.jobset.jobs[0]
    job.replicas = 2
    job.spec.resources.gpu_resources.type = "nvidia-tesla-a100"
    job.spec.resources.gpu_resources.count = 2
    return unit


def cpu_unit() -> WorkUnit:
    unit = minimal_work_unit(queue="cpu-queue")
    cpu = unit.executable.jobset.jobs[0].spec.resources.cpu_resources
    cpu.cpu_millicores, cpu.memory_bytes = 2000, 4 * GIB
    return unit


def tpu_unit() -> WorkUnit:
    """A v5e 2x4 slice: two hosts of 4 chips: 8 chips."""
    unit = minimal_work_unit(queue="tpu-queue")
    job = unit.executable.jobset.jobs[0]
    job.replicas = 2
    job.spec.resources.tpu_resources.type = "tpu-v5-lite-podslice"
    job.spec.resources.tpu_resources.topology = "2x4"
    return unit


@dataclass(frozen=True)
class Scenario:
    alice: str  # experiment
    bob: str
    gpu: str  # units
    cpu: str
    tpu: str
    ahead: str


async def create(ess: Ess, parent: str, unit: WorkUnit, who: tuple[tuple[str, str], ...]) -> str:
    operation = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=unit), metadata=who
    )
    name: str = operation.name.split("/operations/")[0]
    return name


async def build(ess: Ess) -> Scenario:
    """Seconds after T0; the ESS clock ends at T0 + 300 s.

    - gpu (alice, 4 × A100): runs 10-40, preempted, runs 70-100, completes; restarted at
      200, runs from 210 (open): 30 + 30 + 90 = 150 s.
    - cpu (alice, 2 CPUs, 4 GiB): runs from 20, restarted at 200 while running: 180 s.
    - tpu (bob, 8 chips): runs 50-110: 60 s.
    - ahead (bob): the Reconciler's clock is ahead: RUNNING at 350, after now: 0 s.
    """
    alice = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    bob = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=BOB
    )
    gpu = await create(ess, alice.name, gpu_unit(), ALICE)
    cpu = await create(ess, alice.name, cpu_unit(), ALICE)
    tpu = await create(ess, bob.name, tpu_unit(), BOB)
    ahead = await create(ess, bob.name, minimal_work_unit(), BOB)
    for state, at in [
        (S.SCHEDULING, 2),
        (S.RUNNING, 10),
        (S.DESCHEDULING, 40),
        (S.SCHEDULING, 45),
        (S.RUNNING, 70),
        (S.COMPLETED, 100),
    ]:
        await observe(ess, gpu, 1, state, at)
    await observe(ess, cpu, 1, S.RUNNING, 20)
    await observe(ess, tpu, 1, S.RUNNING, 50)
    await observe(ess, tpu, 1, S.COMPLETED, 110)
    await observe(ess, ahead, 1, S.RUNNING, 350)
    ess.clock.advance(200)
    for name in (gpu, cpu):
        await ess.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=name), metadata=ALICE)
    await observe(ess, gpu, 2, S.RUNNING, 210)
    ess.clock.advance(100)
    return Scenario(alice.name, bob.name, gpu, cpu, tpu, ahead)


def stub(ess: Ess) -> usage_pb2_grpc.UsageServiceStub:
    return usage_pb2_grpc.UsageServiceStub(ess.channel)


async def get_usage(ess: Ess, **fields: object) -> usage_pb2.UsageReport:
    report: usage_pb2.UsageReport = await stub(ess).GetUsage(
        usage_pb2.GetUsageRequest(**fields), metadata=BOB
    )
    return report


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def by_key(report: usage_pb2.UsageReport) -> dict[str, usage_pb2.Usage]:
    return {g.key: g.usage for g in report.groups}


async def test_resources_are_stored_at_create(ess: Ess) -> None:
    scenario = await build(ess)
    conn = await asyncpg.connect(ess.database_url)
    try:
        rows = await conn.fetch(
            "SELECT wid, queue, cpu_millicores, memory_bytes, gpus, tpu_chips, "
            "accelerators::text AS kinds FROM work_unit_resources ORDER BY xid, wid"
        )
    finally:
        await conn.close()
    assert [tuple(r) for r in rows] == [
        (1, "gpu-queue", 0, 0, 4, 0, '{"nvidia-tesla-a100": 4}'),
        (2, "cpu-queue", 2000, 4 * GIB, 0, 0, "{}"),
        (1, "tpu-queue", 0, 0, 0, 8, '{"tpu-v5-lite-podslice": 8}'),
        (2, "cpu-queue", 0, 0, 0, 0, "{}"),
    ]
    assert scenario.gpu.endswith("/workUnits/1")


async def test_usage_by_user_experiment_queue_unit_and_execution(ess: Ess) -> None:
    s = await build(ess)
    users = await get_usage(ess)
    assert users.group_by == usage_pb2.USER
    assert users.now.ToDatetime(tzinfo=T0.tzinfo) == at(300)
    assert users.until.ToDatetime(tzinfo=T0.tzinfo) == at(300)
    assert users.since.ToDatetime(tzinfo=T0.tzinfo) == at(300) - timedelta(days=7)
    alice, bob = by_key(users)["alice@example.com"], by_key(users)["bob@example.com"]
    assert [g.key for g in users.groups] == ["alice@example.com", "bob@example.com"]
    assert alice.gpu_hours == pytest.approx(150 * 4 / HOUR)
    assert alice.accelerator_hours["nvidia-tesla-a100"] == pytest.approx(600 / HOUR)
    assert alice.cpu_hours == pytest.approx(180 * 2 / HOUR)
    assert alice.memory_gib_hours == pytest.approx(180 * 4 / HOUR)
    assert alice.runtime_hours == pytest.approx(330 / HOUR)
    assert alice.executions == 3
    assert bob.tpu_chip_hours == pytest.approx(480 / HOUR)
    assert dict(bob.accelerator_hours) == pytest.approx({"tpu-v5-lite-podslice": 480 / HOUR})
    assert (bob.gpu_hours, bob.executions) == (0, 1)  # the run ahead of now counts nothing
    assert users.total.runtime_hours == pytest.approx(390 / HOUR)
    assert users.total.executions == 4

    experiments = by_key(await get_usage(ess, group_by=usage_pb2.EXPERIMENT))
    assert experiments[s.alice].gpu_hours == pytest.approx(alice.gpu_hours)
    queues = by_key(await get_usage(ess, group_by=usage_pb2.QUEUE))
    assert set(queues) == {"gpu-queue", "cpu-queue", "tpu-queue"}
    assert queues["cpu-queue"].runtime_hours == pytest.approx(180 / HOUR)
    units = by_key(await get_usage(ess, group_by=usage_pb2.WORK_UNIT, experiment=s.alice))
    assert set(units) == {s.gpu, s.cpu}
    executions = by_key(await get_usage(ess, group_by=usage_pb2.EXECUTION))
    assert executions[f"{s.gpu}/executions/1"].runtime_hours == pytest.approx(60 / HOUR)
    assert executions[f"{s.gpu}/executions/2"].runtime_hours == pytest.approx(90 / HOUR)
    assert executions[f"{s.cpu}/executions/1"].runtime_hours == pytest.approx(180 / HOUR)
    assert f"{s.cpu}/executions/2" not in executions  # never ran
    limited = await get_usage(ess, group_by=usage_pb2.WORK_UNIT, limit=1)
    assert ([g.key for g in limited.groups], limited.truncated) == ([s.gpu], True)
    assert limited.total.runtime_hours == pytest.approx(390 / HOUR)


async def test_a_range_clips_every_run(ess: Ess) -> None:
    s = await build(ess)
    report = await get_usage(
        ess, group_by=usage_pb2.WORK_UNIT, since=_ts(at(30)), until=_ts(at(80))
    )
    units = by_key(report)
    # gpu: 30-40 and 70-80; cpu: 30-80; tpu: 50-80.
    assert units[s.gpu].runtime_hours == pytest.approx(20 / HOUR)
    assert units[s.cpu].runtime_hours == pytest.approx(50 / HOUR)
    assert units[s.tpu].runtime_hours == pytest.approx(30 / HOUR)
    later = await get_usage(ess, since=_ts(at(250)), until=_ts(at(1000)))
    # Only the open run of gpu's execution 2, up to now (300).
    assert later.total.runtime_hours == pytest.approx(50 / HOUR)


async def test_the_sql_aggregates_agree_with_the_per_execution_model(ess: Ess) -> None:
    await build(ess)
    for since, until in [(0, 1000), (30, 80), (95, 215), (250, 260), (400, 500)]:
        window = {"since": _ts(at(since)), "until": _ts(at(until))}
        sql = (await get_usage(ess, group_by=usage_pb2.QUEUE, **window)).total
        model = (await get_usage(ess, group_by=usage_pb2.EXECUTION, **window)).total
        for field in ("runtime_hours", "cpu_hours", "memory_gib_hours", "gpu_hours"):
            assert math.isclose(getattr(sql, field), getattr(model, field), abs_tol=1e-9)
        assert sql.executions == model.executions
        assert dict(sql.accelerator_hours) == pytest.approx(dict(model.accelerator_hours))


async def test_a_series_in_buckets(ess: Ess) -> None:
    await build(ess)
    report = await get_usage(
        ess, bucket=usage_pb2.HOUR, since=_ts(T0 - timedelta(hours=2)), until=_ts(at(3600))
    )
    [bucket] = report.buckets  # everything ran between 12:00 and 12:05
    assert bucket.start_time.ToDatetime(tzinfo=T0.tzinfo) == T0
    assert bucket.usage.runtime_hours == pytest.approx(report.total.runtime_hours)
    assert bucket.usage.gpu_hours == pytest.approx(report.total.gpu_hours)
    minutes = await get_usage(ess, bucket=usage_pb2.DAY)
    assert [b.start_time.ToDatetime(tzinfo=T0.tzinfo) for b in minutes.buckets] == [
        T0.replace(hour=0)
    ]


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"since": "at(100)", "until": "at(100)"}, "since, until: until"),
        ({"experiment": "experiment/1"}, "experiment:"),
        ({"limit": -1}, "limit:"),
        ({"limit": 10_001}, "limit:"),
        ({"group_by": 42}, "group_by:"),
        ({"bucket": 42}, "bucket:"),
        (
            {"bucket": usage_pb2.HOUR, "since": "at(0)", "until": "at(365 * 86400)"},
            "bucket: ",
        ),
    ],
)
async def test_bad_requests_name_the_field(
    ess: Ess, fields: dict[str, object], fragment: str
) -> None:
    resolved = {
        k: _ts(eval(v, {"at": at})) if isinstance(v, str) and v.startswith("at(") else v
        for k, v in fields.items()
    }
    await expect_error(
        stub(ess).GetUsage(usage_pb2.GetUsageRequest(**resolved), metadata=ALICE),  # type: ignore[arg-type]
        grpc.StatusCode.INVALID_ARGUMENT,
        fragment,
    )


def _counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_ended_runs_are_counted_into_prometheus_once(ess: Ess) -> None:
    gpu_before = _counter("xmc_ess_gpu_seconds_total", queue="gpu-queue")
    kind_before = _counter(
        "xmc_ess_accelerator_seconds_total",
        queue="tpu-queue",
        accelerator="tpu-v5-lite-podslice",
    )
    await build(ess)
    # Ended: gpu's 30 + 30 s (4 GPUs), tpu's 60 s (8 chips); gpu's open run is not yet.
    await eventually(
        lambda: _counter("xmc_ess_gpu_seconds_total", queue="gpu-queue") - gpu_before >= 240,
        within=20,
        every=0.2,
        what="the usage meter counted the ended GPU runs",
    )
    assert _counter("xmc_ess_gpu_seconds_total", queue="gpu-queue") - gpu_before == 240
    tpu = _counter(
        "xmc_ess_accelerator_seconds_total",
        queue="tpu-queue",
        accelerator="tpu-v5-lite-podslice",
    )
    assert tpu - kind_before == 480


def _ts(value: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp
