"""Container logs in Postgres (migration 0006): the tail cut again on write, a final
capture never replaced, an unread end keeping the text read before, and each experiment
kept under its cap by evicting its oldest text (its byte count exact throughout)."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.integration.support import minimal_work_unit
from xmc.model.container_logs import Capture, CaptureKey
from xmc.store.repository import Store
from xmc.store.transactions import experiment_log_bytes, fetch_logs, record_captures
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


async def unit(store: Store) -> int:
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    await store.insert_work_unit(xid, minimal_work_unit(), writer="test")
    return xid


def capture(xid: int, text: bytes, *, pod: str = "u1", terminated: bool = True,
            unavailable: str = "", exit_code: int | None = 0) -> Capture:  # fmt: skip
    return Capture(
        CaptureKey(xid, 1, 1, pod, "main", 0), f"pod-{pod}", terminated, exit_code, "Error",
        NOW, text, False, unavailable,
    )  # fmt: skip


async def record(store: Store, *captures: Capture, tail: int = 1024, cap: int = 10_000
                 ) -> list[bool]:  # fmt: skip
    async with store.transaction() as conn:
        return await record_captures(conn, captures, tail_limit=tail, experiment_limit=cap, now=NOW)


async def stored(store: Store, xid: int) -> list[tuple[str, bytes, bool, bool, int | None]]:
    async with store.connection() as conn:
        rows = await fetch_logs(conn, xid, 1, None)
    return [(r.pod_uid, r.text, r.truncated, r.evicted, r.exit_code) for r in rows]


async def used(store: Store, xid: int) -> int:
    async with store.connection() as conn:
        return await experiment_log_bytes(conn, xid)


async def test_a_capture_of_a_missing_unit_is_dropped(store: Store) -> None:
    xid = await unit(store)
    assert await record(store, capture(xid, b"a\n"), capture(xid + 1000, b"b\n")) == [True, False]
    assert await stored(store, xid) == [("u1", b"a\n", False, False, 0)]


async def test_the_tail_is_cut_again_by_the_store(store: Store) -> None:
    xid = await unit(store)
    await record(store, capture(xid, b"first line\nsecond\n"), tail=8)
    assert await stored(store, xid) == [("u1", b"second\n", True, False, 0)]
    assert await used(store, xid) == len(b"second\n")


async def test_a_final_capture_is_kept_and_an_unread_end_keeps_the_text(store: Store) -> None:
    xid = await unit(store)
    await record(store, capture(xid, b"running\n", terminated=False, exit_code=None))
    await record(store, capture(xid, b"", unavailable="not_found: gone", exit_code=143))
    assert await stored(store, xid) == [("u1", b"running\n", False, False, 143)]
    async with store.connection() as conn:
        (row,) = await fetch_logs(conn, xid, 1, 1)
    assert row.unavailable.startswith("only the output read before the container ended")
    await record(store, capture(xid, b"the whole log\n", exit_code=143))
    await record(store, capture(xid, b"late duplicate\n", exit_code=0))
    assert await stored(store, xid) == [("u1", b"the whole log\n", False, False, 143)]
    assert await used(store, xid) == len(b"the whole log\n")


async def test_past_the_cap_the_oldest_text_is_evicted(store: Store) -> None:
    xid, other = await unit(store), await unit(store)
    for pod in ("u1", "u2", "u3"):
        await record(store, capture(xid, b"x" * 40, pod=pod), cap=100)
    await record(store, capture(other, b"y" * 40), cap=100)
    assert [(pod, evicted) for pod, _, _, evicted, _ in await stored(store, xid)] == [
        ("u1", True), ("u2", False), ("u3", False)
    ]  # fmt: skip
    assert await used(store, xid) == 80
    assert await used(store, other) == 40, "another experiment's text is not touched"
    (first, *_) = await stored(store, xid)
    assert first == ("u1", b"", False, True, 0), "the exit code outlives the text"
