"""A watch stream's last words: once its feed is closed (``WatchHub.close_all``: a fault,
or kubesim stopping), the stream ends without a BOOKMARK. The feed stopped receiving
events when it was closed, so the store's version is not one this stream delivered; a
bookmark there would let the resumed watch skip what was written in between."""

from __future__ import annotations

import json

from kubesim.resources import JOBSET, NAMESPACE
from kubesim.store import ObjectStore
from kubesim.watch import WatchHub, WatchSpec, _Cursor, _follow
from tests.kubesim.support import jobset


class Collected:
    """The part of an aiohttp StreamResponse a stream writes to."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.chunks.append(data)

    def types(self) -> list[str]:
        lines = b"".join(self.chunks).splitlines()
        return [json.loads(line)["type"] for line in lines if line]


async def test_a_closed_feed_ends_without_a_bookmark_past_what_it_delivered() -> None:
    store = ObjectStore()
    store.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    store.create(JOBSET, jobset("before"), "ns")
    hub = WatchHub(store)
    subscription = hub.open(JOBSET)
    delivered = int(store.create(JOBSET, jobset("delivered"), "ns")["metadata"]["resourceVersion"])
    hub.close_all()  # the feed ends here ...
    store.create(JOBSET, jobset("never-sent"), "ns")  # ... so this never reaches it
    spec = WatchSpec(JOBSET, "v1alpha2", "ns", bookmarks=True)
    cursor = _Cursor(resource_version=delivered - 1, last_bookmark=0.0)  # a bookmark is due
    response = Collected()

    await _follow(response, store, subscription, spec, cursor, bookmark_interval=0.0)  # type: ignore[arg-type]

    assert response.types() == ["ADDED"], response.chunks  # no BOOKMARK at the store version
    assert cursor.resource_version == delivered < store.resource_version
