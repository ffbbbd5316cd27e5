"""Automatic retries end to end at real time (issue 28): ESS (gRPC) → Actuator → kubesim
(HTTP, its JobSet/Kueue/kubelet simulators) → Reconciler, whose FAILED observation carries
the failing container's exit code → the ESS's retry → the Actuator's restart, until the
budget is spent (tests/integration/system.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.support import behaving_unit, fetch_all
from tests.integration.system import ALICE, System, running_system
from tests.integration.test_failure_reasons import create
from tests.integration.watching import Watcher, describe
from tests.integration.webhook_receiver import Receiver
from tests.waiting import eventually, holds_for
from xmc.labels import EXECUTION_ID
from xmc.model.retry_policy import RETRY_POLICY_ANNOTATION
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.xmc.v1 import notifications_pb2 as pb
from xmc_api.xmc.v1 import (
    notifications_pb2_grpc,
    retry_pb2,
    retry_pb2_grpc,
    watch_pb2,
    watch_pb2_grpc,
)

# The whole loop at real time: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState


def failing(code: int, policy: dict[str, Any]) -> WorkUnit:
    unit = behaving_unit({"run_seconds": 1, "exit_code": code})
    unit.executable.jobset.annotations[RETRY_POLICY_ANNOTATION] = json.dumps(policy)
    return unit


async def verdicts(system: System, name: str) -> list[tuple[int, str]]:
    stub = retry_pb2_grpc.RetryServiceStub(system.ess.channel)
    found = await stub.GetWorkUnitRetries(
        retry_pb2.GetWorkUnitRetriesRequest(name=name), metadata=ALICE
    )
    return [(d.execution_id, d.verdict) for d in found.decisions]


async def test_a_failing_unit_is_retried_until_its_budget_is_spent(
    ess_factory: Any, receiver: Receiver
) -> None:
    """… and a webhook of its experiment hears of the last failure only."""
    async with running_system(ess_factory) as system:
        parent = await new_experiment(system)
        hooks = notifications_pb2_grpc.NotificationServiceStub(system.ess.channel)
        await hooks.CreateWebhook(
            pb.CreateWebhookRequest(
                parent=parent,
                webhook=pb.Webhook(url=receiver.url("/ok"), events=["work_unit.failed"]),
            ),
            metadata=ALICE,
        )
        watcher = await Watcher(system.ess, experiment=parent).started()
        policy = {"max_attempts": 3, "on_exit_codes": [137], "backoff_seconds": 1}
        retried = await create_in(system, parent, failing(137, policy))
        never = await create_in(
            system, parent, failing(2, {"max_attempts": 3, "never_on_exit_codes": [2]})
        )

        want = [(1, "retry"), (2, "retry"), (3, "exhausted")]
        assert await eventually(lambda: verdicts(system, retried), want, within=90) == want
        assert await system.state(retried) == S.FAILED
        history = await system.history(retried)
        assert [eid for eid, state in history if state == S.FAILED] == [1, 2, 3]
        assert [eid for eid, state in history if state == S.RUNNING] == [1, 2, 3]
        # Each attempt ran its own JobSet, created once (the manifest of each execution).
        xid, wid = (int(p) for p in retried.split("/")[1::2])
        rows = await fetch_all(
            system.ess.database_url,
            "SELECT eid FROM execution_manifests WHERE xid = $1 AND wid = $2 ORDER BY eid",
            xid,
            wid,
        )
        assert [r["eid"] for r in rows] == [1, 2, 3]
        messages = [text for eid, _sev, text in await system.messages(retried) if eid == 3]
        assert messages[0].startswith("attempt 3 of 3, retried after exit code 137")

        assert await eventually(lambda: verdicts(system, never), [(1, "never")], within=30)
        assert await system.state(never) == S.FAILED

        def failures() -> list[tuple[str, int]]:
            return sorted(
                (r.json()["work_unit"]["name"], r.json()["work_unit"]["execution_id"])
                for r in receiver.at("/ok")
            )

        want_posts = sorted([(retried, 3), (never, 1)])
        assert await eventually(failures, want_posts, within=30) == want_posts
        await holds_for(failures, want_posts, during=2)  # nothing for executions 1 and 2
        await pushed_attempts(system, watcher, retried)
        (last,) = [r.json() for r in receiver.at("/ok") if r.json()["work_unit"]["name"] == retried]
        assert last["work_unit"]["retry"] == (
            "attempt 3 of 3: not retried (exit code 137; no attempts left)"
        )
        assert last["text"].endswith(
            "failed (execution 3); attempt 3 of 3: not retried (exit code 137; no attempts left)."
        ), last["text"]


async def pushed_attempts(system: System, watcher: Watcher, unit: str) -> None:
    """The push API streamed each attempt as committed: the failures, the retries'
    new executions and their messages; a client resuming from the first retry's cursor
    reads the rest of the same stream, nothing missed and nothing twice."""
    wanted = {"FAILED", "RESTARTING"}
    attempts = [
        (eid, to, new)
        for kind, name, eid, _from, to, new in (c for c in watcher.changes() if c[0] == "state")
        if name == unit and to in wanted
    ]
    assert attempts == [
        (1, "FAILED", False),
        (2, "RESTARTING", True),
        (2, "FAILED", False),
        (3, "RESTARTING", True),
        (3, "FAILED", False),
    ]
    texts = [c[2] for c in watcher.changes() if c[0] == "message" and c[1].startswith(unit)]
    assert [t.split(",")[0] for t in texts if t.startswith("attempt")] == [
        "attempt 2 of 3",
        "attempt 3 of 3",
    ]
    events = watcher.change_events()
    first_retry = next(
        i
        for i, e in enumerate(events)
        if describe(e)[:5] == ("state", unit, 2, "FAILED", "RESTARTING")
    )
    stub = watch_pb2_grpc.WatchServiceStub(system.ess.channel)
    rest: list[watch_pb2.WatchEvent] = []
    request = watch_pb2.WatchRequest(experiment=watcher_experiment(unit), once=True,
                                     cursor=events[first_retry].cursor)  # fmt: skip
    async for batch in stub.WatchExperiments(request, metadata=ALICE):
        rest += [e for e in batch.events if e.WhichOneof("kind") != "sync"]
    assert [e.cursor for e in rest] == [e.cursor for e in events[first_retry + 1 :]]
    await watcher.close()


def watcher_experiment(unit: str) -> str:
    return unit.split("/workUnits/")[0]


async def new_experiment(system: System) -> str:
    created = await system.ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    return str(created.name)


async def create_in(system: System, parent: str, unit: WorkUnit) -> str:
    operation = await system.ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=unit), metadata=ALICE
    )
    return str(operation.name).split("/operations/")[0]


async def test_a_unit_stopped_while_its_retry_waits_is_not_started(ess_factory: Any) -> None:
    """The retry's task is due after its backoff; a stop meanwhile stops execution 2 (it
    has no JobSet yet) and the task, once due, is refused by the Actuator's admission
    (execution 2 is STOPPED): no JobSet of execution 2 is ever created."""
    async with running_system(ess_factory) as system:
        name = await create(system, failing(137, {"max_attempts": 3, "backoff_seconds": 4}))
        await eventually(lambda: verdicts(system, name), [(1, "retry")], within=30)
        await system.ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)
        await eventually(lambda: system.state(name), S.STOPPED, within=30)

        def second_jobset() -> bool:
            jobset = system.jobset(name)
            labels = (jobset or {}).get("metadata", {}).get("labels", {})
            return bool(labels.get(EXECUTION_ID) == "2")

        await holds_for(second_jobset, False, during=8)
        assert await system.state(name) == S.STOPPED
        xid, wid = (int(p) for p in name.split("/")[1::2])
        rows = await fetch_all(
            system.ess.database_url,
            "SELECT status, outcome FROM task_outbox WHERE xid = $1 AND wid = $2 "
            "AND origin = 'retry'",
            xid,
            wid,
        )
        assert [(r["status"], r["outcome"]) for r in rows] == [("finished", "unwanted")]
