"""Indexes over the object store, so a read costs what it returns, not what is stored.

A sweep keeps thousands of JobSets, Jobs, pods and Workloads live at once, and every
controller pass lists a few of them (one JobSet's Jobs, one Job's pods). Scanning every
object of every kind for each of those made kubesim quadratic in the sweep (issue 14).
Objects are indexed by kind, by equality on a label (``key=value``) and by owner uid; a
list narrows to the smallest candidate set its selector allows, then applies the full
selector, so results are exactly what a scan would give.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from kubesim.selectors import Requirement

Obj = dict[str, Any]
Key = tuple[str, str, str]
"""(resource key, namespace or "", name), as the store keys objects."""


def _labels(obj: Obj) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def _owners(obj: Obj) -> set[str]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {ref["uid"] for ref in refs if isinstance(ref, dict) and ref.get("uid")}


class ObjectIndex:
    """Keys of stored objects by kind, by ``(kind, label, value)`` and by owner uid."""

    def __init__(self) -> None:
        self._by_kind: dict[str, dict[Key, Obj]] = defaultdict(dict)
        self._by_label: dict[tuple[str, str, str], set[Key]] = defaultdict(set)
        self._by_owner: dict[str, set[Key]] = defaultdict(set)

    def put(self, key: Key, old: Obj | None, new: Obj) -> None:
        """Index ``new`` under ``key``, replacing ``old`` (the object stored before)."""
        if old is not None:
            self.drop(key, old)
        kind = key[0]
        self._by_kind[kind][key] = new
        for label, value in _labels(new).items():
            self._by_label[(kind, label, str(value))].add(key)
        for uid in _owners(new):
            self._by_owner[uid].add(key)

    def drop(self, key: Key, old: Obj) -> None:
        kind = key[0]
        self._by_kind[kind].pop(key, None)
        for label, value in _labels(old).items():
            _discard(self._by_label, (kind, label, str(value)), key)
        for uid in _owners(old):
            _discard(self._by_owner, uid, key)

    def owned_by(self, uid: str) -> list[Key]:
        """Keys of the objects with an ownerReference to ``uid``, in key order."""
        return sorted(self._by_owner.get(uid, ()))

    def candidates(
        self, kind: str, namespace: str | None, labels: tuple[Requirement, ...]
    ) -> Iterator[tuple[Key, Obj]]:
        """Objects of ``kind`` that may match, in (namespace, name) order: narrowed by
        the most selective equality requirement; the caller applies the full selector."""
        of_kind = self._by_kind.get(kind, {})
        narrowed = self._narrowest(kind, labels)
        keys: Iterable[Key] = of_kind.keys() if narrowed is None else narrowed
        for key in sorted(k for k in keys if namespace is None or k[1] == namespace):
            obj = of_kind.get(key)
            if obj is not None:
                yield key, obj

    def _narrowest(self, kind: str, labels: tuple[Requirement, ...]) -> set[Key] | None:
        best: set[Key] | None = None
        for requirement in labels:
            if requirement.op not in ("=", "in"):
                continue
            found: set[Key] = set()
            for value in requirement.values:
                found |= self._by_label.get((kind, requirement.key, value), set())
            if best is None or len(found) < len(best):
                best = found
        return best


def _discard(index: dict[Any, set[Key]], at: Any, key: Key) -> None:
    keys = index.get(at)
    if keys is None:
        return
    keys.discard(key)
    if not keys:
        del index[at]
