"""kubesim's write-ahead journal: lines, replay over a snapshot, torn and corrupt files,
and the ``Persister`` in process — a flush holds every write, a failed flush is retried
with the same bytes, compaction replaces the journals by a snapshot and a restore after
it (plus later lines) is exact."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kubesim import journal
from kubesim.clock import SimClock
from kubesim.journal import Entry, decode_journal, decode_line, encode_event, encode_start
from kubesim.persist import Persister, load
from kubesim.resources import JOBSET, NAMESPACE, POD
from kubesim.server import KubeSim
from kubesim.snapshot import STATE_FILE, Snapshot, SnapshotError
from kubesim.store import ObjectStore
from tests.waiting import eventually

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)
POD_A = {"metadata": {"name": "a", "namespace": "default", "uid": "u1", "resourceVersion": "5"}}
NS_X = {"metadata": {"name": "x", "uid": "u2", "resourceVersion": "6"}}


@pytest.mark.parametrize(
    ("line", "entry"),
    [
        pytest.param(
            encode_event(5, "ADDED", POD.key, POD_A, T0),
            Entry(5, "ADDED", T0, POD.key, "default", "a", POD_A),
            id="a put carries the object",
        ),
        pytest.param(
            encode_event(6, "MODIFIED", NAMESPACE.key, NS_X, T1),
            Entry(6, "MODIFIED", T1, NAMESPACE.key, "", "x", NS_X),
            id="a cluster-scoped object has namespace empty",
        ),
        pytest.param(
            encode_event(7, "DELETED", POD.key, POD_A, T1),
            Entry(7, "DELETED", T1, POD.key, "default", "a", None),
            id="a delete carries the key alone",
        ),
        pytest.param(encode_start(9, T1), Entry(9, "START", T1), id="a start marks the counter"),
    ],
)
def test_a_line_round_trips(line: bytes, entry: Entry) -> None:
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode_line(line, 1) == entry


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"rv":', "line 3: not JSON"),
        (b"[1]", "line 3: not a JSON object"),
        (b'{"rv":"5","e":"ADDED"}', "line 3: rv is not an integer"),
        (b'{"rv":5,"e":"ADDED","at":"noon"}', "line 3: at is not an ISO"),
        (b'{"rv":5,"e":"BOOKMARK","at":"2026-01-01T00:00:00+00:00"}', "unknown event type"),
        (b'{"rv":5,"e":"ADDED","at":"2026-01-01T00:00:00+00:00","r":"pods"}', "want strings"),
        (
            b'{"rv":5,"e":"ADDED","at":"2026-01-01T00:00:00+00:00","r":"pods","ns":"","n":"a"}',
            "without its object",
        ),
    ],
)
def test_a_bad_line_is_named(raw: bytes, says: str) -> None:
    with pytest.raises(SnapshotError, match=says):
        decode_line(raw, 3)


def test_only_the_last_journals_final_line_may_be_torn() -> None:
    whole = encode_event(5, "ADDED", POD.key, POD_A, T0)
    torn = encode_event(6, "DELETED", POD.key, POD_A, T0)[:12]
    read = decode_journal(whole + torn, last=True)
    assert (len(read.entries), read.torn_at) == (1, len(whole))
    assert decode_journal(whole, last=True).torn_at is None
    with pytest.raises(SnapshotError, match="line 2: torn"):
        decode_journal(whole + torn, last=False)
    with pytest.raises(SnapshotError, match="line 2: not JSON"):  # a middle line: corrupt
        decode_journal(whole + torn + b"\n" + whole, last=True)


def _obj(name: str, rv: int, namespace: str | None = "default") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": str(rv)}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta}


BASE = Snapshot(10, T0, True, [(NAMESPACE.key, _obj("default", 1, None)), (POD.key, _obj("a", 9))])


@pytest.mark.parametrize(
    ("entries", "want"),
    [
        pytest.param([], BASE, id="nothing after a clean snapshot: clean, exact"),
        pytest.param(
            [Entry(9, "MODIFIED", T1, POD.key, "default", "a", _obj("a", 9) | {"old": 1})],
            BASE,
            id="lines below the snapshot are already in it",
        ),
        pytest.param(
            [Entry(10, "START", T0)],
            Snapshot(10, T0, False, BASE.objects),
            id="a start at its version: a process ran after it, not clean",
        ),
        pytest.param(
            [
                Entry(11, "ADDED", T1, POD.key, "default", "b", _obj("b", 11)),
                Entry(12, "MODIFIED", T1, POD.key, "default", "a", _obj("a", 12)),
                Entry(13, "DELETED", T0, NAMESPACE.key, "", "default"),
            ],
            Snapshot(13, T1, False, [(POD.key, _obj("a", 12)), (POD.key, _obj("b", 11))]),
            id="puts and deletes in order; an update keeps its place; clock at the latest",
        ),
        pytest.param(
            [
                Entry(11, "DELETED", T1, POD.key, "default", "a"),
                Entry(12, "ADDED", T1, POD.key, "default", "a", _obj("a", 12)),
            ],
            Snapshot(
                12, T1, False, [(NAMESPACE.key, _obj("default", 1, None)), (POD.key, _obj("a", 12))]
            ),
            id="deleted and created again: a new object, last",
        ),
        pytest.param(
            [
                Entry(11, "ADDED", T1, POD.key, "default", "b", _obj("b", 11)),
                Entry(1_000_011, "START", T1),
            ],
            Snapshot(1_000_011, T1, False, [*BASE.objects, (POD.key, _obj("b", 11))]),
            id="the counter ends at a later start",
        ),
    ],
)
def test_replay(entries: list[Entry], want: Snapshot) -> None:
    assert journal.replay(BASE, entries) == want


# --- the Persister in process -------------------------------------------------------


def _sim(tmp_path: Path, **bounds: int) -> tuple[ObjectStore, Persister]:
    clock = SimClock()
    store = ObjectStore(clock=clock)
    return store, Persister(store, clock, tmp_path, 3600, **bounds)


def _restored_equals(tmp_path: Path, store: ObjectStore) -> None:
    restored = load(tmp_path)
    assert restored is not None
    resource_version, objects = store.contents()
    assert restored.snapshot.resource_version == resource_version
    assert list(restored.snapshot.objects) == objects
    assert not restored.snapshot.clean


def _journals(tmp_path: Path) -> list[str]:
    return [p.name for p in journal.journal_paths(tmp_path)]


async def test_a_flush_holds_every_write(tmp_path: Path) -> None:
    store, persister = _sim(tmp_path)
    await persister.start()
    assert persister.snapshots == 1  # a first start: the empty cluster, then journals
    store.create(JOBSET, {"metadata": {"name": "a"}})
    store.create(JOBSET, {"metadata": {"name": "b", "finalizers": ["f"]}})
    store.delete(JOBSET, "default", "b")  # held by its finalizer: marked
    store.update(JOBSET, "default", "b", lambda o: o["metadata"].update(finalizers=[]))
    store.delete(JOBSET, "default", "a")
    store.create(JOBSET, {"metadata": {"name": "a"}})
    await persister.flush()
    assert _journals(tmp_path) == ["kubesim-journal-000002.jsonl"]
    _restored_equals(tmp_path, store)


async def test_a_failed_flush_is_retried_with_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, persister = _sim(tmp_path)
    await persister.start()
    store.create(JOBSET, {"metadata": {"name": "a"}})
    real_append = journal.append

    def fail_midway(path: Path, data: bytes) -> None:
        with open(path, "ab") as file:
            file.write(data[:7])  # torn, as a full disk would leave it
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal, "append", fail_midway)
    with pytest.raises(OSError, match="No space"):
        await persister.flush()
    monkeypatch.setattr(journal, "append", real_append)
    store.create(JOBSET, {"metadata": {"name": "b"}})
    # The real append cuts nothing it did not write: cut the torn bytes as it would have.
    path = tmp_path / _journals(tmp_path)[-1]
    path.write_bytes(path.read_bytes()[:-7])
    await persister.flush()
    _restored_equals(tmp_path, store)
    rvs = [e.resource_version for e in journal.read_journal(path, last=True).entries]
    assert rvs == sorted(set(rvs))  # each line once


async def test_append_cuts_back_what_a_failed_write_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "kubesim-journal-000001.jsonl"
    journal.append(path, b"one\n")

    def no_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("kubesim.journal.os.fsync", no_fsync)
    with pytest.raises(OSError, match="Input/output"):
        journal.append(path, b"two\n")
    assert path.read_bytes() == b"one\n"


async def test_compaction_replaces_the_journals_and_restore_stays_exact(tmp_path: Path) -> None:
    store, persister = _sim(tmp_path, compact_lines=5)
    await persister.start()
    for name in ("a", "b", "c"):
        store.create(JOBSET, {"metadata": {"name": name}})
    await persister.flush()  # 4 lines (START and 3): under max(5, 2 × 4 objects)
    assert (persister.snapshots, _journals(tmp_path)) == (1, ["kubesim-journal-000002.jsonl"])
    for step in range(6):
        store.replace(JOBSET, {"metadata": {"name": "a", "labels": {"step": str(step)}}})
    await persister.flush()  # 10 lines > 8: the snapshot replaces journal 2
    assert persister.snapshots == 2
    assert _journals(tmp_path) == []
    restored = load(tmp_path)
    assert restored is not None
    assert restored.snapshot.resource_version == store.resource_version
    store.delete(JOBSET, "default", "b")
    store.create(JOBSET, {"metadata": {"name": "d"}})
    await persister.flush()
    assert _journals(tmp_path) == ["kubesim-journal-000003.jsonl"]
    _restored_equals(tmp_path, store)


async def test_a_failed_compaction_leaves_a_restorable_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, persister = _sim(tmp_path)
    await persister.start()
    store.create(JOBSET, {"metadata": {"name": "a"}})

    def full_disk(path: Path, snapshot: Snapshot) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("kubesim.persist.write_snapshot", full_disk)
    with pytest.raises(OSError, match="No space"):
        await persister.flush(compact=True)  # the lines are in journal 2; no snapshot
    store.create(JOBSET, {"metadata": {"name": "b"}})
    with pytest.raises(OSError, match="No space"):
        await persister.flush(compact=True)  # rotated: b in journal 3
    assert _journals(tmp_path) == ["kubesim-journal-000002.jsonl", "kubesim-journal-000003.jsonl"]
    _restored_equals(tmp_path, store)


async def test_a_clean_stop_leaves_one_clean_snapshot(tmp_path: Path) -> None:
    store, persister = _sim(tmp_path)
    await persister.start()
    store.create(JOBSET, {"metadata": {"name": "a"}})
    await persister.stop()
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_FILE]  # noqa: ASYNC240
    restored = load(tmp_path)
    assert restored is not None
    assert restored.snapshot.clean
    assert restored.snapshot.resource_version == store.resource_version


def test_a_journal_without_its_snapshot_is_refused(tmp_path: Path) -> None:
    journal.append(tmp_path / "kubesim-journal-000001.jsonl", encode_start(1, T0))
    with pytest.raises(SnapshotError, match="a journal without its snapshot"):
        load(tmp_path)


async def test_a_torn_line_in_an_earlier_journal_is_refused(tmp_path: Path) -> None:
    _store, persister = _sim(tmp_path)
    await persister.start()  # the snapshot
    first = journal.journal_path(tmp_path, 2)
    journal.append(first, encode_start(1, T0) + b'{"rv":')
    journal.append(tmp_path / "kubesim-journal-000009.jsonl", encode_start(99, T0))
    with pytest.raises(SnapshotError, match=f"{first}: line 2: torn"):
        load(tmp_path)


async def test_the_flush_loop_survives_failures_and_keeps_the_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = SimClock()
    store = ObjectStore(clock=clock)
    persister = Persister(store, clock, tmp_path, 0.01)
    await persister.start()
    failures = 3
    real_append = journal.append

    def flaky(path: Path, data: bytes) -> None:
        nonlocal failures
        if failures:
            failures -= 1
            raise OSError(5, "Input/output error")
        real_append(path, data)

    monkeypatch.setattr(journal, "append", flaky)
    store.create(JOBSET, {"metadata": {"name": "a"}})
    await eventually(lambda: persister.flushes >= 2, within=20, every=0.01, what="a second flush")
    assert failures == 0
    _restored_equals(tmp_path, store)
    await persister.stop()


async def test_an_embedded_kubesim_continues_exactly_after_a_clean_stop(tmp_path: Path) -> None:
    async with KubeSim(controllers=False, state_dir=tmp_path) as sim:
        created = sim.store.create(JOBSET, {"metadata": {"name": "a"}})
        resource_version = sim.store.resource_version
    async with KubeSim(controllers=False, state_dir=tmp_path) as sim:
        assert sim.restored is not None
        assert sim.restored.clean
        assert sim.store.get(JOBSET, "default", "a") == created
        assert sim.store.resource_version == resource_version
