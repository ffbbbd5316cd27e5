"""kubesim's write-ahead journal: every store event as one JSON line, so a restart replays
what happened after the last snapshot (``kubesim.persist`` decides when lines are written
and when a snapshot replaces them).

A line is ``{"rv", "e", "r", "ns", "n", "at", "o"}``: the event's ``resourceVersion``,
its type (ADDED, MODIFIED, DELETED), the resource key, the object's namespace ("" when
cluster-scoped) and name, the cluster time, and the object as stored (none for a
DELETED: the key says what to remove). A START line (``rv`` and ``at`` only) records
that a kubesim began serving at that counter: after it nothing is known to have stopped
cleanly, and an unclean restart bumps the counter from there even if no write followed.

Journals are ``kubesim-journal-NNNNNN.jsonl``, numbered in the order they were written.
Replaying (``replay``, pure) applies, over a snapshot taken at ``resourceVersion`` S,
every line with ``rv`` > S in file order: an ADDED or MODIFIED puts the object, a DELETED
removes the key. Only the last file's final line may be torn (a crash in the middle of an
append: no newline); it is skipped, and cut off before new lines follow. Anything else
unreadable is a ``SnapshotError`` naming the file and the line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from kubesim.snapshot import Snapshot, SnapshotError, parse_line

Obj = dict[str, Any]

START = "START"
DELETED = "DELETED"
PUTS = frozenset({"ADDED", "MODIFIED"})
_NAME = re.compile(r"^kubesim-journal-(\d+)\.jsonl$")


class Record(NamedTuple):
    """An event as the ``Persister`` buffers it, encoded only when flushed."""

    resource_version: int
    type: str
    resource: str
    object: Obj | None
    cluster_time: datetime


@dataclass(frozen=True)
class Entry:
    """One decoded journal line."""

    resource_version: int
    type: str
    cluster_time: datetime
    resource: str = ""
    namespace: str = ""
    name: str = ""
    object: Obj | None = None


@dataclass(frozen=True)
class JournalFile:
    """What one journal file holds: its entries, and where a torn final line starts
    (None: the file ends with a whole line)."""

    entries: Sequence[Entry]
    torn_at: int | None


def journal_path(state_dir: Path, sequence: int) -> Path:
    return state_dir / f"kubesim-journal-{sequence:06d}.jsonl"


def sequence_of(path: Path) -> int:
    match = _NAME.match(path.name)
    return int(match[1]) if match else 0


def journal_paths(state_dir: Path) -> list[Path]:
    """The journals in ``state_dir``, oldest first."""
    if not state_dir.is_dir():
        return []
    return sorted((p for p in state_dir.iterdir() if _NAME.match(p.name)), key=sequence_of)


# --- pure: lines and replay ------------------------------------------------------------


def encode_event(
    resource_version: int, type_: str, resource: str, obj: Obj, cluster_time: datetime
) -> bytes:
    """One event as a line; costs the size of ``obj`` (nothing else in the store)."""
    meta = obj.get("metadata") or {}
    line: Obj = {
        "rv": resource_version,
        "e": type_,
        "r": resource,
        "ns": meta.get("namespace") or "",
        "n": meta.get("name", ""),
        "at": cluster_time.isoformat(),
    }
    if type_ != DELETED:
        line["o"] = obj
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def encode_start(resource_version: int, cluster_time: datetime) -> bytes:
    line = {"rv": resource_version, "e": START, "at": cluster_time.isoformat()}
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def encode_record(record: Record) -> bytes:
    if record.type == START or record.object is None:
        return encode_start(record.resource_version, record.cluster_time)
    return encode_event(
        record.resource_version, record.type, record.resource, record.object, record.cluster_time
    )


def decode_line(raw: bytes, number: int) -> Entry:
    """A line as an ``Entry``; ``SnapshotError`` naming ``number`` for anything else."""
    line = parse_line(raw, number)
    resource_version, type_ = line.get("rv"), line.get("e")
    if isinstance(resource_version, bool) or not isinstance(resource_version, int):
        raise SnapshotError(f"line {number}: rv is not an integer")
    try:
        cluster_time = datetime.fromisoformat(str(line.get("at")))
    except ValueError:
        raise SnapshotError(f"line {number}: at is not an ISO 8601 time") from None
    if type_ == START:
        return Entry(resource_version, START, cluster_time)
    if type_ != DELETED and type_ not in PUTS:
        raise SnapshotError(f"line {number}: unknown event type {type_!r}")
    resource, namespace, name, obj = line.get("r"), line.get("ns"), line.get("n"), line.get("o")
    if not (isinstance(resource, str) and isinstance(namespace, str) and isinstance(name, str)):
        raise SnapshotError(f"line {number}: want strings r, ns and n")
    if type_ in PUTS and not isinstance(obj, dict):
        raise SnapshotError(f"line {number}: an {type_} line without its object")
    return Entry(resource_version, type_, cluster_time, resource, namespace, name, obj)


def decode_journal(data: bytes, *, last: bool) -> JournalFile:
    """A journal file's bytes. A final line without its newline is torn: tolerated in the
    ``last`` file (a crash mid-append), an error in any other."""
    entries: list[Entry] = []
    offset = 0
    number = 0
    while offset < len(data):
        number += 1
        end = data.find(b"\n", offset)
        if end < 0:
            if last:
                return JournalFile(entries, offset)
            raise SnapshotError(f"line {number}: torn (no newline) and not the last journal")
        entries.append(decode_line(data[offset:end], number))
        offset = end + 1
    return JournalFile(entries, None)


def _key(resource: str, obj: Obj) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (resource, meta.get("namespace") or "", meta.get("name", ""))


def replay(snapshot: Snapshot, entries: Iterable[Entry]) -> Snapshot:
    """The state after ``entries`` over ``snapshot``: lines at or below its
    ``resourceVersion`` are already in it. The counter ends at the last applied line, the
    clock at the latest time seen, in the store's order (an update keeps an object's
    place, a create goes last). Clean only if the snapshot was and no line came after it
    (a START at its version is a process that began there and may have died)."""
    objects = {_key(resource, obj): obj for resource, obj in snapshot.objects}
    resource_version = snapshot.resource_version
    cluster_time = snapshot.cluster_time
    clean = snapshot.clean
    for entry in entries:
        if entry.resource_version < snapshot.resource_version:
            continue
        clean = False
        if entry.resource_version == snapshot.resource_version:
            continue
        resource_version = max(resource_version, entry.resource_version)
        cluster_time = max(cluster_time, entry.cluster_time)
        key = (entry.resource, entry.namespace, entry.name)
        if entry.type == DELETED:
            objects.pop(key, None)
        elif entry.object is not None:
            objects[key] = entry.object
    return Snapshot(
        resource_version, cluster_time, clean, [(key[0], obj) for key, obj in objects.items()]
    )


# --- disk (blocking: call in a worker thread) --------------------------------------------


def read_journal(path: Path, *, last: bool) -> JournalFile:
    """``decode_journal`` of the file, errors naming it."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SnapshotError(f"{path}: cannot read it: {error.strerror}") from None
    try:
        return decode_journal(data, last=last)
    except SnapshotError as error:
        raise SnapshotError(f"{path}: {error}") from None


def append(path: Path, data: bytes) -> None:
    """Append whole lines and fsync them. On failure the file is cut back to where it
    was, so retrying the same bytes never leaves a torn line in the middle."""
    created = not path.exists()
    with open(path, "ab") as file:
        start = file.tell()
        try:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        except BaseException:
            file.truncate(start)
            raise
    if created:
        fsync_directory(path.parent)


def cut(path: Path, length: int) -> None:
    """Drop a torn final line (everything from ``length``), durably."""
    with open(path, "r+b") as file:
        file.truncate(length)
        os.fsync(file.fileno())


def remove(paths: Sequence[Path]) -> None:
    """Remove journals a snapshot has made redundant, oldest first."""
    for path in paths:
        path.unlink(missing_ok=True)
    if paths:
        fsync_directory(paths[0].parent)


def fsync_directory(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
