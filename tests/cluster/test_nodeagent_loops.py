"""The node agent's shell against a fake API: the informer relists on 410 Gone and
resumes from the last resourceVersion; a reconcile writes the status with a UID
precondition, writes nothing new when nothing changed, and deletes a pod whose grace
period is over with gracePeriodSeconds 0 and a UID precondition."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import nodeagent

from tests.waiting import eventually

Obj = dict[str, Any]


def _pod(version: str, *, deleted_at: datetime | None = None) -> Obj:
    meta: Obj = {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": version}
    meta["annotations"] = {"kubesim.xmc/behavior": '{"run_seconds": null}'}
    if deleted_at is not None:
        meta["deletionTimestamp"] = deleted_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": meta,
        "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Pending"},
    }


class FakeApi:
    def __init__(self) -> None:
        self.lists: list[str] = []
        self.watches: list[str] = []
        self.requests: list[tuple[str, str, Any]] = []

    async def list(self, path: str, params: Mapping[str, str]) -> tuple[list[Obj], str]:
        self.lists.append(path)
        return ([_pod("10")], "10") if len(self.lists) == 1 else ([_pod("20")], "20")

    async def watch(
        self, path: str, params: Mapping[str, str], resource_version: str
    ) -> AsyncIterator[Obj]:
        self.watches.append(resource_version)
        if len(self.watches) == 1:
            yield {"type": "MODIFIED", "object": _pod("11")}
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}}
            raise nodeagent.Gone
        await asyncio.Event().wait()  # a quiet watch
        yield {}

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> Obj:
        self.requests.append((method, path, body))
        if method == "PATCH":
            updated = _pod("30")
            updated["status"] = body["status"]
            return updated
        return {}


async def test_the_informer_relists_on_gone_and_resumes_from_the_last_version() -> None:
    api = FakeApi()
    agent = nodeagent.Agent(api, 1.0, 3.0)  # type: ignore[arg-type]
    seen: list[str] = []

    def replace(items: list[Obj]) -> None:
        seen.append("list@" + items[0]["metadata"]["resourceVersion"])

    def apply(kind: str, obj: Obj) -> None:
        seen.append(f"{kind}@{obj['metadata']['resourceVersion']}")

    task = asyncio.create_task(agent._informer("pods", "/api/v1/pods", {}, replace, apply))
    await eventually(lambda: api.watches, ["10", "20"], what="the second watch")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert seen == ["list@10", "MODIFIED@11", "list@20"]
    assert api.watches == ["10", "20"]


async def test_a_reconcile_writes_with_a_uid_precondition_and_only_changes() -> None:
    api = FakeApi()
    agent = nodeagent.Agent(api, 0.0, 3.0)  # type: ignore[arg-type]
    agent.nodes["n"] = "127.0.0.1"
    agent.pods[("ns", "p")] = _pod("10")
    await agent.reconcile(("ns", "p"))
    method, path, body = api.requests[0]
    assert (method, path) == ("PATCH", "/api/v1/namespaces/ns/pods/p/status")
    assert body["metadata"] == {"uid": "u-1"}
    assert body["status"]["phase"] == "Running"
    assert agent.pods[("ns", "p")]["metadata"]["resourceVersion"] == "30"  # the response
    await agent.reconcile(("ns", "p"))
    assert len(api.requests) == 1  # nothing changed: nothing written


async def test_a_pod_past_its_grace_period_is_written_terminal_then_deleted() -> None:
    api = FakeApi()
    agent = nodeagent.Agent(api, 0.0, 3.0)  # type: ignore[arg-type]
    agent.nodes["n"] = "127.0.0.1"
    past = datetime.now(UTC) - timedelta(seconds=5)
    agent.pods[("ns", "p")] = _pod("10", deleted_at=past)
    await agent.reconcile(("ns", "p"))
    (patch, _, status), (delete, path, options) = api.requests
    assert patch == "PATCH"
    assert status["status"]["phase"] == "Failed"
    assert (delete, path) == ("DELETE", "/api/v1/namespaces/ns/pods/p")
    assert options["gracePeriodSeconds"] == 0
    assert options["preconditions"] == {"uid": "u-1"}


async def test_pods_on_other_nodes_are_left_alone() -> None:
    api = FakeApi()
    agent = nodeagent.Agent(api, 0.0, 3.0)  # type: ignore[arg-type]
    agent.pods[("ns", "p")] = _pod("10")  # node "n" is not a fake Node
    await agent.reconcile(("ns", "p"))
    assert api.requests == []


async def test_a_key_is_never_reconciled_by_two_workers_at_once() -> None:
    agent = nodeagent.Agent(FakeApi(), 0.0, 3.0)  # type: ignore[arg-type]
    running, overlaps, calls = set(), [], []

    async def reconcile(key: tuple[str, str]) -> None:
        overlaps.append(key in running)
        running.add(key)
        calls.append(key)
        await asyncio.sleep(0.01)
        running.discard(key)

    agent.reconcile = reconcile  # type: ignore[method-assign]
    workers = [asyncio.create_task(agent._worker()) for _ in range(4)]
    key = ("ns", "p")
    agent.enqueue(key)
    await asyncio.sleep(0)
    for _ in range(3):  # events while the first reconcile runs
        agent.enqueue(key)
        await asyncio.sleep(0)
    await asyncio.sleep(0.1)
    for worker in workers:
        worker.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    assert not any(overlaps)
    assert len(calls) == 2  # the first, then once more for everything queued meanwhile
