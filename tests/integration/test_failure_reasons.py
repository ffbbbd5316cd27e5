"""A FAILED work unit says why (issue 12.4), end to end: ESS (gRPC) → Actuator → kubesim
(HTTP, with its JobSet/Kueue/kubelet simulators) → Reconciler → ESS. The stored execution's
``system_message`` and its status messages name the container, its exit code and reason,
or the Job's reason (``DeadlineExceeded``), once, however often the failure is observed,
on the batched path and on the finalizer's; ``xmc wu get`` and ``xmc wu messages`` show it.

Real time throughout (kubesim time scale 1), on the same system as
tests/integration/test_reconciler_e2e.py (tests/integration/system.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from kubesim.resources import JOB, JOBSET, POD
from kubesim.server import KubeSim
from reconciler.failure import decide_failure_reason
from tests.integration.support import behaving_unit
from tests.integration.system import ALICE, System, running_system
from tests.integration.test_cli import xmc
from tests.kubesim.controller_support import condition_is, make_jobset, replicated_job
from tests.waiting import eventually
from xmc.kube import JOBSETS
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

# The whole loop at real time: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState
ERROR = StructuredMessage.ERROR


async def create(system: System, unit: WorkUnit) -> str:
    experiment: Experiment = await system.ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    operation = await system.ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=unit), metadata=ALICE
    )
    return str(operation.name).split("/operations/")[0]


async def failed(system: System, name: str, *, within: float = 30) -> str:
    """Wait for FAILED; the stored reason (the ERROR system message's text)."""
    await eventually(lambda: system.state(name), S.FAILED, within=within)
    message = await system.system_message(name)
    assert (message.severity, message.source) == (ERROR, StructuredMessage.KUBERNETES)
    return str(message.user_facing_text)


def jobset_name(name: str) -> str:
    xid, wid = name.split("/")[1::2]
    return f"xmc-{xid}-{wid}"


def job_name(name: str) -> str:
    return f"{jobset_name(name)}-main-0"


async def test_a_container_that_exits_1_names_its_exit_code(ess_factory: Any) -> None:
    async with running_system(ess_factory) as system:
        name = await create(system, behaving_unit({"run_seconds": 1, "exit_code": 1}))
        reason = await failed(system, name)

        job = job_name(name)
        assert reason.startswith(f'job "{job}" failed (BackoffLimitExceeded): container "main"')
        assert reason.endswith("exited with code 1 (Error)")
        assert f'of pod "{job}-0-' in reason
        assert await system.messages(name) == [(1, ERROR, reason)]


async def test_an_oom_killed_container_says_so(ess_factory: Any) -> None:
    async with running_system(ess_factory) as system:
        name = await create(system, behaving_unit({"oom_killed": True, "run_seconds": 1}))
        reason = await failed(system, name)
        assert "exited with code 137 (OOMKilled)" in reason
        assert await system.messages(name) == [(1, ERROR, reason)]


async def test_a_job_past_its_deadline_says_deadline_exceeded(ess_factory: Any) -> None:
    async with running_system(ess_factory) as system:
        name = await create(system, behaving_unit({"run_seconds": None}, deadline_seconds=3))
        reason = await failed(system, name)
        assert reason == (
            f'job "{job_name(name)}" failed (DeadlineExceeded): '
            "Job was active longer than specified deadline"
        )
        assert await system.messages(name) == [(1, ERROR, reason)]


async def test_an_image_that_never_pulls_ends_at_the_deadline_with_both_reasons(
    ess_factory: Any,
) -> None:
    grace = timedelta(seconds=1)
    async with running_system(ess_factory, startup_grace=grace) as system:
        unit = behaving_unit({"image_pull_error": True}, deadline_seconds=5)
        name = await create(system, unit)
        reason = await failed(system, name)

        assert reason.startswith(f'job "{job_name(name)}" failed (DeadlineExceeded): ')
        texts = [text for _eid, severity, text in await system.messages(name)]
        assert texts[-1] == reason, "the failure is the last word"
        assert any("ErrImagePull" in t or "ImagePullBackOff" in t for t in texts[:-1]), texts


async def test_the_reason_is_stored_once_through_resyncs_and_the_finalizer(
    ess_factory: Any,
) -> None:
    async with running_system(ess_factory) as system:
        name = await create(system, behaving_unit({"crash": True}))
        reason = await failed(system, name)

        # Re-observe it as a resync and a new leader would, then let the orphan sweep
        # delete it: the finalizer path writes FAILED again.
        jobset = system.reconciler.jobsets.get(jobset_name(name))
        assert jobset is not None
        for _ in range(3):
            await system.reconciler._reconcile_jobset(jobset)
        assert await system.reconciler.collect_orphans() == 1

        async def gone() -> bool:
            return system.jobset(name) is None

        await eventually(gone, True, within=30)
        await system.reconciler.batcher.flush_now()
        assert await system.messages(name) == [(1, ERROR, reason)]
        assert await system.state(name) == S.FAILED


async def test_the_finalizer_path_writes_the_reason_when_it_writes_first(
    ess_factory: Any,
) -> None:
    # A batcher that never flushes on its own: only the finalizer's synchronous write
    # lands before the JobSet is gone (the final flush at shutdown then changes nothing).
    async with running_system(ess_factory, flush_interval=3600) as system:
        name = await create(system, behaving_unit({"crash": True}))

        async def kubesim_failed() -> bool:
            conditions = ((system.jobset(name) or {}).get("status") or {}).get("conditions")
            return any(c["type"] == "Failed" and c["status"] == "True" for c in conditions or [])

        await eventually(kubesim_failed, True, within=30)
        assert await system.state(name) != S.FAILED, "nothing was flushed"
        await system.kube.delete(JOBSETS, "default", jobset_name(name))
        reason = await failed(system, name)
        # As upstream, a JobSet held by the finalizer keeps its Jobs and pods until the
        # finalizer goes, so the finalizer's write has the same evidence as the batch's.
        job = job_name(name)
        assert reason.startswith(f'job "{job}" failed (BackoffLimitExceeded): container "main"')
        assert reason.endswith("exited with code 1 (Error)")
        assert await system.messages(name) == [(1, ERROR, reason)]


async def test_the_cli_shows_the_reason(ess_factory: Any) -> None:
    async with running_system(ess_factory) as system:
        name = await create(system, behaving_unit({"run_seconds": 1, "exit_code": 3}))
        reason = await failed(system, name)

        shown = await xmc(system.ess, "wu", "get", name)
        assert shown.exit_code == 0, shown.output
        assert f"system: {reason}" in shown.stdout

        listed = await xmc(system.ess, "wu", "messages", name)
        assert listed.exit_code == 0, listed.output
        assert reason in _text_column(listed.stdout)


def _text_column(table: str) -> str:
    """The last column of a rich table, its wrapped lines joined again."""
    cells = [line.split("│")[-2].strip() for line in table.splitlines() if line.count("│") > 2]
    return " ".join(cell for cell in cells if cell and cell != "text")


async def test_a_pod_failure_policy_failure_names_the_container_it_matched() -> None:
    """XMC's Jobs carry only an ``Ignore`` rule, but a JobSet made elsewhere may fail a
    Job by ``FailJob``: the Reconciler's reason for what kubesim writes then (as upstream:
    ``PodFailurePolicy``, upstream's message) names the matched container's exit."""
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    rjob = replicated_job(behavior={"run_seconds": 1, "exit_code": 42}, backoff_limit=3)
    rjob["template"]["spec"]["podFailurePolicy"] = policy
    sim = KubeSim(controllers=True, time_scale=100.0)
    await sim.start()
    try:
        sim.store.create(JOBSET, make_jobset("fatal", rjob, queue=None, suspend=False))
        await eventually(
            lambda: condition_is(sim.store.find(JOBSET, "default", "fatal"), "Failed"),
            within=10,
            what="the JobSet to fail",
        )
        jobset = sim.store.get(JOBSET, "default", "fatal")
        jobs, pods = sim.store.list(JOB, "default"), sim.store.list(POD, "default")
    finally:
        await sim.stop()
    (pod,) = pods
    found = decide_failure_reason(jobset, jobs, pods)
    assert found.text == (
        f'job "fatal-main-0" failed (PodFailurePolicy): container "worker" of pod '
        f'"{pod["metadata"]["name"]}" exited with code 42 (Error)'
    )
