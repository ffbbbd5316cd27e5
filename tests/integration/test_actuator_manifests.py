"""The JobSet manifest as the Actuator created it (decision 0039), stored in the settle of
the creating task: against real Postgres rows, a real kubesim over HTTP and the ESS's
``xmc.v1.SpecService`` over gRPC. Includes the kill -9 between the create call and the
settle: the redelivered task meets its own JobSet, already changed by the cluster, and
still records what was sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from kubernetes_asyncio.client import Configuration

from actuator.handlers import JobSetHandlers
from actuator.kube import JobSetClient
from actuator.manifest import build_base_jobset
from actuator.outcome import Outcome
from kubesim.resources import JOBSET
from tests.integration import test_actuator_handlers as handler_tests
from tests.integration.ess_harness import Ess
from tests.integration.test_actuator_handlers import ALICE, FAST_CONFIRMATION, NAMESPACE, Env
from tests.waiting import eventually
from xmc import labels
from xmc.errors import NotFoundError
from xmc.model.manifest import KeptManifest
from xmc.store.manifests import StoredManifest, fetch_manifest, record_manifest
from xmc_api.internal.v1.tasks_pb2 import Task
from xmc_api.xmc.v1 import spec_pb2, spec_pb2_grpc

#: The handler tests' fixtures: kubesim without controllers, and the handlers over it.
sim = handler_tests.sim
env = handler_tests.env
#: What the API server adds to an object it stores (kubesim: these four).
SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp")


class Killed(BaseException):
    """The Actuator process dying: nothing after the raise runs, no handler catches it."""


class DiesAfterCreate(JobSetClient):
    """Creates the JobSet, then the process dies before the handler can settle the task."""

    async def create_jobset(self, namespace: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        await super().create_jobset(namespace, manifest)
        raise Killed


async def stored(env: Env, xid: int, wid: int, eid: int) -> StoredManifest:
    async with env.store.connection() as conn:
        return await fetch_manifest(conn, xid, wid, eid)


def sent(task: Task) -> dict[str, Any]:
    return build_base_jobset(task, namespace=NAMESPACE)


async def recorded(env: Env, xid: int, wid: int, eid: int, task: Task) -> dict[str, Any]:
    """The manifest stored for ``eid``, checked to be what ``task`` sent, by ``task``."""
    record = await stored(env, xid, wid, eid)
    assert record.task_id == task.task_id
    assert record.kept.text is not None
    manifest: dict[str, Any] = json.loads(record.kept.text)
    assert manifest == sent(task)
    return manifest


def as_created(jobset: Mapping[str, Any]) -> dict[str, Any]:
    """The object without what the API server set on it."""
    metadata = {k: v for k, v in jobset["metadata"].items() if k not in SERVER_FIELDS}
    return {**jobset, "metadata": metadata}


async def dying_handlers(env: Env) -> tuple[JobSetHandlers, JobSetClient]:
    kube = await DiesAfterCreate.for_configuration(
        Configuration(host=env.sim.url), confirmation=FAST_CONFIRMATION
    )
    handlers = JobSetHandlers(
        kube, env.store, namespace=NAMESPACE, clock=env.ess.clock, restart_poll_seconds=0.02
    )
    return handlers, kube


async def test_create_stores_what_it_sent_and_a_redelivery_keeps_it(env: Env) -> None:
    xid, wid, create = await env.created()

    manifest = await recorded(env, xid, wid, 1, create)
    live = env.jobset(xid, wid)
    assert live is not None
    assert as_created(live) == manifest, "what kubesim holds, as created"
    first = await stored(env, xid, wid, 1)

    assert (await env.handlers.handle(create)).outcome is Outcome.DONE
    assert await stored(env, xid, wid, 1) == first, "the first record stays"


async def test_a_create_killed_before_its_settle_still_records_what_it_sent(env: Env) -> None:
    xid, wid = await env.new_work_unit()
    create = await env.last_task()
    dying, kube = await dying_handlers(env)
    try:
        with pytest.raises(Killed):
            await dying.handle(create)
    finally:
        await kube.close()
    assert env.jobset(xid, wid) is not None
    with pytest.raises(NotFoundError, match="no stored JobSet manifest"):
        await stored(env, xid, wid, 1)

    # Before the task comes back, the cluster changes the JobSet: Kueue admits it and an
    # Update patches its priority class.
    def admitted_and_patched(obj: dict[str, Any]) -> None:
        obj["spec"]["suspend"] = False
        obj["metadata"]["labels"][labels.PRIORITY_CLASS] = "xmc-priority-high-high"

    env.sim.store.update(JOBSET, NAMESPACE, labels.jobset_name(xid, wid), admitted_and_patched)

    again = await env.handlers.handle(create)

    assert again.outcome is Outcome.DONE, again
    assert "redelivery" in again.reason
    manifest = await recorded(env, xid, wid, 1, create)
    assert manifest["spec"]["suspend"] is True, "as sent, not as it is now"


async def test_a_restart_killed_before_its_settle_records_the_new_execution(env: Env) -> None:
    xid, wid, create = await env.created()
    restart = await env.restart(xid, wid)
    dying, kube = await dying_handlers(env)
    try:
        handling = asyncio.create_task(dying.handle(restart))

        async def old_is_deleting() -> bool:
            jobset = env.jobset(xid, wid)
            return jobset is not None and "deletionTimestamp" in jobset["metadata"]

        await eventually(old_is_deleting, True, what="the old JobSet being deleted")
        env.remove_finalizer(xid, wid)
        with pytest.raises(Killed):
            await asyncio.wait_for(handling, timeout=10)
    finally:
        await kube.close()

    again = await env.handlers.handle(restart)

    assert again.outcome is Outcome.SKIPPED, again
    assert "redelivery" in again.reason
    await recorded(env, xid, wid, 2, restart)
    await recorded(env, xid, wid, 1, create)  # execution 1 keeps its own


async def test_another_task_of_the_execution_replaces_the_record(env: Env) -> None:
    """A repair's re-drive creates a vanished JobSet again: its manifest is the one now."""
    xid, wid = await env.new_work_unit()
    at = datetime(2026, 12, 1, tzinfo=UTC)
    writes = [
        ("create", KeptManifest('{"a":1}', 7)),
        ("create", KeptManifest('{"a":2}', 7)),  # a redelivery: the first one stays
        ("repair", KeptManifest(None, 300_000)),
    ]
    seen = []
    for task_id, kept in writes:
        async with env.store.transaction() as conn:
            await record_manifest(conn, xid, wid, 1, kept, task_id=task_id, now=at)
        seen.append((await stored(env, xid, wid, 1)).kept)
    assert seen == [writes[0][1], writes[0][1], writes[2][1]]


async def test_the_spec_service_serves_it_and_names_what_is_missing(env: Env, ess: Ess) -> None:
    xid, wid, create = await env.created()
    pending_xid, pending_wid = await env.new_work_unit()  # its create not handled yet
    spec = spec_pb2_grpc.SpecServiceStub(ess.channel)
    name = f"experiments/{xid}/workUnits/{wid}/executions/1"

    found = await spec.GetExecutionManifest(
        spec_pb2.GetExecutionManifestRequest(name=name), metadata=ALICE
    )

    assert found.name == f"{name}/manifest"
    assert json.loads(found.manifest_json) == sent(create)
    assert (found.omitted, found.task_id) == (False, create.task_id)
    assert found.size_bytes == len(found.manifest_json.encode())
    assert found.record_time.seconds > 0

    for missing, code, fragment in [
        (
            f"experiments/{pending_xid}/workUnits/{pending_wid}/executions/1",
            grpc.StatusCode.NOT_FOUND,
            "has no stored JobSet manifest",
        ),
        (f"experiments/{xid}/workUnits/{wid}/executions/2", grpc.StatusCode.NOT_FOUND,
         f"name: experiments/{xid}/workUnits/{wid}/executions/2 does not exist"),
        (f"experiments/{xid}/workUnits/999/executions/1", grpc.StatusCode.NOT_FOUND,
         "does not exist"),
        (f"experiments/{xid}/workUnits/{wid}", grpc.StatusCode.INVALID_ARGUMENT,
         "name: 'experiments/"),
    ]:  # fmt: skip
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await spec.GetExecutionManifest(
                spec_pb2.GetExecutionManifestRequest(name=missing), metadata=ALICE
            )
        assert refused.value.code() == code, missing
        assert fragment in (refused.value.details() or ""), refused.value.details()
