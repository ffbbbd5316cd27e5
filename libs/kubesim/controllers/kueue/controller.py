"""The Kueue simulator's shell: the job framework's pass per JobSet and the scheduling
pass over every queue, reading and writing the store (the package docstring explains
both).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from kubesim.clock import SimClock, rfc3339
from kubesim.controllers.conditions import condition, condition_true, set_condition
from kubesim.controllers.jobset_plan import QUEUE_NAME_LABEL, jobset_finished
from kubesim.controllers.mutate import set_status, set_suspend
from kubesim.errors import ApiError
from kubesim.events import Event
from kubesim.resources import (
    CLUSTER_QUEUE,
    EVENT,
    JOBSET,
    LOCAL_QUEUE,
    RESOURCE_FLAVOR,
    WORKLOAD,
    WORKLOAD_PRIORITY_CLASS,
    Resource,
)
from kubesim.store import ObjectStore

from .admission import admit, pending_by_cluster_queue
from .model import QueuedWorkload, QueueState
from .parse import is_admitted, parse_workload, queue_state
from .status import cluster_queue_status, decided_status, local_queue_status, released_status
from .vocabulary import (
    DEFAULT_KUEUE_VERSION,
    OWNER_NOT_FOUND,
    OWNER_NOT_FOUND_MESSAGE,
    PRIORITY_CLASS_LABEL,
    KueueVersion,
)
from .workload import (
    build_workload,
    jobset_active,
    missing_priority_class_event,
    priority_fields,
    workload_name,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]

SCHEDULE = ("schedule",)


class KueueController:
    name = "kueue"
    watches: tuple[Resource, ...] = (
        JOBSET,
        WORKLOAD,
        CLUSTER_QUEUE,
        LOCAL_QUEUE,
        RESOURCE_FLAVOR,
        WORKLOAD_PRIORITY_CLASS,
    )

    def __init__(
        self, store: ObjectStore, clock: SimClock, version: KueueVersion = DEFAULT_KUEUE_VERSION
    ) -> None:
        self._store = store
        self._clock = clock
        self._version = version

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        meta = event.object.get("metadata", {})
        if event.resource.key == JOBSET.key:
            return [("jobset", meta.get("namespace", ""), meta.get("name", ""))]
        if event.resource.key == WORKLOAD.key:
            owners = [
                ("jobset", meta.get("namespace", ""), ref.get("name", ""))
                for ref in meta.get("ownerReferences") or []
                if ref.get("kind") == "JobSet" and ref.get("controller")
            ]
            return [*owners, SCHEDULE]
        if event.resource.key == WORKLOAD_PRIORITY_CLASS.key:  # a JobSet may wait for it
            named = [
                ("jobset", j["metadata"]["namespace"], j["metadata"]["name"])
                for j in self._store.list(JOBSET)
                if (j["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL) == meta.get("name")
            ]
            return [*named, SCHEDULE]
        return [SCHEDULE]

    def initial_keys(self) -> Iterable[Hashable]:
        keys: list[Hashable] = [
            ("jobset", j["metadata"]["namespace"], j["metadata"]["name"])
            for j in self._store.list(JOBSET)
        ]
        return [*keys, SCHEDULE]

    async def close(self) -> None:
        return None

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        if key == SCHEDULE:
            self.schedule()
        else:
            _, namespace, name = key
            self.sync_jobset(namespace, name)

    # -- the job framework: one JobSet and its Workload

    def _priority(self, jobset: Mapping[str, Any]) -> int | None:
        """The labelled WorkloadPriorityClass's value; 0 without a label, None when the
        class does not exist."""
        class_name = (jobset["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL)
        if not class_name:
            return 0
        found = self._store.find(WORKLOAD_PRIORITY_CLASS, None, class_name)
        return None if found is None else int(found.get("value") or 0)

    def sync_jobset(self, namespace: str, name: str) -> None:
        jobset = self._store.find(JOBSET, namespace, name)
        if jobset is None or QUEUE_NAME_LABEL not in (jobset["metadata"].get("labels") or {}):
            return
        wl_name = workload_name(name, jobset["metadata"]["uid"])
        workload = self._store.find(WORKLOAD, namespace, wl_name)
        # 1. A JobSet being deleted finishes its Workload, which gives the quota back; the
        # Workload is garbage-collected with the JobSet (upstream's FinishOrphanedWorkloads,
        # on by default since v0.18: jobframework's finalize → FinalizeOrphanedWorkload).
        if jobset["metadata"].get("deletionTimestamp"):
            if workload is not None and not condition_true(workload, "Finished"):
                self._finish(workload, OWNER_NOT_FOUND, OWNER_NOT_FOUND_MESSAGE)
            return
        now = rfc3339(self._clock.now())
        # 2. Every queued JobSet has a Workload, unless its priority class is missing.
        if workload is None:
            self._match_suspend(jobset, admitted=False)
            priority = self._priority(jobset)
            if priority is None:
                class_name = jobset["metadata"]["labels"][PRIORITY_CLASS_LABEL]
                event = missing_priority_class_event(jobset, class_name, now)
                if self._store.find(EVENT, namespace, event["metadata"]["name"]) is None:
                    self._store.create(EVENT, event)
                return
            built = build_workload(jobset, priority=priority, sequence=self._store.resource_version)
            self._store.create(WORKLOAD, built)
            return
        # 3. A finished JobSet finishes its Workload (which releases the quota).
        if jobset_finished(jobset):
            if not condition_true(workload, "Finished"):
                succeeded = condition_true(jobset, "Completed")
                source = condition(jobset, "Completed" if succeeded else "Failed") or {}
                reason = "Succeeded" if succeeded else "Failed"
                self._finish(workload, reason, source.get("message", ""))
            return
        # 4. The priority-class label is followed, admitted or not (upstream since v0.15).
        self._sync_priority(jobset, workload)
        # 5. An evicted Workload stops its JobSet and gives its quota back once the
        #    JobSet has no active pods.
        if condition_true(workload, "Evicted"):
            self._match_suspend(jobset, admitted=False)
            if is_admitted(workload) and not jobset_active(jobset):
                status = released_status(workload.get("status") or {}, self._version, now)
                self._write_status(WORKLOAD, namespace, wl_name, status)
            return
        # 6. The JobSet runs exactly while its Workload is admitted.
        admitted = is_admitted(workload)
        self._match_suspend(jobset, admitted=admitted)
        # 7. While suspended, the Workload follows the queue-name label.
        if not admitted:
            self._sync_queue_name(jobset, workload)

    def _finish(self, workload: Mapping[str, Any], reason: str, message: str) -> None:
        status = workload.get("status") or {}
        conditions = set_condition(
            status.get("conditions") or [],
            "Finished",
            True,
            reason,
            message,
            rfc3339(self._clock.now()),
        )
        meta = workload["metadata"]
        self._store.update(
            WORKLOAD,
            meta["namespace"],
            meta["name"],
            set_status({**status, "conditions": conditions}),
            subresource="status",
        )

    def _match_suspend(self, jobset: Mapping[str, Any], *, admitted: bool) -> None:
        suspended = bool((jobset.get("spec") or {}).get("suspend"))
        if suspended == (not admitted):
            return
        meta = jobset["metadata"]
        self._store.update(JOBSET, meta["namespace"], meta["name"], set_suspend(not admitted))

    def _update_workload_spec(self, workload: Mapping[str, Any], wanted: Obj) -> None:
        spec = workload.get("spec") or {}
        if all(spec.get(k) == v for k, v in wanted.items()):
            return

        def mutate(obj: Obj) -> None:
            spec = obj.setdefault("spec", {})
            spec.update({k: v for k, v in wanted.items() if v is not None})
            for key in [k for k, v in wanted.items() if v is None]:
                spec.pop(key, None)

        meta = workload["metadata"]
        self._store.update(WORKLOAD, meta["namespace"], meta["name"], mutate)

    def _sync_queue_name(self, jobset: Mapping[str, Any], workload: Mapping[str, Any]) -> None:
        queue = (jobset["metadata"].get("labels") or {}).get(QUEUE_NAME_LABEL, "")
        self._update_workload_spec(workload, {"queueName": queue})

    def _sync_priority(self, jobset: Mapping[str, Any], workload: Mapping[str, Any]) -> None:
        """Upstream ``UpdateWorkloadPriority`` (v0.17.0, docs/kubesim.md): a changed class
        name is resolved and written (while the class is missing nothing changes). While
        quota is reserved the CRD's CEL rule refuses adding or removing
        ``priorityClassRef``: a Workload admitted without a class cannot be given one, nor
        one admitted with a class lose it (upstream's update fails and is retried)."""
        class_name = (jobset["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL, "")
        spec = workload.get("spec") or {}
        if class_name == spec.get("priorityClassName", ""):
            return
        if (not spec.get("priorityClassName") or not class_name) and is_admitted(workload):
            return
        priority = self._priority(jobset)
        if priority is None:
            return
        fields = priority_fields(class_name)
        wanted: Obj = {"priority": priority}
        wanted.update(fields if class_name else dict.fromkeys(fields))
        self._update_workload_spec(workload, wanted)

    # -- the scheduler: every queue at once

    def schedule(self) -> None:
        state = queue_state(self._store)
        objects = {
            (w["metadata"]["namespace"], w["metadata"]["name"]): w
            for w in self._store.list(WORKLOAD)
        }
        workloads = [parse_workload(w) for w in objects.values()]
        decision = admit(state, workloads)
        now = rfc3339(self._clock.now())
        for item in decision.decisions:
            current = objects[item.workload]
            status = decided_status(current.get("status") or {}, item, now, self._version)
            self._write_status(WORKLOAD, item.workload[0], item.workload[1], status)
        self._update_queue_statuses(state, now)

    def _update_queue_statuses(self, state: QueueState, now: str) -> None:
        workloads = [parse_workload(w) for w in self._store.list(WORKLOAD)]
        pending = pending_by_cluster_queue(state, workloads)
        for cq in self._store.list(CLUSTER_QUEUE):
            name = cq["metadata"]["name"]
            admitted = [w for w in workloads if w.admitted_to == name]
            status = cluster_queue_status(cq, admitted, len(pending.get(name, [])), now)
            self._write_status(CLUSTER_QUEUE, None, name, status)
        for lq in self._store.list(LOCAL_QUEUE):
            namespace, name = lq["metadata"]["namespace"], lq["metadata"]["name"]
            cq_name = state.local_queues.get((namespace, name), "")

            def mine(w: QueuedWorkload, ns: str = namespace, q: str = name) -> bool:
                return (w.namespace, w.queue_name) == (ns, q)

            admitted = [w for w in workloads if mine(w) and w.admitted_to is not None]
            waiting = sum(1 for w in pending.get(cq_name, []) if mine(w))
            status = local_queue_status(lq, cq_name in state.cluster_queues, admitted, waiting, now)
            self._write_status(LOCAL_QUEUE, namespace, name, status)

    def _write_status(
        self, resource: Resource, namespace: str | None, name: str, status: Obj
    ) -> None:
        try:
            self._store.update(resource, namespace, name, set_status(status), subresource="status")
        except ApiError as error:
            if error.code != 404:
                raise
