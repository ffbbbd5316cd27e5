"""The Actuator's JobSet handlers against real Postgres rows and a real kubesim over HTTP.

ESS makes the experiments, work units, Operations and signed tasks; each test calls
``handle(task)`` directly (no consumer) with kubesim's controllers off, and plays the
Reconciler itself where a JobSet's finalizer must go.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from google.longrunning.operations_proto_pb2 import Operation
from google.protobuf.field_mask_pb2 import FieldMask
from google.rpc import code_pb2
from kubernetes_asyncio.client import Configuration

from actuator.handlers import JobSetHandlers
from actuator.kube import JobSetClient
from actuator.manifest import build_base_jobset
from actuator.outcome import Outcome, TaskResult
from kubesim.resources import JOBSET, WORKLOAD
from kubesim.server import KubeSim
from tests.integration.ess_harness import SIGNING_KEY, Ess, metadata
from tests.integration.support import minimal_work_unit, unit_history
from tests.waiting import eventually
from xmc import labels
from xmc.model.states import Severity, WorkUnitState
from xmc.retry import Backoffs
from xmc.store import operations
from xmc.store.repository import Store
from xmc.tasks import verify_task
from xmc.timestamps import set_timestamp, to_datetime
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.priority_pb2 import Priority
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import JobSetExecutable, KubernetesJob, WorkUnit
from xmc_api.internal.v1.tasks_pb2 import Task

S = WorkUnitState
ALICE = metadata("alice")
NAMESPACE = "default"
#: The Actuator's refusal confirmation, at test speed.
FAST_CONFIRMATION = Backoffs((0.01, 0.02))


class ReplaceAfterFirstRead(JobSetClient):
    """Runs ``replace`` right after the handler's first read: the JobSet it just judged is
    swapped for another one of the same name before the handler acts on it."""

    replace: Callable[[], None] | None = None

    async def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        jobset = await super().get_jobset(namespace, name)
        if self.replace is not None:
            replace, self.replace = self.replace, None
            replace()
        return jobset


@dataclass
class Env:
    ess: Ess
    sim: KubeSim
    store: Store
    kube: ReplaceAfterFirstRead
    handlers: JobSetHandlers

    def make_handlers(self, **options: Any) -> JobSetHandlers:
        options.setdefault("clock", self.ess.clock)
        return JobSetHandlers(self.kube, self.store, namespace=NAMESPACE, **options)

    async def new_work_unit(self, work_unit: WorkUnit | None = None) -> tuple[int, int]:
        experiment = await self.ess.api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment(title="sweep")), metadata=ALICE
        )
        operation = await self.ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(
                parent=experiment.name, work_unit=work_unit or minimal_work_unit()
            ),
            metadata=ALICE,
        )
        parts = str(operation.name).split("/")
        return int(parts[1]), int(parts[3])

    async def last_task(self) -> Task:
        entries = await self.ess.stream(self.ess.names.tasks)
        _id, fields = entries[-1]
        return verify_task(fields, key=SIGNING_KEY, now=self.ess.clock.now)

    async def created(self, work_unit: WorkUnit | None = None) -> tuple[int, int, Task]:
        """A work unit whose Create task ran: its JobSet exists."""
        xid, wid = await self.new_work_unit(work_unit)
        create = await self.last_task()
        assert (await self.handlers.handle(create)).outcome is Outcome.DONE
        return xid, wid, create

    async def stop(self, xid: int, wid: int) -> Task:
        await self.ess.api.StopWorkUnit(
            api_pb2.StopWorkUnitRequest(name=wu_name(xid, wid)), metadata=ALICE
        )
        return await self.last_task()

    async def restart(self, xid: int, wid: int) -> Task:
        await self.ess.api.RestartWorkUnit(
            api_pb2.RestartWorkUnitRequest(name=wu_name(xid, wid)), metadata=ALICE
        )
        return await self.last_task()

    async def update_priority(self, xid: int, wid: int, priority: int) -> Task:
        await self.ess.api.UpdateWorkUnit(
            api_pb2.UpdateWorkUnitRequest(
                work_unit=WorkUnit(name=wu_name(xid, wid), priority=priority),  # type: ignore[arg-type]
                update_mask=FieldMask(paths=["priority"]),
            ),
            metadata=ALICE,
        )
        return await self.last_task()

    def jobset(self, xid: int, wid: int) -> dict[str, Any] | None:
        return self.sim.store.find(JOBSET, NAMESPACE, labels.jobset_name(xid, wid))

    def remove_finalizer(self, xid: int, wid: int) -> None:
        """What the Reconciler does once it wrote the old execution's terminal state."""
        self.sim.store.update(
            JOBSET,
            NAMESPACE,
            labels.jobset_name(xid, wid),
            lambda obj: obj["metadata"].update(finalizers=[]),
        )

    async def operation(self, name: str) -> Operation:
        async with self.store.transaction() as conn:
            return await operations.fetch_operation(conn, name)

    async def execution(self, xid: int, wid: int) -> WorkUnitExecution:
        return (await self.store.get_work_unit(xid, wid)).current_work_unit_execution

    async def history(self, xid: int, wid: int) -> list[tuple[int, int, int]]:
        rows = await unit_history(self.store, xid, wid)
        return [(eid, int(change.old_state), int(change.new_state)) for eid, change in rows]


def wu_name(xid: int, wid: int) -> str:
    return f"experiments/{xid}/workUnits/{wid}"


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    sim = KubeSim(controllers=False)
    await sim.start()
    yield sim
    await sim.stop()


@pytest.fixture
async def env(ess: Ess, sim: KubeSim) -> AsyncIterator[Env]:
    store = await Store.connect(ess.database_url, min_size=1, max_size=4, clock=ess.clock)
    kube = await ReplaceAfterFirstRead.for_configuration(
        Configuration(host=sim.url), confirmation=FAST_CONFIRMATION
    )
    handlers = JobSetHandlers(
        kube, store, namespace=NAMESPACE, clock=ess.clock, restart_poll_seconds=0.02
    )
    yield Env(ess, sim, store, kube, handlers)
    await kube.close()
    await store.close()


def response_of(operation: Operation) -> WorkUnit:
    assert operation.done, operation
    assert not operation.HasField("error"), operation
    work_unit = WorkUnit()
    assert operation.response.Unpack(work_unit)
    return work_unit


def assert_closed_with_error(operation: Operation, code: int) -> None:
    assert operation.done
    assert operation.error.code == code, operation.error


async def assert_failed_fatally(env: Env, xid: int, wid: int, eid: int, text: str) -> None:
    execution = await env.execution(xid, wid)
    assert execution.name.endswith(f"/executions/{eid}")
    assert S(execution.status.state) == S.FAILED
    message = execution.status.system_message
    assert Severity(message.severity) == Severity.FATAL
    assert message.source == StructuredMessage.XMANAGER_BACKEND
    assert text in message.user_facing_text


# --- Create --------------------------------------------------------------------------------


async def test_create_makes_the_suspended_jobset_and_closes_the_operation(env: Env) -> None:
    xid, wid = await env.new_work_unit()
    task = await env.last_task()

    result = await env.handlers.handle(task)

    assert result.outcome is Outcome.DONE, result
    jobset = env.jobset(xid, wid)
    assert jobset is not None
    assert jobset["metadata"]["labels"] == {
        labels.EXPERIMENT_ID: str(xid),
        labels.WORK_UNIT_ID: str(wid),
        labels.EXECUTION_ID: "1",
        labels.LAST_EDIT: labels.last_edit_label(to_datetime(task.operation_time)),
        labels.PRIORITY_CLASS: "xmc-priority-normal-normal",
        labels.MANAGED_BY: labels.MANAGED_BY_VALUE,
        labels.QUEUE_NAME: "cpu-queue",
    }
    assert jobset["metadata"]["finalizers"] == [labels.FINALIZER]
    assert jobset["spec"]["suspend"] is True
    assert response_of(await env.operation(task.operation)) == task.payload.work_unit


async def test_a_redelivered_create_changes_nothing(env: Env) -> None:
    xid, wid, create = await env.created()
    before = env.jobset(xid, wid)
    history = await env.history(xid, wid)

    again = await env.handlers.handle(create)

    assert again.outcome is Outcome.DONE, "AlreadyExists with the same execution is success"
    assert "redelivery" in again.reason
    assert env.jobset(xid, wid) == before, "same uid and resourceVersion"
    assert await env.history(xid, wid) == history
    assert response_of(await env.operation(create.operation)) == create.payload.work_unit


async def test_create_meeting_another_executions_jobset_fails_permanently(env: Env) -> None:
    xid, wid = await env.new_work_unit()
    create = await env.last_task()
    squatter = Task()
    squatter.CopyFrom(create)
    squatter.payload.eid = 7
    env.sim.store.create(JOBSET, build_base_jobset(squatter, namespace=NAMESPACE), NAMESPACE)
    before = env.jobset(xid, wid)

    result = await env.handlers.handle(create)

    assert (result.outcome, result.code) == (Outcome.PERMANENT, "ALREADY_EXISTS")
    assert env.jobset(xid, wid) == before, "the other JobSet is left alone"
    assert_closed_with_error(await env.operation(create.operation), code_pb2.ALREADY_EXISTS)
    await assert_failed_fatally(env, xid, wid, 1, "execution-id")


async def test_host_network_without_exclusive_topology_fails_the_execution(env: Env) -> None:
    xid, wid = await env.new_work_unit()
    create = await env.last_task()
    # ESS rejects this at the RPC; a task can still carry it (an older ESS, a replayed DLQ).
    create.payload.work_unit.executable.jobset.jobs[0].host_network = True

    result = await env.handlers.handle(create)

    assert (result.outcome, result.code) == (Outcome.PERMANENT, "INVALID_ARGUMENT")
    assert "exclusive-topology" in result.reason
    assert env.jobset(xid, wid) is None
    assert_closed_with_error(await env.operation(create.operation), code_pb2.INVALID_ARGUMENT)
    await assert_failed_fatally(env, xid, wid, 1, "hostNetwork")
    assert (await env.history(xid, wid))[-1] == (1, S.INITIALIZING, S.FAILED)


@pytest.mark.parametrize(
    ("status", "code", "retry_after"),
    [
        pytest.param(500, "UNAVAILABLE", None, id="500 internal error"),
        pytest.param(429, "UNAVAILABLE", 1.0, id="429 throttled with Retry-After"),
    ],
)
async def test_transient_kubernetes_errors_are_retried_then_succeed(
    env: Env, status: int, code: str, retry_after: float | None
) -> None:
    xid, wid = await env.new_work_unit()
    create = await env.last_task()
    env.sim.faults.fail("create", "jobsets", code=status)

    first = await env.handlers.handle(create)

    assert first == TaskResult(Outcome.RETRY, first.reason, code, retry_after)
    assert env.jobset(xid, wid) is None
    assert not (await env.operation(create.operation)).done, "a retry leaves it open"
    assert S((await env.execution(xid, wid)).status.state) == S.INITIALIZING

    assert (await env.handlers.handle(create)).outcome is Outcome.DONE
    assert env.jobset(xid, wid) is not None
    assert (await env.operation(create.operation)).done


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refusal_of_an_api_server_that_has_just_started_is_asked_again(
    env: Env, status: int
) -> None:
    """A kube-apiserver that has just restarted refuses a ServiceAccount its own
    permissions for a moment (its caches are not filled yet; measured on the real
    cluster, docs/cluster.md): one refusal is not believed, the create is asked again
    and the unit runs."""
    xid, wid = await env.new_work_unit()
    create = await env.last_task()
    env.sim.faults.fail("create", "jobsets", code=status, times=len(FAST_CONFIRMATION.delays))

    assert (await env.handlers.handle(create)).outcome is Outcome.DONE
    assert env.jobset(xid, wid) is not None
    assert response_of(await env.operation(create.operation))


async def test_a_permanent_kubernetes_error_fails_the_create(env: Env) -> None:
    """A refusal that outlasts the confirmation schedule is believed: PERMISSION_DENIED."""
    xid, wid = await env.new_work_unit()
    create = await env.last_task()
    env.sim.faults.fail("create", "jobsets", code=403, times=None)

    result = await env.handlers.handle(create)

    assert (result.outcome, result.code) == (Outcome.PERMANENT, "PERMISSION_DENIED")
    assert_closed_with_error(await env.operation(create.operation), code_pb2.PERMISSION_DENIED)
    await assert_failed_fatally(env, xid, wid, 1, "PERMISSION_DENIED")


def rich_work_unit() -> WorkUnit:
    """Two replicated jobs, GPUs, env, volumes, a sidecar, an ordering, success policy ANY."""
    work_unit = WorkUnit(priority=Priority.HIGH)
    executable = work_unit.executable
    executable.scheduling_constraints.queue_name = "gpu-queue"
    jobset = executable.jobset
    jobset.labels["team"] = "vision"
    jobset.annotations["xmc.example/owner"] = "alice"
    jobset.success_policy.operator = JobSetExecutable.SuccessPolicy.ANY
    jobset.success_policy.target_replicated_jobs.append("trainer")
    jobset.network.enable_dns_hostnames = True
    jobset.coordinator.replicated_job = "driver"

    driver = jobset.jobs.add(name="driver", replicas=1, retry_limit=2, active_deadline_seconds=600)
    driver.spec.docker_image = "python:3.11"
    driver.spec.command.extend(["python", "-m", "driver"])
    driver.spec.args_list.append("--verbose")
    driver.spec.args["steps"] = "1000"
    driver.spec.env_vars["MODE"] = "train"
    driver.spec.env.add(name="TOKEN").value_from.secret_key_ref.name = "hf-token"
    driver.spec.env[0].value_from.secret_key_ref.key = "token"
    driver.spec.ports.add(name="grpc", container_port=8470)
    driver.spec.resources.cpu_resources.cpu_millicores = 2000
    driver.spec.resources.cpu_resources.memory_bytes = 8 * 2**30
    driver.spec.volume_mounts.add(name="data", mount_path="/data", read_only=True)
    driver.volumes.add(name="data").persistent_volume_claim.claim_name = "datasets"
    driver.volumes.add(name="scratch").empty_dir.size_limit_bytes = 2**30
    driver.sidecars.add(name="log-shipper", docker_image="fluent/fluent-bit:3.0")

    trainer = jobset.jobs.add(name="trainer", replicas=4, retry_limit=3)
    trainer.spec.docker_image = "nvcr.io/nvidia/pytorch:24.01-py3"
    trainer.spec.resources.gpu_resources.type = "nvidia-h100-80gb"
    trainer.spec.resources.gpu_resources.count = 8
    trainer.spec.resources.ephemeral_storage_bytes = 100 * 2**30
    trainer.spec.env_vars["NCCL_DEBUG"] = "INFO"
    trainer.dependency_order.job_name = "driver"
    trainer.dependency_order.job_dependency_state = KubernetesJob.DependencyOrder.READY
    trainer.init_containers.add(name="warmup", docker_image="busybox:1.36")
    return work_unit


async def test_a_rich_executable_round_trips_through_kubernetes(env: Env) -> None:
    xid, wid, create = await env.created(rich_work_unit())

    stored = env.jobset(xid, wid)
    assert stored is not None
    expected = build_base_jobset(create, namespace=NAMESPACE)
    assert stored["spec"] == expected["spec"]
    for key in ("labels", "annotations", "finalizers"):
        assert stored["metadata"][key] == expected["metadata"][key], key
    # The round trip is only worth something if the rich parts made it into the spec.
    driver, trainer = stored["spec"]["replicatedJobs"]
    assert (driver["name"], trainer["name"], trainer["replicas"]) == ("driver", "trainer", 4)
    assert trainer["dependsOn"] == [{"name": "driver", "status": "Ready"}]
    assert stored["spec"]["successPolicy"] == {
        "operator": "Any",
        "targetReplicatedJobs": ["trainer"],
    }
    gpu = trainer["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert gpu["limits"]["nvidia.com/gpu"] == "8"
    driver_pod = driver["template"]["spec"]["template"]["spec"]
    assert [c["name"] for c in driver_pod["containers"]] == ["driver", "log-shipper"]
    assert [v["name"] for v in driver_pod["volumes"]] == ["data", "scratch"]
    assert stored["metadata"]["labels"][labels.PRIORITY_CLASS] == "xmc-priority-normal-high"


# --- Delete ----------------------------------------------------------------------------------


async def test_delete_deletes_the_jobset_and_a_redelivery_changes_nothing(env: Env) -> None:
    xid, wid, _create = await env.created()
    delete = await env.stop(xid, wid)

    result = await env.handlers.handle(delete)

    assert result.outcome is Outcome.DONE, result
    deleting = env.jobset(xid, wid)
    assert deleting is not None, "the finalizer holds it for the Reconciler"
    assert deleting["metadata"]["deletionTimestamp"]
    assert response_of(await env.operation(delete.operation)) == delete.payload.work_unit

    history = await env.history(xid, wid)
    again = await env.handlers.handle(delete)
    assert again.outcome is Outcome.SKIPPED, again
    assert env.jobset(xid, wid) == deleting
    assert await env.history(xid, wid) == history


async def test_delete_of_a_missing_jobset_writes_stopped_even_with_a_clock_behind(
    env: Env,
) -> None:
    xid, wid = await env.new_work_unit()  # its Create task never ran: no JobSet
    delete = await env.stop(xid, wid)
    lagging = env.make_handlers(clock=lambda: env.ess.clock.now - timedelta(minutes=5))

    result = await lagging.handle(delete)

    assert result.outcome is Outcome.SKIPPED, result
    assert S((await env.execution(xid, wid)).status.state) == S.STOPPED
    assert response_of(await env.operation(delete.operation)) == delete.payload.work_unit
    history = await env.history(xid, wid)
    assert history[-1] == (1, S.STOPPING, S.STOPPED)

    assert (await lagging.handle(delete)).outcome is Outcome.SKIPPED
    assert await env.history(xid, wid) == history, "no second STOPPED row"


async def test_a_uid_mismatch_never_deletes_the_newer_jobset(env: Env) -> None:
    xid, wid, create = await env.created()
    delete = await env.stop(xid, wid)
    name = labels.jobset_name(xid, wid)
    newer_task = Task()
    newer_task.CopyFrom(create)
    newer_task.payload.eid = 2
    set_timestamp(newer_task.operation_time, env.ess.clock.now + timedelta(seconds=5))

    def replace_with_newer() -> None:
        env.remove_finalizer(xid, wid)
        env.sim.store.delete(JOBSET, NAMESPACE, name)
        env.sim.store.create(JOBSET, build_base_jobset(newer_task, namespace=NAMESPACE), NAMESPACE)

    env.kube.replace = replace_with_newer

    result = await env.handlers.handle(delete)

    assert result.outcome is Outcome.SKIPPED, result
    assert "newer than the target" in result.reason
    survivor = env.jobset(xid, wid)
    assert survivor is not None
    assert survivor["metadata"]["labels"][labels.EXECUTION_ID] == "2"
    assert "deletionTimestamp" not in survivor["metadata"]


# --- guards ------------------------------------------------------------------------------------


async def _delete_task(env: Env, xid: int, wid: int) -> Task:
    return await env.stop(xid, wid)


async def _update_task(env: Env, xid: int, wid: int) -> Task:
    return await env.update_priority(xid, wid, Priority.HIGH)


async def _restart_task(env: Env, xid: int, wid: int) -> Task:
    return await env.restart(xid, wid)


@pytest.mark.parametrize(
    ("intent", "newer_eid"),
    [
        pytest.param(_delete_task, 2, id="delete"),
        pytest.param(_update_task, 2, id="update"),
        pytest.param(_restart_task, 3, id="restart"),
    ],
)
async def test_a_task_for_an_older_execution_is_skipped(
    env: Env, intent: Callable[[Env, int, int], Awaitable[Task]], newer_eid: int
) -> None:
    xid, wid, _create = await env.created()
    task = await intent(env, xid, wid)
    # A newer execution's JobSet already holds the name.
    env.sim.store.update(
        JOBSET,
        NAMESPACE,
        labels.jobset_name(xid, wid),
        lambda obj: obj["metadata"]["labels"].update({labels.EXECUTION_ID: str(newer_eid)}),
    )
    before = env.jobset(xid, wid)

    result = await env.handlers.handle(task)

    assert result.outcome is Outcome.SKIPPED, result
    assert env.jobset(xid, wid) == before
    if task.operation:
        assert response_of(await env.operation(task.operation)) == task.payload.work_unit


async def test_a_stale_delete_is_rejected_and_deletes_nothing(env: Env) -> None:
    xid, wid, _create = await env.created()
    env.ess.clock.advance(10)
    update = await env.update_priority(xid, wid, Priority.HIGH)
    assert (await env.handlers.handle(update)).outcome is Outcome.DONE
    env.ess.clock.advance(10)
    delete = await env.stop(xid, wid)
    # A delete decided before the update but delivered after it (a retry, a reclaim).
    delete.operation_time.FromDatetime(env.ess.clock.now - timedelta(seconds=15))
    before = env.jobset(xid, wid)

    result = await env.handlers.handle(delete)

    assert (result.outcome, result.code) == (Outcome.PERMANENT, "FAILED_PRECONDITION")
    assert "older than the JobSet's last edit" in result.reason
    assert env.jobset(xid, wid) == before, "nothing deleted"
    assert_closed_with_error(await env.operation(delete.operation), code_pb2.FAILED_PRECONDITION)


# --- Update ------------------------------------------------------------------------------------


async def test_update_patches_the_labels_and_a_redelivery_changes_nothing(env: Env) -> None:
    xid, wid, _create = await env.created()
    env.ess.clock.advance(10)
    update = await env.update_priority(xid, wid, Priority.HIGH)
    assert update.operation == ""

    result = await env.handlers.handle(update)

    assert result.outcome is Outcome.DONE, result
    patched = env.jobset(xid, wid)
    assert patched is not None
    assert patched["metadata"]["labels"][labels.PRIORITY_CLASS] == "xmc-priority-normal-high"
    assert patched["metadata"]["labels"][labels.LAST_EDIT] == labels.last_edit_label(
        env.ess.clock.now
    )
    assert patched["metadata"]["labels"][labels.QUEUE_NAME] == "cpu-queue"

    assert (await env.handlers.handle(update)).outcome is Outcome.DONE
    assert env.jobset(xid, wid) == patched, "same resourceVersion: nothing written"


async def test_an_older_update_after_a_newer_one_is_rejected(env: Env) -> None:
    xid, wid, _create = await env.created()
    env.ess.clock.advance(10)
    older = await env.update_priority(xid, wid, Priority.LOW)
    env.ess.clock.advance(10)
    newer = await env.update_priority(xid, wid, Priority.HIGH)
    assert (await env.handlers.handle(newer)).outcome is Outcome.DONE
    before = env.jobset(xid, wid)

    result = await env.handlers.handle(older)

    assert (result.outcome, result.code) == (Outcome.PERMANENT, "FAILED_PRECONDITION")
    assert env.jobset(xid, wid) == before


# --- Restart -----------------------------------------------------------------------------------


async def test_restart_deletes_the_old_jobset_waits_for_its_finalizer_then_creates_the_next(
    env: Env,
) -> None:
    xid, wid, _create = await env.created()
    old = env.jobset(xid, wid)
    assert old is not None
    restart = await env.restart(xid, wid)
    assert (restart.target_eid, restart.payload.eid) == (1, 2)

    handling = asyncio.create_task(env.handlers.handle(restart))

    async def old_is_deleting() -> bool:
        jobset = env.jobset(xid, wid)
        return jobset is not None and "deletionTimestamp" in jobset["metadata"]

    await eventually(old_is_deleting, True)
    assert not handling.done(), "it waits for the finalizer"
    env.remove_finalizer(xid, wid)
    result = await asyncio.wait_for(handling, timeout=10)

    assert result.outcome is Outcome.DONE, result
    new = env.jobset(xid, wid)
    assert new is not None
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["metadata"]["labels"][labels.EXECUTION_ID] == "2"
    assert new["metadata"]["finalizers"] == [labels.FINALIZER]
    assert response_of(await env.operation(restart.operation)) == restart.payload.work_unit

    history = await env.history(xid, wid)
    again = await env.handlers.handle(restart)
    assert again.outcome is Outcome.SKIPPED, again
    assert env.jobset(xid, wid) == new
    assert await env.history(xid, wid) == history


async def test_restart_retries_while_the_old_jobset_is_not_gone(env: Env) -> None:
    xid, wid, _create = await env.created()
    restart = await env.restart(xid, wid)
    impatient = env.make_handlers(restart_wait_seconds=0.2, restart_poll_seconds=0.02)

    first = await impatient.handle(restart)

    assert (first.outcome, first.code) == (Outcome.RETRY, "DEADLINE_EXCEEDED")
    assert not (await env.operation(restart.operation)).done
    old = env.jobset(xid, wid)
    assert old is not None
    assert old["metadata"]["labels"][labels.EXECUTION_ID] == "1"
    assert S((await env.execution(xid, wid)).status.state) == S.RESTARTING

    env.remove_finalizer(xid, wid)
    assert (await impatient.handle(restart)).outcome is Outcome.DONE
    new = env.jobset(xid, wid)
    assert new is not None
    assert new["metadata"]["labels"][labels.EXECUTION_ID] == "2"


async def test_restart_waits_for_the_old_jobsets_workload_to_go(env: Env) -> None:
    """Kueue matches Workloads to a JobSet by name (decision 0032): execution 2's JobSet
    is created only once the Workload made for execution 1's (label ``job-uid``) is gone,
    which the garbage collector deletes after the JobSet itself."""
    xid, wid, _create = await env.created()
    old = env.jobset(xid, wid)
    assert old is not None
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "jobset-left-behind",
            "labels": {labels.KUEUE_JOB_UID: old["metadata"]["uid"]},
        },
        "spec": {"queueName": "q", "podSets": []},
    }
    env.sim.store.create(WORKLOAD, workload, NAMESPACE)
    restart = await env.restart(xid, wid)
    impatient = env.make_handlers(restart_wait_seconds=0.3, restart_poll_seconds=0.02)
    env.remove_finalizer(xid, wid)

    first = await impatient.handle(restart)

    assert (first.outcome, first.code) == (Outcome.RETRY, "DEADLINE_EXCEEDED"), first
    assert "Workload" in first.reason
    assert env.jobset(xid, wid) is None, "the old JobSet is gone, the new one not created"
    env.sim.store.delete(WORKLOAD, NAMESPACE, "jobset-left-behind")
    assert (await impatient.handle(restart)).outcome is Outcome.DONE
    new = env.jobset(xid, wid)
    assert new is not None
    assert new["metadata"]["labels"][labels.EXECUTION_ID] == "2"


async def test_a_stop_that_overtakes_a_restart_ends_the_new_execution_stopped(env: Env) -> None:
    """Restart (eid 1 → 2), then stop, with the Delete handled first: it deletes the JobSet
    of eid 1, whose finalizer write the EID fence keeps off eid 2 — so the Delete itself
    writes STOPPED for eid 2, which would otherwise hang in STOPPING."""
    xid, wid, _create = await env.created()
    await env.restart(xid, wid)
    delete = await env.stop(xid, wid)
    assert (delete.kind, delete.target_eid) == (Task.DELETE, 2)

    result = await env.handlers.handle(delete)

    assert result.outcome is Outcome.DONE, result
    old = env.jobset(xid, wid)
    assert old is not None
    assert old["metadata"]["labels"][labels.EXECUTION_ID] == "1"
    assert "deletionTimestamp" in old["metadata"]
    execution = await env.execution(xid, wid)
    assert execution.name.endswith("/executions/2")
    assert S(execution.status.state) == S.STOPPED
