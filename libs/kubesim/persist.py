"""Persistence of a kubesim's objects across restarts (``xmc-kubesim --state-dir DIR``).

Without it a restarted kubesim is an empty cluster while XMC's database still says its
JobSets run (issue 23, "no ghosts"). The store is memory; this module snapshots it to
``DIR/kubesim-state.jsonl`` at most once per ``interval`` seconds, and only when the
``resourceVersion`` moved since the last snapshot. The cost is one snapshot of the whole
store per interval while something changes, never a cost per write: taking the object
references is a pointer copy on the loop, encoding and the fsync run in a worker thread
(``bench/kubesim_persist_bench.py`` measures both at 5,000 JobSets and their pods).

A kill -9 loses the writes since the last snapshot began: at most ``interval`` seconds of
them (more only while writing fails, which is logged every time). A graceful stop writes a
final snapshot marked clean. A restart from a snapshot that is not clean cannot know how
many resourceVersions the lost writes used, and clients may have seen some of them; so
the counter jumps ``RESOURCE_VERSION_BUMP`` ahead, as etcd's ``etcdutl snapshot restore
--bump-revision --mark-compacted`` does after a restore: a watcher's old resourceVersion
is then below the counter and outside the (empty) history, so it gets 410 Expired and
relists, instead of resuming into a timeline that was never written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from kubesim.clock import SimClock
from kubesim.snapshot import STATE_FILE, Snapshot, SnapshotError, read_snapshot, write_snapshot
from kubesim.store import ObjectStore

log = structlog.get_logger("kubesim.persist")

RESOURCE_VERSION_BUMP = 1_000_000
"""How far the counter jumps after an unclean stop: more writes than kubesim can take in
the minutes a failing snapshot could go unnoticed (~3,000 writes/s at most)."""
DEFAULT_INTERVAL = 1.0


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


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


def load(state_dir: Path) -> Snapshot | None:
    """The saved snapshot, None on a first start; ``SnapshotError`` naming the file when
    it cannot be used (kubesim must not start empty over a cluster it cannot read)."""
    path = state_path(state_dir)
    try:
        return read_snapshot(path)
    except SnapshotError as error:
        raise SnapshotError(f"{path}: {error}") from None


class Persister:
    """Snapshots one store to ``state_dir`` every ``interval`` seconds while it changes."""

    def __init__(
        self, store: ObjectStore, clock: SimClock, state_dir: Path, interval: float
    ) -> None:
        self._store = store
        self._clock = clock
        self._path = state_path(state_dir)
        self._interval = interval
        self._saved: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.snapshots = 0
        """Snapshots written (for tests and the log)."""

    def restored(self, resource_version: int) -> None:
        """The store was just restored at ``resource_version``: the file already holds it."""
        self._saved = resource_version

    def start(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._task = asyncio.create_task(self._run(), name="kubesim-persist")

    async def _run(self) -> None:
        """Until ``stop``: a snapshot per interval when dirty. Never cancelled mid-write
        (``stop`` waits for the write in flight), so two writers never share the temp
        file."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval)
            if self._stopping.is_set():
                return
            try:
                await self.save(clean=False)
            except Exception:  # one failed snapshot must not end the loop
                log.exception("kubesim state snapshot failed; retrying", path=str(self._path))

    async def save(self, *, clean: bool) -> bool:
        """Write a snapshot if anything changed since the last one (always when
        ``clean``); returns whether one was written."""
        resource_version, objects = self._store.contents()
        if resource_version == self._saved and not clean:
            return False
        snapshot = Snapshot(resource_version, self._clock.now(), clean, objects)
        started = time.perf_counter()
        size = await asyncio.to_thread(write_snapshot, self._path, snapshot)
        self._saved = resource_version
        self.snapshots += 1
        log.debug(
            "kubesim state saved",
            path=str(self._path),
            resource_version=resource_version,
            objects=len(objects),
            bytes=size,
            seconds=round(time.perf_counter() - started, 4),
            clean=clean,
        )
        return True

    async def stop(self) -> None:
        """Stop the periodic snapshots and write the final, clean one."""
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        await self.save(clean=True)
        log.info("kubesim state saved on stop", path=str(self._path), snapshots=self.snapshots)
