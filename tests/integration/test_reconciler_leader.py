"""LeaderElector against a real kubesim over HTTP: one leader, takeover after a crash
within the lease, immediate takeover after a release, conflicts and failing renewals."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest
from structlog.testing import capture_logs

from kubesim.resources import LEASE
from kubesim.server import KubeSim
from reconciler.leader import LeaderElector, LeaseSettings, expired, format_micro_time
from tests.integration.support import T0, BuggyReads, FakeClock
from tests.waiting import eventually, holds_for
from xmc.kube_client import KubeClient
from xmc.model.fence import Fence
from xmc.timestamps import utc_now

#: Short durations: the lease field is whole seconds, so 1 s; step down after 0.6 s.
SHORT = LeaseSettings(
    lease_seconds=1.0,
    renew_seconds=0.2,
    retry_seconds=0.1,
    renew_deadline_seconds=0.6,
    request_timeout=2.0,
)


@dataclass
class Candidate:
    elector: LeaderElector
    task: asyncio.Task[None]
    transitions: list[str] = field(default_factory=list)


class Start(Protocol):
    def __call__(self, identity: str, *, clock: FakeClock | None = None) -> Candidate: ...


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    sim = KubeSim(controllers=False)
    await sim.start()
    yield sim
    await sim.stop()


@pytest.fixture
async def api(sim: KubeSim) -> AsyncIterator[KubeClient]:
    async with await KubeClient.for_url(sim.url) as kube:
        yield kube


@pytest.fixture
async def start(api: KubeClient) -> AsyncIterator[Start]:
    """Start a candidate with its own identity; cancelled (no release) after the test."""
    candidates: list[Candidate] = []

    def run(identity: str, *, clock: FakeClock | None = None) -> Candidate:
        transitions: list[str] = []

        async def started() -> None:
            transitions.append("started")

        async def stopped() -> None:
            transitions.append("stopped")

        elector = LeaderElector(
            api,
            identity=identity,
            settings=SHORT,
            on_started_leading=started,
            on_stopped_leading=stopped,
            clock=utc_now if clock is None else clock,
        )
        candidate = Candidate(elector, asyncio.create_task(elector.run()), transitions)
        candidates.append(candidate)
        return candidate

    yield run
    for candidate in candidates:
        candidate.task.cancel()
    await asyncio.gather(*(c.task for c in candidates), return_exceptions=True)


def lease(sim: KubeSim) -> dict[str, Any]:
    return sim.store.get(LEASE, "default", "xmc-reconciler")["spec"]  # type: ignore[no-any-return]


def leaders(*candidates: Candidate) -> list[str]:
    return [c.elector.identity for c in candidates if c.elector.is_leader]


async def exactly_one_leader_for(seconds: float, *candidates: Candidate) -> None:
    """Watch the pair for a while: never two leaders at once, and one at the end."""
    await holds_for(
        lambda: leaders(*candidates),
        lambda found: len(found) <= 1,
        during=seconds,
        every=0.01,
        what="at most one leader",
    )
    assert len(leaders(*candidates)) == 1


async def test_two_candidates_elect_exactly_one_leader(sim: KubeSim, start: Start) -> None:
    a, b = start("a"), start("b")

    await eventually(lambda: len(leaders(a, b)) == 1, what="a leader")
    await exactly_one_leader_for(1.0, a, b)

    (winner,) = leaders(a, b)
    spec = lease(sim)
    assert spec["holderIdentity"] == winner
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 1  # the first term's generation (decision 0054)
    leader = a if winner == "a" else b
    assert leader.elector.generation == 1
    assert leader.transitions == ["started"]
    assert leader.elector.leading.is_set()


async def test_standby_takes_over_within_the_lease_after_the_leader_dies(
    sim: KubeSim, start: Start
) -> None:
    a = start("a")
    await eventually(lambda: a.elector.is_leader, what="a leads")
    b = start("b")
    await exactly_one_leader_for(0.5, a, b)
    assert leaders(a, b) == ["a"]

    a.task.cancel()  # a crash: no release, the Lease is left to expire
    await asyncio.gather(a.task, return_exceptions=True)
    died = time.monotonic()
    await eventually(lambda: b.elector.is_leader, within=5, what="b takes over")
    taken_after = time.monotonic() - died

    assert taken_after <= SHORT.lease_seconds + SHORT.retry_seconds + 0.4
    spec = lease(sim)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 2
    assert b.transitions == ["started"]
    assert b.elector.generation == 2


async def test_release_on_graceful_stop_hands_over_at_once(sim: KubeSim, start: Start) -> None:
    a = start("a")
    await eventually(lambda: a.elector.is_leader, what="a leads")
    b = start("b")
    await exactly_one_leader_for(0.3, a, b)

    a.elector.stop()
    await asyncio.wait_for(a.task, 5)
    released = time.monotonic()
    assert a.transitions == ["started", "stopped"]
    assert not a.elector.is_leader
    await eventually(lambda: b.elector.is_leader, within=5, what="b takes over")

    assert time.monotonic() - released < SHORT.lease_seconds / 2, "no waiting for expiry"
    assert lease(sim)["holderIdentity"] == "b"
    assert lease(sim)["leaseTransitions"] == 2


async def test_candidates_racing_for_a_free_lease_conflict_and_one_wins(
    sim: KubeSim, start: Start
) -> None:
    # A free Lease (released by an earlier holder): both read it, both PUT the same
    # resourceVersion, one gets 409 Conflict.
    sim.store.create(
        LEASE,
        {
            "metadata": {"name": "xmc-reconciler"},
            "spec": {"leaseDurationSeconds": 1, "leaseTransitions": 4},
        },
        "default",
    )
    candidates = [start(name) for name in ("a", "b", "c")]

    await eventually(lambda: len(leaders(*candidates)) == 1, what="a leader")
    await exactly_one_leader_for(0.5, *candidates)
    assert lease(sim)["leaseTransitions"] == 5


async def test_a_conflicting_update_is_read_again_not_fatal(sim: KubeSim, start: Start) -> None:
    a = start("a")
    await eventually(lambda: a.elector.is_leader, what="a leads")

    # Someone else writes between our read and our write: the renewal answers 409.
    sim.faults.fail("update", "leases", code=409, times=1)
    await eventually(lambda: not sim.faults.pending, what="the conflict to be served")
    renewed = lease(sim)["renewTime"]
    await eventually(lambda: lease(sim)["renewTime"] != renewed, what="the next renewal")

    assert a.elector.is_leader
    assert a.transitions == ["started"]
    assert not a.task.done()


async def test_leader_steps_down_when_renewals_fail_past_the_deadline(
    sim: KubeSim, start: Start
) -> None:
    a = start("a")
    await eventually(lambda: a.elector.is_leader, what="a leads")

    sim.faults.fail("*", "leases", code=500, times=None)
    failing_since = time.monotonic()
    await eventually(lambda: a.transitions == ["started", "stopped"], what="a steps down")
    assert time.monotonic() - failing_since < SHORT.lease_seconds, "before anyone may take over"
    assert not a.elector.leading.is_set()

    sim.faults.clear()
    await eventually(lambda: a.elector.is_leader, what="a leads again")
    assert a.transitions == ["started", "stopped", "started"]


async def test_any_failure_of_one_attempt_is_counted_and_the_election_goes_on(
    sim: KubeSim,
) -> None:
    async def broken_callback() -> None:
        raise RuntimeError("the started-leading callback failed")

    async with await BuggyReads.for_url(sim.url) as kube:
        kube.bugs = 2
        elector = LeaderElector(
            kube, identity="a", settings=SHORT, on_started_leading=broken_callback
        )
        with capture_logs() as logs:
            task = asyncio.create_task(elector.run())
            try:
                await eventually(lambda: elector.is_leader, what="a leads despite two bugs")
                await exactly_one_leader_for(0.3, Candidate(elector, task))
                assert not task.done()
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    failed = [e for e in logs if e.get("exc_info") and "acquisition failed" in e["event"]]
    assert [e["event"] for e in failed] == [
        "lease default/xmc-reconciler: acquisition failed (attempt 1); retrying in 0.1s",
        "lease default/xmc-reconciler: acquisition failed (attempt 2); retrying in 0.1s",
    ]
    assert any(e["event"].endswith("the started-leading callback failed") for e in logs)
    assert elector.failures == 0, "reset by the first success"


def test_a_lease_expires_after_its_duration_from_the_last_renewal() -> None:
    clock = FakeClock()
    spec = {"holderIdentity": "a", "renewTime": format_micro_time(T0), "leaseDurationSeconds": 15}

    assert not expired(spec, clock())
    assert not expired(spec, clock.advance(14.9))
    assert expired(spec, clock.advance(0.1))
    assert expired({"holderIdentity": "a"}, T0), "never renewed"


async def test_injected_clock_decides_expiry_of_a_foreign_lease(
    sim: KubeSim, api: KubeClient
) -> None:
    clock = FakeClock()
    sim.store.create(
        LEASE,
        {
            "metadata": {"name": "xmc-reconciler"},
            "spec": {
                "holderIdentity": "other",
                "leaseDurationSeconds": 15,
                "renewTime": format_micro_time(T0),
                "leaseTransitions": 0,
            },
        },
        "default",
    )
    elector = LeaderElector(api, identity="me", settings=SHORT, clock=clock)
    task = asyncio.create_task(elector.run())
    try:
        clock.advance(16)  # past renewTime + 15 s by the injected clock alone
        await eventually(lambda: lease(sim)["holderIdentity"] == "me", what="the takeover")
        assert lease(sim)["leaseTransitions"] == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_leader_paused_past_its_deadline_starts_a_new_term(
    sim: KubeSim, start: Start
) -> None:
    """A SIGSTOP'd (or starved) leader whose Lease nobody took renews it when it wakes; it
    must still step down and start again, so its re-observation covers the events its
    watch handlers ignored while it was not a valid leader."""
    clock = FakeClock()
    a = start("a", clock=clock)
    await eventually(lambda: a.elector.is_leader, what="a leads")
    clock.advance(30)  # the pause: past the renew deadline and the whole lease
    assert not a.elector.is_leader
    await eventually(lambda: a.transitions == ["started", "stopped", "started"], what="a term")
    assert a.elector.is_leader
    assert lease(sim)["holderIdentity"] == "a"
    assert lease(sim)["leaseTransitions"] == a.elector.generation == 2  # a newer term


async def test_a_refusal_naming_a_newer_generation_ends_the_term(
    sim: KubeSim, start: Start
) -> None:
    """The ESS says a generation above ours wrote (the Lease was re-created, its count
    went back): this replica stops acting at once and its next term starts above it, so
    the fence never locks the rightful leader out. A refusal of an earlier term's write
    of ours changes nothing."""
    a = start("a")
    await eventually(lambda: a.elector.is_leader, what="a leads")
    assert a.elector.fence() == Fence("default/xmc-reconciler", 1)

    a.elector.fenced(refused=0, newest=1)  # a write from before this term: ignored
    assert a.elector.is_leader
    assert a.transitions == ["started"]

    a.elector.fenced(refused=1, newest=9)
    assert not a.elector.is_leader, "stops acting before the loop runs again"
    await eventually(lambda: a.transitions == ["started", "stopped", "started"], what="a term")
    assert a.elector.generation == lease(sim)["leaseTransitions"] == 10
