"""The store's indexes answer exactly what a scan of every object would, and garbage
collection finds dependents through the owner index."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kubesim.resources import JOB, NAMESPACE, POD
from kubesim.selectors import labels_match, parse_label_selector
from kubesim.store import ObjectStore

Obj = dict[str, Any]
SELECTORS = [
    "",
    "app=a",
    "app in (a,b)",
    "app=a,tier=x",
    "app!=a",
    "tier",
    "!tier",
    "app notin (b),tier=y",
    "app=zzz",
]


def _populate(store: ObjectStore, rng: random.Random, count: int) -> None:
    store.create(NAMESPACE, {"metadata": {"name": "other"}})
    for i in range(count):
        labels: dict[str, str] = {"app": rng.choice("abc")}
        if rng.random() < 0.5:
            labels["tier"] = rng.choice("xy")
        namespace = rng.choice(["default", "other"])
        store.create(POD, {"metadata": {"name": f"p{i}", "labels": labels}}, namespace)
    for i in range(0, count, 3):  # relabel some, delete others: the index must follow
        namespace = "default" if store.find(POD, "default", f"p{i}") else "other"
        if i % 2:
            store.delete(POD, namespace, f"p{i}")
        else:
            store.update(
                POD, namespace, f"p{i}", lambda o: o["metadata"].update(labels={"app": "b"})
            )


def _scan(store: ObjectStore, namespace: str | None, selector: str) -> list[tuple[str, str]]:
    """The answer from the raw objects, without any index."""
    requirements = parse_label_selector(selector)
    return [
        (ns, name)
        for (kind, ns, name), obj in sorted(store._objects.items())
        if kind == POD.key and namespace in (None, ns) and labels_match(requirements, obj)
    ]


@pytest.mark.parametrize("selector", SELECTORS)
@pytest.mark.parametrize("namespace", [None, "default", "other"])
def test_a_selected_list_is_the_scan_filtered(selector: str, namespace: str | None) -> None:
    store = ObjectStore()
    _populate(store, random.Random(13), 200)
    listed = store.list(POD, namespace, labels=parse_label_selector(selector))
    got = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in listed]
    assert got == _scan(store, namespace, selector)
    assert got == sorted(got)


def test_an_unselected_list_is_in_namespace_then_name_order_and_holds_one_kind() -> None:
    store = ObjectStore()
    _populate(store, random.Random(7), 50)
    store.create(JOB, {"metadata": {"name": "j"}}, "default")
    pods = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in store.list(POD)]
    assert pods == sorted(pods)
    assert all(name.startswith("p") for _ns, name in pods)
    assert [o["metadata"]["name"] for o in store.list(JOB)] == ["j"]


def test_garbage_collection_follows_owner_references_and_nothing_else() -> None:
    store = ObjectStore()
    owner = store.create(JOB, {"metadata": {"name": "owner"}}, "default")
    ref = {"uid": owner["metadata"]["uid"], "kind": "Job", "name": "owner", "apiVersion": "v1"}
    store.create(POD, {"metadata": {"name": "child", "ownerReferences": [ref]}}, "default")
    store.create(POD, {"metadata": {"name": "stranger"}}, "default")
    store.create(POD, {"metadata": {"name": "adopted"}}, "default")
    store.update(POD, "default", "adopted", lambda o: o["metadata"].update(ownerReferences=[ref]))
    store.update(POD, "default", "child", lambda o: o["metadata"].update(ownerReferences=[]))

    store.delete(JOB, "default", "owner")

    assert [o["metadata"]["name"] for o in store.list(POD)] == ["child", "stranger"]
