"""Supervision, readiness, the error classifications behind them, and the NUL scrub of
observed text (pure, or asyncio only)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, struct_pb2
from prometheus_client import REGISTRY

from reconciler.ess_client import REJECTED_RETRIES, EssRejected, retry_rejected
from reconciler.observation import Observation, Source
from reconciler.readiness import ElectionState, WatchState, decide_readiness
from xmc.health import Check, evaluate, ready_body
from xmc.messages import scrub_nul
from xmc.streams import ReadFailure, classify_read_error
from xmc.supervise import TaskEnded, every, finish, supervise
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

# --- supervise ---------------------------------------------------------------------------


async def _forever() -> None:
    await asyncio.Event().wait()


async def _boom() -> None:
    raise RuntimeError("boom")


async def _returns() -> None:
    return None


async def _run(*coroutines: Coroutine[Any, Any, None], stop_first: bool = False) -> None:
    tasks = [asyncio.create_task(c, name=f"job {i}") for i, c in enumerate(coroutines)]
    stopping = asyncio.Event()
    if stop_first:
        stopping.set()
    try:
        await asyncio.wait_for(supervise(tasks, stopping=stopping), timeout=5)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_crashed_task_is_named_with_its_error() -> None:
    with pytest.raises(TaskEnded, match=r"'job 1' ended unexpectedly \(failed: RuntimeError: boom"):
        await _run(_forever(), _boom())


async def test_a_task_that_returns_early_ends_the_service_too() -> None:
    with pytest.raises(TaskEnded, match=r"'job 0' ended unexpectedly \(returned\)") as ended:
        await _run(_returns(), _forever())
    assert ended.value.name == "job 0"
    assert ended.value.cause is None


async def test_stopping_returns_without_error() -> None:
    await _run(_forever(), _forever(), stop_first=True)


async def test_a_nested_supervisor_keeps_the_inner_name() -> None:
    async def inner() -> None:
        await _run(_forever(), _boom())

    with pytest.raises(TaskEnded) as ended:
        await _run(inner())
    assert ended.value.name == "job 1"


async def test_finish_never_raises_and_cancels_stragglers() -> None:
    crashed = asyncio.create_task(_boom(), name="crashed")
    stuck = asyncio.create_task(_forever(), name="stuck")
    await asyncio.sleep(0)  # let the crash happen before the stop
    await asyncio.wait_for(finish([crashed, stuck], within=0.01), timeout=5)
    assert stuck.cancelled()
    assert isinstance(crashed.exception(), RuntimeError)


# --- every ---------------------------------------------------------------------------------


def _failures(loop: str) -> float:
    value = REGISTRY.get_sample_value("xmc_loop_iteration_failures_total", {"loop": loop})
    return value or 0.0


async def test_a_periodic_loop_survives_a_failing_iteration() -> None:
    stopping = asyncio.Event()
    calls: list[int] = []

    async def step() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("one 500 from the API server")
        if len(calls) == 3:
            stopping.set()

    before = _failures("test loop")
    await asyncio.wait_for(every("test loop", 0.001, step, stopping=stopping), timeout=5)
    assert calls == [0, 1, 2]
    assert _failures("test loop") == before + 1


async def test_a_stopped_periodic_loop_returns_before_its_next_step() -> None:
    stopping = asyncio.Event()
    stopping.set()
    calls: list[int] = []

    async def step() -> None:
        calls.append(1)

    await asyncio.wait_for(every("stopped loop", 3600, step, stopping=stopping), timeout=5)
    assert calls == []


# --- /readyz -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("checks", "status", "label"),
    [
        ([Check("a", True), Check("b", True)], 200, "ready"),
        ([Check("a", True), Check("b", False, "down")], 503, "not ready"),
        ([], 200, "ready"),
    ],
)
def test_ready_body(checks: list[Check], status: int, label: str) -> None:
    got_status, body = ready_body(checks)
    assert (got_status, body["status"]) == (status, label)
    assert body["checks"] == {c.name: {"ok": c.ok, "detail": c.detail} for c in checks}


async def test_a_readiness_check_that_raises_or_hangs_is_a_failed_check() -> None:
    async def raises() -> list[Check]:
        raise ConnectionError("refused")

    async def hangs() -> list[Check]:
        await asyncio.Event().wait()
        return []

    (raised,) = await evaluate(raises)
    assert (raised.ok, raised.detail) == (False, "ConnectionError: refused")
    (hung,) = await evaluate(hangs, limit=0.01)
    assert hung.ok is False
    assert "longer than" in hung.detail


S, F = True, False


@pytest.mark.parametrize(
    ("watches", "election", "oks"),
    [
        ([WatchState("pods", S, 0)], None, [True, True]),
        ([WatchState("pods", F, 0)], None, [False, True]),
        ([WatchState("pods", S, 2)], None, [False, True]),
        ([WatchState("pods", S, 0)], ElectionState(leading=True, failures=0), [True, True]),
        ([WatchState("pods", S, 0)], ElectionState(leading=False, failures=0), [True, True]),
        ([WatchState("pods", S, 0)], ElectionState(leading=False, failures=3), [True, False]),
        ([WatchState("pods", S, 0, relisting="too_large")], None, [False, True]),
        ([WatchState("pods", S, 0, relisting="expired")], None, [False, True]),
        (
            [WatchState("pods", S, 0), WatchState("jobsets", S, 0, "too_large")],
            None,
            [True, False, True],
        ),
    ],
)
def test_reconciler_readiness(
    watches: list[WatchState], election: ElectionState | None, oks: list[bool]
) -> None:
    checks = decide_readiness(watches, election)
    assert [c.ok for c in checks] == oks
    assert checks[-1].name == "leader election"


def test_a_stale_cache_says_why() -> None:
    (check, _) = decide_readiness([WatchState("jobsets", True, 0, "too_large")], None)
    assert check == Check("watch jobsets", False, "re-listing (too_large): the cache is stale")


def test_a_standby_says_so() -> None:
    checks = decide_readiness([], ElectionState(leading=False, failures=0))
    assert checks == [Check("leader election", True, "standing by")]


# --- classifications -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "failure"),
    [
        ("NOGROUP No such key 'xmc-tasks-stream' or consumer group", ReadFailure.GROUP_GONE),
        ("UNBLOCKED the stream key no longer exists", ReadFailure.GROUP_GONE),
        ("LOADING Redis is loading the dataset in memory", ReadFailure.BUSY),
        ("READONLY You can't write against a read only replica.", ReadFailure.BUSY),
        ("OOM command not allowed when used memory > 'maxmemory'.", ReadFailure.BUSY),
        ("CLUSTERDOWN The cluster is down", ReadFailure.BUSY),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", ReadFailure.FATAL),
        ("", ReadFailure.FATAL),
    ],
)
def test_classify_read_error(message: str, failure: ReadFailure) -> None:
    assert classify_read_error(message) is failure


Code = grpc.StatusCode
REJECTED_RETRY_DELAYS = REJECTED_RETRIES.delays
last = len(REJECTED_RETRY_DELAYS)


@pytest.mark.parametrize(
    ("code", "attempt", "delay"),
    [
        (Code.INTERNAL, 1, REJECTED_RETRY_DELAYS[0]),
        (Code.UNKNOWN, 2, REJECTED_RETRY_DELAYS[1]),
        (Code.INTERNAL, last, REJECTED_RETRY_DELAYS[-1]),
        (Code.INTERNAL, last + 1, None),
        (Code.INVALID_ARGUMENT, 1, None),
        (Code.PERMISSION_DENIED, 1, None),
        (Code.FAILED_PRECONDITION, 1, None),
    ],
)
def test_retry_rejected(code: grpc.StatusCode, attempt: int, delay: float | None) -> None:
    assert retry_rejected(EssRejected(code, "x"), attempt) == delay


# --- text from the cluster -----------------------------------------------------------------


def test_scrub_nul_spells_out_nul_in_every_kind_of_string_field() -> None:
    work_unit = WorkUnit(tags=["ok", "a\x00b"])
    job = work_unit.executable.jobset.jobs.add(name="m\x00")
    job.labels["k\x00"] = "v\x00"
    job.annotations["plain"] = "fine"
    detail = struct_pb2.Struct()
    detail.update({"message": "oom\x00", "nested": {"list": ["x\x00"]}})

    scrub_nul(work_unit)
    scrub_nul(detail)

    assert list(work_unit.tags) == ["ok", "a\\x00b"]
    assert job.name == "m\\x00"
    assert dict(job.labels) == {"k\\x00": "v\\x00"}
    assert dict(job.annotations) == {"plain": "fine"}
    assert detail["message"] == "oom\\x00"
    nested = json_format.MessageToDict(detail)["nested"]
    assert nested == {"list": ["x\\x00"]}


def test_an_observation_on_the_wire_carries_no_nul() -> None:
    execution = WorkUnitExecution()
    execution.status.system_message.user_facing_text = "Back-off\x00pulling"
    observation = Observation(
        xid=1, wid=2, eid=1, source=Source.POD, execution=execution,
        update_mask=("status.system_message",),
    )  # fmt: skip
    update = observation.to_update()
    assert update.execution.status.system_message.user_facing_text == "Back-off\\x00pulling"
    assert execution.status.system_message.user_facing_text == "Back-off\x00pulling"
