"""kubesim's state file: what a restarted kubesim needs to carry on where it stopped.

One snapshot is JSON lines: a header (format, the store's ``resourceVersion``, the
cluster clock's time, whether the process stopped cleanly), then one line per stored
object with its resource key. Objects carry everything else a restored kubesim needs —
uids, ``resourceVersion``s, finalizers, and the status the controllers rebuild their
timers from (a pod's ``startTime``, a Job's conditions, a Workload's admission) — so the
controllers, being level-triggered, carry on from the objects alone.

One line per object (not one document) so that encoding runs in a worker thread as many
short ``json.dumps`` calls: each holds the GIL only briefly, and the event loop keeps
serving while a large snapshot is written. ``write_snapshot`` writes a temp file, fsyncs
it, renames it over the old one and fsyncs the directory, so a crash at any moment
leaves either the old snapshot or the new one, never a torn file.

Encoding and decoding are pure (``encode_lines``, ``decode``); only ``write_snapshot``
and ``read_snapshot`` touch the disk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

FORMAT = 1
MAGIC = "kubesim-state"
STATE_FILE = "kubesim-state.jsonl"
"""The file's name in ``--state-dir``."""


class SnapshotError(Exception):
    """The state file cannot be read as a kubesim snapshot (the message says why)."""


@dataclass(frozen=True)
class Snapshot:
    resource_version: int
    cluster_time: datetime
    """The cluster clock when the snapshot was taken (a restart never moves it back)."""
    clean: bool
    """True only for the snapshot written by a graceful stop: nothing happened after it."""
    objects: Sequence[tuple[str, Obj]]
    """(resource key, object) in store order."""


def encode_lines(snapshot: Snapshot) -> Iterator[bytes]:
    """The snapshot as lines (each ending in a newline), header first."""
    header = {
        "kind": MAGIC,
        "format": FORMAT,
        "resourceVersion": snapshot.resource_version,
        "clusterTime": snapshot.cluster_time.isoformat(),
        "clean": snapshot.clean,
        "objects": len(snapshot.objects),
    }
    yield _line(header)
    for resource_key, obj in snapshot.objects:
        yield _line({"r": resource_key, "o": obj})


def _line(value: Obj) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def decode(lines: Iterable[bytes]) -> Snapshot:
    """A snapshot from its lines; ``SnapshotError`` naming the line for anything else."""
    iterator = iter(lines)
    header = parse_line(next(iterator, b""), 1)
    if header.get("kind") != MAGIC:
        raise SnapshotError("line 1: not a kubesim state file (no kubesim-state header)")
    if header.get("format") != FORMAT:
        raise SnapshotError(f"line 1: format {header.get('format')!r}, this kubesim reads {FORMAT}")
    resource_version = header.get("resourceVersion")
    if isinstance(resource_version, bool) or not isinstance(resource_version, int):
        raise SnapshotError("line 1: resourceVersion is not an integer")
    try:
        cluster_time = datetime.fromisoformat(str(header.get("clusterTime")))
    except ValueError:
        raise SnapshotError("line 1: clusterTime is not an ISO 8601 time") from None
    objects: list[tuple[str, Obj]] = []
    for number, raw in enumerate(iterator, start=2):
        entry = parse_line(raw, number)
        resource_key, obj = entry.get("r"), entry.get("o")
        if not isinstance(resource_key, str) or not isinstance(obj, dict):
            raise SnapshotError(f"line {number}: want {{'r': resource, 'o': object}}")
        objects.append((resource_key, obj))
    if header.get("objects") != len(objects):
        raise SnapshotError(
            f"the header counts {header.get('objects')} objects, the file holds {len(objects)} "
            "(truncated?)"
        )
    return Snapshot(resource_version, cluster_time, bool(header.get("clean")), objects)


def parse_line(raw: bytes, number: int) -> Obj:
    """One line of a state file (snapshot or journal) as a JSON object; ``SnapshotError``
    naming line ``number`` for anything else."""
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SnapshotError(f"line {number}: not JSON ({error})") from None
    if not isinstance(value, dict):
        raise SnapshotError(f"line {number}: not a JSON object")
    return value


def write_snapshot(path: Path, snapshot: Snapshot) -> int:
    """Atomically replace ``path`` with ``snapshot`` (temp file, fsync, rename, fsync of
    the directory); returns the bytes written. Blocking: call it in a worker thread."""
    temp = path.with_name(path.name + ".tmp")
    size = 0
    with open(temp, "wb") as file:
        for line in encode_lines(snapshot):
            file.write(line)
            size += len(line)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return size


def read_snapshot(path: Path) -> Snapshot | None:
    """The snapshot at ``path``; None when there is no file (a first start)."""
    try:
        with open(path, "rb") as file:
            return decode(file)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise SnapshotError(f"cannot read it: {error.strerror}") from None
