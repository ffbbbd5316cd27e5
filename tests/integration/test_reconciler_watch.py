"""ResourceWatcher against a real kubesim over HTTP (controllers off): list, watch, resume,
re-list after 410 and after "too large resource version", selectors, resync and backoff."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from structlog.testing import capture_logs

from kubesim.errors import ApiError
from kubesim.faults import Fault
from kubesim.resources import JOBSET
from kubesim.server import KubeSim
from reconciler import metrics
from reconciler.watch import (
    ChangeKind,
    Failure,
    ResourceWatcher,
    WatchFailed,
    WatchSettings,
    diff,
)
from tests.kubesim.support import MakeKubeSim, jobset
from tests.waiting import eventually
from xmc.kube import JOBSETS
from xmc.kube_client import KubeClient
from xmc.retry import Backoffs

FAST = WatchSettings(
    timeout_seconds=5,
    resync_seconds=None,
    backoffs=Backoffs((0.01, 0.02, 0.1)),
    freshness_seconds=None,
)


@dataclass
class Seen:
    """What the handler was told, in order, as (kind, name, resourceVersion)."""

    events: list[tuple[ChangeKind, str, str]] = field(default_factory=list)

    async def __call__(self, kind: ChangeKind, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.events.append((kind, meta["name"], meta["resourceVersion"]))

    def kinds(self, name: str) -> list[ChangeKind]:
        return [kind for kind, n, _ in self.events if n == name]

    def has(self, kind: ChangeKind, name: str) -> bool:
        return kind in self.kinds(name)


StartWatcher = Callable[..., Awaitable[tuple[ResourceWatcher, Seen]]]


@pytest.fixture
async def make_kubesim() -> AsyncIterator[MakeKubeSim]:
    """A kubesim (controllers off) per call, stopped after the test."""
    started: list[KubeSim] = []

    async def make(**options: Any) -> KubeSim:
        sim = KubeSim(controllers=False, **options)
        await sim.start()
        started.append(sim)
        return sim

    yield make
    for sim in started:
        await sim.stop()


@pytest.fixture
async def start_watcher() -> AsyncIterator[StartWatcher]:
    """Start a JobSet watcher on a sim; stopped (and its client closed) after the test."""
    running: list[tuple[ResourceWatcher, asyncio.Task[None], KubeClient]] = []

    async def start(
        sim: KubeSim, *, wait_ready: bool = True, **options: Any
    ) -> tuple[ResourceWatcher, Seen]:
        kube = await KubeClient.for_url(sim.url)
        seen = Seen()
        options.setdefault("settings", FAST)
        options.setdefault("on_change", seen)
        watcher = ResourceWatcher(kube, JOBSETS, namespace="default", **options)
        task = asyncio.create_task(watcher.run())
        running.append((watcher, task, kube))
        if wait_ready:
            await asyncio.wait_for(watcher.ready.wait(), 5)
        return watcher, seen

    yield start
    for watcher, task, kube in running:
        watcher.stop()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 5)
        await kube.close()


def create(sim: KubeSim, name: str, **labels: str) -> dict[str, Any]:
    return sim.store.create(JOBSET, jobset(name, labels=labels), "default")


def touch(sim: KubeSim, name: str, **labels: str) -> dict[str, Any]:
    def mutate(obj: dict[str, Any]) -> None:
        obj["metadata"].setdefault("labels", {}).update(labels)
        obj["metadata"].setdefault("annotations", {})["touched"] = str(
            int(obj["metadata"].get("annotations", {}).get("touched", "0")) + 1
        )

    return sim.store.update(JOBSET, "default", name, mutate)


async def test_initial_list_is_delivered_as_added(
    make_kubesim: MakeKubeSim, start_watcher: StartWatcher
) -> None:
    sim = await make_kubesim()
    for name in ("a", "b", "c"):
        create(sim, name)

    watcher, seen = await start_watcher(sim)

    assert sorted((k, n) for k, n, _ in seen.events) == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("ADDED", "c"),
    ]
    assert set(watcher.cache) == {"a", "b", "c"}
    got = watcher.get("a")
    assert got is not None
    assert got["kind"] == "JobSet"
    assert watcher.lists == 1


async def test_live_changes_keep_the_cache_current(
    make_kubesim: MakeKubeSim, start_watcher: StartWatcher
) -> None:
    sim = await make_kubesim()
    watcher, seen = await start_watcher(sim)

    create(sim, "a")
    await eventually(lambda: seen.has("ADDED", "a"), what="ADDED a")
    latest = touch(sim, "a", phase="two")
    await eventually(lambda: seen.has("MODIFIED", "a"), what="MODIFIED a")
    got = watcher.get("a")
    assert got is not None
    assert got["metadata"]["resourceVersion"] == latest["metadata"]["resourceVersion"]
    assert got["metadata"]["labels"]["phase"] == "two"

    sim.store.delete(JOBSET, "default", "a")
    await eventually(lambda: seen.has("DELETED", "a"), what="DELETED a")
    assert watcher.get("a") is None
    assert seen.kinds("a") == ["ADDED", "MODIFIED", "DELETED"]


async def test_closed_watch_resumes_from_the_last_resource_version(
    make_kubesim: MakeKubeSim, start_watcher: StartWatcher
) -> None:
    sim = await make_kubesim(bookmark_interval=0.1)
    create(sim, "a")
    create(sim, "b")
    watcher, seen = await start_watcher(sim)

    await eventually(lambda: sim.watches.open_count == 1, what="the watch")
    # No await between closing and writing: these changes happen while disconnected.
    assert sim.faults.close_watches() == 1
    touch(sim, "a")
    sim.store.delete(JOBSET, "default", "b")
    create(sim, "c")

    await eventually(
        lambda: seen.has("MODIFIED", "a") and seen.has("DELETED", "b") and seen.has("ADDED", "c"),
        what="the changes made while disconnected",
    )
    assert watcher.lists == 1, "resumed from the resourceVersion, no re-list"
    assert seen.kinds("a") == ["ADDED", "MODIFIED"], "nothing repeated"
    assert set(watcher.cache) == {"a", "c"}


async def test_expired_resource_version_relists_and_synthesizes_the_difference(
    make_kubesim: MakeKubeSim, start_watcher: StartWatcher
) -> None:
    sim = await make_kubesim(watch_history=5)
    for name in ("gone", "changed", "same"):
        create(sim, name)
    watcher, seen = await start_watcher(sim)
    same_rv = sim.store.get(JOBSET, "default", "same")["metadata"]["resourceVersion"]

    await eventually(lambda: sim.watches.open_count == 1, what="the watch")
    with capture_logs() as logs:
        sim.faults.close_watches()
        sim.store.delete(JOBSET, "default", "gone")
        touch(sim, "changed")
        create(sim, "new")
        for _ in range(10):  # push the watcher's version out of the history
            touch(sim, "changed")

        await eventually(lambda: watcher.lists == 2, what="a re-list")
        await eventually(lambda: set(watcher.cache) == {"changed", "same", "new"}, what="the cache")

    assert seen.kinds("gone") == ["ADDED", "DELETED"]
    assert seen.kinds("changed") == ["ADDED", "MODIFIED"], "only the latest state"
    assert seen.kinds("new") == ["ADDED"]
    assert seen.kinds("same") == ["ADDED"], "unchanged objects are not re-delivered"
    same = watcher.get("same")
    assert same is not None
    assert same["metadata"]["resourceVersion"] == same_rv
    assert any("expired; re-listing" in entry["event"] for entry in logs)

    create(sim, "after")  # and the watch goes on from the new list
    await eventually(lambda: seen.has("ADDED", "after"), what="ADDED after")


class TooLarge(Fault):
    """The answer of an API server whose history is behind the resourceVersion asked for
    (apiserver storage.NewTooLargeResourceVersionError, as the cacher sends it)."""

    def error(self) -> ApiError:
        return ApiError(
            504,
            "Timeout",
            "Too large resource version: 90000, current: 12",
            {
                "causes": [
                    {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                ],
                "retryAfterSeconds": 1,
            },
        )


def _relists(reason: str) -> float:
    value = metrics.RELISTS_TOTAL.labels("jobsets", reason)._value.get()
    return float(value)


async def test_a_server_behind_the_watch_version_is_relisted_not_waited_for(
    make_kubesim: MakeKubeSim, start_watcher: StartWatcher
) -> None:
    sim = await make_kubesim()
    for name in ("kept", "gone"):
        create(sim, name)
    watcher, seen = await start_watcher(sim)
    before = _relists("too_large")
    assert watcher.synced

    await eventually(lambda: sim.watches.open_count == 1, what="the watch")
    sim.faults.add(TooLarge("watch", "jobsets", code=504, times=1))
    sim.faults.delay("list", "jobsets", seconds=0.5, times=1)
    sim.store.delete(JOBSET, "default", "gone")
    sim.faults.close_watches()
    create(sim, "new")

    await eventually(lambda: watcher.relist_reason is Failure.TOO_LARGE, what="a re-list owed")
    assert not watcher.synced, "a cache known stale is not reported synced"
    await eventually(lambda: watcher.lists == 2, what="the re-list")
    await eventually(lambda: watcher.synced, what="synced again")

    assert set(watcher.cache) == {"kept", "new"}
    assert seen.kinds("gone") == ["ADDED", "DELETED"], "what vanished is delivered as DELETED"
    assert seen.kinds("new") == ["ADDED"]
    assert watcher.failures == 0
    assert _relists("too_large") == before + 1
    create(sim, "after")  # and the watch goes on from the new list
    await eventually(lambda: seen.has("ADDED", "after"), what="ADDED after")


async def test_an_ephemeral_kubesim_restarted_is_found_stale_and_relisted(
    start_watcher: StartWatcher,
) -> None:
    """kubesim restarted without its state (its resourceVersions start over) on the same
    port: the watch resumes from the old version and the server just waits for later
    events, as kube-apiserver's cacher does; the freshness check's list NotOlderThan is
    answered "too large", and the watcher re-lists."""
    old = KubeSim(controllers=False)
    await old.start()
    port = int(old.url.rsplit(":", 1)[1])
    for name in ("a", "b"):
        create(old, name)
    for _ in range(30):
        touch(old, "a")  # the old timeline runs well ahead of the new one
    settings = dataclasses.replace(FAST, freshness_seconds=60.0)
    watcher, seen = await start_watcher(old, settings=settings)
    stale_version = watcher.resource_version
    before = _relists("too_large")
    await old.stop()

    new = KubeSim(controllers=False)
    await new.start(port=port)
    try:
        create(new, "fresh")
        await eventually(lambda: set(watcher.cache) == {"fresh"}, within=10, what="a re-list")
        assert _relists("too_large") == before + 1
        await eventually(lambda: watcher.synced, what="synced again")
        assert seen.kinds("a")[-1] == "DELETED"
        assert seen.kinds("b") == ["ADDED", "DELETED"]
        assert seen.kinds("fresh") == ["ADDED"]
        assert int(watcher.resource_version or 0) < int(stale_version or 0)
        create(new, "after")
        await eventually(lambda: seen.has("ADDED", "after"), what="the watch goes on")
    finally:
        await new.stop()


async def test_label_selector_is_respected(
    make_kubesim: MakeKubeSim, start_watcher: StartWatcher
) -> None:
    sim = await make_kubesim()
    create(sim, "mine", team="a")
    create(sim, "theirs", team="b")
    watcher, seen = await start_watcher(sim, label_selector="team=a")
    assert set(watcher.cache) == {"mine"}

    create(sim, "mine-too", team="a")
    create(sim, "not-mine", team="b")
    touch(sim, "theirs")
    await eventually(lambda: seen.has("ADDED", "mine-too"), what="ADDED mine-too")
    touch(sim, "mine", team="b")  # stops matching: DELETED
    await eventually(lambda: seen.has("DELETED", "mine"), what="DELETED mine")

    assert {name for _, name, _ in seen.events} == {"mine", "mine-too"}
    assert set(watcher.cache) == {"mine-too"}


async def test_resync_redelivers_every_cached_object(
    make_kubesim: MakeKubeSim, start_watcher: StartWatcher
) -> None:
    sim = await make_kubesim()
    create(sim, "a")
    create(sim, "b")
    settings = WatchSettings(timeout_seconds=5, resync_seconds=0.1, backoffs=Backoffs((0.01,)))
    watcher, seen = await start_watcher(sim, settings=settings)

    await eventually(lambda: seen.has("RESYNC", "a") and seen.has("RESYNC", "b"), what="a resync")
    latest = touch(sim, "a")
    latest_rv = latest["metadata"]["resourceVersion"]
    await eventually(
        lambda: ("RESYNC", "a", latest_rv) in seen.events, what="a resync of the latest a"
    )
    assert set(watcher.cache) == {"a", "b"}


async def test_failing_list_and_watch_back_off_visibly_and_recover(
    make_kubesim: MakeKubeSim, start_watcher: StartWatcher
) -> None:
    sim = await make_kubesim()
    create(sim, "a")
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(seconds)

    sim.faults.fail("list", "jobsets", code=500, times=2)
    with capture_logs() as logs:
        watcher, seen = await start_watcher(sim, sleep=sleep)
        assert delays == [0.01, 0.02]
        assert seen.kinds("a") == ["ADDED"]

        await eventually(lambda: sim.watches.open_count == 1, what="the watch")
        sim.faults.fail("watch", "jobsets", code=503, times=3)
        sim.faults.close_watches()
        create(sim, "b")
        await eventually(lambda: seen.has("ADDED", "b"), what="ADDED b after recovery")

    assert delays == [0.01, 0.02, 0.01, 0.02, 0.1], "the counter resets after a success"
    warnings = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert "watch of jobsets failed (attempt 3); retrying in 0.1s" in warnings
    assert watcher.failures == 0
    assert watcher.lists == 1


async def test_a_malformed_selector_stops_the_watcher(make_kubesim: MakeKubeSim) -> None:
    sim = await make_kubesim()
    seen = Seen()
    async with await KubeClient.for_url(sim.url) as kube:
        watcher = ResourceWatcher(
            kube,
            JOBSETS,
            namespace="default",
            on_change=seen,
            label_selector="team in (",
            settings=FAST,
        )
        with pytest.raises(WatchFailed, match="400"):
            await asyncio.wait_for(watcher.run(), 5)


async def test_a_failing_handler_does_not_stop_the_watch(
    make_kubesim: MakeKubeSim, start_watcher: StartWatcher
) -> None:
    sim = await make_kubesim()
    seen = Seen()

    async def flaky(kind: ChangeKind, obj: dict[str, Any]) -> None:
        await seen(kind, obj)
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("handler bug")

    watcher, _ = await start_watcher(sim, on_change=flaky)
    create(sim, "bad")
    create(sim, "good")
    await eventually(lambda: seen.has("ADDED", "good"), what="ADDED good")
    assert set(watcher.cache) == {"bad", "good"}


def test_diff_reports_what_a_watch_would_have_sent() -> None:
    def obj(name: str, rv: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "resourceVersion": rv}}

    old = {"gone": obj("gone", "1"), "same": obj("same", "2"), "moved": obj("moved", "3")}
    new = {"same": obj("same", "2"), "moved": obj("moved", "9"), "new": obj("new", "10")}

    assert [(kind, o["metadata"]["name"]) for kind, o in diff(old, new)] == [
        ("DELETED", "gone"),
        ("MODIFIED", "moved"),
        ("ADDED", "new"),
    ]


async def test_groups_follow_every_change_and_every_relist(
    make_kubesim: MakeKubeSim, start_watcher: StartWatcher
) -> None:
    """``group(key)`` is always the cache filtered by ``group_by``, through adds, label
    moves, deletes and a re-list after 410: the Reconciler reads one JobSet's pods from
    it instead of scanning every cached pod."""
    sim = await make_kubesim(watch_history=5, bookmark_interval=0.1)
    create(sim, "a1", team="a")
    create(sim, "b1", team="b")

    def team(obj: dict[str, Any]) -> str | None:
        return (obj["metadata"].get("labels") or {}).get("team")

    watcher, seen = await start_watcher(sim, group_by=team)

    def groups() -> dict[str, list[str]]:
        return {
            key: sorted(o["metadata"]["name"] for o in watcher.group(key))
            for key in ("a", "b", "c")
        }

    def filtered() -> dict[str, list[str]]:
        return {
            key: sorted(n for n, o in watcher.cache.items() if team(o) == key)
            for key in ("a", "b", "c")
        }

    assert groups() == {"a": ["a1"], "b": ["b1"], "c": []}
    create(sim, "a2", team="a")
    touch(sim, "b1", team="c")  # moves from b to c
    create(sim, "none")
    await eventually(lambda: seen.has("ADDED", "none"), what="ADDED none")
    assert groups() == filtered() == {"a": ["a1", "a2"], "b": [], "c": ["b1"]}

    await eventually(lambda: sim.watches.open_count == 1, what="the watch")
    sim.faults.close_watches()
    sim.store.delete(JOBSET, "default", "a1")
    create(sim, "c2", team="c")
    for _ in range(10):  # push the watcher's version out of the history: a re-list
        touch(sim, "none")
    await eventually(lambda: watcher.lists == 2, what="a re-list")
    await eventually(lambda: "c2" in watcher.cache, what="the re-listed cache")
    assert groups() == filtered() == {"a": ["a2"], "b": [], "c": ["b1", "c2"]}
