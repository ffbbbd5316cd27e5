"""The in-memory object store behind kubesim's API server and simulated controllers.

Semantics follow the Kubernetes API server where our code depends on them:
- one global ``resourceVersion`` counter; every write bumps it and emits one event;
- ``generation`` moves only with ``spec`` changes; ``/status`` writes change only status,
  main-resource writes never change status (for resources with a status subresource);
- optimistic concurrency: a write carrying ``metadata.resourceVersion`` must match;
- delete preconditions (``uid``, ``resourceVersion``) → 409 Conflict on mismatch;
- finalizers keep a deleted object (with ``deletionTimestamp``, and for a pod
  ``deletionGracePeriodSeconds`` from its spec) until the last one goes;
- background cascading deletion through controller/owner references;
- a bounded event history so watches can resume from a ``resourceVersion`` (older →
  410 Expired);
- ``dry_run`` writes (``dryRun=All``) run every check and return what would be stored,
  but store nothing, consume no ``resourceVersion`` and emit no event.

The store is synchronous (it is memory) and emits events to subscribers' asyncio queues.
Everything returned is a deep copy: callers can never alias stored state.
"""

from __future__ import annotations

import builtins
import re
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from kubesim.clock import rfc3339, utc_now
from kubesim.clone import clone
from kubesim.errors import ApiError, already_exists, conflict, gone, invalid, not_found
from kubesim.events import Event, Subscription
from kubesim.index import ObjectIndex
from kubesim.resources import NAMESPACE, POD, RESOURCES, Resource
from kubesim.selectors import Requirement, fields_match, labels_match

Obj = dict[str, Any]
Clock = Callable[[], datetime]
Recorder = Callable[[int, str, Resource, Obj], None]

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
DEFAULT_POD_GRACE_SECONDS = 30
"""What the API server defaults a pod's ``spec.terminationGracePeriodSeconds`` to."""


def deletion_grace_seconds(resource: Resource, obj: Mapping[str, Any]) -> int:
    """``metadata.deletionGracePeriodSeconds`` for a deletion: a pod's
    ``spec.terminationGracePeriodSeconds`` (default 30), 0 for everything else."""
    if resource.key != POD.key:
        return 0
    value = (obj.get("spec") or {}).get("terminationGracePeriodSeconds")
    if isinstance(value, bool) or not isinstance(value, int):
        return DEFAULT_POD_GRACE_SECONDS
    return max(value, 0)


def _key(resource: Resource, namespace: str | None, name: str) -> tuple[str, str, str]:
    return (resource.key, (namespace or "") if resource.namespaced else "", name)


class ObjectStore:
    def __init__(self, *, clock: Clock = utc_now, history: int = 10_000) -> None:
        self.clock = clock
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._index = ObjectIndex()
        self._rv = 0
        self._history: deque[Event] = deque(maxlen=max(history, 1))
        self._subscriptions: list[Subscription] = []
        self._recorder: Recorder | None = None
        self._by_key = {r.key: r for r in RESOURCES}
        self.create(NAMESPACE, {"metadata": {"name": "default"}})

    # --- reading -----------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def object_count(self) -> int:
        return len(self._objects)

    def get(self, resource: Resource, namespace: str | None, name: str) -> Obj:
        obj = self._objects.get(_key(resource, namespace, name))
        if obj is None:
            raise not_found(resource.plural, name, resource.group)
        return clone(obj)

    def find(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        obj = self._objects.get(_key(resource, namespace, name))
        return None if obj is None else clone(obj)

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        labels: tuple[Requirement, ...] = (),
        fields: tuple[tuple[str, str, str], ...] = (),
    ) -> list[Obj]:
        """Matching objects in (namespace, name) order; ``namespace`` None = all. Costs
        the objects of this kind in the namespace, or fewer with an equality selector."""
        scope = namespace if resource.namespaced else None
        return [
            clone(obj)
            for _key_, obj in self._index.candidates(resource.key, scope, labels)
            if labels_match(labels, obj) and fields_match(fields, obj)
        ]

    def events_since(self, resource_version: int) -> builtins.list[Event]:
        """Retained events newer than ``resource_version``; 410 when some were dropped."""
        if resource_version >= self._rv:
            return []
        self.check_resumable(resource_version)
        return [e for e in self._history if e.resource_version > resource_version]

    def check_resumable(self, resource_version: int) -> None:
        """410 Expired unless every event after ``resource_version`` is still retained (a
        watch or a paginated list can only resume from there)."""
        if resource_version >= self._rv:
            return
        oldest = self._history[0].resource_version if self._history else self._rv + 1
        if resource_version < oldest - 1:
            raise gone(f"too old resource version: {resource_version} ({oldest - 1})")

    def subscribe(self, resource: Resource | None = None) -> Subscription:
        subscription = Subscription(resource)
        self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)

    def close_subscriptions(self) -> None:
        """End every live feed (watches see their stream close)."""
        for subscription in self._subscriptions:
            subscription.queue.put_nowait(None)
        self._subscriptions.clear()

    # --- writing -----------------------------------------------------------------------

    def _emit(self, type_: str, resource: Resource, obj: Obj, old: Obj | None) -> None:
        event = Event(type_, resource, clone(obj), old, self._rv)
        self._history.append(event)
        if self._recorder is not None:
            self._recorder(self._rv, type_, resource, obj)
        for subscription in self._subscriptions:
            if subscription.resource is None or subscription.resource.key == resource.key:
                subscription.queue.put_nowait(event)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _namespace_of(self, resource: Resource, namespace: str | None, obj: Obj) -> str | None:
        if not resource.namespaced:
            return None
        meta_ns = obj.get("metadata", {}).get("namespace")
        namespace = namespace or meta_ns or "default"
        if meta_ns and meta_ns != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
            )
        if (NAMESPACE.key, "", namespace) not in self._objects:
            raise not_found("namespaces", namespace)
        return namespace

    def create(
        self, resource: Resource, obj: Obj, namespace: str | None = None, *, dry_run: bool = False
    ) -> Obj:
        """A dry run returns the object with its generated fields but no
        ``resourceVersion``, as the API server's dry-run storage copies it unstored."""
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        namespace = self._namespace_of(resource, namespace, obj)
        name = meta.get("name") or ""
        if not name and meta.get("generateName"):
            name = meta["generateName"] + uuid.uuid4().hex[:5]
        if not name or len(name) > 253 or not _NAME.match(name):
            raise invalid(
                resource.kind,
                name,
                "metadata.name: Invalid value: a lowercase RFC 1123 subdomain must consist of "
                "lower case alphanumeric characters, '-' or '.'",
            )
        key = _key(resource, namespace, name)
        if key in self._objects:
            raise already_exists(resource.plural, name, resource.group)
        meta.update(
            name=name, uid=str(uuid.uuid4()), generation=1, creationTimestamp=rfc3339(self.clock())
        )
        meta.pop("resourceVersion", None)
        if namespace is not None:
            meta["namespace"] = namespace
        meta.pop("deletionTimestamp", None)
        obj["apiVersion"] = resource.api_version()
        obj["kind"] = resource.kind
        if resource.status_subresource:
            obj.pop("status", None)
        if dry_run:
            return obj
        meta["resourceVersion"] = self._next_rv()
        self._objects[key] = obj
        self._index.put(key, None, obj)
        self._emit("ADDED", resource, obj, None)
        return clone(obj)

    def replace(
        self,
        resource: Resource,
        obj: Obj,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """PUT semantics: optimistic concurrency on ``metadata.resourceVersion`` when set."""
        meta = obj.get("metadata", {})
        name = meta.get("name", "")
        if resource.namespaced:
            namespace = namespace or meta.get("namespace") or "default"
        key = _key(resource, namespace, name)
        current = self._objects.get(key)
        if current is None:
            raise not_found(resource.plural, name, resource.group)
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            raise conflict(
                resource.plural,
                name,
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
                resource.group,
            )
        return self._write(resource, key, current, clone(obj), subresource, dry_run)

    def _write(
        self,
        resource: Resource,
        key: tuple[str, str, str],
        current: Obj,
        proposed: Obj,
        subresource: str | None,
        dry_run: bool = False,
    ) -> Obj:
        """``subresource`` is None (spec and metadata), "status", or "metadata" (the
        store's own writes, which may set ``deletionTimestamp``). A dry run returns the
        result at the current ``resourceVersion`` and changes nothing."""
        old = clone(current)
        if subresource == "status":
            updated = clone(current)
            updated["status"] = proposed.get("status", {})
        else:
            updated = proposed
            meta = updated.setdefault("metadata", {})
            immutables = ["uid", "creationTimestamp", "name", "namespace"]
            if subresource != "metadata":  # only the store itself marks deletion
                immutables.append("deletionTimestamp")
            for immutable in immutables:
                if immutable in current["metadata"]:
                    meta[immutable] = current["metadata"][immutable]
                else:
                    meta.pop(immutable, None)
            meta["generation"] = current["metadata"].get("generation", 1)
            if updated.get("spec") != current.get("spec"):
                meta["generation"] += 1
            if resource.status_subresource:
                if "status" in current:
                    updated["status"] = current["status"]
                else:
                    updated.pop("status", None)
            updated["apiVersion"] = resource.api_version()
            updated["kind"] = resource.kind
        if updated == current:
            return clone(current)  # a no-op write does not bump resourceVersion
        if dry_run:
            return updated
        updated["metadata"]["resourceVersion"] = self._next_rv()
        if updated["metadata"].get("deletionTimestamp") and not updated["metadata"].get(
            "finalizers"
        ):
            return self._remove(resource, key, updated)
        self._objects[key] = updated
        self._index.put(key, current, updated)
        self._emit("MODIFIED", resource, updated, old)
        return clone(updated)

    def update(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        mutate: Callable[[Obj], None],
        *,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Read-modify-write in one step (controllers; patches after they are applied)."""
        key = _key(resource, namespace, name)
        current = self._objects.get(key)
        if current is None:
            raise not_found(resource.plural, name, resource.group)
        proposed = clone(current)
        mutate(proposed)
        return self._write(resource, key, current, proposed, subresource, dry_run)

    def delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str = "Background",
        dry_run: bool = False,
    ) -> Obj:
        """A dry run checks the preconditions and returns what the delete would answer
        (the object, marked for deletion if finalizers hold it) without deleting."""
        key = _key(resource, namespace, name)
        current = self._objects.get(key)
        if current is None:
            raise not_found(resource.plural, name, resource.group)
        meta = current["metadata"]
        if uid is not None and uid != meta["uid"]:
            raise conflict(
                resource.plural,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{meta['uid']}",
                resource.group,
            )
        if resource_version is not None and resource_version != meta["resourceVersion"]:
            raise conflict(
                resource.plural,
                name,
                "Precondition failed: ResourceVersion in precondition: "
                f"{resource_version}, ResourceVersion in object meta: {meta['resourceVersion']}",
                resource.group,
            )
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return clone(current)
            grace = deletion_grace_seconds(resource, current)
            return self.update(
                resource,
                namespace,
                name,
                lambda obj: obj["metadata"].update(
                    deletionTimestamp=rfc3339(self.clock()), deletionGracePeriodSeconds=grace
                ),
                subresource="metadata",
                dry_run=dry_run,
            )
        if dry_run:
            return clone(current)
        self._rv += 1
        deleted = clone(current)
        deleted["metadata"]["resourceVersion"] = str(self._rv)
        return self._remove(resource, key, deleted, propagation=propagation)

    def _remove(
        self,
        resource: Resource,
        key: tuple[str, str, str],
        obj: Obj,
        *,
        propagation: str = "Background",
    ) -> Obj:
        old = self._objects.pop(key, None)
        if old is not None:
            self._index.drop(key, old)
        self._emit("DELETED", resource, obj, old)
        self._collect_dependents(obj["metadata"]["uid"], orphan=propagation == "Orphan")
        return clone(obj)

    def _collect_dependents(self, owner_uid: str, *, orphan: bool) -> None:
        """Garbage collection of objects owned by a deleted one (background policy)."""
        for kind, ns, name in self._index.owned_by(owner_uid):
            resource = self._by_key[kind]
            if orphan:
                self.update(
                    resource,
                    ns or None,
                    name,
                    lambda o: o["metadata"].update(
                        ownerReferences=[
                            r for r in o["metadata"]["ownerReferences"] if r.get("uid") != owner_uid
                        ]
                    ),
                    subresource="metadata",
                )
            elif (kind, ns, name) in self._objects:
                self.delete(resource, ns or None, name)

    # --- persistence (kubesim.persist) -----------------------------------------------

    def record(self, recorder: Recorder | None) -> None:
        """Call ``recorder(resource_version, type, resource, obj)`` for every event,
        synchronously, as it is emitted (None: stop). Every change of an object or of the
        counter is an event (``_emit``), so a recorder sees the whole timeline; unlike a
        subscription it cannot be closed by ``close_subscriptions`` and costs no queue.
        ``obj`` is the stored object by reference (a DELETED's: the deleted one), safe to
        encode later off the loop because stored objects are never mutated in place."""
        self._recorder = recorder

    def contents(self) -> tuple[int, builtins.list[tuple[str, Obj]]]:
        """The resourceVersion and every stored object, by reference: cheap (no copy),
        and safe to encode later off the loop because stored objects are never mutated
        in place (every write stores a new dict)."""
        return self._rv, [(key[0], obj) for key, obj in self._objects.items()]

    def restore(self, resource_version: int, objects: Iterable[tuple[str, Obj]]) -> None:
        """Replace everything with ``objects`` at ``resource_version``, emitting no event.
        The event history starts empty, so a watch or continue token from before it gets
        410 Expired and relists, as after an etcd compaction."""
        self._objects.clear()
        self._index = ObjectIndex()
        self._history.clear()
        for resource_key, obj in objects:
            resource = self._by_key.get(resource_key)
            if resource is None:
                raise ValueError(f"unknown resource {resource_key!r}")
            meta = obj.get("metadata") or {}
            key = _key(resource, meta.get("namespace"), meta.get("name", ""))
            self._objects[key] = obj
            self._index.put(key, None, obj)
        self._rv = resource_version

    # --- helpers for tests and controllers --------------------------------------------

    def all_of(self, resources: Iterable[Resource]) -> Mapping[str, builtins.list[Obj]]:
        return {r.key: self.list(r) for r in resources}
