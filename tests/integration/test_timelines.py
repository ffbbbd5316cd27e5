"""TimelineService over real gRPC against a real ESS and Postgres: a unit preempted once,
completed and restarted; the timings of its experiment; refusals (docs/timelines.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask

from tests.integration.ess_harness import Ess, metadata
from tests.integration.support import T0, minimal_work_unit
from tests.integration.test_ess_api import expect_error
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.internal.v1 import executions_pb2
from xmc_api.xmc.v1 import timeline_pb2, timeline_pb2_grpc

S = WorkUnitState
ALICE, SERVICE = metadata("alice"), metadata("reconciler")

#: Unit 1's first execution: (state, seconds after T0), as the Reconciler reports them.
PREEMPTED_RUN = [
    (S.SCHEDULING, 2),
    (S.RUNNING, 10),
    (S.DESCHEDULING, 40),
    (S.SCHEDULING, 45),
    (S.RUNNING, 70),
    (S.COMPLETED, 100),
]
#: Unit 1's second execution, after a restart at T0 + 200 s: still running at T0 + 300 s.
RESTARTED_RUN = [(S.SCHEDULING, 203), (S.RUNNING, 210)]


@dataclass(frozen=True)
class Scenario:
    experiment: str
    preempted: str  # work unit 1: preempted, completed, restarted, running
    queued: str  # work unit 2: SCHEDULING since T0 + 5 s


async def observe(ess: Ess, work_unit: str, eid: int, state: S, seconds: float) -> None:
    update = executions_pb2.WorkUnitExecutionUpdate(
        work_unit=work_unit, execution_id=eid, update_mask=FieldMask(paths=["status.state"])
    )
    update.execution.status.state = int(state)  # type: ignore[assignment]
    update.execution.status.state_update_time.FromDatetime(T0 + timedelta(seconds=seconds))
    response = await ess.executions.UpdateWorkUnitExecutions(
        executions_pb2.UpdateWorkUnitExecutionsRequest(
            updates=[update], writer="reconciler/jobset"
        ),
        metadata=SERVICE,
    )
    assert response.results[0].state_changed, response


async def build_scenario(ess: Ess) -> Scenario:
    """Two units created at T0 (the ESS clock); the ESS clock left at T0 + 300 s."""
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    names = []
    for _ in range(2):
        operation = await ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=minimal_work_unit()),
            metadata=ALICE,
        )
        names.append(operation.name.split("/operations/")[0])
    preempted, queued = names
    for state, seconds in PREEMPTED_RUN:
        await observe(ess, preempted, 1, state, seconds)
    await observe(ess, queued, 1, S.SCHEDULING, 5)
    ess.clock.advance(200)
    await ess.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=preempted), metadata=ALICE)
    for state, seconds in RESTARTED_RUN:
        await observe(ess, preempted, 2, state, seconds)
    ess.clock.advance(100)
    return Scenario(experiment.name, preempted, queued)


def seconds(duration: Duration) -> float:
    return duration.ToTimedelta().total_seconds()


def stub(ess: Ess) -> timeline_pb2_grpc.TimelineServiceStub:
    return timeline_pb2_grpc.TimelineServiceStub(ess.channel)


async def test_the_timeline_of_a_preempted_completed_and_restarted_unit(ess: Ess) -> None:
    scenario = await build_scenario(ess)
    timeline = await stub(ess).GetWorkUnitTimeline(
        timeline_pb2.GetWorkUnitTimelineRequest(name=scenario.preempted), metadata=ALICE
    )
    first, second = timeline.executions
    assert timeline.now.ToDatetime(tzinfo=T0.tzinfo) == T0 + timedelta(seconds=300)

    assert (first.execution_id, first.state, first.terminal) == (1, S.COMPLETED, True)
    assert [(c.from_state, c.to_state) for c in first.changes] == [
        (S.WORK_UNIT_STATE_UNSPECIFIED, S.INITIALIZING),
        (S.INITIALIZING, S.SCHEDULING),
        (S.SCHEDULING, S.RUNNING),
        (S.RUNNING, S.DESCHEDULING),
        (S.DESCHEDULING, S.SCHEDULING),
        (S.SCHEDULING, S.RUNNING),
        (S.RUNNING, S.COMPLETED),
    ]
    assert [c.writer for c in first.changes][1:] == [
        "reconciler@xmc.internal/reconciler/jobset"
    ] * 6
    assert [(g.state, seconds(g.duration), g.ongoing) for g in first.segments] == [
        (S.INITIALIZING, 2, False),
        (S.SCHEDULING, 8, False),
        (S.RUNNING, 30, False),
        (S.DESCHEDULING, 5, False),
        (S.SCHEDULING, 25, False),
        (S.RUNNING, 30, False),
        (S.COMPLETED, 0, False),
    ]
    assert [(t.state, seconds(t.duration)) for t in first.state_totals] == [
        (S.INITIALIZING, 2),
        (S.SCHEDULING, 33),
        (S.RUNNING, 60),
        (S.DESCHEDULING, 5),
        (S.COMPLETED, 0),
    ]
    phases = first.phases
    assert (seconds(phases.queue_wait), seconds(phases.startup), seconds(phases.run)) == (
        10,
        0,
        90,
    )
    assert (seconds(phases.requeue), phases.preemptions) == (30, 1)
    assert [phases.queue_wait_ongoing, phases.startup_ongoing, phases.run_ongoing] == [False] * 3

    assert (second.execution_id, second.state, second.terminal) == (2, S.RUNNING, False)
    assert [(c.from_state, c.to_state) for c in second.changes] == [
        (S.COMPLETED, S.RESTARTING),
        (S.RESTARTING, S.SCHEDULING),
        (S.SCHEDULING, S.RUNNING),
    ]
    assert second.segments[-1].ongoing
    assert not second.segments[-1].HasField("end_time")
    assert seconds(second.segments[-1].duration) == 90
    assert (seconds(second.phases.queue_wait), seconds(second.phases.run)) == (10, 90)
    assert second.phases.run_ongoing


async def test_experiment_timings_over_current_executions(ess: Ess) -> None:
    scenario = await build_scenario(ess)
    timings = await stub(ess).GetExperimentTimings(
        timeline_pb2.GetExperimentTimingsRequest(name=scenario.experiment), metadata=ALICE
    )
    assert (timings.name, timings.work_units) == (scenario.experiment, 2)
    # Queue waits: 10 s (unit 1's restart, 200 → 210) and 300 s (unit 2, still queued).
    queue = timings.queue_wait
    assert (seconds(queue.median), seconds(queue.p90), queue.count, queue.ongoing) == (
        155,
        271,
        2,
        1,
    )
    assert (seconds(timings.startup.median), timings.startup.count) == (0, 1)
    run = timings.run
    assert (seconds(run.median), seconds(run.p90), run.count, run.ongoing) == (90, 90, 1, 1)
    assert [(u.name, u.state, u.execution_id, seconds(u.duration)) for u in timings.stuck] == [
        (scenario.queued, S.SCHEDULING, 1, 295),
        (scenario.preempted, S.RUNNING, 2, 90),
    ]
    limited = await stub(ess).GetExperimentTimings(
        timeline_pb2.GetExperimentTimingsRequest(name=scenario.experiment, stuck_limit=1),
        metadata=ALICE,
    )
    assert [u.name for u in limited.stuck] == [scenario.queued]


async def test_the_sql_timings_agree_with_the_timelines(ess: Ess) -> None:
    """The SQL restates the model's phase rules: the phases of each unit's current
    execution, read through GetWorkUnitTimeline, must give the same statistics."""
    scenario = await build_scenario(ess)
    api = stub(ess)
    current = [
        (
            await api.GetWorkUnitTimeline(
                timeline_pb2.GetWorkUnitTimelineRequest(name=name), metadata=ALICE
            )
        ).executions[-1]
        for name in (scenario.preempted, scenario.queued)
    ]
    timings = await api.GetExperimentTimings(
        timeline_pb2.GetExperimentTimingsRequest(name=scenario.experiment), metadata=ALICE
    )
    for phase in ("queue_wait", "startup", "run"):
        present = [e.phases for e in current if e.phases.HasField(phase)]
        stats = getattr(timings, phase)
        assert stats.count == len(present), phase
        assert stats.ongoing == sum(getattr(p, f"{phase}_ongoing") for p in present), phase
        durations = [seconds(getattr(p, phase)) for p in present]
        assert seconds(stats.median) == pytest.approx(percentile(durations, 0.5)), phase
        assert seconds(stats.p90) == pytest.approx(percentile(durations, 0.9)), phase


def percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks, as PostgreSQL's percentile_cont."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


async def test_a_cluster_clock_behind_the_ess_gives_zero_not_negative(ess: Ess) -> None:
    """Created at T0 on the ESS's clock, observed RUNNING at T0 - 1 s on the cluster's:
    the queue wait is clamped to zero, in the timeline (Python) and the timings (SQL)."""
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    operation = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=minimal_work_unit()),
        metadata=ALICE,
    )
    unit = operation.name.split("/operations/")[0]
    await observe(ess, unit, 1, S.RUNNING, -1)
    await observe(ess, unit, 1, S.COMPLETED, 20)
    api = stub(ess)
    timeline = await api.GetWorkUnitTimeline(
        timeline_pb2.GetWorkUnitTimelineRequest(name=unit), metadata=ALICE
    )
    (execution,) = timeline.executions
    assert [seconds(g.duration) for g in execution.segments] == [0, 21, 0]
    assert (seconds(execution.phases.queue_wait), seconds(execution.phases.run)) == (0, 21)
    timings = await api.GetExperimentTimings(
        timeline_pb2.GetExperimentTimingsRequest(name=experiment.name), metadata=ALICE
    )
    assert (seconds(timings.queue_wait.median), timings.queue_wait.count) == (0, 1)
    assert seconds(timings.run.median) == 21


async def test_timings_of_an_experiment_without_units(ess: Ess) -> None:
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    timings = await stub(ess).GetExperimentTimings(
        timeline_pb2.GetExperimentTimingsRequest(name=experiment.name), metadata=ALICE
    )
    assert timings.work_units == 0
    assert [timings.HasField(p) for p in ("queue_wait", "startup", "run")] == [True] * 3
    assert timings.queue_wait == timeline_pb2.PhaseStatistics()  # count 0, no median
    assert not timings.stuck


NOBODY: tuple[tuple[str, str], ...] = ()
NOPE = (("authorization", "Bearer nope"),)
Timeline = timeline_pb2.GetWorkUnitTimelineRequest
Timings = timeline_pb2.GetExperimentTimingsRequest


@pytest.mark.parametrize(
    ("request_", "caller", "code", "fragment"),
    [
        (Timeline(name="experiments/1/workUnits/1"), NOBODY, "UNAUTHENTICATED", "bearer token"),
        (Timings(name="experiments/1"), NOPE, "UNAUTHENTICATED", ""),
        (Timeline(name="experiments/x"), ALICE, "INVALID_ARGUMENT", "name"),
        (Timings(name="experiments/1/workUnits/1"), ALICE, "INVALID_ARGUMENT", "name"),
        (Timeline(name="experiments/999999/workUnits/1"), ALICE, "NOT_FOUND", "workUnits/1"),
        (Timings(name="experiments/999999"), ALICE, "NOT_FOUND", "experiments/999999"),
        (Timings(name="experiments/1", stuck_limit=101), ALICE, "INVALID_ARGUMENT", "stuck_limit"),
        (Timings(name="experiments/1", stuck_limit=-1), ALICE, "INVALID_ARGUMENT", "stuck_limit"),
    ],
    ids=[
        "no-token",
        "bad-token",
        "bad-unit-name",
        "bad-experiment-name",
        "no-unit",
        "no-experiment",
        "limit-too-high",
        "limit-negative",
    ],
)
async def test_refusals(
    ess: Ess,
    request_: Timeline | Timings,
    caller: tuple[tuple[str, str], ...],
    code: str,
    fragment: str,
) -> None:
    api = stub(ess)
    method = api.GetWorkUnitTimeline if isinstance(request_, Timeline) else api.GetExperimentTimings
    await expect_error(method(request_, metadata=caller), grpc.StatusCode[code], fragment)
