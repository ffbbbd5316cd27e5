"""Benchmark: what persisting kubesim (``--state-dir``) costs at N live JobSets, each with
a Job and two running pods (objects of XMC's size: labels, annotations, a pod template,
statuses).

Printed per N, beside the baseline of one store write (what every API request and
controller step pays, unchanged by persistence):

- ``on loop ms``: taking the snapshot's object references on the event loop (a pointer
  copy; the only part that blocks the API);
- ``write ms``: encoding, writing and fsyncing the file in the worker thread, and its size;
- ``max lag ms``: the longest the event loop was late for a 1 ms tick while a snapshot
  was being written (what an API request could wait);
- ``restore ms``: reading the file and restoring the store at start.

A snapshot is taken at most once a second while something changes, so its cost is per
second, never per write. Figures only: this is not a test.

    .venv/bin/python bench/kubesim_persist_bench.py [--sizes 1000,5000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubesim.clock import SimClock
from kubesim.logs import configure_logging
from kubesim.persist import Persister, load
from kubesim.resources import JOB, JOBSET, POD
from kubesim.store import ObjectStore

Obj = dict[str, Any]


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


async def _measure(size: int, directory: Path) -> str:
    clock = SimClock()
    store = ObjectStore(clock=clock, history=10)
    per_write = _populate(store, size)
    started = time.perf_counter()
    _, objects = store.contents()
    on_loop = time.perf_counter() - started
    persister = Persister(store, clock, directory, 1.0)
    started = time.perf_counter()
    lag = await _lag_during(asyncio.create_task(persister.save(clean=False)))
    write = time.perf_counter() - started
    size_mb = (directory / "kubesim-state.jsonl").stat().st_size / 1e6
    started = time.perf_counter()
    saved = load(directory)
    assert saved is not None
    ObjectStore().restore(saved.resource_version, saved.objects)
    restore = time.perf_counter() - started
    return (
        f"{size:>7} {len(objects):>8} {per_write * 1e6:>12.0f} {on_loop * 1e3:>10.1f} "
        f"{write * 1e3:>9.0f} {size_mb:>8.1f} {lag * 1e3:>11.1f} {restore * 1e3:>11.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000")
    args = parser.parse_args()
    configure_logging("WARNING")
    print(
        f"{'JobSets':>7} {'objects':>8} {'write µs':>12} {'on loop ms':>10} {'write ms':>9} "
        f"{'file MB':>8} {'max lag ms':>11} {'restore ms':>11}"
    )
    print(f"{'':>7} {'':>8} {'(baseline)':>12}")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as directory:
            print(asyncio.run(_measure(size, Path(directory))), flush=True)


if __name__ == "__main__":
    main()
