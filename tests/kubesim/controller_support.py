"""Builders and a harness for the simulated-controller tests: an ObjectStore, a fast
SimClock and the Controllers, driven in-process, plus ``wait_for`` that waits on store
events (never on sleeps) until a condition holds or a deadline passes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from kubesim.clock import SimClock
from kubesim.controllers import Controllers, ControllerSettings
from kubesim.defaults import install_defaults
from kubesim.resources import JOBSET, POD, WORKLOAD, Resource
from kubesim.store import ObjectStore
from tests.builders import JobSetBuilder
from tests.waiting import eventually

Obj = dict[str, Any]
T = TypeVar("T")

SCALE = 100.0
"""Simulated seconds per real second: a default pod (1 s start, 3 s run) takes 40 ms."""
DEADLINE = 10.0
"""Real seconds a test waits for a condition before failing."""
XMC_FINALIZER = "jobset.xmanager.cloud/finalizer"


def replicated_job(
    name: str = "main",
    *,
    replicas: int = 1,
    parallelism: int = 1,
    cpu: str = "1",
    behavior: Mapping[str, Any] | None = None,
    container_behaviors: Mapping[str, Mapping[str, Any]] | None = None,
    containers: tuple[str, ...] = ("worker",),
    backoff_limit: int = 0,
    depends_on: list[Obj] | None = None,
) -> Obj:
    annotations: dict[str, str] = {}
    if behavior is not None:
        annotations["kubesim.xmc/behavior"] = json.dumps(behavior)
    for container, spec in (container_behaviors or {}).items():
        annotations[f"kubesim.xmc/behavior.{container}"] = json.dumps(spec)
    rjob: Obj = {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "backoffLimit": backoff_limit,
                "template": {
                    "metadata": {
                        "labels": {"xmc.google.com/work-unit-id": "1"},
                        "annotations": annotations,
                    },
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": c,
                                "image": f"registry.example/{c}:1",
                                "resources": {"requests": {"cpu": cpu}},
                            }
                            for c in containers
                        ],
                    },
                },
            }
        },
    }
    if depends_on:
        rjob["dependsOn"] = depends_on
    return rjob


def make_jobset(
    name: str,
    *rjobs: Obj,
    queue: str | None = "cpu-queue",
    priority_class: str | None = None,
    suspend: bool = True,
    success_policy: Obj | None = None,
    failure_policy: Obj | None = None,
    finalizers: tuple[str, ...] = (XMC_FINALIZER,),
) -> Obj:
    labels: dict[str, str] = {"xmc.google.com/work-unit-id": "1"}
    if queue is not None:
        labels["kueue.x-k8s.io/queue-name"] = queue
    if priority_class is not None:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    spec: Obj = {"suspend": suspend, "replicatedJobs": list(rjobs) or [replicated_job()]}
    if success_policy is not None:
        spec["successPolicy"] = success_policy
    if failure_policy is not None:
        spec["failurePolicy"] = failure_policy
    return {
        "metadata": {"name": name, "labels": labels, "finalizers": list(finalizers)},
        "spec": spec,
    }


def plain_jobset(name: str = "js") -> JobSetBuilder:
    """A JobSet as the pure controller steps are given it (namespace ``default``, uid
    ``<name>-uid``): not queued, since a queue label changes how a plan records a resume,
    and not held by XMC's finalizer."""
    return (
        JobSetBuilder(name, "default")
        .uid(f"{name}-uid")
        .label("kueue.x-k8s.io/queue-name", None)
        .finalizers()
    )


def cluster_queue(name: str, *, cpu: str, preemption: str | None = "LowerPriority") -> Obj:
    spec: Obj = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": "default-flavor",
                        "resources": [
                            {"name": "cpu", "nominalQuota": cpu},
                            {"name": "memory", "nominalQuota": "64Gi"},
                        ],
                    }
                ],
            }
        ],
    }
    if preemption is not None:
        spec["preemption"] = {"withinClusterQueue": preemption}
    return {"metadata": {"name": name}, "spec": spec}


def local_queue(name: str, cluster_queue_name: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def conditions(obj: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def condition_is(obj: Mapping[str, Any] | None, type_: str, status: str = "True") -> bool:
    found = conditions(obj).get(type_)
    return found is not None and found.get("status") == status


@dataclass
class Sim:
    store: ObjectStore
    clock: SimClock

    def jobset(self, name: str) -> Obj | None:
        return self.store.find(JOBSET, "default", name)

    def pods(self, jobset_name: str) -> list[Obj]:
        return [
            p
            for p in self.store.list(POD, "default")
            if (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name")
            == jobset_name
        ]

    def workload(self, jobset_name: str) -> Obj | None:
        for workload in self.store.list(WORKLOAD, "default"):
            refs = workload["metadata"].get("ownerReferences") or []
            if any(r.get("name") == jobset_name for r in refs):
                return workload
        return None

    def create(self, resource: Resource, obj: Obj) -> Obj:
        return self.store.create(resource, obj)

    async def wait_for(self, probe: Callable[[], object], what: str) -> None:
        """Re-check ``probe`` after every store event until it is truthy (or time is up)."""
        await self.until(probe, bool, what)

    async def until(
        self, fetch: Callable[[], T | None], check: Callable[[T], object], what: str
    ) -> T:
        """The first value of ``fetch()`` that is not None and passes ``check``, re-read
        after every store event (no polling), within ``DEADLINE`` real seconds."""
        subscription = self.store.subscribe(None)
        try:
            found: T = await eventually(
                fetch,
                lambda value: value is not None and check(value),
                within=DEADLINE,
                what=what,
                changed=subscription.queue.get,
            )
        finally:
            self.store.unsubscribe(subscription)
        return found


@asynccontextmanager
async def running_sim(
    settings: ControllerSettings | None = None, *, defaults: bool = True, scale: float = SCALE
) -> AsyncIterator[Sim]:
    """The simulators on a store, at ``scale`` simulated seconds per real second (a test
    that bounds a simulated duration from above wants a lower one: at 100, a 20 ms hiccup
    of a loaded machine is 2 simulated seconds)."""
    clock = SimClock(scale)
    store = ObjectStore(clock=clock)
    if defaults:
        install_defaults(store)
    controllers = Controllers(store, clock, settings or ControllerSettings(time_scale=scale))
    await controllers.start()
    try:
        yield Sim(store, clock)
    finally:
        await controllers.stop()
