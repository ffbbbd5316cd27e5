"""Automatic retries on the real loopback control plane (issue 28, docs/retries.md): the
node agent runs a container that exits 137; the real Job controller fails the Job, JobSet
fails the JobSet, the Reconciler (as xmc-reconciler) reads the pod's exit code and sends
it with FAILED; the ESS retries into a new execution through the outbox; the Actuator
restarts the JobSet once the old one and its Kueue Workload are gone (decision 0032) —
until the policy's budget is spent. The same flow as tests/integration/test_retries_e2e.py
asserts on kubesim."""

from __future__ import annotations

import json

from tests.integration.processes import Client
from tests.integration.support import behaving_unit
from tests.integration.watching import Watcher
from tests.integration.webhook_receiver import Receiver
from tests.real.support import POLL, state_history
from tests.stack import Stack
from tests.waiting import eventually, holds_for
from xmc.model.retry_policy import RETRY_POLICY_ANNOTATION
from xmc.model.states import WorkUnitState
from xmc_api.xmc.v1 import notifications_pb2 as pb
from xmc_api.xmc.v1 import notifications_pb2_grpc, retry_pb2, retry_pb2_grpc

S = WorkUnitState


async def test_a_unit_exiting_137_is_retried_until_its_budget_is_spent(
    stack: Stack, client: Client, receiver: Receiver
) -> None:
    """… and the ESS process posts the last failure, only that one, to a webhook of the
    experiment (a real HTTP receiver)."""
    unit = behaving_unit({"run_seconds": 2, "exit_code": 137})
    unit.executable.jobset.annotations[RETRY_POLICY_ANNOTATION] = json.dumps(
        {"max_attempts": 2, "on_exit_codes": [137], "backoff_seconds": 1}
    )
    parent = await client.experiment()
    hooks = notifications_pb2_grpc.NotificationServiceStub(client.channel)
    await hooks.CreateWebhook(
        pb.CreateWebhookRequest(
            parent=parent,
            webhook=pb.Webhook(url=receiver.url("/ok"), events=["work_unit.failed"]),
        )
    )
    watcher = await Watcher(client, experiment=parent).started()
    name = await client.create(parent, unit)
    stub = retry_pb2_grpc.RetryServiceStub(client.channel)

    async def verdicts() -> list[tuple[int, str, int]]:
        found = await stub.GetWorkUnitRetries(retry_pb2.GetWorkUnitRetriesRequest(name=name))
        return [(d.execution_id, d.verdict, d.exit_code) for d in found.decisions]

    want = [(1, "retry", 137), (2, "exhausted", 137)]
    assert await eventually(verdicts, want, within=240, every=POLL) == want
    assert await client.state(name) == S.FAILED
    history = await state_history(stack, name)
    assert [eid for eid, state in history if state == S.RUNNING] == [1, 2], history
    assert [eid for eid, state in history if state == S.FAILED] == [1, 2], history

    def posted() -> list[tuple[str, int]]:
        return [
            (r.json()["work_unit"]["name"], r.json()["work_unit"]["execution_id"])
            for r in receiver.at("/ok")
        ]

    assert await eventually(posted, [(name, 2)], within=60, every=POLL) == [(name, 2)]
    await holds_for(posted, [(name, 2)], during=2)

    # The push API streamed both attempts as they were committed.
    states = [change for change in watcher.changes() if change[0] == "state"]
    pushed = [
        (eid, to, new)
        for _kind, unit_name, eid, _from, to, new in states
        if unit_name == name and to in ("FAILED", "RESTARTING", "RUNNING")
    ]
    await watcher.close()
    assert pushed == [
        (1, "RUNNING", False),
        (1, "FAILED", False),
        (2, "RESTARTING", True),
        (2, "RUNNING", False),
        (2, "FAILED", False),
    ], pushed
