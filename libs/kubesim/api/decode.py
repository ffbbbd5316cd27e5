"""Request decoding — pure: what a resource path names (``Target``) and its verb, request
bodies, ``DeleteOptions``, ``dryRun`` and pagination's continue tokens.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from kubesim.api.context import no_route
from kubesim.errors import ApiError, bad_request, invalid
from kubesim.resources import Resource, find_resource
from kubesim.watch import served_as

Obj = dict[str, Any]

BUILT_IN_GROUPS = frozenset({"", "batch", "coordination.k8s.io"})
"""Groups compiled into the real API server: they take strategic merge patches and allow
unconditional updates; every other group here is a custom resource."""


@dataclass(frozen=True)
class Target:
    """What a resource path names."""

    resource: Resource
    version: str
    namespace: str | None
    name: str | None = None
    subresource: str | None = None

    @property
    def shape(self) -> str:
        if self.name is None:
            return "collection"
        return "item" if self.subresource is None else "status"

    @property
    def fault_resource(self) -> str:
        plural = self.resource.plural
        return plural if self.subresource is None else f"{plural}/{self.subresource}"

    @property
    def built_in(self) -> bool:
        return self.resource.group in BUILT_IN_GROUPS


def parse_target(group: str, version: str, path: str) -> Target:
    """``[namespaces/{ns}/]{plural}[/{name}[/status]]`` under a group version; 404 when the
    path names nothing served (including a namespaced object without its namespace)."""
    segments = [s for s in path.split("/") if s]
    if len(segments) >= 3 and segments[0] == "namespaces":
        resource = find_resource(group, version, segments[2])
        if resource is not None and resource.namespaced:
            return _target(resource, version, segments[1], segments[3:])
    resource = find_resource(group, version, segments[0]) if segments else None
    if resource is None or (resource.namespaced and len(segments) > 1):
        raise no_route()
    return _target(resource, version, None, segments[1:])


def _target(resource: Resource, version: str, namespace: str | None, rest: list[str]) -> Target:
    if len(rest) > 2:
        raise no_route()
    name = rest[0] if rest else None
    subresource = rest[1] if len(rest) == 2 else None
    if subresource is not None and (subresource != "status" or not resource.status_subresource):
        raise no_route()
    return Target(resource, version, namespace, name, subresource)


def verb_of(target: Target, method: str, watch: bool) -> str | None:
    """The Kubernetes verb of a request (what faults match on), or None if not allowed."""
    if target.shape == "collection":
        if target.namespace is None and target.resource.namespaced and method != "GET":
            return None  # across namespaces only list and watch exist
        verbs = {"GET": "watch" if watch else "list", "POST": "create", "DELETE": "delete"}
    elif target.shape == "item":
        verbs = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    else:
        verbs = {"GET": "get", "PUT": "update", "PATCH": "patch"}
    return verbs.get(method)


def decode_json(raw: bytes) -> Any:
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as error:
        raise bad_request(f"error decoding request body: {error}") from None


def object_body(raw: bytes, target: Target) -> Obj:
    """A create/replace body: a JSON object of the URL's kind. Custom resources must say
    ``apiVersion`` and ``kind`` (the real server cannot decode them otherwise); built-in
    types take them from the URL."""
    body = decode_json(raw)
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    expected = target.resource.api_version(target.version)
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if not target.built_in and not (api_version and kind):
        raise bad_request(f"Object 'Kind' is missing in '{json.dumps(body)[:200]}'")
    if api_version and api_version != expected:
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({expected})"
        )
    if kind and kind != target.resource.kind:
        raise bad_request(
            f"the kind in the data ({kind}) does not match the expected kind "
            f"({target.resource.kind})"
        )
    if not isinstance(body.setdefault("metadata", {}), dict):
        raise bad_request("metadata must be a JSON object")
    return body


def check_identity(body: Obj, target: Target) -> None:
    """An update names the object of the URL: same name, same namespace (400 otherwise)."""
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        raise invalid(target.resource.kind, name_of(target), "metadata: Required value")
    name = meta.setdefault("name", target.name)
    if name != target.name:
        raise bad_request(
            f"the name of the object ({name}) does not match the name on the URL ({target.name})"
        )
    if target.resource.namespaced and meta.setdefault("namespace", target.namespace) != (
        target.namespace
    ):
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )


@dataclass(frozen=True)
class DeleteOptions:
    uid: str | None = None
    resource_version: str | None = None
    propagation: str = "Background"
    dry_run: bool = False


_PROPAGATION = {"Background": "Background", "Foreground": "Background", "Orphan": "Orphan"}


def delete_options(body: Any, query: Any) -> DeleteOptions:
    """``DeleteOptions`` from the body and/or the query (the query wins). Foreground is
    served as Background: dependents are collected at once either way."""
    body = body if isinstance(body, dict) else {}
    preconditions = body.get("preconditions") or {}
    policy = query.get("propagationPolicy") or body.get("propagationPolicy")
    orphan = query.get("orphanDependents", body.get("orphanDependents"))
    if policy is None:
        policy = "Orphan" if orphan in (True, "true") else "Background"
    if policy not in _PROPAGATION:
        raise ApiError(
            422,
            "Invalid",
            f'DeleteOptions.propagationPolicy: Unsupported value: "{policy}": supported values: '
            '"Foreground", "Background", "Orphan"',
        )
    dry_run = query_values(query, "dryRun") or body.get("dryRun") or []
    return DeleteOptions(
        preconditions.get("uid"),
        preconditions.get("resourceVersion"),
        _PROPAGATION[policy],
        dry_run_of(dry_run, "DeleteOptions"),
    )


def query_values(query: Any, name: str) -> list[str]:
    """Every value of a repeatable query parameter (a plain mapping has one at most)."""
    if hasattr(query, "getall"):
        return list(query.getall(name, []))
    value = query.get(name)
    return [] if value is None else [value]


def _go_strings(values: Any) -> str:
    if not isinstance(values, list):
        return json.dumps(values)
    return "[]string{" + ", ".join(json.dumps(str(v)) for v in values) + "}"


def dry_run_of(values: Any, options_kind: str) -> bool:
    """Whether ``dryRun`` asks for a dry run: only ``All`` is known; anything else is 422
    Invalid against the verb's options kind, as apimachinery's ``ValidateDryRun``."""
    if not isinstance(values, list) or any(value != "All" for value in values):
        raise ApiError(
            422,
            "Invalid",
            f'{options_kind}.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
            f'{_go_strings(values)}: supported values: "All"',
        )
    return bool(values)


def non_negative_int(value: str | None, name: str) -> int:
    try:
        number = int(value or 0)
    except ValueError:
        raise bad_request(f"invalid {name}: {value!r}") from None
    if number < 0:
        raise bad_request(f"invalid {name}: {value!r}")
    return number


def name_of(target: Target) -> str:
    assert target.name is not None  # item and status paths always carry a name
    return target.name


def in_version(obj: Obj, target: Target) -> Obj:
    return served_as(obj, target.resource, target.version)


# --- pagination --------------------------------------------------------------------


def _sort_key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta.get("name") or "")


def list_page(
    objects: list[Obj], limit: int, after: tuple[str, str] | None
) -> tuple[list[Obj], tuple[str, str] | None, int]:
    """One page of (namespace, name)-ordered ``objects`` after ``after``: the items, the
    key to continue after (None on the last page) and how many items remain after it."""
    rest = [obj for obj in objects if after is None or _sort_key(obj) > after]
    if not limit or len(rest) <= limit:
        return rest, None, 0
    page = rest[:limit]
    return page, _sort_key(page[-1]), len(rest) - limit


def encode_continue(resource_version: int, after: tuple[str, str]) -> str:
    """An opaque token: the list's resourceVersion and the last key served."""
    raw = json.dumps({"rv": resource_version, "start": list(after)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        namespace, name = data["start"]
        return int(data["rv"]), (str(namespace), str(name))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise bad_request("continue key is not valid") from None
