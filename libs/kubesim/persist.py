"""Persistence of a kubesim's objects across restarts (``xmc-kubesim --state-dir DIR``).

Without it a restarted kubesim is an empty cluster while XMC's database still says its
JobSets run (issue 23, "no ghosts"). The store is memory; on disk it is a snapshot
(``DIR/kubesim-state.jsonl``, ``kubesim.snapshot``) plus a write-ahead journal of every
event since (``DIR/kubesim-journal-NNNNNN.jsonl``, ``kubesim.journal``).

- **Per write**: the store hands each event to the ``Persister`` (``ObjectStore.record``),
  which appends it to a memory buffer, on the loop: a reference to the stored object
  (never mutated in place) and the cluster time, never a cost of the store.
- **Per interval** (``interval``, default 1 s): the buffered events are encoded as JSON
  lines (each the cost of its object), appended to the current journal and fsynced, in a
  worker thread. A kill -9 loses at most the writes of the last
  interval (plus that small batch's fsync). A failed append is logged and retried with the
  same bytes (the file is cut back first), so the buffer is never lost.
- **Compaction**: once the journals hold more lines than ``max(compact_lines, 2 ×
  objects)`` or ``compact_bytes``, the next flush also rotates to a new journal file,
  writes a snapshot of the store at the resourceVersion S that its last flushed line has
  (temp file, fsync, rename), then removes the older journals, whose lines are all ≤ S. A
  crash between any two steps leaves a snapshot and journals that replay to the same
  state. The snapshot's cost (``bench/kubesim_persist_bench.py``) is paid once per that
  many writes, never per second.
- **Restore** (``load``): the snapshot, then every journal line above its
  resourceVersion, in file order. The last journal's torn final line (a crash mid-append)
  is skipped and cut off at start; anything else unreadable is a ``SnapshotError`` naming
  the file and line (kubesim must not start empty over a cluster it cannot read).

A graceful stop flushes, writes a final snapshot marked clean and removes the journals.
A restart that is not clean (the snapshot is not, or journal lines follow it, or a START
line says a kubesim served after it) cannot know how many resourceVersions the lost last
interval used, and clients may have seen some of them; so the counter jumps
``RESOURCE_VERSION_BUMP`` ahead, as etcd's ``etcdutl snapshot restore --bump-revision
--mark-compacted`` does after a restore: a watcher's old resourceVersion is then below the
counter and outside the (empty) history, so it gets 410 Expired and relists, instead of
resuming into a timeline that was never written. Every start journals a START line at the
counter it serves from, fsynced before the API serves, so the next restore bumps from
there even if the journal lost every write after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from kubesim import journal
from kubesim.clock import SimClock
from kubesim.resources import Resource
from kubesim.snapshot import STATE_FILE, Snapshot, SnapshotError, read_snapshot, write_snapshot
from kubesim.store import Obj, ObjectStore

log = structlog.get_logger("kubesim.persist")

RESOURCE_VERSION_BUMP = 1_000_000
"""How far the counter jumps after an unclean stop: more writes than kubesim can take in
the minutes a failing journal could go unnoticed (~3,000 writes/s at most)."""
DEFAULT_INTERVAL = 1.0
COMPACT_LINES = 10_000
"""Journal lines (at least; 2 × the objects when more) that trigger a snapshot."""
COMPACT_BYTES = 64 << 20
"""Journal bytes that trigger a snapshot whatever the line count."""


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


@dataclass(frozen=True)
class Restored:
    """What ``load`` found: the state it replays to, and what the ``Persister`` needs to
    carry on the journals (their files, their line count, a torn tail to cut off)."""

    snapshot: Snapshot
    """The snapshot with every journal line applied (clean only if nothing followed it)."""
    journals: tuple[Path, ...]
    lines: int
    torn: tuple[Path, int] | None
    """The last journal and the length to cut it to, when its final line is torn."""


def restored_resource_version(snapshot: Snapshot) -> int:
    """Where the counter continues: exactly where a clean stop left it, else far enough
    ahead that no resourceVersion a client saw before a crash is ever issued again."""
    if snapshot.clean:
        return snapshot.resource_version
    return snapshot.resource_version + RESOURCE_VERSION_BUMP


def clock_start(snapshot: Snapshot | None, now: datetime, offset: timedelta) -> datetime:
    """The host time to start a restored cluster clock from (``SimClock`` adds the
    offset): now, unless the saved cluster time is later (a time scale above 1 runs the
    cluster clock ahead of the host's), so cluster time never goes back."""
    if snapshot is None:
        return now
    return max(now, snapshot.cluster_time.astimezone(UTC) - offset)


def load(state_dir: Path) -> Restored | None:
    """The saved state, None on a first start; ``SnapshotError`` naming the file (and
    line) when it cannot be used (kubesim must not start empty over a cluster it cannot
    read)."""
    path = state_path(state_dir)
    try:
        snapshot = read_snapshot(path)
    except SnapshotError as error:
        raise SnapshotError(f"{path}: {error}") from None
    paths = journal.journal_paths(state_dir)
    if snapshot is None:
        if paths:  # every start writes a snapshot before its first journal
            raise SnapshotError(f"{paths[0]}: a journal without its snapshot {path}")
        return None
    entries: list[journal.Entry] = []
    torn: tuple[Path, int] | None = None
    for number, journal_file in enumerate(paths, start=1):
        read = journal.read_journal(journal_file, last=number == len(paths))
        entries.extend(read.entries)
        if read.torn_at is not None:
            torn = (journal_file, read.torn_at)
    return Restored(journal.replay(snapshot, entries), tuple(paths), len(entries), torn)


class Persister:
    """Journals one store's events to ``state_dir`` every ``interval`` seconds, and
    replaces the journals by a snapshot once they outgrow the bounds."""

    def __init__(
        self,
        store: ObjectStore,
        clock: SimClock,
        state_dir: Path,
        interval: float,
        *,
        compact_lines: int = COMPACT_LINES,
        compact_bytes: int = COMPACT_BYTES,
    ) -> None:
        self._store = store
        self._clock = clock
        self._dir = state_dir
        self._path = state_path(state_dir)
        self._interval = interval
        self._compact_lines = compact_lines
        self._compact_bytes = compact_bytes
        self._buffer: list[journal.Record] = []
        """Events not yet in a journal: appended on the loop, dropped only once a flush
        has fsynced them (a failed flush encodes the same records to the same bytes)."""
        self._sequence = 1
        """The journal file being appended to."""
        self._lines = 0
        self._bytes = 0
        self._restored = False
        self._torn: tuple[Path, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.snapshots = 0
        """Snapshots written (for tests and the log)."""
        self.flushes = 0
        """Journal appends (for tests and the log)."""

    def restored(self, restored: Restored) -> None:
        """The store was just restored from ``restored``: carry on after its journals."""
        self._restored = True
        self._sequence = max((journal.sequence_of(p) for p in restored.journals), default=0) + 1
        self._lines = restored.lines
        self._bytes = sum(p.stat().st_size for p in restored.journals)
        self._torn = restored.torn

    async def start(self) -> None:
        """Record every event from now on; journal a START line (fsynced before this
        returns, so before the API serves); a first start also writes the first snapshot
        (the store holds its default namespace already)."""
        self._dir.mkdir(parents=True, exist_ok=True)
        if self._torn is not None:
            await asyncio.to_thread(journal.cut, *self._torn)
            log.warning("kubesim journal: a torn last line dropped", path=str(self._torn[0]))
            self._torn = None
        self._store.record(self._record)
        start = journal.Record(
            self._store.resource_version, journal.START, "", None, self._clock.now()
        )
        self._buffer.append(start)
        await self.flush(compact=not self._restored)
        self._task = asyncio.create_task(self._run(), name="kubesim-persist")

    def _record(self, resource_version: int, type_: str, resource: Resource, obj: Obj) -> None:
        record = journal.Record(resource_version, type_, resource.key, obj, self._clock.now())
        self._buffer.append(record)

    async def _run(self) -> None:
        """Until ``stop``: a flush per interval. Never cancelled mid-write (``stop`` waits
        for the flush in flight), so two writers never share a file."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval)
            if self._stopping.is_set():
                return
            try:
                await self.flush()
            except Exception:  # one failed flush must not end the loop; the buffer stays
                log.exception(
                    "kubesim journal flush failed; retrying",
                    path=str(journal.journal_path(self._dir, self._sequence)),
                    pending=len(self._buffer),
                )

    async def flush(self, *, compact: bool = False, clean: bool = False) -> None:
        """Append the buffered lines to the journal and fsync them; then, when the
        journals outgrew their bounds (or ``compact``/``clean`` asks), snapshot the store
        as it was when the lines were taken and drop the journals it covers."""
        count = len(self._buffer)
        records = self._buffer[:count]
        snapshot = None
        if compact or clean or self._compaction_due(count):
            resource_version, objects = self._store.contents()  # same moment as the lines
            snapshot = Snapshot(resource_version, self._clock.now(), clean, objects)
        if records:
            started = time.perf_counter()
            path = journal.journal_path(self._dir, self._sequence)
            size = await asyncio.to_thread(_append_records, path, records)
            del self._buffer[:count]
            self._lines += count
            self._bytes += size
            self.flushes += 1
            log.debug(
                "kubesim journal flushed",
                path=str(path),
                lines=count,
                bytes=size,
                seconds=round(time.perf_counter() - started, 4),
            )
        if snapshot is not None:
            await self._compact(snapshot)

    def _compaction_due(self, count: int) -> bool:
        bound = max(self._compact_lines, 2 * self._store.object_count)
        return self._lines + count > bound or self._bytes > self._compact_bytes

    async def _compact(self, snapshot: Snapshot) -> None:
        """Rotate (later lines go to a new file), write the snapshot, then remove the
        journals before the new one: every line in them is at or below its version."""
        self._sequence += 1
        started = time.perf_counter()
        size, removed = await asyncio.to_thread(
            _snapshot_and_trim, self._path, snapshot, self._sequence
        )
        self._lines = 0
        self._bytes = 0
        self.snapshots += 1
        log.debug(
            "kubesim state saved",
            path=str(self._path),
            resource_version=snapshot.resource_version,
            objects=len(snapshot.objects),
            bytes=size,
            seconds=round(time.perf_counter() - started, 4),
            clean=snapshot.clean,
            journals_removed=removed,
        )

    async def stop(self) -> None:
        """Stop the periodic flushes, then flush and write the final, clean snapshot."""
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        await self.flush(clean=True)
        self._store.record(None)
        log.info("kubesim state saved on stop", path=str(self._path), snapshots=self.snapshots)


def _append_records(path: Path, records: list[journal.Record]) -> int:
    """Encode ``records`` and append them to the journal at ``path``; the bytes. Blocking."""
    data = b"".join(journal.encode_record(record) for record in records)
    journal.append(path, data)
    return len(data)


def _snapshot_and_trim(path: Path, snapshot: Snapshot, sequence: int) -> tuple[int, int]:
    """Write ``snapshot``, then remove the journals numbered below ``sequence`` (the one
    lines go to from now on); the bytes written and the journals removed. Blocking."""
    older = [p for p in journal.journal_paths(path.parent) if journal.sequence_of(p) < sequence]
    size = write_snapshot(path, snapshot)
    journal.remove(older)
    return size, len(older)
