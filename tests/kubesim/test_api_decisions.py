"""The API server's pure decisions, table by table: what a path names, which verb a request
is, what a watcher sees of a change, and how lists are paged."""

from __future__ import annotations

from typing import Any

import pytest

from kubesim.api.decode import (
    Target,
    decode_continue,
    delete_options,
    dry_run_of,
    encode_continue,
    list_page,
    parse_target,
    verb_of,
)
from kubesim.errors import ApiError
from kubesim.events import Event
from kubesim.resources import JOBSET, NAMESPACE, POD
from kubesim.selectors import parse_label_selector
from kubesim.watch import WatchSpec, is_true, parse_resource_version, translate


@pytest.mark.parametrize(
    ("group", "version", "path", "expected"),
    [
        pytest.param(
            "jobset.x-k8s.io",
            "v1alpha2",
            "namespaces/ns/jobsets/a/status",
            Target(JOBSET, "v1alpha2", "ns", "a", "status"),
            id="a namespaced status subresource",
        ),
        pytest.param(
            "jobset.x-k8s.io",
            "v1alpha2",
            "jobsets",
            Target(JOBSET, "v1alpha2", None),
            id="a namespaced collection across namespaces",
        ),
        pytest.param(
            "", "v1", "namespaces/ns", Target(NAMESPACE, "v1", None, "ns"), id="a namespace"
        ),
        pytest.param(
            "",
            "v1",
            "namespaces/ns/status",
            Target(NAMESPACE, "v1", None, "ns", "status"),
            id="a namespace's status",
        ),
        pytest.param(
            "", "v1", "namespaces/ns/pods/", Target(POD, "v1", "ns"), id="a trailing slash"
        ),
        pytest.param("", "v1", "namespaces/ns/pods/p/log", None, id="an unserved subresource"),
        pytest.param("", "v1", "pods/p", None, id="a namespaced object without namespace"),
        pytest.param("jobset.x-k8s.io", "v1", "jobsets", None, id="an unserved version"),
    ],
)
def test_parse_target(group: str, version: str, path: str, expected: Target | None) -> None:
    if expected is None:
        with pytest.raises(ApiError) as raised:
            parse_target(group, version, path)
        assert raised.value.code == 404
    else:
        assert parse_target(group, version, path) == expected


@pytest.mark.parametrize(
    ("target", "method", "watch", "verb"),
    [
        pytest.param(Target(POD, "v1", "ns"), "GET", False, "list", id="list"),
        pytest.param(Target(POD, "v1", "ns"), "GET", True, "watch", id="watch"),
        pytest.param(Target(POD, "v1", "ns"), "POST", False, "create", id="create"),
        pytest.param(Target(POD, "v1", "ns"), "DELETE", False, "delete", id="deletecollection"),
        pytest.param(Target(POD, "v1", None), "POST", False, None, id="no create across ns"),
        pytest.param(Target(POD, "v1", "ns", "p"), "PUT", False, "update", id="replace"),
        pytest.param(Target(POD, "v1", "ns", "p"), "POST", False, None, id="no POST to an item"),
        pytest.param(
            Target(POD, "v1", "ns", "p", "status"), "PATCH", False, "patch", id="status patch"
        ),
        pytest.param(
            Target(POD, "v1", "ns", "p", "status"), "DELETE", False, None, id="no status delete"
        ),
    ],
)
def test_verb_of(target: Target, method: str, watch: bool, verb: str | None) -> None:
    assert verb_of(target, method, watch) == verb


def _js(labels: dict[str, str], version: int = 1, namespace: str = "ns") -> dict[str, Any]:
    meta = {"name": "a", "namespace": namespace, "labels": labels, "resourceVersion": str(version)}
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("event", "seen"),
    [
        pytest.param(Event("ADDED", JOBSET, _js({"app": "web"}), None, 1), "ADDED", id="added"),
        pytest.param(Event("ADDED", JOBSET, _js({"app": "db"}), None, 1), None, id="no match"),
        pytest.param(
            Event("MODIFIED", JOBSET, _js({"app": "web"}, 2), _js({"app": "db"}), 2),
            "ADDED",
            id="starts matching",
        ),
        pytest.param(
            Event("MODIFIED", JOBSET, _js({"app": "db"}, 2), _js({"app": "web"}), 2),
            "DELETED",
            id="stops matching",
        ),
        pytest.param(
            Event("MODIFIED", JOBSET, _js({"app": "web"}, 2), _js({"app": "web"}), 2),
            "MODIFIED",
            id="keeps matching",
        ),
        pytest.param(
            Event("DELETED", JOBSET, _js({"app": "web"}, 2), _js({"app": "web"}), 2),
            "DELETED",
            id="deleted",
        ),
        pytest.param(
            Event("DELETED", JOBSET, _js({"app": "db"}, 2), _js({"app": "db"}), 2),
            None,
            id="a non-match deleted",
        ),
        pytest.param(
            Event("ADDED", JOBSET, _js({"app": "web"}, namespace="other"), None, 1),
            None,
            id="another namespace",
        ),
    ],
)
def test_translate_reports_selector_crossings(event: Event, seen: str | None) -> None:
    spec = WatchSpec(JOBSET, "v1alpha2", "ns", labels=parse_label_selector("app=web"))
    result = translate(spec, event)
    assert (result[0] if result else None) == seen
    if seen == "DELETED" and event.type == "MODIFIED":
        assert result is not None
        assert result[1]["metadata"]["labels"] == {"app": "web"}, "its last matching state"
        assert result[1]["metadata"]["resourceVersion"] == "2", "at the change's version"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("1", True),
        ("false", False),
        ("0", False),
        (None, False),
    ],
)
def test_is_true(value: str | None, expected: bool) -> None:
    assert is_true(value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("", None), ("0", None), ("42", 42), ("x", ApiError), ("-1", ApiError)],
)
def test_parse_resource_version(value: str | None, expected: int | type | None) -> None:
    if expected is ApiError:
        with pytest.raises(ApiError):
            parse_resource_version(value)
    else:
        assert parse_resource_version(value) == expected


OBJECTS = [
    {"metadata": {"namespace": ns, "name": n}} for ns, n in [("a", "x"), ("a", "y"), ("b", "x")]
]


@pytest.mark.parametrize(
    ("limit", "after", "names", "next_key", "remaining"),
    [
        pytest.param(0, None, ["a/x", "a/y", "b/x"], None, 0, id="no limit"),
        pytest.param(2, None, ["a/x", "a/y"], ("a", "y"), 1, id="first page"),
        pytest.param(2, ("a", "y"), ["b/x"], None, 0, id="last page"),
        pytest.param(3, None, ["a/x", "a/y", "b/x"], None, 0, id="exactly one page"),
    ],
)
def test_list_page(
    limit: int,
    after: tuple[str, str] | None,
    names: list[str],
    next_key: tuple[str, str] | None,
    remaining: int,
) -> None:
    items, key, left = list_page(OBJECTS, limit, after)
    assert [f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items] == names
    assert (key, left) == (next_key, remaining)


def test_continue_tokens_round_trip_and_reject_garbage() -> None:
    assert decode_continue(encode_continue(7, ("ns", "name"))) == (7, ("ns", "name"))
    with pytest.raises(ApiError) as raised:
        decode_continue("not-a-token")
    assert raised.value.code == 400


@pytest.mark.parametrize(
    ("body", "query", "expected"),
    [
        pytest.param(None, {}, (None, None, "Background"), id="defaults"),
        pytest.param(
            {"preconditions": {"uid": "u", "resourceVersion": "3"}},
            {},
            ("u", "3", "Background"),
            id="preconditions",
        ),
        pytest.param(
            {"propagationPolicy": "Orphan"}, {}, (None, None, "Orphan"), id="policy in the body"
        ),
        pytest.param(
            {"propagationPolicy": "Orphan"},
            {"propagationPolicy": "Background"},
            (None, None, "Background"),
            id="the query wins",
        ),
        pytest.param(
            {"orphanDependents": True}, {}, (None, None, "Orphan"), id="legacy orphanDependents"
        ),
        pytest.param(
            {"propagationPolicy": "Foreground"},
            {},
            (None, None, "Background"),
            id="foreground is served as background",
        ),
    ],
)
def test_delete_options(body: Any, query: dict[str, str], expected: tuple[Any, ...]) -> None:
    options = delete_options(body, query)
    assert (options.uid, options.resource_version, options.propagation) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([], False, id="absent"),
        pytest.param(["All"], True, id="All"),
        pytest.param(["All", "All"], True, id="repeated"),
        pytest.param(["all"], None, id="case matters"),
        pytest.param(["All", "Server"], None, id="one unknown value"),
        pytest.param("All", None, id="not a list (a DeleteOptions body)"),
    ],
)
def test_dry_run_of(values: Any, expected: bool | None) -> None:
    if expected is None:
        with pytest.raises(ApiError) as raised:
            dry_run_of(values, "PatchOptions")
        assert (raised.value.code, raised.value.reason) == (422, "Invalid")
    else:
        assert dry_run_of(values, "PatchOptions") is expected


def test_delete_options_dry_run_from_the_body_or_the_query() -> None:
    assert delete_options({"dryRun": ["All"]}, {}).dry_run
    assert delete_options(None, {"dryRun": "All"}).dry_run
    assert not delete_options({}, {}).dry_run
