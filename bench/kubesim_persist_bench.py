"""Benchmark: what persisting kubesim (``--state-dir``) costs at N live JobSets, each with
a Job and two running pods (objects of XMC's size: labels, annotations, a pod template,
statuses), during a busy second of ``--rate`` pod status writes.

Printed per N:

- ``write µs``: one of the busy second's store writes without persistence (the
  baseline), and with it (the event's record appended to the buffer, on the loop); the
  best of 3 busy seconds each, as the shared VM is noisy;
- ``flush ms``: encoding a busy second's lines, appending them to the journal and
  fsyncing them, in the worker thread (what a kill -9 can lose beyond the interval), the
  worst of 3; a second's lines in MB, and the worst event-loop lag for a 1 ms tick
  meanwhile;
- ``snapshot ms``: a full snapshot of the store (the same-run baseline: what the old
  persistence wrote every second while anything changed; now written once per
  ``max(10,000, 2 × objects)`` journal lines), its size and the worst lag meanwhile, and
  ``every s``: how often that comes at the rate;
- ``restore ms``: reading the snapshot, replaying the busy second's journal and
  restoring the store at start.

Figures only: this is not a test.

    .venv/bin/python bench/kubesim_persist_bench.py [--sizes 1000,5000] [--rate 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubesim import journal
from kubesim.clock import SimClock
from kubesim.logs import configure_logging
from kubesim.persist import COMPACT_LINES, Persister, load
from kubesim.resources import JOB, JOBSET, POD
from kubesim.store import ObjectStore

Obj = dict[str, Any]
ROUNDS = 3


def _labels(name: str) -> dict[str, str]:
    return {
        "jobset.sigs.k8s.io/jobset-name": name,
        "xmc.google.com/experiment-id": "12345",
        "xmc.google.com/work-unit-id": "7",
        "kueue.x-k8s.io/queue-name": "cpu-queue",
    }


def _pod_spec() -> Obj:
    return {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "worker",
                "image": "registry.example/trainer:2026.1",
                "args": ["--learning-rate=0.01", "--batch-size=128", "--steps=100000"],
                "env": [{"name": f"VAR_{i}", "value": f"value-{i}"} for i in range(6)],
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
            }
        ],
    }


def _populate(store: ObjectStore, count: int) -> float:
    """N JobSets with their Job and pods; returns seconds per store write."""
    writes = 0
    started = time.perf_counter()
    for i in range(count):
        name = f"js-{i}"
        labels = _labels(name)
        template = {"metadata": {"labels": labels}, "spec": _pod_spec()}
        job_spec = {"template": {"spec": {"template": template}}}
        spec: Obj = {"replicatedJobs": [{"name": "main", "replicas": 1, **job_spec}]}
        store.create(JOBSET, {"metadata": {"name": name, "labels": labels}, "spec": spec})
        store.create(JOB, {"metadata": {"name": f"{name}-main-0", "labels": labels}})
        writes += 2
        for pod in range(2):
            pod_name = f"{name}-main-0-{pod}"
            store.create(
                POD, {"metadata": {"name": pod_name, "labels": labels}, "spec": _pod_spec()}
            )
            status: Obj = {
                "phase": "Running",
                "startTime": "2026-01-01T00:00:00Z",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "worker", "ready": True, "state": {"running": {}}}],
            }
            store.update(
                POD,
                "default",
                pod_name,
                _set_status(status),
                subresource="status",
            )
            writes += 2
    return (time.perf_counter() - started) / writes


def _set_status(status: Obj) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        obj["status"] = status

    return mutate


async def _lag_during(work: asyncio.Task[Any]) -> float:
    """The worst lateness of a 1 ms tick while ``work`` runs."""
    worst = 0.0
    while not work.done():
        before = time.perf_counter()
        await asyncio.sleep(0.001)
        worst = max(worst, time.perf_counter() - before - 0.001)
    await work
    return worst


def _busy_second(store: ObjectStore, size: int, rate: int, second: int) -> float:
    """``rate`` pod status writes (a condition's probe time moves); seconds per write."""
    started = time.perf_counter()
    for i in range(rate):
        name = f"js-{i % size}-main-0-{i % 2}"
        store.update(POD, "default", name, _probed(second, i), subresource="status")
    return (time.perf_counter() - started) / rate


def _probed(second: int, i: int) -> Callable[[Obj], None]:
    def mutate(obj: Obj) -> None:
        probed = f"2026-01-01T00:00:{second:02}.{i:06}Z"
        obj["status"]["conditions"][0]["lastProbeTime"] = probed

    return mutate


async def _measure(size: int, rate: int, directory: Path) -> str:
    clock = SimClock()
    store = ObjectStore(clock=clock, history=10)
    _populate(store, size)
    # The shared VM is noisy: the best of ROUNDS busy seconds, before and after.
    per_write = min(_busy_second(store, size, rate, r) for r in range(ROUNDS))  # baseline
    persister = Persister(store, clock, directory, 3600)
    await persister.start()  # a first start: the first snapshot
    started = time.perf_counter()
    snapshot_lag = await _lag_during(asyncio.create_task(persister.flush(compact=True)))
    snapshot = time.perf_counter() - started
    snapshot_mb = (directory / "kubesim-state.jsonl").stat().st_size / 1e6
    per_journalled_write, flush, flush_lag = float("inf"), 0.0, 0.0
    for second in range(ROUNDS, 2 * ROUNDS):  # each a busy second, then its flush
        per_journalled_write = min(per_journalled_write, _busy_second(store, size, rate, second))
        started = time.perf_counter()
        flush_lag = max(flush_lag, await _lag_during(asyncio.create_task(persister.flush())))
        flush = max(flush, time.perf_counter() - started)  # the worst flush
    journal_bytes = sum(p.stat().st_size for p in journal.journal_paths(directory))
    journal_mb = journal_bytes / ROUNDS / 1e6
    every = max(COMPACT_LINES, 2 * store.object_count) / rate
    started = time.perf_counter()
    restored = load(directory)
    assert restored is not None
    ObjectStore().restore(restored.snapshot.resource_version, restored.snapshot.objects)
    restore = time.perf_counter() - started
    assert restored.snapshot.resource_version == store.resource_version
    return (
        f"{size:>7} {store.object_count:>8} {per_write * 1e6:>6.0f} "
        f"{per_journalled_write * 1e6:>6.0f} {flush * 1e3:>8.1f} {journal_mb:>6.2f} "
        f"{flush_lag * 1e3:>7.1f} {snapshot * 1e3:>9.0f} {snapshot_mb:>6.1f} "
        f"{snapshot_lag * 1e3:>7.1f} {every:>7.0f} {restore * 1e3:>10.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--rate", type=int, default=1000, help="writes in the busy second")
    args = parser.parse_args()
    configure_logging("WARNING")
    print(
        f"{'':>7} {'':>8} {'write µs':>13} {'journal flush, 1 s':>24} "
        f"{'full snapshot (baseline)':>33} {'':>10}"
    )
    print(
        f"{'JobSets':>7} {'objects':>8} {'base':>6} {'+jrnl':>6} {'ms':>8} {'MB':>6} "
        f"{'lag ms':>7} {'ms':>9} {'MB':>6} {'lag ms':>7} {'every s':>7} {'restore ms':>10}"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as directory:
            print(asyncio.run(_measure(size, args.rate, Path(directory))), flush=True)


if __name__ == "__main__":
    main()
