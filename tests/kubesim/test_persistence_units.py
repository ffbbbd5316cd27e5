"""The pure parts of persistence and of reads from a resourceVersion not yet reached:
snapshot encoding, where a restored counter and clock continue, and how a list is served."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kubesim.errors import ApiError
from kubesim.freshness import ReadAt, future_revision, list_read, too_large
from kubesim.persist import RESOURCE_VERSION_BUMP, clock_start, restored_resource_version
from kubesim.resources import JOBSET, POD
from kubesim.selectors import parse_label_selector
from kubesim.snapshot import (
    Snapshot,
    SnapshotError,
    decode,
    encode_lines,
    read_snapshot,
    write_snapshot,
)
from kubesim.store import ObjectStore

T0 = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def _snapshot(*, clean: bool = False) -> Snapshot:
    return Snapshot(
        42,
        T0,
        clean,
        [
            ("namespaces", {"metadata": {"name": "default", "uid": "u0"}}),
            (POD.key, {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}}),
        ],
    )


def test_snapshot_round_trip() -> None:
    snapshot = _snapshot(clean=True)
    assert decode(list(encode_lines(snapshot))) == snapshot


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ([], "line 1: not JSON"),
        ([b"{}\n"], "not a kubesim state file"),
        ([b"[1]\n"], "line 1: not a JSON object"),
        ([b'{"kind":"kubesim-state","format":9}\n'], "format 9"),
        ([b'{"kind":"kubesim-state","format":1,"resourceVersion":"7"}\n'], "resourceVersion"),
        (
            [b'{"kind":"kubesim-state","format":1,"resourceVersion":7,"clusterTime":"x"}\n'],
            "clusterTime",
        ),
    ],
)
def test_a_bad_header_is_named(lines: list[bytes], says: str) -> None:
    with pytest.raises(SnapshotError, match=says):
        decode(lines)


def test_a_truncated_snapshot_is_refused() -> None:
    lines = list(encode_lines(_snapshot()))
    with pytest.raises(SnapshotError, match="truncated"):
        decode(lines[:-1])
    with pytest.raises(SnapshotError, match="line 3: not JSON"):
        decode([*lines[:2], lines[2][:10]])


def test_write_replaces_the_file_atomically(tmp_path: Path) -> None:
    path = tmp_path / "state.jsonl"
    assert read_snapshot(path) is None
    write_snapshot(path, _snapshot())
    write_snapshot(path, _snapshot(clean=True))
    assert read_snapshot(path) == _snapshot(clean=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.jsonl"]


def test_the_counter_continues_exactly_after_a_clean_stop_and_jumps_after_a_crash() -> None:
    assert restored_resource_version(_snapshot(clean=True)) == 42
    assert restored_resource_version(_snapshot(clean=False)) == 42 + RESOURCE_VERSION_BUMP


@pytest.mark.parametrize(
    ("saved", "now", "offset", "start"),
    [
        (None, T0, timedelta(0), T0),
        (T0 - timedelta(hours=1), T0, timedelta(0), T0),  # time moved on: now
        (T0 + timedelta(hours=1), T0, timedelta(0), T0 + timedelta(hours=1)),  # scaled ahead
        (T0 + timedelta(seconds=10), T0, timedelta(seconds=-5), T0 + timedelta(seconds=15)),
    ],
)
def test_the_cluster_clock_never_goes_back(
    saved: datetime | None, now: datetime, offset: timedelta, start: datetime
) -> None:
    snapshot = None if saved is None else Snapshot(1, saved, True, [])
    assert clock_start(snapshot, now, offset) == start


def test_restore_keeps_uids_versions_and_indexes() -> None:
    store = ObjectStore()
    created = store.create(JOBSET, {"metadata": {"name": "a", "labels": {"k": "v"}}})
    resource_version, objects = store.contents()
    restored = ObjectStore()
    restored.restore(resource_version + 5, objects)
    assert restored.get(JOBSET, "default", "a") == created
    assert restored.resource_version == resource_version + 5
    assert [
        j["metadata"]["uid"] for j in restored.list(JOBSET, labels=parse_label_selector("k=v"))
    ] == [created["metadata"]["uid"]]
    # No history survives: a watch from before the restore must relist.
    with pytest.raises(ApiError) as expired:
        restored.check_resumable(resource_version)
    assert expired.value.code == 410
    restored.check_resumable(resource_version + 5)


@pytest.mark.parametrize(
    ("resource_version", "match", "limit", "read"),
    [
        (None, None, None, ReadAt(None)),
        ("0", None, None, ReadAt(None)),
        ("0", "NotOlderThan", None, ReadAt(None)),
        ("7", None, None, ReadAt(7)),  # watch cache: wait, then 504
        ("7", "NotOlderThan", None, ReadAt(7)),
        ("7", "NotOlderThan", 10, ReadAt(7)),
        ("7", None, 10, ReadAt(7, exact=True)),  # legacy exact read of a page: etcd
        ("7", "Exact", None, ReadAt(7, exact=True)),
    ],
)
def test_how_a_list_is_served(
    resource_version: str | None, match: str | None, limit: int | None, read: ReadAt
) -> None:
    assert list_read(resource_version, match, limit, has_continue=False) == read


@pytest.mark.parametrize(
    ("resource_version", "match", "has_continue", "code", "says"),
    [
        ("7", "Newest", False, 422, 'Unsupported value: "Newest"'),
        (None, "NotOlderThan", False, 422, "forbidden unless resourceVersion is provided"),
        ("0", "Exact", False, 422, 'forbidden for resourceVersion "0"'),
        ("7", None, True, 400, "not allowed when using continue"),
        ("7", "NotOlderThan", True, 422, "forbidden when continue is provided"),
    ],
)
def test_bad_list_options_are_named(
    resource_version: str | None, match: str | None, has_continue: bool, code: int, says: str
) -> None:
    with pytest.raises(ApiError) as refused:
        list_read(resource_version, match, None, has_continue)
    assert refused.value.code == code
    assert says in refused.value.message


def test_the_too_large_status_is_upstreams() -> None:
    assert too_large(1042, 42).status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Timeout: Too large resource version: 1042, current: 42",
        "reason": "Timeout",
        "details": {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
        "code": 504,
    }
    assert future_revision().status()["code"] == 500
    assert "reason" not in future_revision().status()
