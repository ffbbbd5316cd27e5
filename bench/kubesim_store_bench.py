"""Benchmark: one controller-style list (one JobSet's pods by label) against kubesim's
object store at N live JobSets, each with a Job and two pods.

Printed per N: the indexed ``ObjectStore.list`` cost per call, the cost of the scan the
store used before its indexes (every object sorted and filtered, measured in the same
run), and their ratio. The indexed cost should stay flat as N grows; the scan's grows
with N. Figures only: this is not a test.

    .venv/bin/python bench/kubesim_store_bench.py [--sizes 500,2000,5000] [--calls 200]
"""

from __future__ import annotations

import argparse
import time

from kubesim.clone import clone
from kubesim.resources import JOB, JOBSET, POD
from kubesim.selectors import fields_match, labels_match, parse_label_selector
from kubesim.store import ObjectStore


def _populate(store: ObjectStore, count: int) -> None:
    for i in range(count):
        name = f"js-{i}"
        labels = {"jobset.sigs.k8s.io/jobset-name": name}
        store.create(JOBSET, {"metadata": {"name": name}}, "default")
        store.create(JOB, {"metadata": {"name": f"{name}-main-0", "labels": labels}}, "default")
        for pod in range(2):
            store.create(POD, {"metadata": {"name": f"{name}-{pod}", "labels": labels}}, "default")


def _scan(store: ObjectStore, selector: str) -> list[object]:
    """The store's list before it had indexes: sort everything, filter by kind and labels."""
    requirements = parse_label_selector(selector)
    return [
        clone(obj)
        for (kind, _ns, _name), obj in sorted(store._objects.items())
        if kind == POD.key and labels_match(requirements, obj) and fields_match((), obj)
    ]


def _per_call(fn: object, calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        fn(i)  # type: ignore[operator]
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000,5000")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(f"{'live JobSets':>12} {'indexed µs':>11} {'scan µs':>9} {'scan / indexed':>15}")
    for size in (int(s) for s in args.sizes.split(",")):
        store = ObjectStore(history=10)
        _populate(store, size)

        def indexed(i: int, store: ObjectStore = store, size: int = size) -> None:
            selector = parse_label_selector(f"jobset.sigs.k8s.io/jobset-name=js-{i % size}")
            assert len(store.list(POD, "default", labels=selector)) == 2

        def scan(i: int, store: ObjectStore = store, size: int = size) -> None:
            assert len(_scan(store, f"jobset.sigs.k8s.io/jobset-name=js-{i % size}")) == 2

        fast = _per_call(indexed, args.calls)
        slow = _per_call(scan, max(5, args.calls // 20))
        print(f"{size:>12} {fast * 1e6:>11.1f} {slow * 1e6:>9.0f} {slow / fast:>14.0f}×")


if __name__ == "__main__":
    main()
