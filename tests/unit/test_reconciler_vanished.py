"""The vanished-JobSet sweep's decisions (``reconciler.vanished``): who is missing its
JobSet, for how long, and the FAILED write. Tables; the sweep against kubesim and a real
ESS is in tests/integration/test_reconciler_vanished.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from reconciler import metrics
from reconciler.ess_client import EssUnavailable
from reconciler.vanished import (
    VanishedSweep,
    decide_vanished,
    has_its_jobset,
    vanished_observation,
)
from xmc.labels import EXECUTION_ID, EXPERIMENT_ID, WORK_UNIT_ID
from xmc.model.deployed import DeployedExecution
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage

S = WorkUnitState
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)


def execution(wid: int = 1, eid: int = 1, deployed_ago: float | None = 600) -> DeployedExecution:
    return DeployedExecution(
        xid=7, wid=wid, eid=eid, state=S.RUNNING, state_update_time=NOW - timedelta(minutes=5),
        deploy_time=None if deployed_ago is None else NOW - timedelta(seconds=deployed_ago),
    )  # fmt: skip


def jobset(wid: int, eid: int) -> dict[str, Any]:
    labels = {EXPERIMENT_ID: "7", WORK_UNIT_ID: str(wid), EXECUTION_ID: str(eid)}
    return {"metadata": {"name": f"xmc-7-{wid}", "labels": labels}}


@pytest.mark.parametrize(
    ("cached", "first_missed", "now", "deployed_ago", "suspect", "due"),
    [
        pytest.param(jobset(1, 1), None, 1000.0, 600, False, False, id="its JobSet is there"),
        pytest.param(jobset(1, 1), 900.0, 1000.0, 600, False, False, id="back: cleared"),
        pytest.param(None, None, 1000.0, 600, True, False, id="first missed: grace starts"),
        pytest.param(None, 950.0, 1000.0, 600, True, False, id="missed 50 s: within grace"),
        pytest.param(None, 940.0, 1000.0, 600, True, True, id="missed 60 s: due"),
        pytest.param(None, 0.0, 1000.0, 30, True, False, id="created 30 s ago: not yet"),
        pytest.param(None, 0.0, 1000.0, None, True, True, id="no record of the create: old"),
        pytest.param(
            jobset(1, 0), 0.0, 1000.0, 600, True, True, id="a JobSet of another execution"
        ),
        pytest.param(
            {"metadata": {"name": "xmc-7-1"}},
            0.0,
            1000.0,
            600,
            True,
            True,
            id="a JobSet without our labels",
        ),
    ],
)
def test_when_a_missing_jobset_ends_its_execution(
    cached: dict[str, Any] | None,
    first_missed: float | None,
    now: float,
    deployed_ago: float | None,
    suspect: bool,
    due: bool,
) -> None:
    target = execution(deployed_ago=deployed_ago)
    key = (7, 1, 1)
    decision = decide_vanished(
        [target],
        jobset_of=lambda name: cached if name == "xmc-7-1" else None,
        suspects={} if first_missed is None else {key: first_missed},
        now=now,
        wall_now=NOW,
        grace=GRACE,
    )
    assert (key in decision.suspects) is suspect
    if suspect:
        assert decision.suspects[key] == (now if first_missed is None else first_missed)
    assert decision.due == ([target] if due else [])


def test_executions_no_longer_listed_are_forgotten() -> None:
    decision = decide_vanished(
        [execution(wid=2)], jobset_of=lambda _: None, suspects={(7, 1, 1): 0.0, (7, 2, 1): 5.0},
        now=10.0, wall_now=NOW, grace=GRACE,
    )  # fmt: skip
    assert decision.suspects == {(7, 2, 1): 5.0}


def test_has_its_jobset() -> None:
    assert has_its_jobset(jobset(1, 2), 2)
    assert not has_its_jobset(jobset(1, 1), 2)
    assert not has_its_jobset(None, 2)


@pytest.mark.parametrize(
    ("stored_at", "expected"),
    [
        pytest.param(NOW - timedelta(minutes=5), NOW, id="this host's time"),
        pytest.param(
            NOW + timedelta(seconds=5),
            NOW + timedelta(seconds=5),
            id="never before the stored (cluster) time",
        ),
    ],
)
def test_the_failed_write_says_what_happened(stored_at: datetime, expected: datetime) -> None:
    target = DeployedExecution(7, 3, 2, S.RUNNING, stored_at, NOW - timedelta(hours=1))
    observation = vanished_observation(target, uid="u-123", wall_now=NOW)
    assert (observation.xid, observation.wid, observation.eid) == (7, 3, 2)
    assert observation.update_mask == ("status.state", "status.system_message")
    assert observation.force_status_message_update
    status = observation.execution.status
    assert S(status.state) is S.FAILED
    assert status.state_update_time.ToDatetime(tzinfo=UTC) == expected
    message = status.system_message
    assert message.severity == StructuredMessage.ERROR
    assert message.source == StructuredMessage.XMANAGER_BACKEND
    assert message.parent == "experiments/7/workUnits/3"
    assert message.user_facing_text.startswith(
        "JobSet xmc-7-3 (uid u-123) of execution 2 disappeared from the cluster without "
        "XMC's finalizer"
    )
    unknown = vanished_observation(target, uid=None, wall_now=NOW)
    assert "JobSet xmc-7-3 of execution 2 disappeared" in (
        unknown.execution.status.system_message.user_facing_text
    )


class _DownEss:
    async def deployed(self, *, page_token: str, page_size: int) -> Any:
        raise EssUnavailable(grpc.StatusCode.UNAVAILABLE, "connection refused")


async def test_a_failed_pass_is_counted_and_a_standby_keeps_no_suspects() -> None:
    sweep = VanishedSweep(
        kube=None,  # type: ignore[arg-type]
        ess=_DownEss(),  # type: ignore[arg-type]
        namespace="default", jobset_of=lambda _: None, synced=lambda: True,
        wall_clock=lambda: NOW,
    )  # fmt: skip
    failed = metrics.VANISHED_SWEEPS_TOTAL.labels("failed")._value.get()
    await sweep.step(leading=True)  # raises nothing: the loop goes on
    assert metrics.VANISHED_SWEEPS_TOTAL.labels("failed")._value.get() == failed + 1

    sweep.suspects[(7, 1, 1)] = 1.0
    await sweep.step(leading=False)
    assert sweep.suspects == {}
