"""How the Reconciler sends a batch the ESS refuses: INTERNAL retried a bounded number of
times, a verdict split in halves so only the refused observation is dropped."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import grpc
import pytest

from reconciler.app import Reconciler, ReconcilerOptions
from reconciler.ess_client import EssClient, EssFenced, EssRejected
from reconciler.observation import Observation, Source
from xmc.kube_client import KubeClient
from xmc.timestamps import utc_now
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution


class RefusingEss:
    """Refuses any batch holding a work unit of experiment ``bad_xid`` with ``code``,
    ``internal_first`` times INTERNAL before that."""

    def __init__(self, bad_xid: int, code: grpc.StatusCode, internal_first: int = 0) -> None:
        self.bad_xid = bad_xid
        self.code = code
        self.internal_left = internal_first
        self.calls: list[list[int]] = []
        self.written: list[int] = []

    async def update(self, observations: Sequence[Observation], *, writer: str) -> list[Any]:
        self.calls.append([o.xid for o in observations])
        if self.internal_left:
            self.internal_left -= 1
            raise EssRejected(grpc.StatusCode.INTERNAL, "a passing fault")
        if any(o.xid == self.bad_xid for o in observations):
            raise EssRejected(self.code, "refused")
        self.written.extend(o.xid for o in observations)
        return []


def _observations(count: int) -> list[Observation]:
    return [
        Observation(xid=x, wid=1, eid=1, source=Source.JOBSET, execution=WorkUnitExecution(),
                    update_mask=("status.state",))
        for x in range(1, count + 1)
    ]  # fmt: skip


def _reconciler(ess: RefusingEss) -> Reconciler:
    return Reconciler(
        cast(KubeClient, object()),  # never called: only _send runs
        cast(EssClient, ess),
        identity="test",
        clock=utc_now,
        options=ReconcilerOptions(lease=None),
    )


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    async def instant(_delay: float) -> None:
        return None

    monkeypatch.setattr(asyncio, "sleep", instant)


async def test_a_refused_observation_costs_only_itself() -> None:
    ess = RefusingEss(bad_xid=13, code=grpc.StatusCode.INVALID_ARGUMENT)
    await _reconciler(ess)._send(_observations(100))
    assert sorted(ess.written) == [x for x in range(1, 101) if x != 13]
    assert len(ess.calls) <= 2 * 7 + 1  # a bisection, not one call per item


async def test_internal_is_retried_then_the_batch_lands() -> None:
    ess = RefusingEss(bad_xid=0, code=grpc.StatusCode.INVALID_ARGUMENT, internal_first=3)
    await _reconciler(ess)._send(_observations(10))
    assert sorted(ess.written) == list(range(1, 11))
    assert len(ess.calls) == 4


async def test_a_lasting_internal_drops_the_batch_after_bounded_retries() -> None:
    ess = RefusingEss(bad_xid=0, code=grpc.StatusCode.INVALID_ARGUMENT, internal_first=10**6)
    await _reconciler(ess)._send(_observations(10))
    assert ess.written == []
    assert len(ess.calls) == 5  # the first try and 4 retries; INTERNAL is not bisected


class FencedEss(RefusingEss):
    """Refuses every batch as a deposed leader's (decision 0054)."""

    async def update(self, observations: Sequence[Observation], *, writer: str) -> list[Any]:
        self.calls.append([o.xid for o in observations])
        raise EssFenced(grpc.StatusCode.FAILED_PRECONDITION, "stale", refused=1, newest=2)


async def test_a_deposed_leaders_batch_is_dropped_whole_not_bisected() -> None:
    ess = FencedEss(bad_xid=0, code=grpc.StatusCode.FAILED_PRECONDITION)
    await _reconciler(ess)._send(_observations(100))
    assert ess.calls == [list(range(1, 101))], "one call: resending cannot help"
    assert ess.written == []
